"""Sequence families: bert, nmt, lstm, wavernn."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from . import nn
from .registry import Family, register


# =========================================================================== BERT
def bert_forward(cx, inputs, cfg):
    tokens, segments, mask = inputs["tokens"], inputs["segments"], inputs["mask"]
    b, t = tokens.shape
    d = cfg["hidden"]
    word = cx.param("embed/word", (cfg["vocab"], d), "normal")
    x = jnp.take(word, tokens, axis=0)
    x = x + cx.param("embed/position", (cfg["max_len"], d), "normal")[None, :t]
    x = x + jnp.take(cx.param("embed/segment", (2, d), "normal"), segments, axis=0)
    x = nn.layernorm(cx, "embed/ln", x)
    attn_mask = (mask > 0)[:, None, None, :]  # (B, 1, 1, T)
    for i in range(cfg["layers"]):
        with cx.scope(f"layer{i}"):
            x = nn.layernorm(cx, "attn_ln", x + nn.attention(cx, "attn", x, x, cfg["heads"], attn_mask))
            h = nn.gelu(nn.dense(cx, "ffn_in", x, cfg["ffn"]))
            x = nn.layernorm(cx, "ffn_ln", x + nn.dense(cx, "ffn_out", h, d))
    # masked-LM head (decoder tied to the word embedding)
    h = nn.layernorm(cx, "mlm/ln", nn.gelu(nn.dense(cx, "mlm/transform", x, d)))
    mlm_logits = jnp.dot(h, word.T) + cx.param("mlm/bias", (cfg["vocab"],), "zeros")
    # next-sentence head on the pooled [CLS] token
    pooled = jnp.tanh(nn.dense(cx, "pooler", x[:, 0], d))
    nsp_logits = nn.dense(cx, "nsp", pooled, 2)
    return {"mlm": mlm_logits, "nsp": nsp_logits}


def bert_loss(out, targets, cfg):
    mlm = nn.softmax_xent(out["mlm"], targets["mlm_labels"], targets["mlm_weights"])
    return mlm + nn.softmax_xent(out["nsp"], targets["nsp_labels"])


def bert_batch(rng, cfg):
    b, t = cfg["batch"], cfg["seq"]
    tokens = rng.randint((b, t), 0, cfg["vocab"], np.int32)
    segments = (np.arange(t)[None, :] >= t // 2).astype(np.int32) * np.ones((b, 1), np.int32)
    lengths = rng.randint((b, 1), t // 2, t + 1)
    mask = (np.arange(t)[None, :] < lengths).astype(np.int32)
    mlm_labels = rng.randint((b, t), 0, cfg["vocab"], np.int32)
    mlm_weights = (rng.uniform((b, t)) < 0.15).astype(np.float32) * mask
    nsp = rng.randint((b,), 0, 2, np.int32)
    return ({"tokens": tokens, "segments": segments, "mask": mask},
            {"mlm_labels": mlm_labels, "mlm_weights": mlm_weights, "nsp_labels": nsp})


register(Family(
    "bert", "BERT-style transformer encoder: embeddings, multi-head attention, GELU FFN, MLM + NSP heads",
    bert_forward, bert_loss, bert_batch,
    sizes={
        "small": dict(layers=2, hidden=64, heads=2, ffn=256, vocab=1000, max_len=64, seq=16, batch=4),
        "medium": dict(layers=6, hidden=128, heads=4, ffn=512, vocab=2000, max_len=64, seq=32, batch=2),
    },
))


# =========================================================================== NMT (seq2seq + attention)
def _nmt_encode(cx, src, cfg):
    h = cfg["hidden"]
    x = jnp.take(cx.param("src_embed", (cfg["src_vocab"], cfg["embed"]), "normal"), src, axis=0)
    for i in range(cfg["enc_layers"]):
        fwd, _ = nn.lstm_layer(cx, f"enc{i}/fwd", x, h // 2)
        bwd, _ = nn.lstm_layer(cx, f"enc{i}/bwd", x, h // 2, reverse=True)
        x = jnp.concatenate([fwd, bwd], axis=-1)
    return x  # (B, S, H)


def _nmt_decoder(cx, cfg, in_dim):
    """Parameters of the attention decoder and its single-step function."""
    h = cfg["hidden"]
    cells = [nn.lstm_params(cx, f"dec{i}", (in_dim + h) if i == 0 else h, h)
             for i in range(cfg["dec_layers"])]
    w_att = cx.param("attn/w", (h, h), "uniform")         # Luong 'general' score
    w_comb = cx.param("attn/combine", (2 * h, h), "uniform")
    w_out = cx.param("out/w", (h, cfg["tgt_vocab"]), "uniform")
    b_out = cx.param("out/b", (cfg["tgt_vocab"],), "zeros")

    def step(state, emb, enc, enc_keys, src_mask):
        hs, cs, feed = state
        x = jnp.concatenate([emb, feed], axis=-1)  # input feeding
        new_h, new_c = [], []
        for p, h0, c0 in zip(cells, hs, cs):
            h1, c1 = nn.lstm_cell(p, (h0, c0), jnp.dot(x, p["wi"]) + p["b"])
            new_h.append(h1)
            new_c.append(c1)
            x = h1
        scores = jnp.einsum("bh,bsh->bs", x, enc_keys)
        scores = jnp.where(src_mask, scores, -1e9)
        alpha = jax.nn.softmax(scores, axis=-1)
        context = jnp.einsum("bs,bsh->bh", alpha, enc)
        att = jnp.tanh(jnp.dot(jnp.concatenate([context, x], -1), w_comb))
        logits = jnp.dot(att, w_out) + b_out
        return (tuple(new_h), tuple(new_c), att), logits

    return step, w_att


def _nmt_init_state(cfg, b):
    z = jnp.zeros((b, cfg["hidden"]), jnp.float32)
    n = cfg["dec_layers"]
    return ((z,) * n, (z,) * n, z)


def nmt_forward(cx, inputs, cfg):
    """Teacher-forced decoder (training)."""
    src, tgt_in = inputs["src"], inputs["tgt_in"]
    enc = _nmt_encode(cx, src, cfg)
    src_mask = inputs["src_mask"] > 0
    tgt_embed = cx.param("tgt_embed", (cfg["tgt_vocab"], cfg["embed"]), "normal")
    step, w_att = _nmt_decoder(cx, cfg, cfg["embed"])
    enc_keys = jnp.dot(enc, w_att.T)
    embs = jnp.swapaxes(jnp.take(tgt_embed, tgt_in, axis=0), 0, 1)  # (T, B, E)

    def body(state, emb):
        return step(state, emb, enc, enc_keys, src_mask)

    _, logits = lax.scan(body, _nmt_init_state(cfg, src.shape[0]), embs)
    return jnp.swapaxes(logits, 0, 1)  # (B, T, V)


def nmt_infer(cx, inputs, cfg):
    """Greedy decoding: the argmax token is fed back at every step."""
    src = inputs["src"]
    b = src.shape[0]
    enc = _nmt_encode(cx, src, cfg)
    src_mask = inputs["src_mask"] > 0
    tgt_embed = cx.param("tgt_embed", (cfg["tgt_vocab"], cfg["embed"]), "normal")
    step, w_att = _nmt_decoder(cx, cfg, cfg["embed"])
    enc_keys = jnp.dot(enc, w_att.T)

    def body(carry, _):
        state, tok = carry
        state, logits = step(state, jnp.take(tgt_embed, tok, axis=0), enc, enc_keys, src_mask)
        tok = jnp.argmax(logits, axis=-1).astype(jnp.int32)
        return (state, tok), tok

    bos = jnp.ones((b,), jnp.int32)
    _, toks = lax.scan(body, (_nmt_init_state(cfg, b), bos), None, length=cfg["tgt_len"])
    return jnp.swapaxes(toks, 0, 1)


def nmt_batch(rng, cfg):
    b, s, t = cfg["batch"], cfg["src_len"], cfg["tgt_len"]
    src = rng.randint((b, s), 2, cfg["src_vocab"], np.int32)
    tgt = rng.randint((b, t + 1), 2, cfg["tgt_vocab"], np.int32)
    lengths = rng.randint((b, 1), s // 2, s + 1)
    src_mask = (np.arange(s)[None, :] < lengths).astype(np.int32)
    return ({"src": src, "src_mask": src_mask, "tgt_in": tgt[:, :-1]},
            {"tgt_out": tgt[:, 1:]})


register(Family(
    "nmt", "seq2seq NMT: bidirectional LSTM encoder, LSTM decoder with Luong attention (scan), greedy decode",
    nmt_forward, lambda out, t, cfg: nn.softmax_xent(out, t["tgt_out"]), nmt_batch,
    infer=nmt_infer,
    sizes={
        "small": dict(hidden=64, embed=32, enc_layers=1, dec_layers=1, src_vocab=500, tgt_vocab=500,
                      src_len=12, tgt_len=12, batch=4),
        "medium": dict(hidden=128, embed=64, enc_layers=2, dec_layers=2, src_vocab=1000, tgt_vocab=1000,
                       src_len=20, tgt_len=20, batch=4),
    },
))


# =========================================================================== LSTM language model
def lstm_forward(cx, inputs, cfg):
    emb = cx.param("embed", (cfg["vocab"], cfg["embed"]), "normal")
    x = jnp.take(emb, inputs["tokens"], axis=0)
    for i in range(cfg["layers"]):
        y, _ = nn.lstm_layer(cx, f"lstm{i}", x, cfg["hidden"])
        x = y + x if y.shape == x.shape else y  # residual between equal-width layers
    return nn.dense(cx, "softmax", x, cfg["vocab"])


def lstm_batch(rng, cfg):
    toks = rng.randint((cfg["batch"], cfg["seq"] + 1), 0, cfg["vocab"], np.int32)
    return {"tokens": toks[:, :-1]}, {"labels": toks[:, 1:]}


register(Family(
    "lstm", "stacked LSTM language model via lax.scan (HLO while loops)",
    lstm_forward, lambda out, t, cfg: nn.softmax_xent(out, t["labels"]), lstm_batch,
    sizes={
        "small": dict(layers=1, embed=64, hidden=64, vocab=1000, seq=16, batch=4),
        "medium": dict(layers=3, embed=128, hidden=128, vocab=2000, seq=32, batch=4),
    },
))


# =========================================================================== WaveRNN
def _wavernn_params(cx, cfg):
    h = cfg["hidden"]
    half = h // 2
    return dict(
        # input weights: coarse gates see (c_{t-1}, f_{t-1}, cond); fine gates also see c_t
        I=cx.param("I/w", (2 + cfg["cond"], 3 * h), "uniform"),
        Ic=cx.param("I/coarse_now", (1, 3 * half), "uniform"),
        R=cx.param("R/w", (h, 3 * h), "uniform"),
        bu=cx.param("R/bias", (3 * h,), "zeros"),
        O1=cx.param("O1/w", (half, half), "uniform"), b1=cx.param("O1/b", (half,), "zeros"),
        O2=cx.param("O2/w", (half, cfg["bins"]), "uniform"), b2=cx.param("O2/b", (cfg["bins"],), "zeros"),
        O3=cx.param("O3/w", (half, half), "uniform"), b3=cx.param("O3/b", (half,), "zeros"),
        O4=cx.param("O4/w", (half, cfg["bins"]), "uniform"), b4=cx.param("O4/b", (cfg["bins"],), "zeros"),
    )


def _wavernn_cell(p, h, prev, cond, coarse_now, hidden):
    """Dual (coarse / fine) GRU cell of WaveRNN; the fine half is conditioned on c_t."""
    half = hidden // 2
    xi = jnp.dot(jnp.concatenate([prev, cond], -1), p["I"])
    # only the fine half of each gate sees the current coarse sample
    extra = jnp.dot(coarse_now, p["Ic"]).reshape(-1, 3, half)
    xi = xi.reshape(-1, 3, 2, half).at[:, :, 1, :].add(extra).reshape(-1, 3 * hidden)
    hr = jnp.dot(h, p["R"]) + p["bu"]
    xu, xr, xe = jnp.split(xi, 3, -1)
    hu, hr_, he = jnp.split(hr, 3, -1)
    u = nn.sigmoid(xu + hu)
    r = nn.sigmoid(xr + hr_)
    e = jnp.tanh(xe + r * he)
    h = u * h + (1.0 - u) * e
    hc, hf = h[:, :half], h[:, half:]
    coarse = jnp.dot(nn.relu(jnp.dot(hc, p["O1"]) + p["b1"]), p["O2"]) + p["b2"]
    fine = jnp.dot(nn.relu(jnp.dot(hf, p["O3"]) + p["b3"]), p["O4"]) + p["b4"]
    return h, coarse, fine


def _wavernn_conditioning(cx, mel, cfg):
    """Conditioning network: 1-D convs over frames, then nearest upsampling to samples."""
    x = mel
    for i in range(cfg["cond_layers"]):
        x = nn.relu(nn.conv1d(cx, f"cond{i}", x, cfg["cond"], 3))
    return jnp.repeat(x, cfg["hop"], axis=1)  # (B, T, cond)


def wavernn_forward(cx, inputs, cfg):
    cond = jnp.swapaxes(_wavernn_conditioning(cx, inputs["mel"], cfg), 0, 1)
    p = _wavernn_params(cx, cfg)
    prev = jnp.swapaxes(inputs["prev"], 0, 1)        # (T, B, 2): c_{t-1}, f_{t-1} in [-1, 1]
    coarse_now = jnp.swapaxes(inputs["coarse_now"], 0, 1)  # (T, B, 1)
    b = prev.shape[1]

    def body(h, xs):
        pr, cd, cn = xs
        h, coarse, fine = _wavernn_cell(p, h, pr, cd, cn, cfg["hidden"])
        return h, (coarse, fine)

    h0 = jnp.zeros((b, cfg["hidden"]), jnp.float32)
    _, (coarse, fine) = lax.scan(body, h0, (prev, cond, coarse_now))
    return {"coarse": jnp.swapaxes(coarse, 0, 1), "fine": jnp.swapaxes(fine, 0, 1)}


def wavernn_infer(cx, inputs, cfg):
    """Autoregressive generation (argmax sampling), one sample per scan step."""
    cond = jnp.swapaxes(_wavernn_conditioning(cx, inputs["mel"], cfg), 0, 1)
    p = _wavernn_params(cx, cfg)
    b = cond.shape[1]
    bins = cfg["bins"]

    def to_float(idx):
        return (idx.astype(jnp.float32) / (bins - 1)) * 2.0 - 1.0

    def body(carry, cd):
        h, prev = carry
        # coarse pass (c_t unknown yet: zero), then fine pass with the sampled c_t
        _, coarse, _ = _wavernn_cell(p, h, prev, cd, jnp.zeros((b, 1)), cfg["hidden"])
        c_t = to_float(jnp.argmax(coarse, -1))[:, None]
        h, _, fine = _wavernn_cell(p, h, prev, cd, c_t, cfg["hidden"])
        f_t = to_float(jnp.argmax(fine, -1))[:, None]
        sample = jnp.concatenate([c_t, f_t], -1)
        return (h, sample), sample

    init = (jnp.zeros((b, cfg["hidden"]), jnp.float32), jnp.zeros((b, 2), jnp.float32))
    _, samples = lax.scan(body, init, cond)
    return jnp.swapaxes(samples, 0, 1)  # (B, T, 2)


def wavernn_loss(out, targets, cfg):
    return nn.softmax_xent(out["coarse"], targets["coarse"]) + nn.softmax_xent(out["fine"], targets["fine"])


def wavernn_batch(rng, cfg):
    b, frames, hop, bins = cfg["batch"], cfg["frames"], cfg["hop"], cfg["bins"]
    t = frames * hop
    mel = rng.normal((b, frames, cfg["mels"]), np.float32)
    coarse = rng.randint((b, t), 0, bins, np.int32)
    fine = rng.randint((b, t), 0, bins, np.int32)
    as_f = lambda i: (i.astype(np.float32) / (bins - 1)) * 2.0 - 1.0
    prev = np.stack([as_f(coarse), as_f(fine)], -1)
    prev = np.concatenate([np.zeros((b, 1, 2)), prev[:, :-1]], axis=1)
    return ({"mel": mel, "prev": prev, "coarse_now": as_f(coarse)[..., None]},
            {"coarse": coarse, "fine": fine})


register(Family(
    "wavernn", "WaveRNN: dual-softmax GRU-style cell via scan, conditioning convs, autoregressive sampling",
    wavernn_forward, wavernn_loss, wavernn_batch, infer=wavernn_infer,
    sizes={
        "small": dict(hidden=64, bins=64, cond=16, cond_layers=1, mels=16, frames=4, hop=8, batch=2),
        "medium": dict(hidden=128, bins=256, cond=32, cond_layers=2, mels=32, frames=4, hop=16, batch=2),
    },
))
