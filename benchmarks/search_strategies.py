"""Search strategies on the corpus: speedup over the default fusion found by annealing and genetic
search against random search with the same wall-clock budget, the simulator as the cost.

The cost of a configuration is the TPU simulator's noise-free program time (hardware in the loop, as
the paper's hardware-only search), so the speedup is what the simulated TPU would see.

    python -m benchmarks.search_strategies [--budget 60] [--programs GLOB] [--workers 2] [--json OUT]
        [--log runs.jsonl]

Each finished (program, strategy) run is appended to `--log` at once; a rerun with the same log
skips the runs already there (a long sweep survives an interruption).
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import platform
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed

from benchmarks.joblog import append_record, read_records

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

STRATEGIES = ("annealing", "genetic", "random")


def run_one(args: tuple) -> dict:
    path, strategy, budget, seed = args
    from autotune.compiler.fusion import FusionSpace
    from autotune.compiler.program import Program
    from autotune.tuning.options import TunerOptions
    from autotune.tuning.tuner import Tuner
    from hardware.simulator import TpuSimulator
    from search.base import get_strategy

    space = FusionSpace(Program.from_file(path), "tpu")
    sim = TpuSimulator(noise=0.0)
    t = Tuner(space, sim.simulate, get_strategy(strategy)(space, seed=seed), budget=budget,
              options=TunerOptions(progress=False))
    r = t.run()
    return {"program": os.path.basename(path)[:-4], "strategy": strategy, "default_s": r.default_cost,
            "best_s": r.best_cost, "speedup": r.speedup, "evaluations": r.evaluations, "seed": seed}


def _read_log(path: str) -> list:
    """Finished runs from the log (`joblog.read_records`: a line cut short by a kill is skipped)."""
    return [r for r in read_records(path) if isinstance(r, dict) and {"program", "strategy", "seed"} <= r.keys()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget", type=float, default=60.0, help="seconds per (program, strategy)")
    ap.add_argument("--programs", default=os.path.join(ROOT, "examples", "hlo", "*.hlo"))
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None, help="write raw results here")
    ap.add_argument("--log", default=None, help="append each finished run here (JSON lines); resume from it")
    args = ap.parse_args()
    paths = sorted(glob.glob(args.programs))
    if not paths:
        sys.exit(f"search_strategies.py: no HLO files match {args.programs}")
    jobs = [(p, s, args.budget, args.seed) for p in paths for s in STRATEGIES]
    rows: list = []
    if args.log and os.path.exists(args.log):
        rows = _read_log(args.log)
        done = {(r["program"], r["strategy"], r["seed"]) for r in rows if r.get("budget_s") == args.budget}
        rows = [r for r in rows if r.get("budget_s") == args.budget]
        jobs = [j for j in jobs if (os.path.basename(j[0])[:-4], j[1], j[3]) not in done]
    t0 = time.time()
    with ProcessPoolExecutor(args.workers) as ex:
        futures = [ex.submit(run_one, j) for j in jobs]
        for n, fut in enumerate(as_completed(futures), 1):
            r = fut.result()
            r["budget_s"] = args.budget
            rows.append(r)
            if args.log:
                append_record(args.log, r)
            print(f"[{n}/{len(jobs)}] {r['program']} {r['strategy']}: x{r['speedup']:.3f} "
                  f"({r['evaluations']:,} evaluations)", file=sys.stderr, flush=True)
    by: dict = {}
    for r in sorted(rows, key=lambda r: r["program"]):
        by.setdefault(r["program"], {})[r["strategy"]] = r
    by = {p: d for p, d in by.items() if all(s in d for s in STRATEGIES)}
    print(f"# search strategies, {args.budget:g} s each, simulator cost; {platform.machine()} "
          f"{os.cpu_count()} cores, {args.workers} in parallel; {time.time() - t0:.0f} s total\n")
    print("| program | " + " | ".join(f"{s} speedup (evals)" for s in STRATEGIES) + " |")
    print("|---|" + "---:|" * len(STRATEGIES))
    for prog, d in by.items():
        print(f"| {prog} | " + " | ".join(f"{d[s]['speedup']:.3f} ({d[s]['evaluations']:,})" for s in STRATEGIES) + " |")
    print("| **median** | " + " | ".join(f"**{statistics.median(d[s]['speedup'] for d in by.values()):.3f}**"
                                       for s in STRATEGIES) + " |")
    wins = {s: sum(d[s]["speedup"] > d["random"]["speedup"] + 1e-9 for d in by.values()) for s in STRATEGIES[:2]}
    print(f"\nprograms where the strategy beats random search: " +
          ", ".join(f"{s} {wins[s]}/{len(by)}" for s in wins))
    if args.json:
        json.dump({"budget_s": args.budget, "rows": rows}, open(args.json, "w"), indent=1)


if __name__ == "__main__":
    main()
