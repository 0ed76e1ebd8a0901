import os, sys, functools
os.environ["JAX_PLATFORMS"]="cpu"
import jax, jax.numpy as jnp, numpy as np
from jax import lax
rng = np.random.default_rng(0)
def r(*s, dt=np.float32): return jnp.asarray(rng.standard_normal(s).astype(dt))
progs = {}
def prog(name, donate=()):
    def deco(f):
        progs[name]=(f, donate); return f
    return deco

# 1 per-example grads
def loss(w, x, y): return jnp.mean((jnp.tanh(x @ w) - y)**2)
@prog("per_example_grads")
def f(w, x, y): return jax.vmap(jax.grad(loss), in_axes=(None,0,0))(w, x, y)
progs["per_example_grads"] += ((r(8,4), r(16,3,8), r(16,3,4)),)
# 2 associative scan with max / custom op
@prog("assoc_scan_max")
def f(x):
    def op(a,b): return (jnp.maximum(a[0],b[0]), a[1]*b[1]+b[0])
    return lax.associative_scan(op, (x, x*0.5), axis=1)
progs["assoc_scan_max"] += ((r(4,37),),)
# 3 custom_vjp
@jax.custom_vjp
def clip_grad(x): return x
def fw(x): return x, None
def bw(_, g): return (jnp.clip(g, -0.1, 0.1),)
clip_grad.defvjp(fw, bw)
@prog("custom_vjp_clip")
def f(w, x): return jax.grad(lambda w: jnp.sum(jnp.sin(clip_grad(x @ w))**2))(w)
progs["custom_vjp_clip"] += ((r(6,5), r(10,6)),)
# 4 top_k + segment_max
@prog("topk_segment_max")
def f(x, seg):
    v, i = lax.top_k(x, 3)
    sm = jax.ops.segment_max(x, seg, num_segments=5)
    return v, i, sm
progs["topk_segment_max"] += ((r(12,20), jnp.asarray(rng.integers(0,5,12).astype(np.int32))),)
# 5 beam search
@prog("beam_search")
def f(emb, wout, start):
    B, K, T = 2, 3, 6
    seqs = jnp.zeros((B,K,T), jnp.int32); scores = jnp.zeros((B,K))
    tok = jnp.broadcast_to(start, (B,K))
    def cond(c): return c[0] < T
    def body(c):
        t, seqs, scores, tok = c
        h = jnp.tanh(emb[tok])             # B,K,D
        lp = jax.nn.log_softmax(h @ wout)  # B,K,V
        V = lp.shape[-1]
        tot = (scores[...,None] + lp).reshape(B, K*V)
        sc, idx = lax.top_k(tot, K)
        beam = idx // V; nt = (idx % V).astype(jnp.int32)
        seqs = jnp.take_along_axis(seqs, beam[...,None], axis=1)
        seqs = lax.dynamic_update_slice(seqs, nt[...,None], (0,0,t))
        return t+1, seqs, sc, nt
    _, seqs, scores, _ = lax.while_loop(cond, body, (0, seqs, scores, tok))
    return seqs, scores
progs["beam_search"] += ((r(11,8), r(8,11), jnp.int32(1)),)
# 6 einsum 3 operands + complex
@prog("einsum3_complex")
def f(a, b, c, zr, zi):
    e = jnp.einsum("ij,jk,kl->il", a, b, c)
    z = lax.complex(zr, zi)
    w = z * jnp.conj(z) + jnp.exp(1j * zr) / (z + 2.0)
    return e, jnp.abs(w), jnp.angle(w), w
progs["einsum3_complex"] += ((r(5,7), r(7,9), r(9,3), r(4,6), r(4,6)),)
# 7 reduce_precision + searchsorted/digitize
@prog("searchsorted_digitize")
def f(x, edges):
    e = jnp.sort(edges)
    i1 = jnp.searchsorted(e, x)
    i2 = jnp.digitize(x, e)
    q = lax.reduce_precision(x, exponent_bits=4, mantissa_bits=3)
    return i1, i2, q
progs["searchsorted_digitize"] += ((r(50), r(9)),)
# 8 argsort + take_along_axis
@prog("argsort_take")
def f(x, y):
    i = jnp.argsort(x, axis=-1)
    return jnp.take_along_axis(y, i, axis=-1), jnp.argsort(-x, axis=0, stable=True)
progs["argsort_take"] += ((r(6,10), r(6,10)),)
# 9 cond inside scan
@prog("cond_in_scan")
def f(xs, h0):
    def step(h, x):
        h = lax.cond(jnp.sum(x) > 0, lambda h: jnp.tanh(h + x), lambda h: h * 0.9 - x, h)
        return h, jnp.sum(h)
    return lax.scan(step, h0, xs)
progs["cond_in_scan"] += ((r(7,5), r(5)),)
# 10 dot_product_attention + categorical
@prog("dpa_categorical")
def f(q, k, v, key):
    o = jax.nn.dot_product_attention(q, k, v, is_causal=True)
    logits = o.sum(-1)
    s = jax.random.categorical(key, logits, axis=-1)
    return o, s
progs["dpa_categorical"] += ((r(2,8,4,16), r(2,8,4,16), r(2,8,4,16), jax.random.PRNGKey(3)),)
# 11 uint32 hash overflow
@prog("uint32_hash")
def f(x):
    h = x * jnp.uint32(2654435761)
    h = h ^ (h >> 16)
    h = h * jnp.uint32(0x85ebca6b)
    h = h ^ (h >> 13)
    i = x.astype(jnp.int32) * jnp.int32(1 << 30) + jnp.int32(7)
    return h, i, (h % jnp.uint32(97)).astype(jnp.int8)
progs["uint32_hash"] += ((jnp.asarray(rng.integers(0, 2**32-1, 64, dtype=np.uint64).astype(np.uint32)),),)
# 12 pad modes
@prog("pad_modes")
def f(x):
    return jnp.pad(x, ((1,2),(3,1)), mode="reflect"), jnp.pad(x, 2, mode="edge"), jnp.pad(x, ((0,1),(2,0)), mode="symmetric"), jnp.pad(x,1,mode="wrap")
progs["pad_modes"] += ((r(5,6),),)
# 13 batchnorm train donated
@prog("batchnorm_train_donated", donate=(0,1,2,3))
def f(scale, bias, rmean, rvar, x):
    def l(p):
        s,b = p
        m = x.mean((0,1,2)); v = x.var((0,1,2))
        y = (x-m)*lax.rsqrt(v+1e-5)*s+b
        return jnp.mean(jax.nn.relu(y)**2), (m,v)
    (lv,(m,v)), g = jax.value_and_grad(l, has_aux=True)((scale,bias))
    return scale-0.1*g[0], bias-0.1*g[1], 0.9*rmean+0.1*m, 0.9*rvar+0.1*v, lv
progs["batchnorm_train_donated"] += ((r(8), r(8), r(8), jnp.abs(r(8)), r(4,6,6,8)),)
# 14 conv feature_group_count + rhs_dilation
@prog("conv_group_rhs_dilation")
def f(x, w, w2):
    y = lax.conv_general_dilated(x, w, (1,1), "SAME", rhs_dilation=(2,2), feature_group_count=4,
                                 dimension_numbers=("NHWC","HWIO","NHWC"))
    z = lax.conv_general_dilated(y, w2, (2,1), ((1,1),(0,2)), lhs_dilation=(1,2), dimension_numbers=("NHWC","HWIO","NHWC"))
    return z
progs["conv_group_rhs_dilation"] += ((r(2,9,9,8), r(3,3,2,8), r(2,3,8,5)),)
# 15 tiny scalar & nested tuple
@prog("scalar_nested_tuple")
def f(a, b):
    return ((a*b, (a-b, jnp.sqrt(jnp.abs(a)))), {"s": a+b, "z": (a > b)})
progs["scalar_nested_tuple"] += ((jnp.float32(3.0), jnp.float32(-2.0)),)
# 16 grad of conv group dilation
@prog("conv_group_dil_grad")
def f(x, w):
    def l(w):
        y = lax.conv_general_dilated(x, w, (1,1), "VALID", rhs_dilation=(1,2), feature_group_count=2,
                                     dimension_numbers=("NCHW","OIHW","NCHW"))
        return jnp.sum(y**2)
    return jax.grad(l)(w)
progs["conv_group_dil_grad"] += ((r(2,4,7,9), r(6,2,3,3)),)

only = sys.argv[1:]
dumps = {"per_example_grads","beam_search","einsum3_complex","batchnorm_train_donated","conv_group_rhs_dilation"}
for name,(fn,donate,args) in progs.items():
    if only and name not in only: continue
    pf = functools.wraps(fn)(lambda *a, fn=fn: fn(*a)); pf.__name__ = name
    j = jax.jit(pf, donate_argnums=donate)
    low = j.lower(*args)
    open(f"/tmp/user22/{name}.hlo","w").write(low.as_text(dialect="hlo"))
    if name in dumps:
        open(f"/tmp/user22/{name}.opt.hlo","w").write(low.compile().as_text())
    print("ok", name)
