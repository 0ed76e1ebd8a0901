"""The learned-cost-model paper's section 7 claim on the simulator: search guided by a cost model,
followed by 1/10 of the hardware budget for verification, finds configurations at least as good as
hardware-only search with the full hardware budget (the experiment itself: benchmarks/guided_search.py,
also run by benchmarks/paper.py's fusion_search sections).

"Hardware" is the TPU simulator with its measurement noise (1.5%); hardware time is simulated: every
configuration measured costs a compile (`--compile-s`, default 1 s) plus `--repeats` runs of the
program. The quality of a final configuration is its noise-free simulated program time.

    python -m benchmarks.paper_claim [--hw-budget 600] [--model-seconds 30] [--seeds 0 1 2]
        [--cost-model analytical|gnn|PATH] [--programs GLOB] [--workers 2] [--json OUT]
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import platform
import time
from concurrent.futures import ProcessPoolExecutor

from benchmarks import guided_search  # the experiment itself (shared with paper.py)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hw-budget", type=float, default=600.0, help="simulated hardware seconds (B)")
    ap.add_argument("--model-seconds", type=float, default=30.0, help="wall-clock seconds of cost-model search")
    ap.add_argument("--compile-s", type=float, default=1.0)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--cost-model", default="analytical", help="as `autotune fusion --cost-model`: analytical, "
                    "gnn (the shipped model), or a model file")
    ap.add_argument("--programs", default=os.path.join(ROOT, "examples", "hlo", "*_small_infer.hlo"))
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    jobs = [{"program": p, "seed": s, "hw_budget": args.hw_budget, "model_seconds": args.model_seconds,
             "compile_s": args.compile_s, "repeats": args.repeats, "cost_model": args.cost_model}
            for p in sorted(glob.glob(args.programs)) for s in args.seeds]
    t0 = time.time()
    with ProcessPoolExecutor(args.workers) as ex:
        rows = list(ex.map(guided_search.run_sim_job, jobs))
    table, wins, n = guided_search.summary_table(rows)
    print(f"# paper section 7 claim, simulator; B = {args.hw_budget:g} s simulated hardware time "
          f"(compile {args.compile_s:g} s + {args.repeats} runs per configuration); cost model "
          f"{args.cost_model}, {args.model_seconds:g} s of search; seeds {args.seeds}; {platform.machine()} "
          f"{os.cpu_count()} cores; {time.time() - t0:.0f} s\n")
    print(table)
    print(f"\nmodel + B/10 matches or beats hardware only in {wins} of {n} programs")
    if args.json:
        json.dump({"args": vars(args), "rows": rows}, open(args.json, "w"), indent=1)
    return {"rows": rows, "wins": wins, "programs": n, "table": table}


if __name__ == "__main__":
    main()
