"""Scale corpus: the training step (loss, gradient, SGD update) of an L-layer transformer, lowered by JAX.

d_model 256, 4 heads, batch 4, sequence 32, pre-norm attention and a GELU MLP, no biases; about
230 instructions per layer (L=12: 3.1k, L=48: 12.3k, L=200: 51k). Used by benchmarks/scale.py and
tests/autotune/compiler/test_scale.py (transformer_L12.hlo and transformer_L48.hlo are committed; larger
depths are generated on demand).

    python examples/scale/gen_transformer.py L [--out examples/scale/transformer_L{L}.hlo]
"""
from __future__ import annotations

import argparse
import os

import jax
import jax.numpy as jnp

D, T, B, H = 256, 32, 4, 4


def layer(p: dict, x: jax.Array) -> jax.Array:
    h = (x - x.mean(-1, keepdims=True)) / jnp.sqrt(x.var(-1, keepdims=True) + 1e-5)
    q, k, v = ((h @ p[w]).reshape(B, T, H, D // H) for w in ("q", "k", "v"))
    a = jnp.einsum("bthd,bshd->bhts", q, k) / 8.0
    a = jax.nn.softmax(a + jnp.triu(jnp.full((T, T), -1e9), 1), -1)
    x = x + jnp.einsum("bhts,bshd->bthd", a, v).reshape(B, T, D) @ p["o"]
    h = (x - x.mean(-1, keepdims=True)) / jnp.sqrt(x.var(-1, keepdims=True) + 1e-5)
    return x + jax.nn.gelu(h @ p["w1"]) @ p["w2"]


def loss(ps: list, x: jax.Array) -> jax.Array:
    for p in ps:
        x = layer(p, x)
    return (x ** 2).mean()


def step(ps: list, x: jax.Array) -> list:
    g = jax.grad(loss)(ps, x)
    return jax.tree_util.tree_map(lambda a, b: a - 0.01 * b, ps, g)


def hlo_text(layers: int) -> str:
    """HLO text of the training step of a `layers`-deep model."""
    z = lambda *s: jnp.zeros(s, jnp.float32)
    ps = [dict(q=z(D, D), k=z(D, D), v=z(D, D), o=z(D, D), w1=z(D, 4 * D), w2=z(4 * D, D)) for _ in range(layers)]
    return jax.jit(step).lower(ps, z(B, T, D)).as_text(dialect="hlo")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("layers", type=int)
    ap.add_argument("--out")
    args = ap.parse_args()
    out = args.out or os.path.join(os.path.dirname(os.path.abspath(__file__)), f"transformer_L{args.layers}.hlo")
    with open(out, "w") as f:
        f.write(hlo_text(args.layers))


if __name__ == "__main__":
    main()
