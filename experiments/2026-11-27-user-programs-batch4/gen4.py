"""User-like JAX programs, batch 4 (2026-11-27): idioms not in examples/idioms nor batches 1-3.

python gen4.py OUT_DIR [NAME ...]  writes OUT_DIR/NAME.hlo (jax.jit(f).lower(...).as_text("hlo")).
"""
import os, sys
os.environ.setdefault("JAX_PLATFORMS", "cpu")
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
OUT = sys.argv[1] if len(sys.argv) > 1 else "/tmp/user24"
rng = np.random.default_rng(0)
def r(*s, dt=np.float32): return jnp.asarray(rng.standard_normal(s).astype(dt))
def ri(lo, hi, *s, dt=np.int32): return jnp.asarray(rng.integers(lo, hi, s).astype(dt))
P = {}
def add(name, fn, args, donate=()):
    P[name] = (fn, args, donate)


# 1. Llama-style decode step: rotary embeddings, grouped-query attention, KV cache written at a
#    dynamic position (dynamic_update_slice), masked softmax over the valid prefix, donated caches.
def rope(x, pos):
    d = x.shape[-1] // 2
    inv = 1.0 / (10000.0 ** (jnp.arange(d, dtype=jnp.float32) / d))
    ang = pos[..., None].astype(jnp.float32) * inv
    c, s = jnp.cos(ang), jnp.sin(ang)
    x1, x2 = x[..., :d], x[..., d:]
    return jnp.concatenate([x1 * c - x2 * s, x1 * s + x2 * c], -1)
def rope_gqa_decode(kc, vc, x, wq, wk, wv, wo, pos):
    B, T, KH, D = kc.shape
    H = wq.shape[1] // D
    q = (x @ wq).reshape(B, H, D)
    k = (x @ wk).reshape(B, KH, D)
    v = (x @ wv).reshape(B, KH, D)
    p = jnp.full((B, 1), pos)
    q = rope(q, p)
    k = rope(k, p)
    kc = lax.dynamic_update_slice(kc, k[:, None].astype(kc.dtype), (0, pos, 0, 0))
    vc = lax.dynamic_update_slice(vc, v[:, None].astype(vc.dtype), (0, pos, 0, 0))
    qg = q.reshape(B, KH, H // KH, D)
    s = jnp.einsum("bkgd,btkd->bkgt", qg, kc.astype(jnp.float32)) / jnp.sqrt(D)
    s = jnp.where(jnp.arange(T) <= pos, s, -jnp.inf)
    a = jax.nn.softmax(s, axis=-1)
    o = jnp.einsum("bkgt,btkd->bkgd", a, vc.astype(jnp.float32)).reshape(B, H * D)
    return kc, vc, o @ wo
add("rope_gqa_kv_decode", rope_gqa_decode,
    (r(2, 8, 2, 8).astype(jnp.bfloat16), r(2, 8, 2, 8).astype(jnp.bfloat16), r(2, 32), r(32, 32) * 0.2,
     r(32, 16) * 0.2, r(32, 16) * 0.2, r(32, 32) * 0.2, jnp.int32(3)), donate=(0, 1))

# 2. einsum with many operands and ellipsis (batch dims through "..."), plus a trace-like contraction.
def einsum_ellipsis(a, b, c, d, m):
    x = jnp.einsum("...ij,...jk,...kl,l->...i", a, b, c, d)
    t = jnp.einsum("...ii->...", m)
    o = jnp.einsum("bi,bj->bij", a[..., 0, :].reshape(-1, 3), d[None, :3].repeat(6, 0))
    return x, t, o, jnp.einsum("...ij->...ji", m)
add("einsum_ellipsis_multi", einsum_ellipsis, (r(2, 3, 4, 3), r(2, 3, 3, 5), r(2, 3, 5, 4), r(4), r(2, 3, 4, 4)))

# 3. -inf masking: fully-masked rows give NaN from softmax, fixed with nan_to_num / where; nanmean,
#    nanmax, nanargmax, isneginf.
def masked_nan(x, mask):
    s = jnp.where(mask, x, -jnp.inf)
    p = jax.nn.softmax(s, axis=-1)
    p_fixed = jnp.nan_to_num(p, nan=0.0)
    lse = jax.nn.logsumexp(s, axis=-1)
    y = jnp.where(mask, x, jnp.nan)
    return (p_fixed, jnp.nan_to_num(lse, neginf=-1e4), jnp.nanmean(y, axis=-1), jnp.nanmax(jnp.where(mask, x, jnp.nan), axis=0),
            jnp.nanargmax(jnp.where(mask.any(-1, keepdims=True), y, 0.0), axis=-1), jnp.isneginf(lse).sum(),
            jax.nn.softmax(x, axis=-1, where=mask))
m3 = np.asarray(rng.random((5, 6)) > 0.4); m3[2] = False
add("neg_inf_mask_nan_to_num", masked_nan, (r(5, 6), jnp.asarray(m3)))

# 4. Pooling variants: avg pool SAME stride 2 including padding (divide by window size), min pool via
#    reduce_window with +inf init, dilated (window_dilation) max pool, base dilation.
def pool_variants(x):
    mx = lax.reduce_window(x, -jnp.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1), "SAME")
    av = lax.reduce_window(x, 0.0, lax.add, (1, 3, 3, 1), (1, 2, 2, 1), "SAME") / 9.0
    mn = lax.reduce_window(x, jnp.inf, lax.min, (1, 2, 2, 1), (1, 1, 1, 1), "VALID")
    dl = lax.reduce_window(x, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 1, 1, 1), "VALID", window_dilation=(1, 2, 2, 1))
    bd = lax.reduce_window(x, 0.0, lax.add, (1, 2, 2, 1), (1, 1, 1, 1), ((0, 0), (1, 1), (0, 1), (0, 0)),
                           base_dilation=(1, 2, 1, 1))
    return mx, av, mn, dl, bd
add("pool_same_dilated_min", pool_variants, (r(2, 7, 6, 3),))

# 5. Transposed conv with transpose_kernel=True, stride 3 SAME, and conv_general_dilated_patches.
def convt_patches(x, w):
    y = lax.conv_transpose(x, w, (3, 3), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"), transpose_kernel=True)
    p = lax.conv_general_dilated_patches(x, (2, 2), (1, 1), "VALID", dimension_numbers=("NHWC", "HWIO", "NHWC"))
    return y, p
add("conv_transpose_kernel_patches", convt_patches, (r(1, 4, 5, 3), r(3, 3, 2, 3) * 0.3))

# 6. jax.image.resize nearest / cubic / lanczos3, and scale_and_translate.
def resize_modes(img):
    a = jax.image.resize(img, (2, 9, 7, 3), "nearest")
    b = jax.image.resize(img, (2, 3, 4, 3), "cubic")
    c = jax.image.resize(img, (2, 8, 10, 3), "lanczos3", antialias=False)
    d = jax.image.scale_and_translate(img, (2, 6, 6, 3), (1, 2), jnp.array([1.2, 0.9]), jnp.array([0.5, -0.3]), "linear")
    return a, b, c, d
add("image_resize_nearest_cubic_lanczos", resize_modes, (r(2, 5, 5, 3),))

# 7. Integer corner cases: shifts past the width, rem / floor_divide of negative ints, uint8 overflow,
#    int8 abs(-128), clz, arithmetic vs logical shifts, popcount on int8, int min // -1 avoided.
def int_corners(a, b, u, s8):
    sh = jnp.int32(33)
    return (lax.shift_left(a, sh), lax.shift_right_arithmetic(a, jnp.int32(3)), lax.shift_right_logical(a, jnp.int32(3)),
            a % b, jnp.fmod(a, b), a // b, lax.rem(a, b), lax.div(a, b),
            u + jnp.uint8(200), u * jnp.uint8(3), u - jnp.uint8(250), jnp.abs(s8), lax.clz(a), lax.population_count(s8),
            (s8.astype(jnp.int32) << 24) >> 24, jnp.right_shift(u, jnp.uint8(9)))
bb = ri(-7, 8, 12); bb = jnp.where(bb == 0, 3, bb)
s8 = ri(-128, 128, 12, dt=np.int8).at[0].set(-128)
add("int_shift_rem_overflow", int_corners, (ri(-1000, 1000, 12), bb, ri(0, 256, 12, dt=np.uint8), s8))

# 8. float16 reductions under default (non-x64) promotion: sum/mean/var/prod/cumsum/max in f16,
#    and with dtype=f32 accumulation; bf16 logsumexp.
def f16_reductions(x, y):
    h = x.astype(jnp.float16)
    b = y.astype(jnp.bfloat16)
    return (h.sum(0), h.mean(1), h.var(), jnp.prod(h[:, :4] * 0.5 + 1, axis=0), jnp.cumsum(h, axis=1), h.max(),
            h.sum(dtype=jnp.float32), jax.nn.logsumexp(b, axis=-1), jnp.linalg.norm(h, axis=1))
add("f16_bf16_reductions", f16_reductions, (r(16, 24), r(4, 33)))

# 9. Outputs that are inputs, duplicated outputs, zero-size arrays, a constant output, an unused argument.
def odd_outputs(x, empty, unused, s):
    e = empty * 2.0
    return (x, x, e, e.sum(), e.max(initial=-1.0), jnp.zeros((0, 5)), jnp.float32(7.0), s, x * s, x,
            jnp.concatenate([e.reshape(-1), x[0]]))
add("identity_dup_zero_size_outputs", odd_outputs, (r(3, 4), jnp.zeros((0, 4)), r(5), jnp.float32(2.0)))

# 10. Scalar-only function: all f32[] / s32[] / pred[] (a polynomial, a clamp, a select, an int pow).
def scalars(a, b, n):
    p = jnp.polyval(jnp.array([1.0, -2.0, 0.5, 3.0]), a)
    return p, jnp.clip(a * b, -1.0, 1.0), jnp.where(a > b, a, b), n ** 3, lax.integer_pow(a, 5), jnp.hypot(a, b), a > b
add("scalar_only", scalars, (jnp.float32(0.7), jnp.float32(-1.3), jnp.int32(-4)))

# 11. tril / triu with offsets, trace / diagonal with offsets, kron, outer, vander.
def tri_ops(a, v):
    return (jnp.tril(a, -1), jnp.triu(a, 2), jnp.trace(a, offset=1), jnp.diagonal(a, offset=-2), jnp.kron(a[:2, :2], a[:3, :2]),
            jnp.outer(v, v[:3]), jnp.vander(v, 4), jnp.tril(jnp.ones((5, 5), bool)) & (a > 0))
add("tril_triu_trace_kron", tri_ops, (r(5, 5), r(5)))

# 12. Gumbel-softmax (straight-through) with jax.random.gumbel, categorical with a shape, and grad.
def gumbel_st(key, logits, w):
    k1, k2 = jax.random.split(key)
    def loss(logits):
        g = jax.random.gumbel(k1, logits.shape)
        y = jax.nn.softmax((logits + g) / 0.5, axis=-1)
        hard = jax.nn.one_hot(jnp.argmax(y, -1), y.shape[-1])
        st = hard - lax.stop_gradient(y) + y
        return jnp.sum((st @ w) ** 2)
    l, g = jax.value_and_grad(loss)(logits)
    samp = jax.random.categorical(k2, logits, axis=-1, shape=(3, logits.shape[0]))
    return l, g, samp
add("gumbel_softmax_straight_through", gumbel_st, (jax.random.PRNGKey(5), r(4, 6), r(6, 3)))

# 13. vmap of lax.switch (index per example) and cond with different operand subsets, and its grad.
def vmap_switch(idx, x, y, w):
    branches = [lambda x, y: jnp.sin(x) * y, lambda x, y: x @ w @ w.T, lambda x, y: jnp.cumsum(y) - x]
    out = jax.vmap(lambda i, a, b: lax.switch(i, branches, a, b))(idx, x, y)
    def c(wv):
        return lax.cond(wv.sum() > 0, lambda a, b: jnp.sum(a * 2.0), lambda a, b: jnp.sum(jnp.exp(b)), wv, y[0])
    return out, jax.grad(c)(w)
add("vmap_switch_cond_grad", vmap_switch, (ri(0, 3, 6), r(6, 4), r(6, 4), r(4, 4) * 0.5))

# 14. jax.checkpoint with save_only_these_names / checkpoint_name inside a scan, prevent_cse=False.
from jax.ad_checkpoint import checkpoint_name
def remat_names(ws, x):
    pol = jax.checkpoint_policies.save_only_these_names("proj")
    @jax.checkpoint
    def block(h, w):
        z = checkpoint_name(h @ w, "proj")
        return jnp.tanh(z) * jax.nn.sigmoid(z), None
    def loss(ws):
        h, _ = lax.scan(jax.checkpoint(lambda h, w: block(h, w), policy=pol, prevent_cse=False), x, ws)
        return jnp.mean(h ** 2)
    l, g = jax.value_and_grad(loss)(ws)
    return l, ws - 0.1 * g
add("remat_named_policy_scan", remat_names, (r(3, 8, 8) * 0.4, r(4, 8)))

# 15. jnp.linalg.norm ord variants: vector 0/1/2/inf/-inf/3, matrix fro/nuc/1/-1/2/inf.
def norms(v, m):
    return (jnp.linalg.norm(v, 0), jnp.linalg.norm(v, 1), jnp.linalg.norm(v, 2), jnp.linalg.norm(v, jnp.inf),
            jnp.linalg.norm(v, -jnp.inf), jnp.linalg.norm(v, 3), jnp.linalg.norm(m, "fro"), jnp.linalg.norm(m, "nuc"),
            jnp.linalg.norm(m, 1), jnp.linalg.norm(m, -1), jnp.linalg.norm(m, 2), jnp.linalg.norm(m, jnp.inf),
            jnp.linalg.norm(m, axis=0, keepdims=True))
add("linalg_norm_ords", norms, (r(7), r(4, 5)))

# 16. bf16 one-hot cross-entropy with label smoothing, entirely in bf16 (optax-like), with grad and
#     the loss averaged over a padding mask.
def bf16_xent(w, x, labels, valid):
    def loss(w):
        logits = (x.astype(jnp.bfloat16) @ w.astype(jnp.bfloat16))
        oh = jax.nn.one_hot(labels, logits.shape[-1], dtype=jnp.bfloat16)
        t = oh * (1 - 0.1) + 0.1 / logits.shape[-1]
        l = -(t * jax.nn.log_softmax(logits, axis=-1)).sum(-1)
        return (l * valid).sum() / jnp.maximum(valid.sum(), 1)
    l, g = jax.value_and_grad(loss)(w)
    return l.astype(jnp.float32), w - 0.5 * g.astype(jnp.float32)
add("bf16_label_smoothing_xent_grad", bf16_xent, (r(12, 10) * 0.3, r(8, 12), ri(0, 10, 8),
                                                  jnp.asarray([1, 1, 1, 1, 1, 0, 0, 1], jnp.bfloat16)))

# 17. argpartition / partition, sort of ints along axis 0 stable, searchsorted methods, interp.
def partition_interp(x, k, xp, fp, q):
    return (jnp.partition(x, 3, axis=-1), jnp.argpartition(x, 2, axis=0), jnp.sort(k, axis=0, stable=True),
            jnp.argsort(k, axis=0, stable=True), jnp.searchsorted(xp, q, side="right", method="compare_all"),
            jnp.searchsorted(xp, q, method="sort"), jnp.interp(q, xp, fp, left=-1.0, right=2.0))
add("partition_searchsorted_interp", partition_interp, (r(4, 7), ri(-3, 3, 6, 4), jnp.sort(r(8)), r(8), r(11) * 2))

# 18. custom_vjp with nondiff_argnums and residuals (a stable softplus with clipped gradient), and
#     grad of fori_loop with static bounds carrying a tuple.
from functools import partial
@partial(jax.custom_vjp, nondiff_argnums=(1,))
def clipped_softplus(x, limit):
    return jnp.logaddexp(x, 0.0)
def _csp_fwd(x, limit):
    return clipped_softplus(x, limit), jax.nn.sigmoid(x)
def _csp_bwd(limit, sig, g):
    return (jnp.clip(g * sig, -limit, limit),)
clipped_softplus.defvjp(_csp_fwd, _csp_bwd)
def custom_vjp_fori(x, w):
    def loss(w):
        def body(i, c):
            h, acc = c
            h = clipped_softplus(h @ w, 0.05) - 0.5
            return h, acc + jnp.sum(h) * (i + 1)
        h, acc = lax.fori_loop(0, 4, body, (x, 0.0))
        return acc + jnp.sum(h ** 2)
    return jax.value_and_grad(loss)(w)
add("custom_vjp_nondiff_fori_grad", custom_vjp_fori, (r(3, 6), r(6, 6) * 0.4))

# 19. associative_scan on 2x2 matrix products (non-commutative), reverse=True, over a linear recurrence.
def assoc_matmul(ms, v):
    fwd = lax.associative_scan(lambda a, b: jnp.einsum("...ij,...jk->...ik", b, a), ms, axis=0)
    rev = lax.associative_scan(jnp.add, v, reverse=True, axis=0)
    return fwd, rev, jnp.einsum("tij,j->ti", fwd, v[0])
add("associative_scan_matmul_reverse", assoc_matmul, (r(9, 2, 2) * 0.7, r(9, 2)))

# 20. lax.reduce with two operands (argmin written by hand), count_nonzero, bool cumsum, all/any.
def variadic_reduce(x):
    idx = lax.broadcasted_iota(jnp.int32, x.shape, 1)
    def comb(a, b):
        av, ai = a; bv, bi = b
        take_a = (av < bv) | ((av == bv) & (ai < bi))
        return jnp.where(take_a, av, bv), jnp.where(take_a, ai, bi)
    v, i = lax.reduce((x, idx), (jnp.float32(jnp.inf), jnp.int32(0)), comb, (1,))
    return v, i, jnp.count_nonzero(x > 0, axis=0), jnp.cumsum(x > 0, axis=1), jnp.all(x > -3), jnp.any(x > 3, axis=1)
add("variadic_reduce_argmin", variadic_reduce, (r(5, 9),))

# Programs 21-26 were added after the bf16 select finding (f16_bf16_reductions) to look for more of
# its kind: bf16 / fp8 selects in larger kernels, and a few more idioms.

# 21. bf16 where-heavy block: relu via jnp.where, a masked attention in bf16 whose mask is an
#     argument, clip, a where on a comparison of two bf16 tensors, leaky relu, its gradient.
def bf16_where_block(x, w, mask):
    def f(w):
        h = (x.astype(jnp.bfloat16) @ w.astype(jnp.bfloat16))
        h = jnp.where(h > 0, h, 0.01 * h)
        s = h @ h.T
        s = jnp.where(mask, s, jnp.bfloat16(-1e4))
        a = jax.nn.softmax(s, axis=-1)
        o = jnp.clip(a @ h, -2.0, 2.0)
        return jnp.where(o > h, o, h - o).astype(jnp.float32).sum(), o
    (l, o), g = jax.value_and_grad(f, has_aux=True)(w)
    return l, o, g
add("bf16_where_masked_attention_grad", bf16_where_block, (r(6, 8), r(8, 8) * 0.3, jnp.asarray(rng.random((6, 6)) > 0.3)))

# 22. float8 (e4m3fn / e5m2) scaled casts with jnp.where saturation and a select between fp8 tensors.
def fp8_where(x, y, c):
    s = jnp.max(jnp.abs(x)) / 448.0
    q = jnp.where(jnp.abs(x / s) > 448.0, jnp.sign(x) * 448.0, x / s).astype(jnp.float8_e4m3fn)
    q2 = y.astype(jnp.float8_e5m2)
    pick = jnp.where(c, q, q2.astype(jnp.float8_e4m3fn))
    return pick.astype(jnp.float32) * s, q.astype(jnp.bfloat16), jnp.where(c, q2, jnp.float8_e5m2(0)).astype(jnp.float32)
add("fp8_where_saturate_select", fp8_where, (r(4, 8) * 3, r(4, 8), jnp.asarray(rng.random((4, 8)) > 0.5)))

# 23. vmap of dynamic_slice / dynamic_update_slice with per-example offsets (becomes gather/scatter),
#     and jnp.take with mode clip / wrap / fill on out-of-range and negative indices.
def vmap_dyn(x, starts, upd, idx):
    sl = jax.vmap(lambda row, s: lax.dynamic_slice(row, (s,), (3,)))(x, starts)
    up = jax.vmap(lambda row, u, s: lax.dynamic_update_slice(row, u, (s,)))(x, upd, starts)
    return (sl, up, jnp.take(x[0], idx, mode="clip"), jnp.take(x[0], idx, mode="wrap"),
            jnp.take(x[0], idx, mode="fill", fill_value=-7.0), x[:, idx % 10])
add("vmap_dynamic_slice_take_modes", vmap_dyn, (r(5, 10), jnp.asarray([0, 3, 7, 9, -2], jnp.int32), r(5, 2),
                                                jnp.asarray([-12, -1, 0, 4, 9, 10, 25], jnp.int32)))

# 24. scan with xs=None and length, full unroll, a nested (dict, tuple) carry, and a bf16 carry.
def scan_none(x, w):
    def step(c, _):
        h, (t, acc) = c["h"], c["aux"]
        h = jnp.tanh(h @ w) + 0.1 * t.astype(jnp.float32)
        acc = (acc + h.astype(jnp.bfloat16)).astype(jnp.bfloat16)
        return {"h": h, "aux": (t + 1, acc)}, h.sum()
    c, ys = lax.scan(step, {"h": x, "aux": (jnp.int32(0), jnp.zeros_like(x, jnp.bfloat16))}, None, length=5, unroll=True)
    c2, ys2 = lax.scan(step, c, None, length=3)
    return c2["h"], c2["aux"][0], c2["aux"][1], ys, ys2
add("scan_xs_none_unrolled_nested_carry", scan_none, (r(3, 4), r(4, 4) * 0.5))

# 25. jax.scipy.special.logsumexp with weights b and return_sign, in bf16 and f32; top_k on bf16.
import jax.scipy.special as jsp
def lse_weights(x, b):
    v, s = jsp.logsumexp(x, axis=1, b=b, return_sign=True)
    vb = jsp.logsumexp(x.astype(jnp.bfloat16), axis=0, b=b.astype(jnp.bfloat16))
    tv, ti = lax.top_k(x.astype(jnp.bfloat16), 2)
    return v, s, vb, tv, ti
add("logsumexp_weights_sign_bf16_topk", lse_weights, (r(5, 7), r(5, 7)))

# 26. A bf16 GELU (erf form) + RMSNorm with jnp.where guards against zero rows, in a lax.fori_loop.
def bf16_gelu_rms_loop(x, w):
    def body(i, h):
        h = jax.nn.gelu(h @ w, approximate=False)
        ms = jnp.mean(h.astype(jnp.float32) ** 2, -1, keepdims=True)
        n = jnp.where(ms > 0, lax.rsqrt(ms + 1e-6), 0.0)
        return (h * n.astype(h.dtype)).astype(jnp.bfloat16)
    return lax.fori_loop(0, 3, body, x.astype(jnp.bfloat16)).astype(jnp.float32)
add("bf16_gelu_rmsnorm_fori", bf16_gelu_rms_loop, (r(4, 8), (r(8, 8) * 0.4).astype(jnp.bfloat16)))


if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    want = set(sys.argv[2:])
    for name, (fn, args, donate) in P.items():
        if want and name not in want:
            continue
        try:
            text = jax.jit(fn, donate_argnums=donate).lower(*args).as_text(dialect="hlo")
            jax.jit(fn)(*args)  # the program itself runs
        except Exception as e:
            print("GENFAIL", name, type(e).__name__, str(e)[:300]); continue
        open(os.path.join(OUT, name + ".hlo"), "w").write(text)
        print("wrote", name, text.count("\n"))
