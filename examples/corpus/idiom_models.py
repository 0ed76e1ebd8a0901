"""Small ViT, DLRM, GRU and WaveNet models for the idiom corpus, each as inference and training.

The reporter of issue 16 trained and ran models of these four families; they are written here in
plain JAX at a small size and registered with :func:`.idioms.program` (group ``model``). Training
programs take one optimizer step and return the new parameters (and Adam state) and the loss.
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .idioms import (F32, adam, adam_state, attention_params, dense_params, dropout, layer_norm,
                     mlp, mlp_params, one_hot_xent, program, sgd, threefry_key, weight)
from .nn import make_init

# =========================================================================== ViT
VIT = dict(image=32, patch=8, channels=3, dim=64, heads=4, depth=2, mlp=128, classes=10, batch=4)


def vit_params(r):
    c = VIT
    d = c["dim"]
    tokens = (c["image"] // c["patch"]) ** 2 + 1
    ln = lambda: {"scale": np.ones(d, F32), "bias": np.zeros(d, F32)}  # noqa: E731
    return {
        "patch": weight(r, c["patch"], c["patch"], c["channels"], d),
        "cls": np.zeros((1, 1, d), F32),
        "pos": make_init("normal", r.rng, (1, tokens, d), 1.0),
        "blocks": [{"ln1": ln(), "attn": attention_params(r, d), "ln2": ln(),
                    "fc1": dense_params(r, d, c["mlp"]), "fc2": dense_params(r, c["mlp"], d)}
                   for _ in range(c["depth"])],
        "ln": ln(), "head": dense_params(r, d, c["classes"]),
    }


def _vit_attention(p, x, heads):
    b, t, d = x.shape
    hd = d // heads
    q, k, v = jnp.split((x @ p["qkv"]).reshape(b, t, 3, heads, hd), 3, axis=2)
    w = jax.nn.softmax(jnp.einsum("bqhd,bkhd->bhqk", q[:, :, 0], k[:, :, 0]) / math.sqrt(hd))
    return jnp.einsum("bhqk,bkhd->bqhd", w, v[:, :, 0]).reshape(b, t, d) @ p["out"]


def vit_forward(p, images, key=None, rate=0.1):
    """Patch-embedding conv (stride = patch), class token, pre-LN encoder blocks, linear head."""
    c = VIT
    x = lax.conv_general_dilated(images, p["patch"], (c["patch"],) * 2, "VALID",
                                 dimension_numbers=("NHWC", "HWIO", "NHWC"))
    b = x.shape[0]
    x = x.reshape(b, -1, c["dim"])
    x = jnp.concatenate([jnp.broadcast_to(p["cls"], (b, 1, c["dim"])), x], axis=1) + p["pos"]
    keys = jax.random.split(key, 2 * c["depth"]) if key is not None else None
    for i, blk in enumerate(p["blocks"]):
        h = _vit_attention(blk["attn"], layer_norm(x, **blk["ln1"]), c["heads"])
        x = x + (dropout(keys[2 * i], h, rate) if key is not None else h)
        h = layer_norm(x, **blk["ln2"])
        h = jax.nn.gelu(h @ blk["fc1"]["w"] + blk["fc1"]["b"]) @ blk["fc2"]["w"] + blk["fc2"]["b"]
        x = x + (dropout(keys[2 * i + 1], h, rate) if key is not None else h)
    x = layer_norm(x[:, 0], **p["ln"])
    return x @ p["head"]["w"] + p["head"]["b"]


@program("vit_small_infer", "model", "infer",
         ("conv_stride", "layer_norm", "softmax", "keepdims_reduction", "argmax",
          "multiple_outputs"),
         "ViT (32x32 images, 8x8 patches, 2 blocks, dim 64): class probabilities and predictions")
def vit_small_infer(r):
    def vit_small_infer(p, images):
        logits = vit_forward(p, images)
        return jax.nn.softmax(logits), jnp.argmax(logits, -1)
    return vit_small_infer, (vit_params(r), r.normal((VIT["batch"], 32, 32, 3)))


@program("vit_small_train", "model", "train",
         ("conv_stride", "layer_norm", "softmax", "dropout_threefry", "one_hot_cross_entropy"),
         "ViT training step with dropout (threefry key argument), one-hot cross-entropy, Adam")
def vit_small_train(r):
    params = vit_params(r)

    def vit_small_train(p, opt, key, images, labels):
        loss, g = jax.value_and_grad(
            lambda p: one_hot_xent(vit_forward(p, images, key), labels))(p)
        p, opt = adam(p, g, opt)
        return p, opt, loss
    return vit_small_train, (params, adam_state(params), threefry_key(11),
                             r.normal((VIT["batch"], 32, 32, 3)),
                             r.randint((VIT["batch"],), 0, VIT["classes"]))


# =========================================================================== DLRM
DLRM = dict(dense=13, rows=(500, 300, 200, 100), embed=16, hot=3, bottom=(64, 32), top=(64, 32),
            batch=16)


def dlrm_params(r):
    c = DLRM
    return {"tables": [make_init("normal", r.rng, (n, c["embed"]), 1.0) for n in c["rows"]],
            "bottom": mlp_params(r, (c["dense"],) + c["bottom"] + (c["embed"],)),
            "top": mlp_params(r, (c["embed"] + math.comb(len(c["rows"]) + 1, 2),) + c["top"] + (1,))}


def dlrm_forward(p, dense, sparse):
    """Bottom MLP, sum-pooled multi-hot embedding bags, pairwise dot interactions, top MLP."""
    bottom = jax.nn.relu(mlp(p["bottom"], dense))
    bags = [jnp.take(t, sparse[:, i], axis=0).sum(axis=1) for i, t in enumerate(p["tables"])]
    z = jnp.stack([bottom] + bags, axis=1)                    # (B, F, D)
    inter = jnp.einsum("bfd,bgd->bfg", z, z)
    iu, ju = jnp.triu_indices(z.shape[1], k=1)
    return mlp(p["top"], jnp.concatenate([bottom, inter[:, iu, ju]], axis=-1))[:, 0]


def _dlrm_batch(r):
    c = DLRM
    sparse = np.stack([r.randint((c["batch"], c["hot"]), 0, n) for n in c["rows"]], axis=1)
    return r.normal((c["batch"], c["dense"])), sparse


@program("dlrm_small_infer", "model", "infer", ("gather_embedding",),
         "DLRM click-through predictor: embedding-bag gathers, dot interactions, sigmoid")
def dlrm_small_infer(r):
    def dlrm_small_infer(p, dense, sparse):
        return jax.nn.sigmoid(dlrm_forward(p, dense, sparse))
    return dlrm_small_infer, (dlrm_params(r),) + _dlrm_batch(r)


@program("dlrm_small_train", "model", "train", ("gather_embedding", "scatter_embedding_grad"),
         "DLRM training step: binary cross-entropy with logits, embedding gradients as "
         "scatter-adds, SGD")
def dlrm_small_train(r):
    def loss_fn(p, dense, sparse, clicks):
        logits = dlrm_forward(p, dense, sparse)
        return jnp.mean(jnp.maximum(logits, 0) - logits * clicks
                        + jnp.log1p(jnp.exp(-jnp.abs(logits))))

    def dlrm_small_train(p, dense, sparse, clicks):
        loss, g = jax.value_and_grad(loss_fn)(p, dense, sparse, clicks)
        return sgd(p, g, 0.05), loss
    dense, sparse = _dlrm_batch(r)
    clicks = (r.uniform((DLRM["batch"],)) < 0.3).astype(F32)
    return dlrm_small_train, (dlrm_params(r), dense, sparse, clicks)


# =========================================================================== GRU
GRU = dict(vocab=64, embed=32, hidden=64, steps=16, batch=8)


def gru_params(r):
    c = GRU
    e, h = c["embed"], c["hidden"]
    return {"embed": make_init("normal", r.rng, (c["vocab"], e), 1.0),
            "wi": weight(r, e, 3 * h), "wh": weight(r, h, 3 * h, scale=0.5),
            "bi": np.zeros(3 * h, F32), "bh": np.zeros(3 * h, F32),
            "out": dense_params(r, h, c["vocab"])}


def gru_forward(p, tokens, h0):
    """GRU language model over (B, T) tokens with lax.scan; returns (final h, (B, T, V) logits)."""
    def cell(h, x):
        xr, xz, xn = jnp.split(x @ p["wi"] + p["bi"], 3, axis=-1)
        hr, hz, hn = jnp.split(h @ p["wh"] + p["bh"], 3, axis=-1)
        r_ = jax.nn.sigmoid(xr + hr)
        z = jax.nn.sigmoid(xz + hz)
        h = (1 - z) * jnp.tanh(xn + r_ * hn) + z * h
        return h, h
    xs = jnp.swapaxes(p["embed"][tokens], 0, 1)               # (T, B, E)
    h, hs = lax.scan(cell, h0, xs)
    return h, jnp.swapaxes(hs, 0, 1) @ p["out"]["w"] + p["out"]["b"]


@program("gru_small_infer", "model", "infer",
         ("scan_carry", "gather_embedding", "dynamic_slice", "dynamic_update_slice",
          "log_softmax", "argmax", "multiple_outputs"),
         "GRU language model (lax.scan): next-token log-probabilities, predictions, final state")
def gru_small_infer(r):
    c = GRU

    def gru_small_infer(p, tokens, h0):
        h, logits = gru_forward(p, tokens, h0)
        return jax.nn.log_softmax(logits), jnp.argmax(logits, -1), h
    return gru_small_infer, (gru_params(r), r.randint((c["batch"], c["steps"]), 0, c["vocab"]),
                             np.zeros((c["batch"], c["hidden"]), F32))


@program("gru_small_train", "model", "train",
         ("scan_carry", "gather_embedding", "scatter_embedding_grad", "one_hot_cross_entropy",
          "dynamic_slice", "dynamic_update_slice"),
         "GRU language-model training step: backprop through the scan, global-norm gradient "
         "clipping, Adam")
def gru_small_train(r):
    c = GRU
    params = gru_params(r)

    def gru_small_train(p, opt, tokens):
        h0 = jnp.zeros((tokens.shape[0], c["hidden"]))
        loss, g = jax.value_and_grad(
            lambda p: one_hot_xent(gru_forward(p, tokens[:, :-1], h0)[1], tokens[:, 1:]))(p)
        norm = jnp.sqrt(sum(jnp.sum(jnp.square(a)) for a in jax.tree.leaves(g)))
        g = jax.tree.map(lambda a: a * jnp.minimum(1.0, 1.0 / (norm + 1e-6)), g)
        p, opt = adam(p, g, opt)
        return p, opt, loss
    return gru_small_train, (params, adam_state(params),
                             r.randint((c["batch"], c["steps"] + 1), 0, c["vocab"]))


# =========================================================================== WaveNet
WAVENET = dict(classes=64, residual=32, skip=32, dilations=(1, 2, 4, 8, 1, 2, 4, 8), kernel=2,
               steps=64, batch=2)


def wavenet_params(r):
    c = WAVENET
    res, skip, k = c["residual"], c["skip"], c["kernel"]
    return {"embed": make_init("normal", r.rng, (c["classes"], res), 1.0),
            "layers": [{"filter": weight(r, k, res, res), "gate": weight(r, k, res, res),
                        "res": weight(r, 1, res, res), "skip": weight(r, 1, res, skip)}
                       for _ in c["dilations"]],
            "out1": weight(r, 1, skip, skip), "out2": weight(r, 1, skip, c["classes"])}


def _causal_conv(x, w, dilation=1):
    """Dilated causal 1-D conv over (B, T, C): pad (kernel - 1) * dilation on the left only."""
    pad = (w.shape[0] - 1) * dilation
    return lax.conv_general_dilated(x, w, (1,), [(pad, 0)], rhs_dilation=(dilation,),
                                    dimension_numbers=("NWC", "WIO", "NWC"))


def wavenet_forward(p, samples):
    """Embedded mu-law samples -> gated dilated causal conv stack -> per-step class logits."""
    x = p["embed"][samples]
    skips = 0.0
    for d, layer in zip(WAVENET["dilations"], p["layers"]):
        h = jnp.tanh(_causal_conv(x, layer["filter"], d)) * \
            jax.nn.sigmoid(_causal_conv(x, layer["gate"], d))
        skips = skips + _causal_conv(h, layer["skip"])
        x = x + _causal_conv(h, layer["res"])
    h = jax.nn.relu(_causal_conv(jax.nn.relu(skips), p["out1"]))
    return _causal_conv(h, p["out2"])


@program("wavenet_small_infer", "model", "infer",
         ("conv_dilation", "conv_padding", "gather_embedding", "softmax", "argmax",
          "multiple_outputs"),
         "WaveNet (8 gated dilated causal conv layers, dilations 1-8): next-sample "
         "distributions and the most likely samples")
def wavenet_small_infer(r):
    c = WAVENET

    def wavenet_small_infer(p, samples):
        logits = wavenet_forward(p, samples)
        return jax.nn.softmax(logits), jnp.argmax(logits, -1)
    return wavenet_small_infer, (wavenet_params(r),
                                 r.randint((c["batch"], c["steps"]), 0, c["classes"]))


@program("wavenet_small_train", "model", "train",
         ("conv_dilation", "conv_padding", "gather_embedding", "scatter_embedding_grad",
          "one_hot_cross_entropy"),
         "WaveNet training step: teacher-forced next-sample cross-entropy, Adam")
def wavenet_small_train(r):
    c = WAVENET
    params = wavenet_params(r)

    def wavenet_small_train(p, opt, samples):
        loss, g = jax.value_and_grad(
            lambda p: one_hot_xent(wavenet_forward(p, samples[:, :-1]), samples[:, 1:]))(p)
        p, opt = adam(p, g, opt)
        return p, opt, loss
    return wavenet_small_train, (params, adam_state(params),
                                 r.randint((c["batch"], c["steps"] + 1), 0, c["classes"]))
