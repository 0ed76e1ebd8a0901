"""Attention families beyond bert: gpt (causal decoder), vit (vision transformer), t5 (encoder-decoder),
roberta (padding-masked encoder).

Issue 17's corpus lead: the fusion cost models must see attention, normalization and softmax kernels of
more than one family. These families are generated into examples/hlo_attention/ (not examples/hlo/, whose
automatic family split and benchmarks stay as they were); benchmarks/results/fusion_split_attention.json
places them: gpt in training, vit and t5 in validation (so that choices are made on families that have
attention), bert and recommender stay the test families. roberta came later (issue 17, the padding-only
mask lead): it is generated into examples/hlo_encoder/ (so that examples/hlo_attention/ and every command
built on it stay as they were), and benchmarks/results/fusion_split_attention_enc.json adds it to the
training split.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from . import nn
from .registry import Family, register


def rmsnorm(cx, name, x, eps=1e-6):
    scale = cx.param(f"{name}/scale", (x.shape[-1],), "ones")
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps) * scale


# =========================================================================== GPT (causal decoder)
def gpt_forward(cx, inputs, cfg):
    tokens, pad = inputs["tokens"], inputs["pad"]
    b, t = tokens.shape
    d = cfg["hidden"]
    word = cx.param("embed/word", (cfg["vocab"], d), "normal")
    x = jnp.take(word, tokens, axis=0) + cx.param("embed/position", (cfg["max_len"], d), "normal")[None, :t]
    causal = jnp.arange(t)[:, None] >= jnp.arange(t)[None, :]          # (T, T) iota compare
    mask = causal[None, None] & (pad > 0)[:, None, None, :]             # and with the padding mask
    for i in range(cfg["layers"]):
        with cx.scope(f"layer{i}"):
            h = nn.layernorm(cx, "ln1", x)
            x = x + nn.attention(cx, "attn", h, h, cfg["heads"], mask)
            h = nn.gelu(nn.dense(cx, "fc1", nn.layernorm(cx, "ln2", x), cfg["ffn"]))
            x = x + nn.dense(cx, "fc2", h, d)
    x = nn.layernorm(cx, "final_ln", x)
    return jnp.dot(x, word.T)                                           # tied LM head


def gpt_batch(rng, cfg):
    b, t = cfg["batch"], cfg["seq"]
    tokens = rng.randint((b, t), 0, cfg["vocab"], np.int32)
    lengths = rng.randint((b, 1), t // 2, t + 1)
    pad = (np.arange(t)[None, :] < lengths).astype(np.int32)
    labels = rng.randint((b, t), 0, cfg["vocab"], np.int32)
    return {"tokens": tokens, "pad": pad}, {"labels": labels, "weights": pad.astype(np.float32)}


register(Family(
    "gpt", "GPT-style causal decoder: pre-LN blocks, causal and padding masks, GELU MLP, tied LM head",
    gpt_forward, lambda out, tg, cfg: nn.softmax_xent(out, tg["labels"], tg["weights"]), gpt_batch,
    corpus="attention",
    sizes={
        "small": dict(layers=2, hidden=96, heads=3, ffn=384, vocab=800, max_len=64, seq=24, batch=4),
        "medium": dict(layers=4, hidden=192, heads=6, ffn=768, vocab=1500, max_len=96, seq=48, batch=2),
    },
))


# =========================================================================== ViT
def vit_forward(cx, inputs, cfg):
    images = inputs["images"]
    d, p = cfg["hidden"], cfg["patch"]
    x = nn.conv(cx, "patch", images, d, kernel=p, stride=p, padding="VALID", bias=True)
    b = x.shape[0]
    x = x.reshape(b, -1, d)
    cls = jnp.broadcast_to(cx.param("cls", (1, 1, d), "zeros"), (b, 1, d))
    x = jnp.concatenate([cls, x], axis=1)
    x = x + cx.param("pos", (1, x.shape[1], d), "normal")
    for i in range(cfg["layers"]):
        with cx.scope(f"block{i}"):
            h = nn.layernorm(cx, "ln1", x)
            x = x + nn.attention(cx, "attn", h, h, cfg["heads"])
            x = x + nn.dense(cx, "fc2", nn.gelu(nn.dense(cx, "fc1", nn.layernorm(cx, "ln2", x), cfg["mlp"])), d)
    return nn.dense(cx, "head", nn.layernorm(cx, "final_ln", x[:, 0]), cfg["classes"])


def vit_batch(rng, cfg):
    b, s = cfg["batch"], cfg["image"]
    return ({"images": rng.normal((b, s, s, 3))},
            {"labels": rng.randint((b,), 0, cfg["classes"], np.int32)})


register(Family(
    "vit", "Vision transformer: strided patch-embedding conv, class token, pre-LN encoder blocks, linear head",
    vit_forward, lambda out, tg, cfg: nn.softmax_xent(out, tg["labels"]), vit_batch,
    corpus="attention",
    sizes={
        "small": dict(layers=2, hidden=64, heads=4, mlp=256, patch=8, image=32, classes=10, batch=8),
        "medium": dict(layers=4, hidden=128, heads=4, mlp=512, patch=4, image=32, classes=100, batch=4),
    },
))


# =========================================================================== T5-style encoder-decoder
def t5_forward(cx, inputs, cfg):
    src, src_pad, tgt = inputs["src"], inputs["src_pad"], inputs["tgt"]
    b, ts = src.shape
    tt = tgt.shape[1]
    d = cfg["hidden"]
    emb = cx.param("embed", (cfg["vocab"], d), "normal")
    enc_mask = (src_pad > 0)[:, None, None, :]                          # (B, 1, 1, Ts)
    x = jnp.take(emb, src, axis=0)
    for i in range(cfg["layers"]):
        with cx.scope(f"enc{i}"):
            h = rmsnorm(cx, "ln1", x)
            x = x + nn.attention(cx, "attn", h, h, cfg["heads"], enc_mask)
            h = rmsnorm(cx, "ln2", x)
            x = x + nn.dense(cx, "wo", jax.nn.relu(nn.dense(cx, "wi", h, cfg["ffn"], bias=False)), d, bias=False)
    enc = rmsnorm(cx, "enc_ln", x)
    causal = (jnp.arange(tt)[:, None] >= jnp.arange(tt)[None, :])[None, None]
    y = jnp.take(emb, tgt, axis=0)
    for i in range(cfg["layers"]):
        with cx.scope(f"dec{i}"):
            h = rmsnorm(cx, "ln1", y)
            y = y + nn.attention(cx, "self", h, h, cfg["heads"], causal)
            h = rmsnorm(cx, "ln2", y)
            y = y + nn.attention(cx, "cross", h, enc, cfg["heads"], enc_mask)
            h = rmsnorm(cx, "ln3", y)
            y = y + nn.dense(cx, "wo", jax.nn.relu(nn.dense(cx, "wi", h, cfg["ffn"], bias=False)), d, bias=False)
    return jnp.dot(rmsnorm(cx, "dec_ln", y), emb.T)


def t5_batch(rng, cfg):
    b, ts, tt = cfg["batch"], cfg["src_len"], cfg["tgt_len"]
    src = rng.randint((b, ts), 0, cfg["vocab"], np.int32)
    lengths = rng.randint((b, 1), ts // 2, ts + 1)
    src_pad = (np.arange(ts)[None, :] < lengths).astype(np.int32)
    tgt = rng.randint((b, tt), 0, cfg["vocab"], np.int32)
    labels = rng.randint((b, tt), 0, cfg["vocab"], np.int32)
    return {"src": src, "src_pad": src_pad, "tgt": tgt}, {"labels": labels}


register(Family(
    "t5", "T5-style encoder-decoder: RMS norm, padding-masked encoder, causal decoder with cross-attention",
    t5_forward, lambda out, tg, cfg: nn.softmax_xent(out, tg["labels"]), t5_batch,
    corpus="attention",
    sizes={
        "small": dict(layers=2, hidden=64, heads=4, ffn=256, vocab=600, src_len=20, tgt_len=12, batch=4),
        "medium": dict(layers=3, hidden=128, heads=8, ffn=512, vocab=1200, src_len=40, tgt_len=24, batch=2),
    },
))


# =========================================================================== RoBERTa-style encoder
def roberta_forward(cx, inputs, cfg):
    """Bert-like by design (a post-LN encoder whose only attention mask is the padding mask), but not
    bert: no token types, positions offset by 2 as in RoBERTa, no pooler or next-sentence head, other
    depths, widths, head counts and sequence lengths, and an MLP width ratio of its own."""
    tokens, pad = inputs["tokens"], inputs["pad"]
    b, t = tokens.shape
    d = cfg["hidden"]
    word = cx.param("embed/word", (cfg["vocab"], d), "normal")
    pos = cx.param("embed/position", (cfg["max_len"] + 2, d), "normal")
    x = nn.layernorm(cx, "embed/ln", jnp.take(word, tokens, axis=0) + pos[None, 2:2 + t])
    mask = (pad > 0)[:, None, None, :]                                  # (B, 1, 1, T): padding only
    for i in range(cfg["layers"]):
        with cx.scope(f"layer{i}"):
            x = nn.layernorm(cx, "ln1", x + nn.attention(cx, "attn", x, x, cfg["heads"], mask))
            h = nn.gelu(nn.dense(cx, "fc1", x, cfg["ffn"]))
            x = nn.layernorm(cx, "ln2", x + nn.dense(cx, "fc2", h, d))
    h = nn.layernorm(cx, "lm/ln", nn.gelu(nn.dense(cx, "lm/dense", x, d)))
    return jnp.dot(h, word.T) + cx.param("lm/bias", (cfg["vocab"],), "zeros")   # MLM head only


def roberta_batch(rng, cfg):
    b, t = cfg["batch"], cfg["seq"]
    tokens = rng.randint((b, t), 0, cfg["vocab"], np.int32)
    lengths = rng.randint((b, 1), t // 3, t + 1)
    pad = (np.arange(t)[None, :] < lengths).astype(np.int32)
    labels = rng.randint((b, t), 0, cfg["vocab"], np.int32)
    weights = (rng.uniform((b, t)) < 0.15).astype(np.float32) * pad     # dynamic masking: 15% of tokens
    return {"tokens": tokens, "pad": pad}, {"labels": labels, "weights": weights}


register(Family(
    "roberta", "RoBERTa-style encoder: padding mask only, post-LN blocks, offset learned positions, no token "
               "types, MLM head only",
    roberta_forward, lambda out, tg, cfg: nn.softmax_xent(out, tg["labels"], tg["weights"]), roberta_batch,
    corpus="encoder",
    sizes={
        "small": dict(layers=3, hidden=80, heads=5, ffn=240, vocab=1200, max_len=40, seq=20, batch=6),
        "medium": dict(layers=5, hidden=160, heads=5, ffn=640, vocab=2400, max_len=64, seq=40, batch=3),
    },
))
