import os, sys, functools
os.environ["JAX_PLATFORMS"]="cpu"
import jax, jax.numpy as jnp, numpy as np
from jax import lax
rng = np.random.default_rng(1)
def r(*s, dt=np.float32): return jnp.asarray(rng.standard_normal(s).astype(dt))
progs = {}
def add(name, f, args, donate=()): progs[name]=(f, donate, args)

def bitcast_popcount(x):
    u = lax.bitcast_convert_type(x, jnp.uint32)
    return lax.population_count(u), lax.clz(u), lax.bitcast_convert_type(u ^ jnp.uint32(0x80000000), jnp.float32), jnp.isnan(x/0.0).any(), (x > 0).all(axis=0)
add("bitcast_popcount", bitcast_popcount, (r(8,5),))
def sort_multi(k1, k2, v):
    a, b, c = lax.sort((k1, k2, v), dimension=1, num_keys=2, is_stable=True)
    return a, b, c, jnp.argmin(v, axis=1), lax.rev(c, (0,))
add("sort_multi_operand", sort_multi, (jnp.asarray(rng.integers(0,3,(4,9)).astype(np.int32)), r(4,9), r(4,9)))
def scan_rev(xs, w):
    @jax.checkpoint
    def step(h, x):
        h = jnp.tanh(h @ w + x); return h, h.sum()
    def loss(w):
        h, ys = lax.scan(lambda h, x: (jnp.tanh(h @ w + x), jnp.sum(h)), jnp.zeros(4), xs, reverse=True, unroll=2)
        return jnp.sum(h) + jnp.sum(ys)
    return jax.value_and_grad(loss)(w)
add("scan_reverse_unroll_grad", scan_rev, (r(9,4), r(4,4)))
def complex_mm(ar, ai, br, bi):
    a = ar + 1j*ai; b = br + 1j*bi
    c = a @ b
    return jnp.real(c), jnp.imag(jnp.conj(c) * c), jnp.abs(jnp.linalg.norm(c, axis=0))
add("complex_matmul", complex_mm, (r(4,6), r(4,6), r(6,3), r(6,3)))
def unique_bincount(x):
    u = jnp.unique(x, size=8, fill_value=-1)
    return u, jnp.bincount(x, length=10), jnp.histogram(x.astype(jnp.float32), bins=5, range=(0,10))[0]
add("unique_bincount", unique_bincount, (jnp.asarray(rng.integers(0,10,40).astype(np.int32)),))
def rand_perm_gamma(key, x):
    k1, k2, k3 = jax.random.split(key, 3)
    return jax.random.permutation(k1, x), jax.random.gamma(k2, jnp.full((5,), 2.5)), jax.random.truncated_normal(k3, -1., 1., (6,))
add("random_permutation_gamma", rand_perm_gamma, (jax.random.PRNGKey(0), jnp.arange(12.)))
def special(x):
    y = jnp.abs(x) + 0.5
    return (jax.scipy.special.gammaln(y), jax.scipy.special.digamma(y), lax.erf_inv(jnp.tanh(x)*0.9),
            jax.scipy.special.gammainc(y, y*0.7), jax.nn.gelu(x, approximate=False), jax.scipy.special.logsumexp(x, b=y))
add("special_functions", special, (r(16),))
def select3(i, a, b, c, s):
    sel = lax.select_n(i, a, b, c)
    return sel, jnp.roll(a, s, axis=1), jnp.triu(b) + jnp.tril(c, -1), jnp.floor_divide(jnp.int32(-7)*i - 1, 3), jnp.round(a*3.5)
add("select_n_roll_tri", select3, (jnp.asarray(rng.integers(0,3,(5,5)).astype(np.int32)), r(5,5), r(5,5), r(5,5), jnp.int32(2)))
def onehot_int8(lbl, x):
    oh = jax.nn.one_hot(lbl, 7, dtype=jnp.int8)
    acc = jnp.sum(oh.astype(jnp.int32) * (x > 0), axis=0)
    return oh, acc, jnp.cumprod(x, axis=0), jax.lax.cummax(x, axis=1)
add("one_hot_int8_cumprod", onehot_int8, (jnp.asarray(rng.integers(0,7,6).astype(np.int32)), r(6,7)))
def fori_map(x, w):
    def body(i, c): return c + jnp.sin(c @ w) * i.astype(jnp.float32)
    y = lax.fori_loop(0, 5, body, x)
    z = lax.map(lambda row: jnp.max(row) - jnp.min(row), y)
    return y, z
add("fori_loop_lax_map", fori_map, (r(3,4), r(4,4)))
def bf16_layernorm_grad(x, g):
    def l(g):
        xb = x.astype(jnp.bfloat16)
        m = xb.mean(-1, keepdims=True); v = ((xb-m)**2).mean(-1, keepdims=True)
        y = (xb-m)*lax.rsqrt(v+1e-5).astype(jnp.bfloat16)*g.astype(jnp.bfloat16)
        return jnp.sum(y.astype(jnp.float32)**2)
    return jax.grad(l)(g)
add("bf16_layernorm_grad", bf16_layernorm_grad, (r(6,16), r(16)))

for name,(fn,donate,args) in progs.items():
    pf = functools.wraps(fn)(lambda *a, fn=fn: fn(*a)); pf.__name__ = name
    low = jax.jit(pf, donate_argnums=donate).lower(*args)
    open(f"/tmp/user22/b2/{name}.hlo","w").write(low.as_text(dialect="hlo"))
    if name in ("special_functions", "sort_multi_operand"):
        open(f"/tmp/user22/b2/{name}.opt.hlo","w").write(low.compile().as_text())
    print("ok", name)
# x64
jax.config.update("jax_enable_x64", True)
def x64_mixed(a, b, n):
    c = a.astype(jnp.float64) @ b
    return c, (n * jnp.int64(6364136223846793005) + 1442695040888963407) >> 7, c.astype(jnp.float32).sum()
args = (r(3,4), jnp.asarray(rng.standard_normal((4,2))), jnp.asarray(rng.integers(0, 1<<40, 5, dtype=np.int64)))
pf = functools.wraps(x64_mixed)(lambda *a: x64_mixed(*a)); pf.__name__="x64_mixed"
open("/tmp/user22/b2/x64_mixed.hlo","w").write(jax.jit(pf).lower(*args).as_text(dialect="hlo")); print("ok x64")
