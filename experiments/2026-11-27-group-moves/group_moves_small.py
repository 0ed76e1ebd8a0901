"""Group moves on small programs (issue 21): annealing with and without group moves, seed-matched, at a
fixed number of configurations (load-independent), on corpus programs; the best configuration of
each search measured on the noise-free simulator (kernel sums) against the default.

    python experiments/2026-11-27-group-moves/group_moves_small.py [--programs examples/hlo/bert_small_train.hlo ...]
        [--model default] [--evals 1000 | --seconds 20] [--seeds 0 1 2] [--group-min-edges 0] [--md out.md]
        [--json out.json]

`--group-min-edges 0` forces group moves on these small spaces (annealing's default, 5,000, gives them none:
the two searches are then the same, draw for draw).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from benchmarks.tables import emit_results  # noqa: E402

PROGRAMS = ["examples/hlo/bert_small_train.hlo", "examples/hlo/resnet_small_train.hlo",
            "examples/hlo/lstm_small_train.hlo", "examples/hlo/mlp_mixer_small_train.hlo",
            "examples/hlo/efficientnet_small_train.hlo", "examples/hlo/gnn_small_train.hlo"]


def run(program: str, model_name: str, evals: int, seeds: list, min_edges: int = 0, seconds: float = 0.0) -> list:
    from autotune.api import make_cost_model
    from autotune.compiler.fusion import FusionSpace
    from autotune.compiler.program import Program
    from autotune.tuning.options import TunerOptions
    from autotune.tuning.tuner import Tuner
    from hardware.simulator import TpuSimulator
    from search.annealing import SimulatedAnnealing
    rows = []
    for seed in seeds:
        for gm in (0.94, 0.0):
            space = FusionSpace(Program.from_file(program), "tpu")
            model = make_cost_model(None if model_name == "default" else model_name, "fusion", "tpu", None)
            strat = SimulatedAnnealing(space, seed=seed, group_moves=gm, group_min_edges=min_edges)
            t0 = time.perf_counter()
            r = Tuner(space, model, strat, budget=seconds or None,
                      options=TunerOptions(max_evaluations=None if seconds else evals, progress=False)).run()
            wall = time.perf_counter() - t0
            sim = TpuSimulator(noise=0.0)
            default_s = float(np.sum(sim.simulate(space.kernels(space.default()))))
            best_s = float(np.sum(sim.simulate(space.kernels(r.best))))
            rows.append({"program": Path(program).name, "edges": space.n_edges, "grouped": space.grouped_edges(),
                         "seed": seed, "group_moves": gm, "evaluations": r.evaluations, "search_s": wall,
                         "n_group_moves": strat.n_group_moves, "predicted_speedup": r.default_cost / r.best_cost,
                         "measured_speedup": default_s / best_s})
            print(rows[-1], flush=True)
    return rows


def render(rows: list, model: str, evals) -> str:
    evals = f"{evals:,}" if isinstance(evals, int) else evals
    lines = [f"Annealing ({model} model) with group moves (group_moves=0.94) and without (0), {evals} configurations "
             "each, seed-matched; measured = noise-free simulator, default / best (kernel sums)", "",
             "| program | edges | grouped | seed | measured, with | measured, without | ratio | group moves | "
             "search s, with / without |", "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    by = {}
    for r in rows:
        by.setdefault((r["program"], r["seed"]), {})[r["group_moves"]] = r
    for (prog, seed), d in by.items():
        a, b = d.get(0.94), d.get(0.0)
        if not (a and b):
            continue
        lines.append(f"| {prog} | {a['edges']:,} | {a['grouped']:,} | {seed} | x{a['measured_speedup']:.4f} | "
                     f"x{b['measured_speedup']:.4f} | {a['measured_speedup'] / b['measured_speedup']:.4f} | "
                     f"{a['n_group_moves']:,} | {a['search_s']:.1f} / {b['search_s']:.1f} |")
    return "\n".join(lines)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--programs", nargs="+", default=PROGRAMS)
    ap.add_argument("--model", default="default")
    ap.add_argument("--evals", type=int, default=1000)
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--seconds", type=float, default=0.0, help="a search budget in seconds instead of --evals")
    ap.add_argument("--group-min-edges", type=int, default=0, help="annealing's group_min_edges (0: group moves on any space)")
    ap.add_argument("--md", default=None)
    ap.add_argument("--json", dest="json_out", default=None)
    a = ap.parse_args(argv)
    rows = []
    for p in a.programs:
        rows += run(p, a.model, a.evals, a.seeds, a.group_min_edges, a.seconds)
    res = {"model": a.model, "evals": a.evals, "seeds": a.seeds, "runs": rows}
    emit_results(render(rows, a.model, a.evals if not a.seconds else f"{a.seconds:g} s of"), res, a.md, a.json_out)
    return res


if __name__ == "__main__":
    main()
