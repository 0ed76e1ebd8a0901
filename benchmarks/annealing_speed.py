"""Configurations evaluated per second: simulated annealing + the analytical cost model through the
Tuner (memoized, incremental program costs) on the largest corpus program, one core.

Reports the overall rate and the steady-state rate (after the chains' starting points are priced).

    python -m benchmarks.annealing_speed [--program P] [--seconds 30] [--target tpu|cpu] [--json]
"""
from __future__ import annotations

import argparse
import json
import os
import platform

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--program", default=None)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--target", default="tpu")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    from autotune.compiler.fusion import FusionSpace
    from autotune.compiler.program import Program
    from autotune.tuning.callbacks import FunctionCallback
    from autotune.tuning.options import TunerOptions
    from autotune.tuning.tuner import Tuner
    from costmodels.analytical import AnalyticalCostModel
    from search.base import get_strategy

    if args.program is None:
        manifest = json.load(open(os.path.join(ROOT, "examples", "hlo", "manifest.json")))
        args.program = os.path.join(ROOT, "examples", "hlo", max(manifest, key=lambda e: e["instructions"])["file"])
    prog = Program.from_file(args.program)
    space = FusionSpace(prog, args.target)
    hist: list = []
    tuner = Tuner(space, AnalyticalCostModel(target=args.target), get_strategy("annealing")(space, seed=args.seed),
                  budget=args.seconds, options=TunerOptions(progress=False),
                  callbacks=[FunctionCallback(on_batch=lambda info: hist.append((info.t, info.evaluations)))])
    r = tuner.run()
    start = next((h for h in hist if h[0] > 0.25 * r.elapsed_s), hist[0])
    steady = (hist[-1][1] - start[1]) / max(hist[-1][0] - start[0], 1e-9)
    res = {"program": os.path.relpath(args.program, ROOT), "target": args.target,
           "instructions": prog.instruction_count(), "edges": space.n_edges, "seconds": r.elapsed_s,
           "evaluations": r.evaluations, "rate": r.evaluations / r.elapsed_s, "steady_rate": steady,
           "kernels_priced": r.kernel_evaluations, "speedup": r.speedup,
           "machine": f"{platform.machine()} {os.cpu_count()} cores"}
    if args.json:
        print(json.dumps(res, indent=2))
    else:
        print(f"{res['program']} ({res['instructions']:,} instructions, {res['edges']:,} edges, target {args.target}): "
              f"{r.evaluations:,} configurations in {r.elapsed_s:.1f} s = {res['rate']:,.0f}/s overall, "
              f"{steady:,.0f}/s steady state; {r.kernel_evaluations:,} kernels priced; predicted speedup "
              f"x{r.speedup:.3f}")
    return res


if __name__ == "__main__":
    main()
