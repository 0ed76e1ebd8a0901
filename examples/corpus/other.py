"""Other families: recommender (DLRM-style), mlp_mixer, gnn."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from . import nn
from .registry import Family, register


# =========================================================================== Recommender (DLRM)
def _mlp(cx, name, x, widths, last_act=True):
    for i, w in enumerate(widths):
        x = nn.dense(cx, f"{name}{i}", x, w)
        if last_act or i < len(widths) - 1:
            x = nn.relu(x)
    return x


def recommender_forward(cx, inputs, cfg):
    dense_x, sparse = inputs["dense"], inputs["sparse"]  # (B, Fd), (B, T, hot) int32
    d = cfg["embed"]
    bottom = _mlp(cx, "bottom", dense_x, cfg["bottom"] + (d,))
    feats = [bottom]
    for t in range(cfg["tables"]):
        table = cx.param(f"table{t}", (cfg["rows"][t % len(cfg["rows"])], d), "normal")
        rows = jnp.take(table, sparse[:, t, :], axis=0)   # gather: (B, hot, D)
        feats.append(jnp.sum(rows, axis=1))                # sum pooling (multi-hot bag)
    z = jnp.stack(feats, axis=1)                           # (B, F, D)
    inter = jnp.einsum("bfd,bgd->bfg", z, z)               # pairwise dot interactions
    iu, ju = np.triu_indices(z.shape[1], k=1)
    flat = inter[:, iu, ju]                                # strictly upper triangle
    top_in = jnp.concatenate([bottom, flat], axis=-1)
    return _mlp(cx, "top", top_in, cfg["top"] + (1,), last_act=False)[:, 0]


def recommender_batch(rng, cfg):
    b = cfg["batch"]
    dense_x = rng.normal((b, cfg["dense_features"]), np.float32)
    cols = [rng.randint((b, 1, cfg["hot"]), 0, cfg["rows"][t % len(cfg["rows"])],
                               np.int32) for t in range(cfg["tables"])]
    clicks = (rng.uniform((b,)) < 0.3).astype(np.float32)
    return {"dense": dense_x, "sparse": np.concatenate(cols, axis=1)}, {"clicks": clicks}


register(Family(
    "recommender", "DLRM-style recommender: bottom/top MLPs, embedding-bag gathers, dot interactions",
    recommender_forward, lambda out, t, cfg: nn.sigmoid_bce(out, t["clicks"]), recommender_batch,
    sizes={
        "small": dict(tables=4, rows=(1000, 500, 200, 100), embed=16, hot=2, dense_features=13,
                      bottom=(64, 32), top=(64, 32), batch=8),
        "medium": dict(tables=12, rows=(2000, 1000, 500, 300, 100, 50), embed=32, hot=4,
                       dense_features=13, bottom=(256, 128, 64), top=(256, 128, 64), batch=8),
    },
))


# =========================================================================== MLP-Mixer
def mixer_forward(cx, inputs, cfg):
    p, d = cfg["patch"], cfg["hidden"]
    x = nn.conv(cx, "stem", inputs["image"], d, p, p, padding="VALID", bias=True)
    b, h, w, _ = x.shape
    x = x.reshape(b, h * w, d)
    for i in range(cfg["layers"]):
        with cx.scope(f"mixer{i}"):
            y = jnp.swapaxes(nn.layernorm(cx, "ln_token", x), 1, 2)       # (B, D, S)
            y = nn.dense(cx, "token2", nn.gelu(nn.dense(cx, "token1", y, cfg["token_mlp"])), h * w)
            x = x + jnp.swapaxes(y, 1, 2)
            y = nn.layernorm(cx, "ln_channel", x)
            x = x + nn.dense(cx, "channel2", nn.gelu(nn.dense(cx, "channel1", y, cfg["channel_mlp"])), d)
    x = nn.layernorm(cx, "ln_final", x)
    return nn.dense(cx, "head", jnp.mean(x, axis=1), cfg["classes"])


def _image_batch(rng, cfg):
    b, s = cfg["batch"], cfg["image"]
    return ({"image": rng.normal((b, s, s, 3), np.float32)},
            {"labels": rng.randint((b,), 0, cfg["classes"], np.int32)})


register(Family(
    "mlp_mixer", "MLP-Mixer: patch embedding, token-mixing and channel-mixing MLPs, layer norm",
    mixer_forward, lambda out, t, cfg: nn.softmax_xent(out, t["labels"]), _image_batch,
    sizes={
        "small": dict(patch=4, hidden=64, token_mlp=32, channel_mlp=128, layers=2, image=32,
                      batch=4, classes=10),
        "medium": dict(patch=4, hidden=128, token_mlp=64, channel_mlp=256, layers=8, image=32,
                       batch=2, classes=10),
    },
))


# =========================================================================== GNN
def gnn_forward(cx, inputs, cfg):
    x, src, dst = inputs["nodes"], inputs["src"], inputs["dst"]
    n = x.shape[0]
    deg = jax.ops.segment_sum(jnp.ones_like(dst, jnp.float32), dst, num_segments=n)
    inv_deg = 1.0 / jnp.maximum(deg, 1.0)
    h = nn.relu(nn.dense(cx, "embed", x, cfg["hidden"]))
    for i in range(cfg["layers"]):
        with cx.scope(f"layer{i}"):
            if cfg["attention"]:  # GAT-style: edge scores, segment softmax, weighted sum
                heads, hd = cfg["heads"], cfg["hidden"] // cfg["heads"]
                z = nn.dense(cx, "proj", h, cfg["hidden"], bias=False).reshape(n, heads, hd)
                a_src = cx.param("att_src", (heads, hd), "uniform")
                a_dst = cx.param("att_dst", (heads, hd), "uniform")
                e = jax.nn.leaky_relu(jnp.sum(z[src] * a_src, -1) + jnp.sum(z[dst] * a_dst, -1), 0.2)
                e_max = jax.ops.segment_max(e, dst, num_segments=n)
                ex = jnp.exp(e - e_max[dst])
                denom = jax.ops.segment_sum(ex, dst, num_segments=n)
                alpha = ex / (denom[dst] + 1e-9)
                agg = jax.ops.segment_sum(alpha[..., None] * z[src], dst, num_segments=n)
                h_new = agg.reshape(n, cfg["hidden"])
            else:  # GraphSAGE-mean / GCN-style: gather, scatter-add, normalize
                msgs = jnp.take(h, src, axis=0)
                agg = jax.ops.segment_sum(msgs, dst, num_segments=n) * inv_deg[:, None]
                h_new = nn.dense(cx, "self", h, cfg["hidden"]) + nn.dense(cx, "neigh", agg, cfg["hidden"])
            h = nn.layernorm(cx, "ln", nn.relu(h_new) + h)
    return nn.dense(cx, "classifier", h, cfg["classes"])


def gnn_batch(rng, cfg):
    n, e = cfg["nodes"], cfg["edges"]
    x = rng.normal((n, cfg["features"]), np.float32)
    src = rng.randint((e,), 0, n, np.int32)
    dst = rng.randint((e,), 0, n, np.int32)
    labels = rng.randint((n,), 0, cfg["classes"], np.int32)
    return {"nodes": x, "src": src, "dst": dst}, {"labels": labels}


register(Family(
    "gnn", "graph neural network: gathers over edges, segment_sum / segment_max scatters (GCN, GAT)",
    gnn_forward, lambda out, t, cfg: nn.softmax_xent(out, t["labels"]), gnn_batch,
    sizes={
        "small": dict(attention=False, hidden=64, layers=2, nodes=64, edges=256, features=32, classes=7),
        "medium": dict(attention=True, heads=4, hidden=128, layers=4, nodes=128, edges=512, features=64,
                       classes=7),
    },
))
