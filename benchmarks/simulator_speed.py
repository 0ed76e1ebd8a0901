"""Simulator and analytical-model throughput (kernel simulations per second, one process).

Kernels come from example programs (default fusion on the TPU target). Three measurements:
  1. `simulate(kernels)` with default tiles (tiles=None), per-kernel caches warm,
  2. `simulate(kernels, tiles)` with random valid tiles (TileConfig objects),
  3. the analytical model on the same (kernel, tile) pairs.
The first call for a kernel builds its cached feature row and default tile; that cold cost is
reported separately.

    python -m benchmarks.simulator_speed [--programs examples/hlo/bert_small_train.hlo ...] [--n 200000]
"""
from __future__ import annotations

import argparse
import glob
import os
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("AUTOTUNE_NO_MICROBENCH", "1")

from autotune.compiler.fusion import FusionSpace  # noqa: E402
from autotune.compiler.program import Program  # noqa: E402
from autotune.compiler.tiles import TileSpace  # noqa: E402
from costmodels.analytical import AnalyticalCostModel  # noqa: E402
from hardware.simulator import TpuSimulator  # noqa: E402


def collect(paths):
    kernels = []
    for p in paths:
        prog = Program.from_file(p)
        space = FusionSpace(prog, "tpu")
        kernels.extend(k for k in space.kernels(space.default()) if not k.is_trivial)
    uniq = {}
    for k in kernels:
        uniq.setdefault(k.hash, k)
    return list(uniq.values())


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser()
    default = sorted(glob.glob(os.path.join(ROOT, "examples/hlo/*small*.hlo")))[:4]
    ap.add_argument("--programs", nargs="*", default=default)
    ap.add_argument("--n", type=int, default=200_000, help="items per timed call")
    args = ap.parse_args(argv)
    kernels = collect(args.programs)
    sim = TpuSimulator("tpu", noise=0.015, seed=0)
    t0 = time.perf_counter()
    sim.simulate(kernels)  # cold: feature rows + default tiles (TileSpace + analytical argmin)
    cold = time.perf_counter() - t0
    rng = np.random.default_rng(0)
    items = [kernels[i] for i in rng.integers(len(kernels), size=args.n)]
    t0 = time.perf_counter()
    sim.simulate(items)
    warm_default = time.perf_counter() - t0
    spaces = {k.hash: TileSpace(k, "tpu") for k in kernels}
    tiles = [spaces[k.hash].random(rng) for k in items]
    t0 = time.perf_counter()
    sim.simulate(items, tiles)
    warm_tiles = time.perf_counter() - t0
    am = AnalyticalCostModel("tpu")
    am.predict(kernels[:1], [spaces[kernels[0].hash].random(rng)])
    t0 = time.perf_counter()
    am.predict(items, tiles)
    an = time.perf_counter() - t0
    res = {
        "programs": [os.path.basename(p) for p in args.programs], "distinct_kernels": len(kernels),
        "cold_seconds_per_kernel": cold / len(kernels),
        "sim_default_tile_per_s": args.n / warm_default,
        "sim_explicit_tile_per_s": args.n / warm_tiles,
        "analytical_explicit_tile_per_s": args.n / an,
    }
    print(f"{len(kernels)} distinct kernels from {len(args.programs)} programs; cold (features + default tile): "
          f"{1e3 * res['cold_seconds_per_kernel']:.2f} ms/kernel")
    print(f"simulator, default tiles : {res['sim_default_tile_per_s']:,.0f} kernel simulations/s")
    print(f"simulator, explicit tiles: {res['sim_explicit_tile_per_s']:,.0f} kernel simulations/s")
    print(f"analytical, explicit tiles: {res['analytical_explicit_tile_per_s']:,.0f} predictions/s")
    return res


if __name__ == "__main__":
    main()
