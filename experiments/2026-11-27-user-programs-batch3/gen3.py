"""User-like JAX programs, batch 3 (2026-11-27): idioms not in examples/idioms or batches 1-2."""
import os, sys
os.environ.setdefault("JAX_PLATFORMS", "cpu")
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
OUT = sys.argv[1] if len(sys.argv) > 1 else "/tmp/user23"
rng = np.random.default_rng(0)
def r(*s, dt=np.float32): return jnp.asarray(rng.standard_normal(s).astype(dt))
P = {}
def add(name, fn, args, donate=()):
    P[name] = (fn, args, donate)

def rand_beta_dirichlet_poisson(key):
    k1, k2, k3 = jax.random.split(key, 3)
    return (jax.random.beta(k1, 2.0, 3.0, (4,)), jax.random.dirichlet(k2, jnp.ones(3) * 0.7, (2,)),
            jax.random.poisson(k3, 3.5, (6,)))
add("random_beta_dirichlet_poisson", rand_beta_dirichlet_poisson, (jax.random.PRNGKey(1),))

def bidir_scan(xs, w):
    def cell(h, x):
        h = jnp.tanh(x @ w + h)
        return h, h
    def one(x):
        _, f = lax.scan(cell, jnp.zeros(8), x)
        _, b = lax.scan(cell, jnp.zeros(8), x, reverse=True)
        return jnp.concatenate([f, b], -1)
    return jax.vmap(one)(xs)
add("vmap_bidirectional_scan", bidir_scan, (r(3, 5, 8), r(8, 8) * 0.3))

def linalg_mix(a, b):
    s = a @ a.T + 3 * jnp.eye(4)
    w, v = jnp.linalg.eigh(s)
    u, sv, vt = jnp.linalg.svd(a, full_matrices=False)
    x, *_ = jnp.linalg.lstsq(a, b)
    sign, logdet = jnp.linalg.slogdet(s)
    return w, jnp.abs(v[:, 0]), sv, x, sign * logdet, jnp.linalg.inv(s)
add("eigh_svd_lstsq", linalg_mix, (r(4, 4), r(4, 2)))

def dpa(q, k, v, mask, bias):
    return jax.nn.dot_product_attention(q.astype(jnp.bfloat16), k.astype(jnp.bfloat16), v.astype(jnp.bfloat16),
                                        bias=bias.astype(jnp.bfloat16), mask=mask).astype(jnp.float32)
add("dot_product_attention_mask_bias", dpa, (r(2, 6, 2, 8), r(2, 6, 2, 8), r(2, 6, 2, 8),
                                            jnp.asarray(rng.random((2, 2, 6, 6)) > 0.3), r(2, 2, 6, 6)))

def rfft2_filter(x, h):
    X = jnp.fft.rfft2(x)
    H = jnp.fft.rfft2(h, s=x.shape)
    y = jnp.fft.irfft2(X * H, s=x.shape)
    return y, jnp.abs(X).max(), jnp.angle(X[0, 1])
add("rfft2_irfft2_filter", rfft2_filter, (r(8, 8), r(3, 3)))

def int8_dot(a, b, scale):
    qa = jnp.clip(jnp.round(a / scale), -127, 127).astype(jnp.int8)
    qb = jnp.clip(jnp.round(b / scale), -127, 127).astype(jnp.int8)
    acc = lax.dot_general(qa, qb, (((1,), (0,)), ((), ())), preferred_element_type=jnp.int32)
    return acc.astype(jnp.float32) * scale * scale, jnp.einsum("ij,jk->ik", qa, qb, preferred_element_type=jnp.int32)
add("int8_dot_preferred_int32", int8_dot, (r(6, 16), r(16, 5), jnp.float32(0.05)))

def segment_ops(data, ids):
    return (jax.ops.segment_sum(data, ids, num_segments=5), jax.ops.segment_max(data, ids, num_segments=5),
            jax.ops.segment_min(data, ids, num_segments=5, indices_are_sorted=False),
            jax.ops.segment_prod(data[:, 0], ids, num_segments=5))
add("segment_sum_max_min_prod", segment_ops, (r(12, 3), jnp.asarray(rng.integers(0, 5, 12).astype(np.int32))))

def scatter_modes(x, idx, v):
    return (x.at[idx].mul(v), x.at[idx].min(v), x.at[idx + 7].set(v, mode="drop"), x.at[-1].add(1.0),
            x.at[idx].get(mode="fill", fill_value=-1.0))
add("scatter_mul_min_drop_fill", scatter_modes, (r(10), jnp.asarray([1, 3, 3, 8], jnp.int32), r(4)))

def while_dict_cond(x):
    def cond(s): return (s["i"] < 10) & (jnp.abs(s["x"]).sum() > 1e-3)
    def body(s):
        y = lax.cond(s["i"] % 2 == 0, lambda v: v * 0.5, lambda v: v - 0.1 * jnp.sign(v), s["x"])
        return {"i": s["i"] + 1, "x": y, "hist": s["hist"].at[s["i"]].set(jnp.linalg.norm(y))}
    out = lax.while_loop(cond, body, {"i": jnp.int32(0), "x": x, "hist": jnp.zeros(10)})
    return out["x"], out["hist"], out["i"]
add("while_dict_carry_cond", while_dict_cond, (r(7),))

def float_bits(x):
    m, e = jnp.frexp(x)
    return (lax.reduce_precision(x, exponent_bits=5, mantissa_bits=10), jnp.nextafter(x, jnp.inf), m, e,
            jnp.ldexp(m, e + 1), jnp.where(jnp.isfinite(1.0 / x), x, 0.0), jnp.isnan(jnp.log(x)).sum())
add("reduce_precision_frexp_nextafter", float_bits, (r(9),))

def argsort_bf16(x, a, b):
    return (jnp.argsort(x.astype(jnp.bfloat16), stable=True, descending=True), jnp.lexsort((a, b)),
            jnp.sort(x.astype(jnp.bfloat16)).astype(jnp.float32))
add("argsort_bf16_lexsort", argsort_bf16, (r(11), jnp.asarray(rng.integers(0, 3, 11).astype(np.int32)),
                                          jnp.asarray(rng.integers(0, 3, 11).astype(np.int32))))

def grouped_conv_grad(x, w):
    def f(w):
        y = lax.conv_general_dilated(x, w, (1, 1), "SAME", lhs_dilation=(1, 1), rhs_dilation=(2, 1),
                                     dimension_numbers=("NHWC", "HWIO", "NHWC"), feature_group_count=2)
        return jnp.sum(jax.nn.relu(y) ** 2)
    return jax.grad(f)(w)
add("grouped_dilated_conv_weight_grad", grouped_conv_grad, (r(2, 7, 6, 4), r(3, 3, 2, 6) * 0.2))

def cum_ops(x):
    return (lax.cumlogsumexp(x, axis=0), jnp.cumsum(x[::-1], axis=1)[::-1], jnp.diff(x, axis=0, n=2),
            jnp.convolve(x[:, 0], jnp.array([0.25, 0.5, 0.25]), mode="same"), lax.cummin(x, axis=0, reverse=True))
add("cumlogsumexp_diff_convolve", cum_ops, (r(9, 4),))

def topk_take(x, labels):
    v, i = lax.top_k(x, 3)
    g = jnp.take_along_axis(x, i, axis=-1)
    oh = jax.nn.one_hot(labels, x.shape[-1], dtype=jnp.float16)
    return v - g, (oh * x.astype(jnp.float16)).sum(-1), jnp.argmax(x, -1) == labels
add("topk_take_along_axis_f16_onehot", topk_take, (r(5, 10), jnp.asarray(rng.integers(0, 10, 5).astype(np.int32))))

def f16_activations_grad(x, w):
    def loss(w):
        h = (x.astype(jnp.float16) @ w.astype(jnp.float16))
        a = jax.nn.gelu(h) + jax.nn.silu(h) + jax.nn.softplus(h) + jax.nn.log_sigmoid(h)
        return (a.astype(jnp.float32) ** 2).mean() * 128.0
    return jax.grad(loss)(w) / 128.0
add("f16_activations_loss_scaled_grad", f16_activations_grad, (r(4, 8), r(8, 6) * 0.3))

def pad_rev_dyn(x, s, i):
    return (lax.pad(x, 0.0, ((-1, 2, 1), (1, -1, 0))), lax.rev(x, (0,)), jnp.roll(x, s, axis=1),
            lax.dynamic_slice(x, (i, i), (3, 3)), lax.dynamic_update_slice(x, jnp.ones((2, 2)), (i + 5, -1)))
add("negative_interior_pad_roll_clamped_dus", pad_rev_dyn, (r(5, 6), jnp.int32(-2), jnp.int32(3)))

def unrolled_fori(x, w):
    def body(i, c):
        return jnp.tanh(c @ w) + i.astype(jnp.float32) * 0.01
    return lax.fori_loop(0, 6, body, x, unroll=3)
add("fori_unroll3_donated", unrolled_fori, (r(4, 8), r(8, 8) * 0.3), donate=(0,))

@jax.custom_jvp
def safe_lse(x):
    m = lax.stop_gradient(x.max())
    return m + jnp.log(jnp.exp(x - m).sum())
@safe_lse.defjvp
def _lse_jvp(p, t):
    (x,), (tx,) = p, t
    y = safe_lse(x)
    return y, (jax.nn.softmax(x) * tx).sum()
def custom_jvp_grad(x):
    return jax.grad(lambda v: safe_lse(v * 2.0) + lax.stop_gradient(v).sum())(x)
add("custom_jvp_logsumexp_grad", custom_jvp_grad, (r(7),))

def bn_infer(x, mean, var, g, b):
    y = (x - mean) * lax.rsqrt(var + 1e-5) * g + b
    return jnp.where(jnp.isfinite(y), y, 0.0), jnp.mean(y, axis=(0, 1, 2), keepdims=True)
add("batchnorm_inference_nhwc", bn_infer, (r(2, 4, 4, 3), r(3), jnp.abs(r(3)), r(3), r(3)))

def complex_ops(x, w):
    z = jnp.exp(1j * x.astype(jnp.complex64))
    m = z @ jnp.conj(w.astype(jnp.complex64)).T
    return jnp.abs(m), jnp.angle(m), jnp.real(m * 1j).sum(), jnp.linalg.norm(m)
add("complex64_phase_matmul", complex_ops, (r(3, 4), r(5, 4)))

if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    want = set(sys.argv[2:])
    for name, (fn, args, donate) in P.items():
        if want and name not in want:
            continue
        try:
            text = jax.jit(fn, donate_argnums=donate).lower(*args).as_text(dialect="hlo")
        except Exception as e:
            print("GENFAIL", name, type(e).__name__, str(e)[:200]); continue
        open(os.path.join(OUT, name + ".hlo"), "w").write(text)
        print("wrote", name, text.count("\n"))
