"""Convolutional families: resnet, inception, efficientnet, ssd, segmentation, autoencoder, vae."""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from . import nn
from .registry import Family, register


def _image_batch(rng, cfg, with_labels=True):
    b, s, c = cfg["batch"], cfg["image"], cfg.get("channels", 3)
    x = rng.normal((b, s, s, c), np.float32)
    targets = {}
    if with_labels:
        targets["labels"] = rng.randint((b,), 0, cfg["classes"], np.int32)
    return {"image": x}, targets


def _classification_loss(logits, targets, cfg):
    return nn.softmax_xent(logits, targets["labels"])


# =========================================================================== ResNet
def _basic_block(cx, x, width, stride):
    shortcut = x
    y = nn.conv_bn(cx, "a", x, width, 3, stride)
    y = nn.conv_bn(cx, "b", y, width, 3, 1, act=None)
    if stride != 1 or x.shape[-1] != width:
        shortcut = nn.conv_bn(cx, "proj", x, width, 1, stride, act=None)
    return nn.relu(y + shortcut)


def _bottleneck_block(cx, x, width, stride, expansion=4):
    out = width * expansion
    shortcut = x
    y = nn.conv_bn(cx, "a", x, width, 1, 1)
    y = nn.conv_bn(cx, "b", y, width, 3, stride)
    y = nn.conv_bn(cx, "c", y, out, 1, 1, act=None)
    if stride != 1 or x.shape[-1] != out:
        shortcut = nn.conv_bn(cx, "proj", x, out, 1, stride, act=None)
    return nn.relu(y + shortcut)


def resnet_forward(cx, inputs, cfg):
    x = nn.conv_bn(cx, "stem", inputs["image"], cfg["width"], 3, 1)
    block = _bottleneck_block if cfg["bottleneck"] else _basic_block
    for si, n in enumerate(cfg["blocks"]):
        width = cfg["width"] * 2 ** si
        for bi in range(n):
            with cx.scope(f"stage{si}/block{bi}"):
                x = block(cx, x, width, 2 if (bi == 0 and si > 0) else 1)
    return nn.dense(cx, "fc", nn.global_avg_pool(x), cfg["classes"])


register(Family(
    "resnet", "ResNet: basic blocks (ResNet-18 style) and bottleneck blocks (ResNet-50/101 style)",
    resnet_forward, _classification_loss, _image_batch,
    sizes={
        "small": dict(blocks=(2, 2, 2, 2), bottleneck=False, width=16, image=32, batch=4, classes=10),
        "medium": dict(blocks=(3, 4, 6, 3), bottleneck=True, width=16, image=32, batch=2, classes=10),
        # deep variant for the performance benchmark (>= 10k instructions when training)
        "large": dict(blocks=(3, 4, 23, 3), bottleneck=True, width=8, image=32, batch=2, classes=10),
    },
))


# =========================================================================== Inception
def _inception_a(cx, x, c1, c3r, c3, c5r, c5, cp):
    b1 = nn.conv_bn(cx, "b1x1", x, c1, 1)
    b3 = nn.conv_bn(cx, "b3x3_reduce", x, c3r, 1)
    b3 = nn.conv_bn(cx, "b3x3", b3, c3, 3)
    b5 = nn.conv_bn(cx, "b5x5_reduce", x, c5r, 1)
    b5 = nn.conv_bn(cx, "b5x5_a", b5, c5, 3)   # 5x5 factorized as two 3x3 (Inception-v3)
    b5 = nn.conv_bn(cx, "b5x5_b", b5, c5, 3)
    bp = nn.conv_bn(cx, "pool_proj", nn.avg_pool(x, 3, 1), cp, 1)
    return jnp.concatenate([b1, b3, b5, bp], axis=-1)


def _inception_b(cx, x, c1, c7r, c7, cp):
    """Inception-v3 'B' module with asymmetric 1x7 / 7x1 convolutions."""
    b1 = nn.conv_bn(cx, "b1x1", x, c1, 1)
    b7 = nn.conv_bn(cx, "b7_reduce", x, c7r, 1)
    b7 = nn.conv_bn(cx, "b7_1x7", b7, c7r, (1, 7))
    b7 = nn.conv_bn(cx, "b7_7x1", b7, c7, (7, 1))
    bp = nn.conv_bn(cx, "pool_proj", nn.max_pool(x, 3, 1), cp, 1)
    return jnp.concatenate([b1, b7, bp], axis=-1)


def _reduction(cx, x, c3r, c3):
    b3 = nn.conv_bn(cx, "b3_reduce", x, c3r, 1)
    b3 = nn.conv_bn(cx, "b3", b3, c3, 3, 2)
    bp = nn.max_pool(x, 3, 2)
    return jnp.concatenate([b3, bp], axis=-1)


def inception_forward(cx, inputs, cfg):
    w = cfg["width"]
    x = nn.conv_bn(cx, "stem1", inputs["image"], w, 3, 2)
    x = nn.conv_bn(cx, "stem2", x, 2 * w, 3, 1)
    for i in range(cfg["a_modules"]):
        with cx.scope(f"mixed_a{i}"):
            x = _inception_a(cx, x, w, w, 2 * w, w // 2, w, w // 2)
    with cx.scope("reduction_a"):
        x = _reduction(cx, x, w, 2 * w)
    for i in range(cfg["b_modules"]):
        with cx.scope(f"mixed_b{i}"):
            x = _inception_b(cx, x, 2 * w, w, 2 * w, w)
    if cfg["b_modules"]:
        with cx.scope("reduction_b"):
            x = _reduction(cx, x, w, 2 * w)
    return nn.dense(cx, "logits", nn.global_avg_pool(x), cfg["classes"])


register(Family(
    "inception", "Inception-v3 style: parallel branches, factorized and asymmetric convs, concat",
    inception_forward, _classification_loss, _image_batch,
    sizes={
        "small": dict(width=16, a_modules=2, b_modules=1, image=32, batch=4, classes=10),
        "medium": dict(width=24, a_modules=3, b_modules=4, image=48, batch=2, classes=10),
    },
))


# =========================================================================== EfficientNet
def _mbconv(cx, x, expand, out, kernel, stride, se_ratio=0.25):
    cin = x.shape[-1]
    y = x
    if expand != 1:
        y = nn.conv_bn(cx, "expand", y, cin * expand, 1, act=nn.swish)
    mid = y.shape[-1]
    y = nn.conv_bn(cx, "depthwise", y, mid, kernel, stride, act=nn.swish, groups=mid)
    # squeeze and excite
    s = nn.global_avg_pool(y)
    s = nn.swish(nn.dense(cx, "se_reduce", s, max(1, int(cin * se_ratio))))
    s = nn.sigmoid(nn.dense(cx, "se_expand", s, mid))
    y = y * s[:, None, None, :]
    y = nn.conv_bn(cx, "project", y, out, 1, act=None)
    if stride == 1 and cin == out:
        y = y + x
    return y


def efficientnet_forward(cx, inputs, cfg):
    x = nn.conv_bn(cx, "stem", inputs["image"], cfg["stem"], 3, 2, act=nn.swish)
    for si, (expand, out, repeats, stride, kernel) in enumerate(cfg["stages"]):
        for r in range(repeats):
            with cx.scope(f"stage{si}/block{r}"):
                x = _mbconv(cx, x, expand, out, kernel, stride if r == 0 else 1)
    x = nn.conv_bn(cx, "head", x, cfg["head"], 1, act=nn.swish)
    return nn.dense(cx, "logits", nn.global_avg_pool(x), cfg["classes"])


register(Family(
    "efficientnet", "EfficientNet style: MBConv (expand, depthwise, squeeze-excite, swish, project)",
    efficientnet_forward, _classification_loss, _image_batch,
    sizes={
        "small": dict(stem=16, head=128, image=32, batch=4, classes=10, stages=(
            (1, 16, 1, 1, 3), (6, 24, 2, 2, 3), (6, 40, 2, 2, 5), (6, 64, 2, 2, 3))),
        "medium": dict(stem=16, head=256, image=64, batch=2, classes=10, stages=(  # B0 layout
            (1, 16, 1, 1, 3), (6, 24, 2, 2, 3), (6, 40, 2, 2, 5), (6, 48, 3, 2, 3),
            (6, 64, 3, 1, 5), (6, 96, 4, 2, 5), (6, 128, 1, 1, 3))),
    },
))


# =========================================================================== SSD
def _ssd_feature_sizes(cfg):
    s = cfg["image"] // 4
    sizes = []
    for _ in range(cfg["scales"]):
        sizes.append(s)
        s = (s + 1) // 2
    return sizes


def ssd_forward(cx, inputs, cfg):
    w, a, c = cfg["width"], cfg["anchors"], cfg["classes"]
    x = nn.conv_bn(cx, "stem", inputs["image"], w, 3, 2)
    x = nn.conv_bn(cx, "conv1", x, w, 3, 1)
    x = nn.conv_bn(cx, "conv2", x, 2 * w, 3, 2)
    cls_out, box_out = [], []
    for i in range(cfg["scales"]):
        with cx.scope(f"scale{i}"):
            if i > 0:  # extra feature layers, SSD style: 1x1 reduce then strided 3x3
                x = nn.conv_bn(cx, "reduce", x, w, 1)
                x = nn.conv_bn(cx, "down", x, 2 * w, 3, 2)
            for j in range(cfg["convs_per_scale"]):
                x = nn.conv_bn(cx, f"feat{j}", x, 2 * w, 3)
            b, h, ww, _ = x.shape
            cls = nn.conv(cx, "cls_head", x, a * c, 3, bias=True)
            box = nn.conv(cx, "box_head", x, a * 4, 3, bias=True)
            cls_out.append(cls.reshape(b, h * ww * a, c))
            box_out.append(box.reshape(b, h * ww * a, 4))
    return {"cls": jnp.concatenate(cls_out, axis=1), "box": jnp.concatenate(box_out, axis=1)}


def ssd_loss(out, targets, cfg):
    labels = targets["labels"]
    pos = (labels > 0).astype(jnp.float32)
    cls_loss = nn.softmax_xent(out["cls"], labels)
    box_loss = nn.smooth_l1(out["box"], targets["boxes"], pos[..., None])
    return cls_loss + box_loss


def ssd_batch(rng, cfg):
    b, s = cfg["batch"], cfg["image"]
    n = sum(f * f for f in _ssd_feature_sizes(cfg)) * cfg["anchors"]
    x = rng.normal((b, s, s, 3), np.float32)
    labels = rng.randint((b, n), 0, cfg["classes"], np.int32)
    boxes = rng.normal((b, n, 4), np.float32)
    return {"image": x}, {"labels": labels, "boxes": boxes}


register(Family(
    "ssd", "SSD-style single-shot detector: multi-scale conv class/box heads, reshape, concatenation",
    ssd_forward, ssd_loss, ssd_batch,
    sizes={
        "small": dict(width=16, anchors=4, classes=8, scales=3, convs_per_scale=1, image=32, batch=2),
        "medium": dict(width=32, anchors=6, classes=16, scales=5, convs_per_scale=2, image=64, batch=2),
    },
))


# =========================================================================== Segmentation
def segmentation_forward(cx, inputs, cfg):
    w = cfg["width"]
    up = nn.upsample_bilinear if cfg["bilinear"] else nn.upsample_nearest
    x = inputs["image"]
    skips = []
    for i in range(cfg["levels"]):
        with cx.scope(f"down{i}"):
            x = nn.conv_bn(cx, "c1", x, w * 2 ** i)
            x = nn.conv_bn(cx, "c2", x, w * 2 ** i)
            skips.append(x)
            x = nn.max_pool(x, 2, 2)
    with cx.scope("bottom"):
        x = nn.conv_bn(cx, "c1", x, w * 2 ** cfg["levels"])
        x = nn.conv_bn(cx, "c2", x, w * 2 ** cfg["levels"])
    for i in reversed(range(cfg["levels"])):
        with cx.scope(f"up{i}"):
            x = up(x, 2)
            x = jnp.concatenate([x, skips[i]], axis=-1)
            x = nn.conv_bn(cx, "c1", x, w * 2 ** i)
            x = nn.conv_bn(cx, "c2", x, w * 2 ** i)
    return nn.conv(cx, "classifier", x, cfg["classes"], 1, bias=True)


def segmentation_batch(rng, cfg):
    b, s = cfg["batch"], cfg["image"]
    x = rng.normal((b, s, s, 3), np.float32)
    return {"image": x}, {"labels": rng.randint((b, s, s), 0, cfg["classes"], np.int32)}


register(Family(
    "segmentation", "U-Net style encoder-decoder: pooling, upsampling (nearest / bilinear resize), skips",
    segmentation_forward, lambda out, t, cfg: nn.softmax_xent(out, t["labels"]), segmentation_batch,
    sizes={
        "small": dict(width=8, levels=2, bilinear=False, image=32, batch=2, classes=5),
        "medium": dict(width=16, levels=4, bilinear=True, image=32, batch=2, classes=8),
    },
))


# =========================================================================== Autoencoder
def autoencoder_forward(cx, inputs, cfg):
    x = inputs["image"]
    widths = cfg["widths"]
    for i, wd in enumerate(widths):
        with cx.scope(f"enc{i}"):
            x = nn.conv_bn(cx, "down", x, wd, 3, 2)
            for j in range(cfg["extra_convs"]):
                x = nn.conv_bn(cx, f"conv{j}", x, wd, 3)
    for i, wd in enumerate(reversed((inputs["image"].shape[-1],) + tuple(widths[:-1]))):
        last = i == len(widths) - 1
        with cx.scope(f"dec{i}"):
            for j in range(cfg["extra_convs"]):
                x = nn.conv_bn(cx, f"conv{j}", x, x.shape[-1], 3)
            x = nn.conv_transpose(cx, "up", x, wd, 3, 2)
            if not last:
                x = nn.relu(nn.batchnorm(cx, "bn", x))
    return nn.sigmoid(x)


def autoencoder_batch(rng, cfg):
    b, s = cfg["batch"], cfg["image"]
    x = rng.uniform((b, s, s, 3), np.float32)
    return {"image": x}, {"image": x}


register(Family(
    "autoencoder", "convolutional autoencoder: strided convs down, conv_transpose up, MSE loss",
    autoencoder_forward, lambda out, t, cfg: nn.mse(out, t["image"]), autoencoder_batch,
    sizes={
        "small": dict(widths=(16, 32), extra_convs=0, image=32, batch=4),
        "medium": dict(widths=(16, 32, 64, 128), extra_convs=1, image=64, batch=2),
    },
))


# =========================================================================== VAE
def vae_forward(cx, inputs, cfg):
    x = inputs["image"]
    b = x.shape[0]
    if cfg["conv"]:
        h = x
        for i, wd in enumerate(cfg["widths"]):
            h = nn.relu(nn.conv(cx, f"enc{i}", h, wd, 4, 2, bias=True))
        spatial = h.shape[1:]
        h = h.reshape(b, -1)
    else:
        h = x.reshape(b, -1)
        for i, wd in enumerate(cfg["widths"]):
            h = nn.relu(nn.dense(cx, f"enc{i}", h, wd))
    mu = nn.dense(cx, "mu", h, cfg["latent"])
    logvar = nn.dense(cx, "logvar", h, cfg["latent"])
    z = mu + jnp.exp(0.5 * logvar) * inputs["eps"]  # reparameterization trick
    if cfg["conv"]:
        d = nn.relu(nn.dense(cx, "dec_in", z, spatial[0] * spatial[1] * spatial[2]))
        d = d.reshape((b,) + tuple(spatial))
        outs = tuple(reversed(cfg["widths"][:-1])) + (x.shape[-1],)
        for i, wd in enumerate(outs):
            d = nn.conv_transpose(cx, f"dec{i}", d, wd, 4, 2)
            if i < len(outs) - 1:
                d = nn.relu(d)
        logits = d
    else:
        d = z
        for i, wd in enumerate(reversed(cfg["widths"])):
            d = nn.relu(nn.dense(cx, f"dec{i}", d, wd))
        logits = nn.dense(cx, "out", d, x[0].size).reshape(x.shape)
    return {"logits": logits, "mu": mu, "logvar": logvar}


def vae_loss(out, targets, cfg):
    x = targets["image"]
    b = x.shape[0]
    rec = nn.sigmoid_bce(out["logits"], x) * (x.size / b)
    mu, logvar = out["mu"], out["logvar"]
    kl = -0.5 * jnp.sum(1.0 + logvar - jnp.square(mu) - jnp.exp(logvar)) / b
    return rec + kl


def vae_batch(rng, cfg):
    b, s, c = cfg["batch"], cfg["image"], cfg["channels"]
    x = rng.uniform((b, s, s, c), np.float32)
    eps = rng.normal((b, cfg["latent"]), np.float32)
    return {"image": x, "eps": eps}, {"image": x}


register(Family(
    "vae", "variational autoencoder (MLP and conv): reparameterization, BCE + KL loss",
    vae_forward, vae_loss, vae_batch,
    sizes={
        "small": dict(conv=False, widths=(256, 128), latent=16, image=28, channels=1, batch=8),
        "medium": dict(conv=True, widths=(32, 64, 128), latent=32, image=32, channels=3, batch=4),
    },
))
