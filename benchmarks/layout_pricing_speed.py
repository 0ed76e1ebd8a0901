"""Layout pricing speed: configurations per second priced from scratch (the whole program rewritten and
fused per configuration) against incrementally (`LayoutSpace.move_delta`: a move priced as its parent's
cost minus the kernels it removes plus those it adds), side by side on the same configurations.

For each program, an annealing-like walk: batches of `--batch` neighbours of a head configuration
(one tensor's layout each), the head moving to a random one of them; every batch is priced by both
pricers in turn (incremental first, then from scratch: the same configurations, one after the other, so
the machine's load hits both alike), by the noise-free simulator. Reports configurations per second for
each, their ratio, how many moves the incremental pricer priced by a window (the others from scratch),
and the largest relative difference between the two prices (they must agree to rounding).

    python -m benchmarks.layout_pricing_speed [--programs a,b,c] [--batches 5] [--batch 8] [--md F] [--json F]
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from autotune.compiler.layouts import LayoutSpace
from autotune.compiler.program import load_program
from autotune.tuning.pricing import LayoutCost
from hardware.simulator import TpuSimulator

ROOT = Path(__file__).resolve().parent.parent

PROGRAMS = ("resnet_small_train", "resnet_medium_train", "bert_medium_train", "resnet_large_train")


def measure(name: str, batches: int, batch: int, seed: int) -> dict:
    space = LayoutSpace(load_program(ROOT / "examples" / "hlo" / f"{name}.hlo"), "tpu")
    sim = TpuSimulator("tpu", noise=0.0)
    inc = LayoutCost(space, sim.simulate)
    ref = LayoutCost(space, sim.simulate, incremental=False)
    rng = np.random.default_rng(seed)
    head = space.default()
    inc([head])
    ref([head])
    t_inc = t_ref = 0.0
    worst = 0.0
    n = 0
    for _ in range(batches):
        cfgs = [space.neighbor(head, rng) for _ in range(batch)]
        t0 = time.perf_counter()
        a = inc(cfgs)
        t_inc += time.perf_counter() - t0
        t0 = time.perf_counter()
        b = ref(cfgs)
        t_ref += time.perf_counter() - t0
        worst = max(worst, float(np.max(np.abs(a - b) / b)))
        n += len(cfgs)
        head = cfgs[int(rng.integers(len(cfgs)))]
    comp = max(len(c) for c in space.program.computations)
    return {"program": name, "instructions": space.program.instruction_count(), "largest_computation": comp,
            "configurable_nodes": len(space.nodes), "configs": n,
            "from_scratch_per_s": n / t_ref, "incremental_per_s": n / t_inc, "speedup": t_ref / t_inc,
            "moves_by_window": inc.moves_incremental - 0, "moves_from_scratch": inc.moves_from_scratch - 1,
            "max_rel_diff": worst}


def markdown(rows: list) -> str:
    lines = ["# Layout pricing speed (benchmarks/layout_pricing_speed.py)", "",
             "configurations per second, noise-free simulator; the same configurations priced by both, "
             "batch by batch", "",
             "| program | instructions | configurable nodes | configs | from scratch /s | incremental /s | ratio | "
             "moves by window | max rel. diff |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['program']} | {r['instructions']} | {r['configurable_nodes']} | {r['configs']} | "
                     f"{r['from_scratch_per_s']:.2f} | {r['incremental_per_s']:.2f} | {r['speedup']:.1f}x | "
                     f"{r['moves_by_window']} / {r['configs']} | {r['max_rel_diff']:.1e} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> list:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--programs", default=",".join(PROGRAMS))
    ap.add_argument("--batches", type=int, default=5)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--md", default=None)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    rows = []
    for name in args.programs.split(","):
        rows.append(measure(name, args.batches, args.batch, args.seed))
        print(json.dumps(rows[-1]), flush=True)
    md = markdown(rows)
    print(md)
    if args.md:
        Path(args.md).write_text(md)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    return rows


if __name__ == "__main__":
    main()
