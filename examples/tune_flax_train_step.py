#!/usr/bin/env python3
"""Tune a flax model's train step for this machine's CPU with `autotune.jax.tune`.

    pip install -e ".[models]"
    python examples/tune_flax_train_step.py [--budget 2m]

A small flax linen CNN with batch norm, trained by optax's adamw: the train step is lowered, tuned
(`autotune fusion --target cpu` in a subprocess; verified against XLA's own compile of it) and returned
as a callable that runs the tuned program, or `jax.jit(step)` with one warning when nothing faster was
verified. Run it twice: the second time the tuned result comes from the cache (~/.cache/autotune/jax/).
"""
import argparse
import os
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import flax.linen as nn  # noqa: E402
import jax  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

import autotune.jax  # noqa: E402


class CNN(nn.Module):
    @nn.compact
    def __call__(self, x, train: bool):
        for features in (16, 32):
            x = nn.Conv(features, (3, 3))(x)
            x = nn.BatchNorm(use_running_average=not train, momentum=0.9)(x)
            x = nn.avg_pool(nn.relu(x), (2, 2), strides=(2, 2))
        return nn.Dense(10)(x.reshape((x.shape[0], -1)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--budget", default="2m")
    budget = ap.parse_args().budget
    model, tx = CNN(), optax.adamw(1e-3)
    x = jax.random.normal(jax.random.PRNGKey(1), (8, 16, 16, 3))
    y = jax.random.randint(jax.random.PRNGKey(2), (8,), 0, 10)
    variables = model.init(jax.random.PRNGKey(0), x, train=False)
    params, stats = variables["params"], variables["batch_stats"]
    opt_state = tx.init(params)

    def train_step(params, stats, opt_state, x, y):
        def loss_fn(p):
            logits, upd = model.apply({"params": p, "batch_stats": stats}, x, train=True, mutable=["batch_stats"])
            return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean(), upd["batch_stats"]
        (loss, stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), stats, opt_state, loss

    t0 = time.perf_counter()
    step = autotune.jax.tune(train_step, params, stats, opt_state, x, y, budget=budget)
    print(f"tune: {time.perf_counter() - t0:.1f} s; tuned program: {step.tuned}; measured speedup over "
          f"XLA's own compile: x{step.measured_speedup or 1.0:.3f}; run folder {step.run_dir}")
    ours, theirs = step(params, stats, opt_state, x, y), jax.jit(train_step)(params, stats, opt_state, x, y)
    worst = max(float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))
                for a, b in zip(jax.tree_util.tree_leaves(ours), jax.tree_util.tree_leaves(theirs)))
    print(f"largest difference from jax.jit(train_step): {worst:.2e}; loss {float(ours[-1]):.4f}")


if __name__ == "__main__":
    main()
