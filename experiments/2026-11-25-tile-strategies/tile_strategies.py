"""Tile strategies of `autotune tile` on the simulator: the tile each strategy ships, against the
exhaustive optimum, at equal hardware trials.

Arms (all through `autotune.tuning.tile_tuning.tune_kernel_tiles`, i.e. the Tuner plus the race of
finalists by median): `topk` ranks every tile with the analytical model and races its 10 best and the
default (11 tiles measured); `random` and `model-based` (AutoTVM, search/model_based.py) search
online with `trials` noisy measurements, then race their best. "Hardware" is the TPU simulator with
1.5% seeded noise; quality is the shipped tile's noise-free time over the optimum of all valid tiles.
Kernels: the dot/convolution kernels of benchmarks/paper_tile_online.py's quick set.

    python experiments/2026-11-25-tile-strategies/tile_strategies.py [--seeds 3] [--trials 8 16 32] [--json OUT]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

NEAR = 1.02


def shipped_ratio(case, strategy: str, seed: int, trials: int) -> float:
    """Noise-free time of the tile tune_kernel_tiles ships, over the kernel's optimum."""
    from autotune.tuning.tile_tuning import TileTuningOptions, tune_kernel_tiles
    from costmodels.analytical import AnalyticalCostModel
    from hardware.simulator import TpuSimulator
    hw = TpuSimulator(noise=0.015, seed=seed)
    r = tune_kernel_tiles(case.kernel, AnalyticalCostModel("tpu"), hw,
                          TileTuningOptions(strategy=strategy, trials=trials, top_k=10, repeats=3, seed=seed),
                          space=case.space)
    tile = r.measured_best_config if r.measured_best_config is not None else case.space.default()
    return float(case.true[case.tiles.index(tile)] / case.optimum)


def main(argv: "list | None" = None) -> dict:
    import benchmarks.paper_tile_online as P
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--trials", type=int, nargs="+", default=[8, 16, 32])
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    cases = P.find_cases(P.QUICK_PROGRAMS, per_family=1, max_kernels=6, log=lambda m: None)
    t0 = time.time()
    arms = [("topk", 11)] + [(s, t) for t in args.trials for s in ("random", "model-based")]
    out: dict = {}
    for strategy, trials in arms:
        ratios = [shipped_ratio(c, strategy, seed, trials) for c in cases for seed in range(args.seeds)]
        out[f"{strategy}/{trials}"] = {"strategy": strategy, "trials": trials, "mean_ratio": float(np.mean(ratios)),
                                       "median_ratio": float(statistics.median(ratios)),
                                       "within_2pct": float(np.mean([r <= NEAR for r in ratios])), "runs": len(ratios)}
    print(f"{len(cases)} kernels ({', '.join(c.name for c in cases)}), seeds 0..{args.seeds - 1}, "
          f"{time.time() - t0:.0f} s")
    print("| strategy | hardware trials per kernel | mean shipped / optimum | within 2% of optimum |")
    print("|---|---:|---:|---:|")
    for v in out.values():
        trials = "11 (10 best predicted + default)" if v["strategy"] == "topk" else v["trials"]
        print(f"| {v['strategy']} | {trials} | {v['mean_ratio']:.4f} | {100 * v['within_2pct']:.0f}% |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return out


if __name__ == "__main__":
    main()
