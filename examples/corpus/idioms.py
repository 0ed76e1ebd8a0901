"""Idiom corpus: small programs written the way JAX users write them (issue 16).

Each program is registered with :func:`program` under a name, a group and a mode (``infer`` or
``train``) and tagged with the idioms of :mod:`.idiom_catalog` it exercises. Its builder takes a
seeded :class:`~.nn.Rand` and returns ``(function, example_args)``; parameters and inputs are jit
*arguments* (numpy, fixed seed), so the lowered HLO holds ``parameter`` instructions rather than
large constants. Training programs take one optimizer step (``jax.value_and_grad`` + SGD or Adam)
and return the new parameters (and optimizer state) and the loss. ``examples/generate_idioms.py``
lowers every program to ``examples/idioms/<name>.hlo``; the four small model families (ViT, DLRM,
GRU, WaveNet) live in :mod:`.idiom_models` and register here too.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable

import jax
import jax.numpy as jnp
import jax.scipy as jsp
import numpy as np
from jax import lax

from .idiom_catalog import GROUPS, IDIOMS, MODES
from .nn import Rand, make_init

Builder = Callable[[Rand], tuple[Callable, tuple]]


@dataclasses.dataclass(frozen=True)
class IdiomProgram:
    """One registered program: what it is, what it exercises, and how to build it."""

    name: str
    group: str
    mode: str
    idioms: tuple[str, ...]
    description: str
    build: Builder
    donate_argnums: tuple[int, ...] = ()


PROGRAMS: dict[str, IdiomProgram] = {}


def program(name: str, group: str, mode: str, idioms: tuple[str, ...], description: str,
            donate_argnums: tuple[int, ...] = ()) -> Callable[[Builder], Builder]:
    """Register the decorated builder as program ``name`` (checked against the catalog)."""
    def register(build: Builder) -> Builder:
        if name in PROGRAMS:
            raise ValueError(f"idiom program {name!r} registered twice")
        if group not in GROUPS or mode not in MODES:
            raise ValueError(f"{name}: unknown group {group!r} or mode {mode!r}")
        unknown = [i for i in idioms if i not in IDIOMS]
        if unknown:
            raise ValueError(f"{name}: unknown idioms {unknown}")
        PROGRAMS[name] = IdiomProgram(name, group, mode, tuple(idioms), description, build,
                                      tuple(donate_argnums))
        return build
    return register


# =========================================================================== shared helpers
F32 = np.float32


def weight(r: Rand, *shape: int, scale: float = 1.0) -> np.ndarray:
    """He-normal weight over all but the last axis (dense (in, out) and conv HWIO kernels)."""
    return make_init("fan_in", r.rng, shape, scale)


def dense_params(r: Rand, d_in: int, d_out: int) -> dict[str, np.ndarray]:
    return {"w": weight(r, d_in, d_out), "b": np.zeros(d_out, F32)}


def mlp_params(r: Rand, sizes: tuple[int, ...]) -> list[dict[str, np.ndarray]]:
    return [dense_params(r, a, b) for a, b in zip(sizes[:-1], sizes[1:])]


def mlp(layers, x, act=jax.nn.relu):
    """Dense layers with ``act`` between them (none after the last)."""
    for i, layer in enumerate(layers):
        x = x @ layer["w"] + layer["b"]
        if i < len(layers) - 1:
            x = act(x)
    return x


def sgd(params, grads, lr: float = 0.01):
    return jax.tree.map(lambda p, g: p - lr * g, params, grads)


def adam_state(params) -> dict[str, Any]:
    """Adam's step counter and moments for a numpy parameter tree."""
    zeros = jax.tree.map(np.zeros_like, params)
    return {"step": np.zeros((), np.int32), "m": zeros, "v": jax.tree.map(np.zeros_like, params)}


def adam(params, grads, opt, lr: float = 1e-3, b1: float = 0.9, b2: float = 0.999,
         eps: float = 1e-8):
    """One Adam step; returns (new params, new optimizer state)."""
    step = opt["step"] + 1
    m = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, opt["m"], grads)
    v = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * jnp.square(g), opt["v"], grads)
    t = step.astype(jnp.float32)
    c1, c2 = 1 - b1 ** t, 1 - b2 ** t
    new = jax.tree.map(lambda p, m, v: p - lr * (m / c1) / (jnp.sqrt(v / c2) + eps), params, m, v)
    return new, {"step": step, "m": m, "v": v}


def layer_norm(x, scale, bias, eps: float = 1e-6):
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.var(x, axis=-1, keepdims=True)
    return (x - mean) * lax.rsqrt(var + eps) * scale + bias


def rms_norm(x, scale, eps: float = 1e-6):
    return x * lax.rsqrt(jnp.mean(jnp.square(x), axis=-1, keepdims=True) + eps) * scale


def one_hot_xent(logits, labels):
    """Mean cross-entropy with integer labels turned into one-hot targets."""
    targets = jax.nn.one_hot(labels, logits.shape[-1])
    return -jnp.mean(jnp.sum(targets * jax.nn.log_softmax(logits), axis=-1))


def dropout(key, x, rate: float):
    keep = jax.random.bernoulli(key, 1.0 - rate, x.shape)
    return jnp.where(keep, x / (1.0 - rate), 0.0)


def mse(pred, target):
    return jnp.mean(jnp.square(pred - target))


def threefry_key(seed: int) -> np.ndarray:
    """Raw key data of the default (threefry2x32) PRNG, as jax.random.PRNGKey(seed) holds it."""
    return np.array([0, seed], np.uint32)


def rbg_key(seed: int) -> np.ndarray:
    """Raw key data (4 x uint32) for the 'rbg' / 'unsafe_rbg' PRNG implementations."""
    return np.array([0, seed, 0, seed], np.uint32)


def causal_self_attention(p, x, heads: int, mask_dropout=None):
    """Multi-head self-attention over (B, T, D) with an iota-built causal mask."""
    b, t, d = x.shape
    hd = d // heads
    qkv = x @ p["qkv"]
    q, k, v = jnp.split(qkv.reshape(b, t, 3, heads, hd), 3, axis=2)
    q, k, v = q[:, :, 0], k[:, :, 0], v[:, :, 0]
    logits = jnp.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(hd)
    causal = jnp.arange(t)[:, None] >= jnp.arange(t)[None, :]
    logits = jnp.where(causal, logits, jnp.finfo(logits.dtype).min)
    w = jax.nn.softmax(logits, axis=-1)
    if mask_dropout is not None:
        w = mask_dropout(w)
    o = jnp.einsum("bhqk,bkhd->bqhd", w, v).reshape(b, t, d)
    return o @ p["out"]


def attention_params(r: Rand, d: int) -> dict[str, np.ndarray]:
    return {"qkv": weight(r, d, 3 * d), "out": weight(r, d, d)}


def conv2d(x, w, stride=1, padding="SAME", dilation=1, groups=1):
    """NHWC x HWIO convolution."""
    return lax.conv_general_dilated(x, w, (stride, stride), padding,
                                    rhs_dilation=(dilation, dilation),
                                    dimension_numbers=("NHWC", "HWIO", "NHWC"),
                                    feature_group_count=groups)


def max_pool(x, window=2, stride=2, padding="VALID"):
    return lax.reduce_window(x, -jnp.inf, lax.max, (1, window, window, 1), (1, stride, stride, 1),
                             padding)


def avg_pool(x, window=2, stride=2, padding="VALID"):
    s = lax.reduce_window(x, 0.0, lax.add, (1, window, window, 1), (1, stride, stride, 1), padding)
    return s / (window * window)


# =========================================================================== tiny
@program("tiny_add", "tiny", "infer", ("tiny",), "a lone elementwise add of two parameters")
def tiny_add(r):
    return lambda a, b: a + b, (r.normal((16, 16)), r.normal((16, 16)))


@program("tiny_exp", "tiny", "infer", ("tiny",), "exp of a parameter")
def tiny_exp(r):
    return jnp.exp, (r.normal((64,)),)


@program("tiny_dot", "tiny", "infer", ("tiny",), "a lone matrix product")
def tiny_dot(r):
    return jnp.dot, (r.normal((8, 32)), r.normal((32, 16)))


@program("tiny_two_outputs", "tiny", "infer", ("tiny", "multiple_outputs"),
         "sum and product of two parameters returned as a tuple")
def tiny_two_outputs(r):
    return lambda a, b: (a + b, a * b), (r.normal((8, 8)), r.normal((8, 8)))


@program("tiny_identity", "tiny", "infer", ("tiny",), "the output is the parameter itself")
def tiny_identity(r):
    return lambda x: x, (r.normal((4, 4)),)


@program("tiny_scalar", "tiny", "infer", ("tiny",), "scalar multiply-add (f32[] everywhere)")
def tiny_scalar(r):
    a, b, c = (np.asarray(v, F32) for v in r.normal((3,)))
    return lambda a, b, c: a * b + c, (a, b, c)


@program("tiny_chain", "tiny", "infer", ("tiny",),
         "exp -> multiply -> add -> tanh -> negate: a chain of four fusible edges")
def tiny_chain(r):
    return (lambda x, y, z: -jnp.tanh(jnp.exp(x) * y + z),
            (r.normal((32,)), r.normal((32,)), r.normal((32,))))


@program("tiny_diamond", "tiny", "infer", ("tiny",),
         "e = exp(x); e * y + e: one producer with two consumers (three fusible edges)")
def tiny_diamond(r):
    def tiny_diamond(x, y):
        e = jnp.exp(x)
        return e * y + e
    return tiny_diamond, (r.normal((32,)), r.normal((32,)))


@program("tiny_dot_add", "tiny", "infer", ("tiny",), "x @ w + c: a dot feeding an add")
def tiny_dot_add(r):
    return lambda x, w, c: x @ w + c, (r.normal((8, 16)), r.normal((16, 16)), r.normal((8, 16)))


@program("tiny_sum", "tiny", "infer", ("tiny",), "full reduction to a scalar")
def tiny_sum(r):
    return jnp.sum, (r.normal((8, 128)),)


@program("tiny_donated_update", "tiny", "train", ("tiny", "donated_buffers"),
         "p - 0.1 * g with p donated (the update happens in place)", donate_argnums=(0,))
def tiny_donated_update(r):
    return lambda p, g: p - 0.1 * g, (r.normal((256,)), r.normal((256,)))


# =========================================================================== normalization
@program("softmax_keepdims", "normalization", "infer",
         ("keepdims_reduction", "softmax", "multiple_outputs"),
         "hand-written max-shifted softmax with keepdims, jax.nn.softmax over another axis, "
         "standardization with keepdims mean/std")
def softmax_keepdims(r):
    def softmax_keepdims(x):
        m = jnp.max(x, axis=-1, keepdims=True)
        e = jnp.exp(x - m)
        by_row = e / jnp.sum(e, axis=-1, keepdims=True)
        by_col = jax.nn.softmax(x, axis=0)
        z = (x - x.mean(axis=0, keepdims=True)) / (x.std(axis=0, keepdims=True) + 1e-5)
        return by_row, by_col, z
    return softmax_keepdims, (r.normal((16, 100)),)


@program("log_softmax_logsumexp", "normalization", "infer",
         ("log_softmax", "logsumexp", "keepdims_reduction"),
         "log_softmax, logsumexp with keepdims and with weights, entropy of the distribution")
def log_softmax_logsumexp(r):
    def log_softmax_logsumexp(logits, weights):
        logp = jax.nn.log_softmax(logits, axis=-1)
        lse = jax.nn.logsumexp(logits, axis=-1, keepdims=True)
        weighted = jsp.special.logsumexp(logits, axis=-1, b=jax.nn.softplus(weights))
        entropy = -jnp.sum(jnp.exp(logp) * logp, axis=-1)
        return logp, lse, weighted, entropy
    return log_softmax_logsumexp, (r.normal((8, 50)), r.normal((8, 50)))


def _ln_mlp_params(r, d=64, hidden=128):
    return {"ln1": {"scale": np.ones(d, F32), "bias": np.zeros(d, F32)},
            "fc1": dense_params(r, d, hidden), "fc2": dense_params(r, hidden, d),
            "ln2": {"scale": np.ones(d, F32), "bias": np.zeros(d, F32)}}


def _ln_mlp(p, x):
    h = layer_norm(x, **p["ln1"])
    h = jax.nn.gelu(h @ p["fc1"]["w"] + p["fc1"]["b"])
    x = x + h @ p["fc2"]["w"] + p["fc2"]["b"]
    return layer_norm(x, **p["ln2"])


@program("layer_norm_mlp", "normalization", "infer", ("layer_norm", "keepdims_reduction"),
         "pre-LN residual GELU MLP block followed by a final layer norm")
def layer_norm_mlp(r):
    return _ln_mlp, (_ln_mlp_params(r), r.normal((8, 16, 64)))


@program("layer_norm_mlp_train", "normalization", "train", ("layer_norm", "keepdims_reduction"),
         "one SGD step of the layer-norm MLP block on an MSE loss")
def layer_norm_mlp_train(r):
    def layer_norm_mlp_train(p, x, y):
        loss, g = jax.value_and_grad(lambda p: mse(_ln_mlp(p, x), y))(p)
        return sgd(p, g), loss
    return layer_norm_mlp_train, (_ln_mlp_params(r), r.normal((8, 16, 64)), r.normal((8, 16, 64)))


@program("rms_norm_swiglu_train", "normalization", "train", ("rms_norm", "keepdims_reduction"),
         "one Adam step of an RMSNorm + SwiGLU feed-forward block (Llama style)")
def rms_norm_swiglu_train(r):
    d, hidden = 64, 96
    params = {"norm": np.ones(d, F32), "gate": weight(r, d, hidden), "up": weight(r, d, hidden),
              "down": weight(r, hidden, d)}

    def block(p, x):
        h = rms_norm(x, p["norm"])
        return x + (jax.nn.silu(h @ p["gate"]) * (h @ p["up"])) @ p["down"]

    def rms_norm_swiglu_train(p, opt, x, y):
        loss, g = jax.value_and_grad(lambda p: mse(block(p, x), y))(p)
        p, opt = adam(p, g, opt)
        return p, opt, loss
    return rms_norm_swiglu_train, (params, adam_state(params), r.normal((4, 16, d)),
                                   r.normal((4, 16, d)))


@program("one_hot_xent_train", "normalization", "train",
         ("one_hot_cross_entropy", "log_softmax"),
         "MLP classifier, jax.nn.one_hot labels, log_softmax cross-entropy, one SGD step")
def one_hot_xent_train(r):
    params = mlp_params(r, (32, 64, 10))

    def one_hot_xent_train(p, x, labels):
        loss, g = jax.value_and_grad(lambda p: one_hot_xent(mlp(p, x), labels))(p)
        return sgd(p, g, 0.1), loss
    return one_hot_xent_train, (params, r.normal((16, 32)), r.randint((16,), 0, 10))


@program("label_smoothing_xent_train", "normalization", "train",
         ("one_hot_cross_entropy", "logsumexp", "keepdims_reduction"),
         "optax-style softmax_cross_entropy (logits - logsumexp) with label smoothing, Adam")
def label_smoothing_xent_train(r):
    params = mlp_params(r, (32, 64, 10))

    def loss_fn(p, x, labels, smoothing=0.1):
        logits = mlp(p, x, jax.nn.tanh)
        targets = jax.nn.one_hot(labels, 10) * (1 - smoothing) + smoothing / 10
        logp = logits - jax.nn.logsumexp(logits, axis=-1, keepdims=True)
        return -jnp.mean(jnp.sum(targets * logp, axis=-1))

    def label_smoothing_xent_train(p, opt, x, labels):
        loss, g = jax.value_and_grad(loss_fn)(p, x, labels)
        p, opt = adam(p, g, opt)
        return p, opt, loss
    return label_smoothing_xent_train, (params, adam_state(params), r.normal((16, 32)),
                                        r.randint((16,), 0, 10))


# =========================================================================== attention
@program("causal_attention", "attention", "infer", ("causal_attention", "softmax"),
         "one multi-head causal self-attention layer (iota mask, jnp.where, softmax)")
def causal_attention(r):
    d = 64

    def causal_attention(p, x):
        return causal_self_attention(p, x, heads=4)
    return causal_attention, (attention_params(r, d), r.normal((2, 32, d)))


@program("causal_attention_train", "attention", "train",
         ("causal_attention", "dropout_threefry", "one_hot_cross_entropy", "softmax",
          "gather_embedding", "scatter_embedding_grad"),
         "tiny causal language model (embedding, attention with attention-dropout, tied "
         "output), one Adam step")
def causal_attention_train(r):
    vocab, d = 64, 32
    params = {"embed": make_init("normal", r.rng, (vocab, d), 1.0), "attn": attention_params(r, d)}

    def loss_fn(p, key, tokens):
        x = p["embed"][tokens[:, :-1]]
        h = x + causal_self_attention(p["attn"], x, heads=4,
                                      mask_dropout=lambda w: dropout(key, w, 0.1))
        return one_hot_xent(h @ p["embed"].T, tokens[:, 1:])

    def causal_attention_train(p, opt, key, tokens):
        loss, g = jax.value_and_grad(loss_fn)(p, key, tokens)
        p, opt = adam(p, g, opt)
        return p, opt, loss
    return causal_attention_train, (params, adam_state(params), threefry_key(1),
                                    r.randint((4, 17), 0, vocab))


@program("sdpa_causal", "attention", "infer", ("causal_attention", "softmax"),
         "jax.nn.dot_product_attention(..., is_causal=True) with grouped query heads")
def sdpa_causal(r):
    def sdpa_causal(q, k, v):
        return jax.nn.dot_product_attention(q, k, v, is_causal=True)
    b, t, hd = 2, 32, 16
    return sdpa_causal, (r.normal((b, t, 8, hd)), r.normal((b, t, 2, hd)), r.normal((b, t, 2, hd)))


def _decoder_params(r, vocab, d):
    return {"embed": make_init("normal", r.rng, (vocab, d), 1.0), "q": weight(r, d, d),
            "k": weight(r, d, d), "v": weight(r, d, d), "o": weight(r, d, d),
            "norm": np.ones(d, F32)}


def _decode_step(p, tok, k_cache, v_cache, pos, heads):
    """One decoder step: write this token's key/value at ``pos``, attend to positions <= pos."""
    b = tok.shape[0]
    length, d = k_cache.shape[1], p["q"].shape[0]
    hd = d // heads
    x = p["embed"][tok]                                            # (B, D) gather
    q = (x @ p["q"]).reshape(b, heads, hd)
    k = (x @ p["k"]).reshape(b, 1, heads, hd)
    v = (x @ p["v"]).reshape(b, 1, heads, hd)
    k_cache = lax.dynamic_update_slice(k_cache, k, (0, pos, 0, 0))
    v_cache = lax.dynamic_update_slice(v_cache, v, (0, pos, 0, 0))
    logits = jnp.einsum("bhd,blhd->bhl", q, k_cache) / math.sqrt(hd)
    logits = jnp.where(jnp.arange(length) <= pos, logits, -1e30)
    o = jnp.einsum("bhl,blhd->bhd", jax.nn.softmax(logits, axis=-1), v_cache).reshape(b, d)
    h = rms_norm(x + o @ p["o"], p["norm"])
    return h @ p["embed"].T, k_cache, v_cache


@program("kv_cache_decode", "attention", "infer",
         ("kv_cache", "dynamic_update_slice", "while_static_trip_count", "argmax",
          "gather_embedding", "causal_attention", "multiple_outputs"),
         "greedy decoding of 8 tokens with lax.fori_loop over a prefilled key/value cache")
def kv_cache_decode(r):
    vocab, d, heads, length, steps = 64, 32, 4, 24, 8
    b = 2

    def kv_cache_decode(p, tok, k_cache, v_cache, start):
        def body(i, state):
            tok, k_cache, v_cache, out = state
            logits, k_cache, v_cache = _decode_step(p, tok, k_cache, v_cache, start + i, heads)
            tok = jnp.argmax(logits, axis=-1).astype(jnp.int32)
            out = lax.dynamic_update_slice(out, tok[:, None], (0, i))
            return tok, k_cache, v_cache, out
        out = jnp.zeros((b, steps), jnp.int32)
        _, k_cache, v_cache, out = lax.fori_loop(0, steps, body, (tok, k_cache, v_cache, out))
        return out, k_cache, v_cache
    cache = (b, length, heads, d // heads)
    return kv_cache_decode, (_decoder_params(r, vocab, d), r.randint((b,), 0, vocab),
                             0.1 * r.normal(cache), 0.1 * r.normal(cache), np.int32(8))


@program("kv_cache_step_donated", "attention", "infer",
         ("kv_cache", "dynamic_update_slice", "dynamic_slice", "donated_buffers",
          "multiple_outputs"),
         "one serving step with donated caches; sliding-window attention reads the last 8 "
         "positions with lax.dynamic_slice", donate_argnums=(2, 3))
def kv_cache_step_donated(r):
    vocab, d, heads, length, window = 64, 32, 4, 32, 8
    b, hd = 2, d // heads

    def kv_cache_step_donated(p, tok, k_cache, v_cache, pos):
        x = p["embed"][tok]
        q = (x @ p["q"]).reshape(b, heads, hd)
        k_cache = lax.dynamic_update_slice(k_cache, (x @ p["k"]).reshape(b, 1, heads, hd),
                                           (0, pos, 0, 0))
        v_cache = lax.dynamic_update_slice(v_cache, (x @ p["v"]).reshape(b, 1, heads, hd),
                                           (0, pos, 0, 0))
        lo = jnp.clip(pos - window + 1, 0, length - window)
        k_win = lax.dynamic_slice(k_cache, (0, lo, 0, 0), (b, window, heads, hd))
        v_win = lax.dynamic_slice(v_cache, (0, lo, 0, 0), (b, window, heads, hd))
        logits = jnp.einsum("bhd,bwhd->bhw", q, k_win) / math.sqrt(hd)
        logits = jnp.where(lo + jnp.arange(window) <= pos, logits, -1e30)
        o = jnp.einsum("bhw,bwhd->bhd", jax.nn.softmax(logits), v_win).reshape(b, d)
        next_logits = rms_norm(x + o @ p["o"], p["norm"]) @ p["embed"].T
        return next_logits, k_cache, v_cache
    cache = (b, length, heads, hd)
    return kv_cache_step_donated, (_decoder_params(r, vocab, d), r.randint((b,), 0, vocab),
                                   0.1 * r.normal(cache), 0.1 * r.normal(cache), np.int32(12))


# =========================================================================== random
def _dropout_mlp_params(r):
    return mlp_params(r, (32, 64, 64, 8))


def _dropout_mlp(p, x, key, rate=0.2):
    keys = jax.random.split(key, len(p) - 1)
    for i, layer in enumerate(p[:-1]):
        x = dropout(keys[i], jax.nn.relu(x @ layer["w"] + layer["b"]), rate)
    return x @ p[-1]["w"] + p[-1]["b"]


@program("dropout_threefry_train", "random", "train", ("dropout_threefry",),
         "MLP with dropout; the legacy uint32[2] PRNGKey is split per layer (threefry2x32), "
         "one SGD step")
def dropout_threefry_train(r):
    def dropout_threefry_train(p, key, x, y):
        loss, g = jax.value_and_grad(lambda p: mse(_dropout_mlp(p, x, key), y))(p)
        return sgd(p, g), loss
    return dropout_threefry_train, (_dropout_mlp_params(r), threefry_key(2), r.normal((16, 32)),
                                    r.normal((16, 8)))


@program("dropout_rbg_train", "random", "train", ("dropout_rng_bit_generator",),
         "the same MLP with the 'rbg' PRNG (jax.random.wrap_key_data(..., impl='rbg')): "
         "dropout masks come from rng-bit-generator")
def dropout_rbg_train(r):
    def dropout_rbg_train(p, key_data, x, y):
        key = jax.random.wrap_key_data(key_data, impl="rbg")
        loss, g = jax.value_and_grad(lambda p: mse(_dropout_mlp(p, x, key), y))(p)
        return sgd(p, g), loss
    return dropout_rbg_train, (_dropout_mlp_params(r), rbg_key(3), r.normal((16, 32)),
                               r.normal((16, 8)))


@program("mc_dropout_unsafe_rbg", "random", "infer",
         ("dropout_rng_bit_generator", "keepdims_reduction", "multiple_outputs"),
         "Monte-Carlo dropout: 4 stochastic passes under jax.default_prng_impl('unsafe_rbg') "
         "with the key made inside jit from an int32 seed; mean and variance")
def mc_dropout_unsafe_rbg(r):
    def mc_dropout_unsafe_rbg(p, seed, x):
        with jax.default_prng_impl("unsafe_rbg"):  # as jax.config.update(...) does globally
            keys = jax.random.split(jax.random.PRNGKey(seed), 4)
            samples = jnp.stack([_dropout_mlp(p, x, k) for k in keys])
        return samples.mean(axis=0, keepdims=True), samples.var(axis=0, keepdims=True)
    return mc_dropout_unsafe_rbg, (_dropout_mlp_params(r), np.int32(5), r.normal((8, 32)))


@program("typed_key_sampling", "random", "infer",
         ("dropout_threefry", "top_k", "custom_call", "multiple_outputs"),
         "a typed jax.random.key argument (lowers to a Sharding custom-call), dropout, "
         "top-k filtered temperature sampling with jax.random.categorical")
def typed_key_sampling(r):
    def typed_key_sampling(p, key, x):
        k_drop, k_sample = jax.random.split(key)
        logits = _dropout_mlp(p, x, k_drop) / 0.7
        top_vals, _ = lax.top_k(logits, 3)
        logits = jnp.where(logits >= top_vals[:, -1:], logits, -jnp.inf)
        return jax.random.categorical(k_sample, logits), jax.nn.softmax(logits)
    return typed_key_sampling, (_dropout_mlp_params(r), jax.random.key(7), r.normal((8, 32)))


# =========================================================================== selection
@program("argmax_topk_accuracy", "selection", "infer",
         ("argmax", "top_k", "multiple_outputs"),
         "classifier predictions: argmax, top-5 classes and top-1 / top-5 accuracy")
def argmax_topk_accuracy(r):
    params = mlp_params(r, (32, 64, 20))

    def argmax_topk_accuracy(p, x, labels):
        logits = mlp(p, x)
        pred = jnp.argmax(logits, axis=-1)
        _, top5 = lax.top_k(logits, 5)
        top1_acc = jnp.mean(pred == labels)
        top5_acc = jnp.mean(jnp.any(top5 == labels[:, None], axis=-1))
        return pred, top5, top1_acc, top5_acc
    return argmax_topk_accuracy, (params, r.normal((32, 32)), r.randint((32,), 0, 20))


@program("sort_quantiles", "selection", "infer", ("sort", "multiple_outputs"),
         "jnp.sort, jnp.argsort, jnp.median, jnp.quantile and take_along_axis re-ordering")
def sort_quantiles(r):
    def sort_quantiles(x, payload):
        order = jnp.argsort(x, axis=-1)
        reordered = jnp.take_along_axis(payload, order, axis=-1)
        return (jnp.sort(x, axis=0), reordered, jnp.median(x, axis=-1),
                jnp.quantile(x, jnp.array([0.1, 0.9]), axis=-1))
    return sort_quantiles, (r.normal((16, 64)), r.normal((16, 64)))


@program("nms_ranking", "selection", "infer", ("sort", "argmax", "top_k", "gather_embedding"),
         "detection post-processing: rank boxes by score (argsort), gather the top boxes, "
         "suppress overlaps with the best one (IoU), keep the top 10")
def nms_ranking(r):
    def nms_ranking(boxes, scores):
        order = jnp.argsort(-scores)
        boxes, scores = boxes[order], scores[order]
        best = boxes[jnp.argmax(scores)]
        lo = jnp.maximum(boxes[:, :2], best[:2])
        hi = jnp.minimum(boxes[:, 2:], best[2:])
        inter = jnp.prod(jnp.clip(hi - lo, 0), axis=-1)
        area = jnp.prod(boxes[:, 2:] - boxes[:, :2], axis=-1)
        iou = inter / (area + jnp.prod(best[2:] - best[:2]) - inter + 1e-6)
        kept = jnp.where((iou < 0.5) | (jnp.arange(scores.shape[0]) == 0), scores, -1.0)
        top, idx = lax.top_k(kept, 10)
        return boxes[idx], top
    xy = r.uniform((128, 2))
    return nms_ranking, (np.concatenate([xy, xy + 0.1 + r.uniform((128, 2))], -1), r.uniform((128,)))


# =========================================================================== embedding
@program("embedding_bag", "embedding", "infer", ("gather_embedding", "keepdims_reduction"),
         "multi-hot embedding bag: table[ids], padding id 0 masked out, mean pooling")
def embedding_bag(r):
    def embedding_bag(table, ids):
        rows = table[ids]                                   # (B, L, D)
        mask = (ids > 0)[..., None].astype(rows.dtype)
        return jnp.sum(rows * mask, axis=1) / jnp.maximum(jnp.sum(mask, axis=1), 1.0)
    return embedding_bag, (make_init("normal", r.rng, (500, 32), 1.0), r.randint((8, 12), 0, 500))


@program("embedding_classifier_train", "embedding", "train",
         ("gather_embedding", "scatter_embedding_grad", "one_hot_cross_entropy"),
         "bag-of-words classifier (jnp.take embedding, mean, linear), one SGD step: the "
         "embedding gradient is a scatter-add")
def embedding_classifier_train(r):
    params = {"embed": make_init("normal", r.rng, (300, 32), 1.0), "out": dense_params(r, 32, 5)}

    def loss_fn(p, ids, labels):
        h = jnp.mean(jnp.take(p["embed"], ids, axis=0), axis=1)
        return one_hot_xent(h @ p["out"]["w"] + p["out"]["b"], labels)

    def embedding_classifier_train(p, ids, labels):
        loss, g = jax.value_and_grad(loss_fn)(p, ids, labels)
        return sgd(p, g, 0.5), loss
    return embedding_classifier_train, (params, r.randint((16, 10), 0, 300), r.randint((16,), 0, 5))


@program("scatter_updates", "embedding", "infer",
         ("scatter_embedding_grad", "gather_embedding", "multiple_outputs"),
         "x.at[idx].add / .set / .max, jax.ops.segment_sum and a histogram via .at[].add")
def scatter_updates(r):
    def scatter_updates(x, idx, values, segments):
        added = x.at[idx].add(values)
        replaced = x.at[idx].set(values)
        maxed = x.at[idx].max(values)
        seg = jax.ops.segment_sum(values, segments, num_segments=8)
        hist = jnp.zeros(8, jnp.int32).at[segments].add(1)
        return added, replaced, maxed, seg, hist, x[idx]
    return scatter_updates, (r.normal((64, 16)), r.randint((20,), 0, 64), r.normal((20, 16)),
                             r.randint((20,), 0, 8))


# =========================================================================== control flow
def _rnn_params(r, d_in=16, hidden=32):
    return {"wx": weight(r, d_in, hidden), "wh": weight(r, hidden, hidden, scale=0.5),
            "b": np.zeros(hidden, F32), "out": dense_params(r, hidden, 4)}


def _rnn(p, xs):
    """Elman RNN over time-major xs (T, B, D) with lax.scan; returns (final h, outputs)."""
    def step(h, x):
        h = jnp.tanh(x @ p["wx"] + h @ p["wh"] + p["b"])
        return h, h @ p["out"]["w"] + p["out"]["b"]
    h0 = jnp.zeros((xs.shape[1], p["wh"].shape[0]), xs.dtype)
    return lax.scan(step, h0, xs)


@program("scan_rnn", "control_flow", "infer",
         ("scan_carry", "dynamic_slice", "dynamic_update_slice", "multiple_outputs"),
         "Elman RNN with lax.scan: carried hidden state, stacked per-step outputs")
def scan_rnn(r):
    return _rnn, (_rnn_params(r), r.normal((20, 8, 16)))


@program("scan_rnn_train", "control_flow", "train",
         ("scan_carry", "dynamic_slice", "dynamic_update_slice"),
         "backpropagation through time of the scan RNN, one SGD step")
def scan_rnn_train(r):
    def scan_rnn_train(p, xs, ys):
        loss, g = jax.value_and_grad(lambda p: mse(_rnn(p, xs)[1], ys))(p)
        return sgd(p, g), loss
    return scan_rnn_train, (_rnn_params(r), r.normal((20, 8, 16)), r.normal((20, 8, 4)))


@program("power_iteration", "control_flow", "infer", ("while_static_trip_count",),
         "20 steps of power iteration with lax.fori_loop; Rayleigh quotient")
def power_iteration(r):
    def power_iteration(a, v0):
        s = a @ a.T

        def body(_, v):
            v = s @ v
            return v / jnp.linalg.norm(v)
        v = lax.fori_loop(0, 20, body, v0)
        return v @ s @ v, v
    return power_iteration, (r.normal((32, 32)), r.normal((32,)))


@program("euler_ode_train", "control_flow", "train", ("while_static_trip_count", "scan_carry"),
         "neural ODE: 8 explicit Euler steps in lax.fori_loop (reverse-mode turns it into a "
         "scan), one Adam step")
def euler_ode_train(r):
    params = mlp_params(r, (8, 32, 8))

    def solve(p, y):
        dt = 1.0 / 8
        return lax.fori_loop(0, 8, lambda i, y: y + dt * mlp(p, y, jnp.tanh), y)

    def euler_ode_train(p, opt, y0, y1):
        loss, g = jax.value_and_grad(lambda p: mse(solve(p, y0), y1))(p)
        p, opt = adam(p, g, opt)
        return p, opt, loss
    return euler_ode_train, (params, adam_state(params), r.normal((16, 8)), r.normal((16, 8)))


@program("newton_while", "control_flow", "infer", ("while_data_dependent",),
         "Newton's method for x**3 = a with lax.while_loop until the step is below a "
         "tolerance (at most 50 iterations)")
def newton_while(r):
    def newton_while(a):
        def cond(state):
            _, step, i = state
            return (i < 50) & (jnp.max(jnp.abs(step)) > 1e-6)

        def body(state):
            x, _, i = state
            step = (x ** 3 - a) / (3 * x ** 2)
            return x - step, step, i + 1
        x, _, iterations = lax.while_loop(cond, body, (jnp.ones_like(a), jnp.ones_like(a), 0))
        return x, iterations
    return newton_while, (1.0 + r.uniform((64,)),)


@program("greedy_decode_until_eos", "control_flow", "infer",
         ("while_data_dependent", "argmax", "gather_embedding", "dynamic_update_slice",
          "multiple_outputs"),
         "GRU-cell greedy decoding in a lax.while_loop that stops when every sequence has "
         "emitted EOS (or after 16 tokens)")
def greedy_decode_until_eos(r):
    vocab, d, max_len, eos = 32, 32, 16, 1
    params = {"embed": make_init("normal", r.rng, (vocab, d), 1.0), "wz": weight(r, 2 * d, d),
              "wh": weight(r, 2 * d, d), "out": weight(r, d, vocab)}

    def greedy_decode_until_eos(p, h, tok):
        def cond(s):
            _, _, i, done, _ = s
            return (i < max_len) & ~jnp.all(done)

        def body(s):
            h, tok, i, done, out = s
            xh = jnp.concatenate([p["embed"][tok], h], axis=-1)
            z = jax.nn.sigmoid(xh @ p["wz"])
            h = (1 - z) * h + z * jnp.tanh(xh @ p["wh"])
            tok = jnp.where(done, eos, jnp.argmax(h @ p["out"], axis=-1).astype(jnp.int32))
            out = lax.dynamic_update_slice(out, tok[:, None], (0, i))
            return h, tok, i + 1, done | (tok == eos), out
        b = h.shape[0]
        init = (h, tok, 0, jnp.zeros(b, bool), jnp.zeros((b, max_len), jnp.int32))
        _, _, length, _, out = lax.while_loop(cond, body, init)
        return out, length
    return greedy_decode_until_eos, (params, r.normal((4, d)), r.randint((4,), 2, vocab))


@program("cond_switch", "control_flow", "infer", ("conditional",),
         "lax.cond on a data-dependent predicate and lax.switch on an index argument")
def cond_switch(r):
    params = {"w1": weight(r, 32, 32), "w2": weight(r, 32, 32)}

    def cond_switch(p, x, branch):
        h = lax.cond(jnp.mean(x) > 0, lambda x: jnp.tanh(x @ p["w1"]),
                     lambda x: jax.nn.relu(x @ p["w2"]), x)
        return lax.switch(branch, [jax.nn.gelu, jax.nn.silu, lambda v: v * v], h)
    return cond_switch, (params, r.normal((8, 32)), np.int32(1))


@program("cond_train", "control_flow", "train", ("conditional",),
         "gradient through lax.cond: the loss is L2 or Huber depending on a flag argument, "
         "one SGD step")
def cond_train(r):
    params = mlp_params(r, (16, 32, 4))

    def cond_train(p, x, y, use_huber):
        def loss_fn(p):
            err = mlp(p, x) - y
            return lax.cond(use_huber,
                            lambda e: jnp.mean(jnp.where(jnp.abs(e) < 1, 0.5 * e * e,
                                                         jnp.abs(e) - 0.5)),
                            lambda e: jnp.mean(e * e), err)
        loss, g = jax.value_and_grad(loss_fn)(p)
        return sgd(p, g), loss
    return cond_train, (params, r.normal((16, 16)), r.normal((16, 4)), np.bool_(True))


@program("cumulative_ops", "control_flow", "infer", ("cumsum", "reduce_window", "multiple_outputs"),
         "jnp.cumsum, jnp.cumprod, lax.cummax, lax.cumlogsumexp and a reversed cumsum")
def cumulative_ops(r):
    def cumulative_ops(x):
        return (jnp.cumsum(x, axis=-1), jnp.cumprod(1 + 0.01 * x, axis=-1), lax.cummax(x, axis=1),
                lax.cumlogsumexp(x, axis=0), jnp.flip(jnp.cumsum(jnp.flip(x, 1), 1), 1))
    return cumulative_ops, (r.normal((8, 64)),)


@program("moving_average", "control_flow", "infer", ("reduce_window",),
         "lax.reduce_window moving sum / max over time with padding, normalized by the "
         "window counts")
def moving_average(r):
    def moving_average(x):
        pad = ((0, 0), (4, 0), (0, 0))
        total = lax.reduce_window(x, 0.0, lax.add, (1, 5, 1), (1, 1, 1), pad)
        count = lax.reduce_window(jnp.ones_like(x), 0.0, lax.add, (1, 5, 1), (1, 1, 1), pad)
        peak = lax.reduce_window(x, -jnp.inf, lax.max, (1, 3, 1), (1, 2, 1), "SAME")
        return total / count, peak
    return moving_average, (r.normal((4, 64, 8)),)


@program("cox_survival_train", "control_flow", "train", ("cumsum", "sort", "reduce_window"),
         "Cox proportional-hazards loss: argsort by time, risk sets as log(cumsum(exp)), "
         "one Adam step")
def cox_survival_train(r):
    params = mlp_params(r, (12, 32, 1))

    def loss_fn(p, x, time, event):
        order = jnp.argsort(-time)
        risk = mlp(p, x)[:, 0][order]
        log_risk_set = jnp.log(jnp.cumsum(jnp.exp(risk)))
        return -jnp.sum((risk - log_risk_set) * event[order]) / jnp.maximum(jnp.sum(event), 1)

    def cox_survival_train(p, opt, x, time, event):
        loss, g = jax.value_and_grad(loss_fn)(p, x, time, event)
        p, opt = adam(p, g, opt)
        return p, opt, loss
    return cox_survival_train, (params, adam_state(params), r.normal((64, 12)), r.uniform((64,)),
                                (r.uniform((64,)) < 0.7).astype(F32))


# =========================================================================== conv
@program("conv_stride_padding", "conv", "infer", ("conv_stride", "conv_padding"),
         "NHWC convs: 3x3 stride 2 SAME, 3x3 with explicit asymmetric padding, 1x1 VALID")
def conv_stride_padding(r):
    params = {"a": weight(r, 3, 3, 3, 16), "b": weight(r, 3, 3, 16, 16), "c": weight(r, 1, 1, 16, 8)}

    def conv_stride_padding(p, x):
        x = jax.nn.relu(conv2d(x, p["a"], stride=2))
        x = jax.nn.relu(conv2d(x, p["b"], padding=((1, 2), (0, 1))))
        return conv2d(x, p["c"], padding="VALID")
    return conv_stride_padding, (params, r.normal((2, 32, 32, 3)))


@program("atrous_aspp", "conv", "infer", ("conv_dilation", "conv_padding"),
         "DeepLab-style atrous spatial pyramid: 3x3 convs with dilation 1, 2 and 4, concat, 1x1")
def atrous_aspp(r):
    params = {f"d{d}": weight(r, 3, 3, 8, 8) for d in (1, 2, 4)}
    params["proj"] = weight(r, 1, 1, 24, 8)

    def atrous_aspp(p, x):
        branches = [jax.nn.relu(conv2d(x, p[f"d{d}"], dilation=d)) for d in (1, 2, 4)]
        return conv2d(jnp.concatenate(branches, -1), p["proj"])
    return atrous_aspp, (params, r.normal((2, 24, 24, 8)))


@program("conv_transpose_decoder", "conv", "infer", ("conv_transpose",),
         "decoder upsampling with two stride-2 lax.conv_transpose layers")
def conv_transpose_decoder(r):
    params = {"up1": weight(r, 4, 4, 16, 8), "up2": weight(r, 4, 4, 8, 3)}

    def conv_transpose_decoder(p, z):
        dn = ("NHWC", "HWIO", "NHWC")
        h = jax.nn.relu(lax.conv_transpose(z, p["up1"], (2, 2), "SAME", dimension_numbers=dn))
        return jax.nn.sigmoid(lax.conv_transpose(h, p["up2"], (2, 2), "SAME", dimension_numbers=dn))
    return conv_transpose_decoder, (params, r.normal((2, 8, 8, 16)))


@program("conv_autoencoder_train", "conv", "train",
         ("conv_transpose", "conv_stride", "conv_padding"),
         "convolutional autoencoder (stride-2 convs down, conv_transpose up), MSE, one SGD step")
def conv_autoencoder_train(r):
    params = {"down1": weight(r, 3, 3, 1, 8), "down2": weight(r, 3, 3, 8, 16),
              "up1": weight(r, 3, 3, 16, 8), "up2": weight(r, 3, 3, 8, 1)}
    dn = ("NHWC", "HWIO", "NHWC")

    def model(p, x):
        h = jax.nn.relu(conv2d(x, p["down1"], stride=2))
        h = jax.nn.relu(conv2d(h, p["down2"], stride=2))
        h = jax.nn.relu(lax.conv_transpose(h, p["up1"], (2, 2), "SAME", dimension_numbers=dn))
        return lax.conv_transpose(h, p["up2"], (2, 2), "SAME", dimension_numbers=dn)

    def conv_autoencoder_train(p, x):
        loss, g = jax.value_and_grad(lambda p: mse(model(p, x), x))(p)
        return sgd(p, g), loss
    return conv_autoencoder_train, (params, r.uniform((4, 16, 16, 1)))


@program("depthwise_separable_train", "conv", "train", ("conv_depthwise", "conv_padding"),
         "MobileNet block: depthwise 3x3 (feature_group_count = channels), batch statistics, "
         "pointwise 1x1, one SGD step")
def depthwise_separable_train(r):
    c = 16
    params = {"dw": weight(r, 3, 3, 1, c), "pw": weight(r, 1, 1, c, 32),
              "head": dense_params(r, 32, 10)}

    def model(p, x):
        h = conv2d(x, p["dw"], groups=c)
        mean, var = h.mean((0, 1, 2)), h.var((0, 1, 2))
        h = jax.nn.relu6((h - mean) * lax.rsqrt(var + 1e-5))
        h = jax.nn.relu(conv2d(h, p["pw"]))
        return h.mean((1, 2)) @ p["head"]["w"] + p["head"]["b"]

    def depthwise_separable_train(p, x, labels):
        loss, g = jax.value_and_grad(lambda p: one_hot_xent(model(p, x), labels))(p)
        return sgd(p, g), loss
    return depthwise_separable_train, (params, r.normal((4, 16, 16, c)), r.randint((4,), 0, 10))


@program("grouped_conv_train", "conv", "train", ("conv_grouped", "conv_padding"),
         "ResNeXt bottleneck with a 4-group 3x3 conv and a residual add, one Adam step")
def grouped_conv_train(r):
    params = {"reduce": weight(r, 1, 1, 32, 16), "grouped": weight(r, 3, 3, 4, 16),
              "expand": weight(r, 1, 1, 16, 32)}

    def block(p, x):
        h = jax.nn.relu(conv2d(x, p["reduce"]))
        h = jax.nn.relu(conv2d(h, p["grouped"], groups=4))
        return jax.nn.relu(x + conv2d(h, p["expand"]))

    def grouped_conv_train(p, opt, x, y):
        loss, g = jax.value_and_grad(lambda p: mse(block(p, x), y))(p)
        p, opt = adam(p, g, opt)
        return p, opt, loss
    return grouped_conv_train, (params, adam_state(params), r.normal((2, 12, 12, 32)),
                                r.normal((2, 12, 12, 32)))


@program("grouped_conv_nchw", "conv", "infer", ("conv_grouped", "conv_padding", "conv_stride"),
         "PyTorch-layout (NCHW / OIHW) grouped conv with stride 2, as ported models write it")
def grouped_conv_nchw(r):
    def grouped_conv_nchw(x, w, b):
        y = lax.conv_general_dilated(x, w, (2, 2), ((1, 1), (1, 1)),
                                     dimension_numbers=("NCHW", "OIHW", "NCHW"),
                                     feature_group_count=2)
        return jax.nn.relu(y + b[None, :, None, None])
    return grouped_conv_nchw, (r.normal((2, 16, 20, 20)), weight(r, 32, 8, 3, 3),
                               np.zeros(32, F32))


@program("pooling", "conv", "infer", ("pool_forward", "reduce_window", "multiple_outputs"),
         "max pool (SAME, stride 2), average pool that excludes padding, global average pool")
def pooling(r):
    def pooling(x):
        mx = max_pool(x, 3, 2, "SAME")
        total = lax.reduce_window(x, 0.0, lax.add, (1, 3, 3, 1), (1, 1, 1, 1), "SAME")
        count = lax.reduce_window(jnp.ones_like(x[:1, :, :, :1]), 0.0, lax.add, (1, 3, 3, 1),
                                  (1, 1, 1, 1), "SAME")
        return mx, total / count, x.mean(axis=(1, 2))
    return pooling, (r.normal((2, 15, 15, 8)),)


@program("pooling_cnn_train", "conv", "train",
         ("pool_forward", "pool_backward", "conv_padding", "one_hot_cross_entropy"),
         "small CNN with max pool and average pool; the backward pass has select-and-scatter "
         "and a padded reduce-window; one SGD step")
def pooling_cnn_train(r):
    params = {"c1": weight(r, 3, 3, 3, 8), "c2": weight(r, 3, 3, 8, 16),
              "head": dense_params(r, 16 * 4 * 4, 10)}

    def model(p, x):
        h = max_pool(jax.nn.relu(conv2d(x, p["c1"])))
        h = avg_pool(jax.nn.relu(conv2d(h, p["c2"])))
        return h.reshape(h.shape[0], -1) @ p["head"]["w"] + p["head"]["b"]

    def pooling_cnn_train(p, x, labels):
        loss, g = jax.value_and_grad(lambda p: one_hot_xent(model(p, x), labels))(p)
        return sgd(p, g), loss
    return pooling_cnn_train, (params, r.normal((4, 16, 16, 3)), r.randint((4,), 0, 10))


# =========================================================================== spectral
@program("fft_filter", "spectral", "infer", ("fft", "multiple_outputs"),
         "2-D FFT low-pass filter: fft2, fftshift, a radial mask, ifft2; also returns the "
         "complex spectrum")
def fft_filter(r):
    def fft_filter(img):
        spec = jnp.fft.fftshift(jnp.fft.fft2(img), axes=(-2, -1))
        n = img.shape[-1]
        yy, xx = jnp.meshgrid(jnp.arange(n) - n // 2, jnp.arange(n) - n // 2, indexing="ij")
        mask = (yy ** 2 + xx ** 2) <= (n // 4) ** 2
        low = jnp.fft.ifft2(jnp.fft.ifftshift(spec * mask, axes=(-2, -1))).real
        return low, spec
    return fft_filter, (r.normal((4, 32, 32)),)


@program("spectral_conv_train", "spectral", "train", ("rfft",),
         "Fourier neural operator layer: rfft, keep 8 modes, complex weights from real/imag "
         "parameters, irfft, one SGD step")
def spectral_conv_train(r):
    modes, c = 8, 8
    params = {"wr": 0.1 * r.normal((modes, c, c)), "wi": 0.1 * r.normal((modes, c, c)),
              "skip": weight(r, c, c)}

    def layer(p, x):                      # x: (B, N, C)
        xf = jnp.fft.rfft(x, axis=1)[:, :modes]
        w = p["wr"] + 1j * p["wi"]
        yf = jnp.einsum("bmc,mcd->bmd", xf, w)
        yf = jnp.pad(yf, ((0, 0), (0, x.shape[1] // 2 + 1 - modes), (0, 0)))
        return jax.nn.gelu(jnp.fft.irfft(yf, n=x.shape[1], axis=1) + x @ p["skip"])

    def spectral_conv_train(p, x, y):
        loss, g = jax.value_and_grad(lambda p: mse(layer(p, x), y))(p)
        return sgd(p, g), loss
    return spectral_conv_train, (params, r.normal((4, 64, c)), r.normal((4, 64, c)))


@program("log_spectrogram", "spectral", "infer", ("rfft", "keepdims_reduction"),
         "framed signal (reshape of overlapping slices), Hann window, rfft magnitude, "
         "mel-like projection, log, per-utterance normalization")
def log_spectrogram(r):
    frame, hop = 64, 32

    def log_spectrogram(signal, mel):
        n = (signal.shape[-1] - frame) // hop + 1
        frames = jnp.stack([signal[:, i * hop:i * hop + frame] for i in range(n)], axis=1)
        window = 0.5 - 0.5 * jnp.cos(2 * jnp.pi * jnp.arange(frame) / frame)
        power = jnp.abs(jnp.fft.rfft(frames * window, axis=-1)) ** 2
        feats = jnp.log(power @ mel + 1e-6)
        return feats - feats.mean(axis=1, keepdims=True)
    return log_spectrogram, (r.normal((2, 512)), np.abs(r.normal((frame // 2 + 1, 16))))


# =========================================================================== linalg
def _rbf(x1, x2, log_ls, log_sf):
    d2 = jnp.sum(jnp.square(x1[:, None, :] - x2[None, :, :]), -1) / jnp.exp(2 * log_ls)
    return jnp.exp(2 * log_sf) * jnp.exp(-0.5 * d2)


def _gp_hyper():
    return {"log_ls": np.zeros((), F32), "log_sf": np.zeros((), F32),
            "log_noise": np.asarray(-1.0, F32)}


@program("gp_posterior", "linalg", "infer",
         ("cholesky", "triangular_solve", "custom_call", "multiple_outputs"),
         "Gaussian-process regression: RBF kernel, jnp.linalg.cholesky, cho_solve and "
         "solve_triangular (LAPACK custom-calls on CPU), predictive mean and variance")
def gp_posterior(r):
    def gp_posterior(h, x, y, xs):
        k = _rbf(x, x, h["log_ls"], h["log_sf"])
        k = k + (jnp.exp(2 * h["log_noise"]) + 1e-4) * jnp.eye(x.shape[0])
        chol = jnp.linalg.cholesky(k)
        alpha = jsp.linalg.cho_solve((chol, True), y)
        ks = _rbf(x, xs, h["log_ls"], h["log_sf"])
        v = jsp.linalg.solve_triangular(chol, ks, lower=True)
        return ks.T @ alpha, jnp.exp(2 * h["log_sf"]) - jnp.sum(v * v, axis=0)
    return gp_posterior, (_gp_hyper(), r.normal((32, 2)), r.normal((32,)), r.normal((16, 2)))


@program("gp_marginal_likelihood_train", "linalg", "train",
         ("cholesky", "triangular_solve", "custom_call"),
         "gradient of the GP negative log marginal likelihood w.r.t. the kernel "
         "hyper-parameters (Cholesky's derivative needs triangular solves), one SGD step")
def gp_marginal_likelihood_train(r):
    def nll(h, x, y):
        n = x.shape[0]
        k = _rbf(x, x, h["log_ls"], h["log_sf"])
        k = k + (jnp.exp(2 * h["log_noise"]) + 1e-4) * jnp.eye(n)
        chol = jnp.linalg.cholesky(k)
        alpha = jsp.linalg.cho_solve((chol, True), y)
        return 0.5 * y @ alpha + jnp.sum(jnp.log(jnp.diag(chol))) + 0.5 * n * jnp.log(2 * jnp.pi)

    def gp_marginal_likelihood_train(h, x, y):
        loss, g = jax.value_and_grad(nll)(h, x, y)
        return sgd(h, g, 0.01), loss
    return gp_marginal_likelihood_train, (_gp_hyper(), r.normal((32, 2)), r.normal((32,)))


@program("matrix_decompositions", "linalg", "infer", ("custom_call", "multiple_outputs"),
         "jnp.linalg.qr, eigh, svd and slogdet, each a LAPACK custom-call on CPU")
def matrix_decompositions(r):
    def matrix_decompositions(a):
        q, rr = jnp.linalg.qr(a)
        s = a @ a.T + jnp.eye(a.shape[0])
        evals, evecs = jnp.linalg.eigh(s)
        sv = jnp.linalg.svd(a, compute_uv=False)
        sign, logdet = jnp.linalg.slogdet(s)
        return q, rr, evals, jnp.abs(evecs), sv, sign * logdet
    return matrix_decompositions, (r.normal((16, 16)),)


# =========================================================================== precision
def _bf16_mlp(p, x):
    h = x.astype(jnp.bfloat16)
    for i, layer in enumerate(p):
        h = jnp.dot(h, layer["w"].astype(jnp.bfloat16), preferred_element_type=jnp.float32)
        h = h + layer["b"]
        if i < len(p) - 1:
            h = jax.nn.gelu(h).astype(jnp.bfloat16)
    return h


@program("bf16_mlp", "precision", "infer", ("bf16", "softmax"),
         "bf16 activations and weights, f32 accumulation (preferred_element_type), f32 softmax")
def bf16_mlp(r):
    def bf16_mlp(p, x):
        return jax.nn.softmax(_bf16_mlp(p, x), axis=-1)
    return bf16_mlp, (mlp_params(r, (64, 128, 128, 10)), r.normal((16, 64)))


@program("bf16_mixed_precision_train", "precision", "train", ("bf16", "one_hot_cross_entropy"),
         "f32 master weights, bf16 compute, f32 loss, gradients back in f32, one SGD step")
def bf16_mixed_precision_train(r):
    def bf16_mixed_precision_train(p, x, labels):
        loss, g = jax.value_and_grad(lambda p: one_hot_xent(_bf16_mlp(p, x), labels))(p)
        return sgd(p, g, 0.1), loss
    return bf16_mixed_precision_train, (mlp_params(r, (64, 128, 128, 10)), r.normal((16, 64)),
                                        r.randint((16,), 0, 10))


@program("f16_conv_net", "precision", "infer", ("f16", "conv_padding", "layer_norm"),
         "float16 parameters and activations (convs in f16), layer norm computed in f32")
def f16_conv_net(r):
    params = {"c1": weight(r, 3, 3, 3, 16).astype(np.float16),
              "c2": weight(r, 3, 3, 16, 16).astype(np.float16),
              "scale": np.ones(16, np.float16), "bias": np.zeros(16, np.float16)}

    def f16_conv_net(p, x):
        h = jax.nn.relu(conv2d(x, p["c1"]))
        h32 = layer_norm(h.astype(jnp.float32), p["scale"].astype(jnp.float32),
                         p["bias"].astype(jnp.float32))
        return conv2d(h32.astype(jnp.float16), p["c2"])
    return f16_conv_net, (params, r.normal((2, 16, 16, 3)).astype(np.float16))


@program("f16_loss_scaling_train", "precision", "train", ("f16",),
         "float16 compute with dynamic loss scaling: skip the update and halve the scale when "
         "a gradient is not finite, else grow it")
def f16_loss_scaling_train(r):
    def loss_fn(p, x, y, scale):
        pred = mlp([jax.tree.map(lambda a: a.astype(jnp.float16), l) for l in p],
                   x.astype(jnp.float16))
        return mse(pred.astype(jnp.float32), y) * scale

    def f16_loss_scaling_train(p, scale, x, y):
        scaled_loss, g = jax.value_and_grad(loss_fn)(p, x, y, scale)
        g = jax.tree.map(lambda a: a / scale, g)
        finite = jnp.all(jnp.array([jnp.all(jnp.isfinite(a)) for a in jax.tree.leaves(g)]))
        new = jax.tree.map(lambda a, b: jnp.where(finite, a - 0.01 * b, a), p, g)
        new_scale = jnp.where(finite, scale * 2.0, scale / 2.0)
        return new, new_scale, scaled_loss / scale
    return f16_loss_scaling_train, (mlp_params(r, (32, 64, 8)), np.asarray(1024.0, F32),
                                    r.normal((16, 32)), r.normal((16, 8)))


def _quantize(x, axis):
    """Symmetric int8 quantization with a per-row/column scale along ``axis``."""
    scale = jnp.max(jnp.abs(x), axis=axis, keepdims=True) / 127.0 + 1e-8
    return jnp.clip(jnp.round(x / scale), -127, 127).astype(jnp.int8), scale


@program("int8_quantized_matmul", "precision", "infer", ("int8_quantization", "keepdims_reduction"),
         "dynamic per-row activation quantization, per-column weight quantization, int8 x int8 "
         "-> int32 dot_general, dequantize; second layer takes pre-quantized int8 weights")
def int8_quantized_matmul(r):
    def int8_quantized_matmul(w1, b1, qw2, s2, x):
        qx, sx = _quantize(x, -1)
        qw, sw = _quantize(w1, 0)
        acc = lax.dot_general(qx, qw, (((1,), (0,)), ((), ())), preferred_element_type=jnp.int32)
        h = jax.nn.relu(acc.astype(jnp.float32) * sx * sw + b1)
        qh, sh = _quantize(h, -1)
        acc2 = lax.dot_general(qh, qw2, (((1,), (0,)), ((), ())), preferred_element_type=jnp.int32)
        return acc2.astype(jnp.float32) * sh * s2
    w2 = weight(r, 64, 16)
    s2 = np.abs(w2).max(0, keepdims=True) / 127.0
    qw2 = np.clip(np.round(w2 / s2), -127, 127).astype(np.int8)
    return int8_quantized_matmul, (weight(r, 32, 64), np.zeros(64, F32), qw2, s2.astype(F32),
                                   r.normal((8, 32)))


@program("int8_qat_train", "precision", "train", ("int8_quantization",),
         "quantization-aware training: int8 fake-quantized weights with a straight-through "
         "estimator, one Adam step")
def int8_qat_train(r):
    params = mlp_params(r, (32, 64, 8))

    def fake_quant(w):
        q, s = _quantize(w, 0)
        return w + lax.stop_gradient(q.astype(jnp.float32) * s - w)

    def int8_qat_train(p, opt, x, y):
        def loss_fn(p):
            q = [{"w": fake_quant(l["w"]), "b": l["b"]} for l in p]
            return mse(mlp(q, x), y)
        loss, g = jax.value_and_grad(loss_fn)(p)
        p, opt = adam(p, g, opt)
        return p, opt, loss
    return int8_qat_train, (params, adam_state(params), r.normal((16, 32)), r.normal((16, 8)))


# =========================================================================== outputs
@program("dict_outputs", "outputs", "infer", ("multiple_outputs",),
         "a dict of results: logits, probabilities, features, a scalar, an input passed "
         "through unchanged and the same array returned twice")
def dict_outputs(r):
    params = mlp_params(r, (16, 32, 4))

    def dict_outputs(p, x, mask):
        feats = jax.nn.relu(x @ p[0]["w"] + p[0]["b"])
        logits = feats @ p[1]["w"] + p[1]["b"]
        return {"logits": logits, "probs": jax.nn.softmax(logits), "features": feats,
                "mean_logit": logits.mean(), "mask": mask, "logits_again": logits}
    return dict_outputs, (params, r.normal((8, 16)), r.uniform((8,)) < 0.5)


@program("donated_adam_train", "outputs", "train",
         ("donated_buffers", "multiple_outputs", "layer_norm"),
         "training step jitted with donate_argnums=(0, 1): parameters and Adam state are "
         "updated in place", donate_argnums=(0, 1))
def donated_adam_train(r):
    params = {"mlp": mlp_params(r, (32, 64, 32)), "ln": {"scale": np.ones(32, F32),
                                                         "bias": np.zeros(32, F32)}}

    def donated_adam_train(p, opt, x, y):
        def loss_fn(p):
            return mse(layer_norm(mlp(p["mlp"], x), **p["ln"]), y)
        loss, g = jax.value_and_grad(loss_fn)(p)
        p, opt = adam(p, g, opt)
        return p, opt, loss
    return donated_adam_train, (params, adam_state(params), r.normal((16, 32)), r.normal((16, 32)))


@program("remat_train", "outputs", "train", ("multiple_outputs", "layer_norm"),
         "jax.checkpoint (rematerialization) around each residual block, gradient-norm "
         "clipping, one SGD step returning params, loss and the gradient norm")
def remat_train(r):
    params = [_ln_mlp_params(r, 32, 64) for _ in range(3)]

    def remat_train(p, x, y):
        def loss_fn(p):
            h = x
            for block in p:
                h = jax.checkpoint(_ln_mlp)(block, h)
            return mse(h, y)
        loss, g = jax.value_and_grad(loss_fn)(p)
        norm = jnp.sqrt(sum(jnp.sum(jnp.square(a)) for a in jax.tree.leaves(g)))
        g = jax.tree.map(lambda a: a * jnp.minimum(1.0, 1.0 / (norm + 1e-6)), g)
        return sgd(p, g), loss, norm
    return remat_train, (params, r.normal((8, 8, 32)), r.normal((8, 8, 32)))


# =========================================================================== array ops (user-reported idioms)
@program("linear_recurrence_scan", "array_ops", "infer", ("associative_scan", "multiple_outputs"),
         "h_t = a_t * h_(t-1) + b_t over 64 steps with lax.associative_scan (the parallel scan of "
         "linear RNNs / state-space models), and the last state")
def linear_recurrence_scan(r):
    def linear_recurrence_scan(a, b):
        def combine(left, right):
            a_l, b_l = left
            a_r, b_r = right
            return a_l * a_r, a_r * b_l + b_r
        _, h = lax.associative_scan(combine, (jax.nn.sigmoid(a), b), axis=1)
        return h, h[:, -1]
    return linear_recurrence_scan, (r.normal((4, 64, 16)), r.normal((4, 64, 16)))


@program("image_augment", "array_ops", "infer", ("image_resize", "reflect_pad_roll", "keepdims_reduction"),
         "image augmentation: reflect padding, a roll, bilinear resize to 24x24, per-channel "
         "standardization with keepdims means")
def image_augment(r):
    def image_augment(images):
        x = jnp.pad(images, ((0, 0), (2, 2), (2, 2), (0, 0)), mode="reflect")
        x = jnp.roll(x, 3, axis=2)
        x = jax.image.resize(x, (x.shape[0], 24, 24, x.shape[3]), "bilinear")
        mean = x.mean(axis=(1, 2), keepdims=True)
        return (x - mean) / (x.std(axis=(1, 2), keepdims=True) + 1e-5)
    return image_augment, (r.uniform((2, 16, 16, 3)),)


@program("feature_hashing", "array_ops", "infer", ("bit_manipulation", "integer_division", "scatter_embedding_grad"),
         "the hashing trick: mix uint32 ids with shifts, xor and multiplies, bucket with // and %, "
         "count set bits, histogram the buckets with .at[].add")
def feature_hashing(r):
    def feature_hashing(ids, weights):
        h = ids.astype(jnp.uint32)
        h = (h ^ lax.shift_right_logical(h, jnp.uint32(16))) * jnp.uint32(0x45D9F3B)
        h = h ^ lax.shift_right_logical(h, jnp.uint32(16))
        signed = lax.bitcast_convert_type(h, jnp.int32)
        bucket = signed % 97
        row = signed // 97 % 4
        bits = lax.population_count(h).astype(jnp.float32)
        hist = jnp.zeros((4, 97), jnp.float32).at[row, bucket].add(weights * bits)
        return hist, bucket
    return feature_hashing, (r.randint((256,), 0, 1 << 30), r.uniform((256,)))


@program("graph_segment_pool_train", "array_ops", "train", ("segment_sum", "gather_embedding", "multiple_outputs"),
         "a message-passing layer: gather node features along edges, jax.ops.segment_sum to "
         "receivers, mean pooling per graph, one SGD step")
def graph_segment_pool_train(r):
    n_nodes, n_edges, n_graphs, d = 24, 64, 4, 16
    params = {"w_msg": weight(r, d, d), "w_out": weight(r, d, 1)}

    def graph_segment_pool_train(p, x, senders, receivers, graph_of_node, y):
        def loss_fn(p):
            msg = jax.nn.relu(x[senders] @ p["w_msg"])
            h = x + jax.ops.segment_sum(msg, receivers, num_segments=n_nodes)
            pooled = jax.ops.segment_sum(h, graph_of_node, num_segments=n_graphs)
            counts = jax.ops.segment_sum(jnp.ones((n_nodes, 1)), graph_of_node, num_segments=n_graphs)
            return mse(pooled / counts @ p["w_out"], y)
        loss, g = jax.value_and_grad(loss_fn)(p)
        return sgd(p, g), loss
    return graph_segment_pool_train, (params, r.normal((n_nodes, d)), r.randint((n_edges,), 0, n_nodes),
                                      r.randint((n_edges,), 0, n_nodes),
                                      np.repeat(np.arange(n_graphs, dtype=np.int32), n_nodes // n_graphs),
                                      r.normal((n_graphs, 1)))


@program("batched_bisection", "control_flow", "infer", ("batched_while", "while_data_dependent"),
         "jax.vmap of a bisection root finder (lax.while_loop until the bracket is narrower "
         "than a tolerance) over 32 right-hand sides")
def batched_bisection(r):
    def solve(c):
        def cond(s):
            lo, hi, i = s
            return (hi - lo > 1e-5) & (i < 60)

        def body(s):
            lo, hi, i = s
            mid = 0.5 * (lo + hi)
            up = mid ** 3 + mid - c > 0
            return jnp.where(up, lo, mid), jnp.where(up, mid, hi), i + 1
        lo, hi, _ = lax.while_loop(cond, body, (jnp.float32(-10.0), jnp.float32(10.0), 0))
        return 0.5 * (lo + hi)
    batched_bisection = jax.vmap(solve)
    return batched_bisection, (r.normal((32,)) * 5,)


@program("remat_policy_train", "control_flow", "train", ("remat_policy", "multiple_outputs"),
         "jax.checkpoint with policy=dots_saveable around tanh MLP blocks (dots kept, the rest "
         "recomputed), one SGD step")
def remat_policy_train(r):
    params = mlp_params(r, (32, 64, 64, 32))

    def remat_policy_train(p, x, y):
        block = jax.checkpoint(lambda p, x: mlp(p, x, jnp.tanh), policy=jax.checkpoint_policies.dots_saveable)
        loss, g = jax.value_and_grad(lambda p: mse(block(p, x), y))(p)
        return sgd(p, g), loss
    return remat_policy_train, (params, r.normal((16, 32)), r.normal((16, 32)))


@program("fp8_simulated_matmul", "precision", "infer", ("reduce_precision", "bf16"),
         "simulated fp8 (e4m3, IEEE-style: largest finite 240) quantization with lax.reduce_precision of activations and weights, "
         "a bf16 matmul with f32 accumulation, per-row scales")
def fp8_simulated_matmul(r):
    def fp8_simulated_matmul(x, w):
        sx = jnp.max(jnp.abs(x), axis=-1, keepdims=True) / 240.0
        sw = jnp.max(jnp.abs(w), axis=0, keepdims=True) / 240.0
        xq = lax.reduce_precision(x / sx, exponent_bits=4, mantissa_bits=3)
        wq = lax.reduce_precision(w / sw, exponent_bits=4, mantissa_bits=3)
        y = jnp.dot(xq.astype(jnp.bfloat16), wq.astype(jnp.bfloat16), preferred_element_type=jnp.float32)
        return y * sx * sw
    return fp8_simulated_matmul, (r.normal((16, 64)), weight(r, 64, 32))


from . import idiom_models  # noqa: E402,F401  (registers the model programs)
