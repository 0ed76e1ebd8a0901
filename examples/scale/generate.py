"""Scale corpus: training steps of large models, lowered by JAX, in three families that stress
different parts of the analysis.

- ``transformer L``: an L-layer transformer (d_model 256, 4 heads, batch 4, sequence 32, pre-norm
  attention, GELU MLP, no biases, SGD update); about 230 instructions per layer (L=12: 3.1k,
  L=48: 12.3k, L=200: 51k). Deep chains of dots, reductions and transposes.
- ``convnet N``: N residual blocks of four parallel 3x3 convolution branches (16 channels each,
  batch 8, 16x16 images) summed, with ReLU; wide fan-out and fan-in around convolutions.
- ``scan N``: N stacked GRU layers (hidden 64, batch 8), each a ``lax.scan`` over 16 steps; many
  small called computations (while bodies and conditions) rather than one large one.

transformer_L12.hlo and transformer_L48.hlo are committed (tests/autotune/compiler/test_scale.py reads
them); benchmarks/scale.py generates the others on demand.

    python examples/scale/generate.py FAMILY SIZE [--out examples/scale/FAMILY_SIZE.hlo]
"""
from __future__ import annotations

import argparse
import os
from typing import Callable

import jax
import jax.numpy as jnp

D, T, B, H = 256, 32, 4, 4


def _zeros(*shape: int) -> jax.Array:
    return jnp.zeros(shape, jnp.float32)


def _sgd_step(loss: Callable, params, x) -> str:
    """HLO text of one SGD step (loss, gradient, update) of `loss` at zero parameters."""
    def step(ps, x):
        g = jax.grad(loss)(ps, x)
        return jax.tree_util.tree_map(lambda a, b: a - 0.01 * b, ps, g)
    return jax.jit(step).lower(params, x).as_text(dialect="hlo")


def transformer_layer(p: dict, x: jax.Array) -> jax.Array:
    h = (x - x.mean(-1, keepdims=True)) / jnp.sqrt(x.var(-1, keepdims=True) + 1e-5)
    q, k, v = ((h @ p[w]).reshape(B, T, H, D // H) for w in ("q", "k", "v"))
    a = jnp.einsum("bthd,bshd->bhts", q, k) / 8.0
    a = jax.nn.softmax(a + jnp.triu(jnp.full((T, T), -1e9), 1), -1)
    x = x + jnp.einsum("bhts,bshd->bthd", a, v).reshape(B, T, D) @ p["o"]
    h = (x - x.mean(-1, keepdims=True)) / jnp.sqrt(x.var(-1, keepdims=True) + 1e-5)
    return x + jax.nn.gelu(h @ p["w1"]) @ p["w2"]


def transformer(layers: int) -> str:
    """Training step of a `layers`-deep transformer."""
    def loss(ps, x):
        for p in ps:
            x = transformer_layer(p, x)
        return (x ** 2).mean()
    ps = [dict(q=_zeros(D, D), k=_zeros(D, D), v=_zeros(D, D), o=_zeros(D, D), w1=_zeros(D, 4 * D),
               w2=_zeros(4 * D, D)) for _ in range(layers)]
    return _sgd_step(loss, ps, _zeros(B, T, D))


CONV_C, CONV_HW, CONV_B, CONV_BRANCHES = 16, 16, 8, 4


def convnet(blocks: int) -> str:
    """Training step of `blocks` residual blocks of parallel 3x3 convolution branches."""
    def conv(x, w):
        return jax.lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))

    def loss(ps, x):
        for branches in ps:
            x = x + sum(jax.nn.relu(conv(x, w)) for w in branches)
        return (x ** 2).mean()
    ps = [[_zeros(3, 3, CONV_C, CONV_C) for _ in range(CONV_BRANCHES)] for _ in range(blocks)]
    return _sgd_step(loss, ps, _zeros(CONV_B, CONV_HW, CONV_HW, CONV_C))


GRU_H, GRU_B, GRU_T = 64, 8, 16


def scan(layers: int) -> str:
    """Training step of `layers` stacked GRU layers, each a lax.scan over the sequence."""
    def gru_layer(p, xs):
        def cell(h, x):
            z = jax.nn.sigmoid(x @ p["wz"] + h @ p["uz"])
            r = jax.nn.sigmoid(x @ p["wr"] + h @ p["ur"])
            n = jnp.tanh(x @ p["wn"] + (r * h) @ p["un"])
            h = (1 - z) * n + z * h
            return h, h
        _, ys = jax.lax.scan(cell, jnp.zeros((GRU_B, GRU_H)), xs)
        return ys

    def loss(ps, xs):
        for p in ps:
            xs = gru_layer(p, xs)
        return (xs ** 2).mean()
    ps = [{k: _zeros(GRU_H, GRU_H) for k in ("wz", "uz", "wr", "ur", "wn", "un")} for _ in range(layers)]
    return _sgd_step(loss, ps, _zeros(GRU_T, GRU_B, GRU_H))


FAMILIES: dict[str, Callable[[int], str]] = {"transformer": transformer, "convnet": convnet, "scan": scan}


def default_path(family: str, size: int) -> str:
    """examples/scale/<family>_<L|N><size>.hlo (transformer_L48.hlo, convnet_N200.hlo, scan_N50.hlo)."""
    letter = "L" if family == "transformer" else "N"
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{family}_{letter}{size}.hlo")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("family", choices=sorted(FAMILIES))
    ap.add_argument("size", type=int)
    ap.add_argument("--out")
    args = ap.parse_args()
    if args.size < 1:
        ap.error("size must be >= 1")
    out = args.out or default_path(args.family, args.size)
    with open(out, "w") as f:
        f.write(FAMILIES[args.family](args.size))


if __name__ == "__main__":
    main()
