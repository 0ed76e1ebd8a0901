"""Layout costs against real TPU runs, and layout search on the simulator.

1. ranking: the TpuGraphs layout sample (data/tpugraphs: one module, 62 configurable nodes, 122 TPU
   runs of which 112 have a runtime) - every recorded configuration decoded into our LayoutSpace,
   priced as the program rewritten with its layouts (autotune.compiler.layouts) by the noise-free
   simulator and by the analytical model; Kendall's tau-b of predicted vs measured runtime over the
   runs (TpuGraphs' layout metric). Also how our default rule compares with the recorded default.
2. search: `autotune layout`'s search (annealing, the noise-free simulator or a shipped layout model as
   cost model, at most `--evals` configurations and `--budget-s` seconds per program) on example
   programs (`--programs all`: the whole examples/hlo corpus); speedup of the best over the default
   layout as the noise-free simulator prices them, median over the programs.

    python -m benchmarks.layout_tpugraphs [--evals 200] [--programs vae_small_infer,...|all] [--budget-s S]
                                          [--cost-model sim|gnn|xgboost] [--skip-ranking] [--ranking-runs N]
                                          [--md F] [--json F]
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Optional

import numpy as np

from autotune.api import make_cost_model
from autotune.compiler.layouts import LayoutSpace, complete_layout
from autotune.compiler.program import load_program
from autotune.tuning.pricing import LayoutCost
from autotune.tuning.options import TunerOptions
from autotune.tuning.tuner import Tuner
from costmodels.analytical import AnalyticalCostModel
from costmodels.metrics import kendall
from hardware.simulator import TpuSimulator
from search.base import get_strategy

ROOT = Path(__file__).resolve().parent.parent

SAMPLE = ROOT / "data" / "tpugraphs"
PROGRAMS = ("vae_small_infer", "autoencoder_small_infer", "lstm_small_infer", "resnet_small_infer",
            "efficientnet_small_infer", "inception_small_infer")


def ranking(limit: Optional[int] = None) -> dict:
    """Kendall's tau of the simulator's and the analytical model's prices against the recorded runtimes; `limit`:
    only the first `limit` runs with a runtime (and the recorded default), for a smoke run."""
    summary = json.loads((SAMPLE / "tile_layout_summary.json").read_text())
    space = LayoutSpace(load_program(SAMPLE / "layout_module.hlo"), "tpu")
    runs = [r for r in summary["runs"] if not r["error"]]
    if limit is not None:
        runs = [r for i, r in enumerate(runs) if i < limit or r["is_default"]]
    cfgs = [space.from_layouts(r["layout_nodes"]) for r in runs]
    measured = np.array([r["compute_time_ns"] for r in runs], float)
    out: dict = {"runs": len(summary["runs"]), "runs_with_runtime": len(runs), "distinct_configs":
                 len({c.key() for c in cfgs}), "measured_spread": float(measured.max() / measured.min() - 1)}
    sim = TpuSimulator("tpu", noise=0.0)
    for name, fn in (("sim", sim.simulate), ("analytical", AnalyticalCostModel(target="tpu").predict)):
        t0 = time.time()
        pred = LayoutCost(space, fn)(cfgs)
        out[f"kendall_{name}"] = kendall(pred, measured)
        out[f"seconds_{name}"] = time.time() - t0
        recorded_default = space.from_layouts(next(r for r in runs if r["is_default"])["layout_nodes"])
        ours, theirs = LayoutCost(space, fn)([space.default(), recorded_default])
        out[f"{name}_our_default_over_recorded_default"] = float(ours / theirs)
    recorded = next(r for r in runs if r["is_default"])["layout_nodes"]
    lay = space.layouts(space.default())
    agree = [0, 0, 0]
    convs = 0
    for nd, rec in zip(space.nodes, recorded):
        if nd.opcode != "convolution":
            continue
        convs += 1
        for t in range(3):
            agree[t] += complete_layout(rec[t], len(nd.choices[t][0])) == lay[(nd.comp, nd.node)][t]
    out["default_rule_agreement"] = {"convolutions": convs, "output": agree[0], "lhs": agree[1], "rhs": agree[2]}
    return out


def search(programs: list, evals: int, seed: int, budget_s: Optional[float] = None, cost_model: str = "sim") -> dict:
    """Annealing over each program's layout space priced by `cost_model` (sim: the noise-free simulator;
    gnn / xgboost: the shipped layout model), at most `evals` configurations and `budget_s` seconds per
    program; the speedup is always the noise-free simulator's price of the default over the best's."""
    sim = TpuSimulator("tpu", noise=0.0)
    model = sim.simulate if cost_model == "sim" else make_cost_model(cost_model, "layout", "tpu")
    rows = []
    for name in programs:
        space = LayoutSpace(load_program(ROOT / "examples" / "hlo" / f"{name}.hlo"), "tpu")
        t0 = time.time()
        if not space.free_slots:
            rows.append({"program": name, "nodes": len(space.nodes), "free_tensors": 0, "speedup": 1.0,
                         "evaluations": 0, "seconds": time.time() - t0})
            continue
        r = Tuner(space, model, get_strategy("annealing")(space, seed=seed), budget=budget_s,
                  options=TunerOptions(max_evaluations=evals, progress=False, batch_size=16)).run()
        default_s, best_s = LayoutCost(space, sim.simulate)([space.default(), r.best])
        rows.append({"program": name, "nodes": len(space.nodes), "free_tensors": len(space.free_slots),
                     "default_ms": default_s * 1e3, "best_ms": best_s * 1e3, "speedup": float(default_s / best_s),
                     "predicted_speedup": r.speedup,
                     "copies_default": space.copies(space.default()), "copies_best": space.copies(r.best),
                     "evaluations": r.evaluations, "seconds": time.time() - t0})
        print(json.dumps(rows[-1]), flush=True)
    sp = np.array([r["speedup"] for r in rows])
    return {"cost_model": cost_model, "evals": evals, "budget_s": budget_s, "programs": rows,
            "median_speedup": float(np.median(sp)), "mean_speedup": float(sp.mean()),
            "programs_faster": int((sp > 1.0 + 1e-9).sum()), "programs_slower": int((sp < 1.0 - 1e-9).sum())}


def search_markdown(res: dict) -> str:
    """The search part as a markdown table (one row per program, then the median)."""
    lines = ["# Layout search on the simulator (python -m benchmarks.layout_tpugraphs --skip-ranking)", "",
             f"cost model {res['cost_model']}, annealing, at most {res['evals']} configurations and "
             f"{res['budget_s']} s per program; speedup = noise-free simulator's default / best", "",
             "| program | configurable nodes | free tensors | speedup | copies default -> best | evaluations | seconds |",
             "|---|---:|---:|---:|---|---:|---:|"]
    for r in res["programs"]:
        copies = f"{r['copies_default']} -> {r['copies_best']}" if "copies_best" in r else "-"
        lines.append(f"| {r['program']} | {r['nodes']} | {r['free_tensors']} | {r['speedup']:.3f} | {copies} | "
                     f"{r['evaluations']} | {r['seconds']:.0f} |")
    lines += ["", f"median speedup {res['median_speedup']:.3f} over {len(res['programs'])} programs (mean "
              f"{res['mean_speedup']:.3f}; {res['programs_faster']} faster than the default, {res['programs_slower']} "
              "slower)"]
    return "\n".join(lines) + "\n"


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--evals", type=int, default=200, help="configurations per program in the search part")
    ap.add_argument("--programs", default=",".join(PROGRAMS),
                    help="comma-separated example programs, or 'all' (every examples/hlo program)")
    ap.add_argument("--budget-s", type=float, default=None, help="search seconds per program (default: no limit)")
    ap.add_argument("--cost-model", default="sim", choices=("sim", "gnn", "xgboost"),
                    help="search pricing: the noise-free simulator or the shipped layout model")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ranking-runs", type=int, default=None,
                    help="rank only the first N recorded runs (and the recorded default): a smoke run")
    ap.add_argument("--skip-ranking", action="store_true")
    ap.add_argument("--skip-search", action="store_true")
    ap.add_argument("--md", default=None, help="write the search table (markdown) here")
    ap.add_argument("--json", default=None, help="write the results (JSON) here")
    args = ap.parse_args(argv)
    out: dict = {}
    if not args.skip_ranking:
        out["ranking"] = ranking(args.ranking_runs)
        print(json.dumps({"ranking": out["ranking"]}, indent=1), flush=True)
    if not args.skip_search:
        names = sorted(p.stem for p in (ROOT / "examples" / "hlo").glob("*.hlo")) if args.programs == "all" \
            else [p for p in args.programs.split(",") if p]
        out["search"] = search(names, args.evals, args.seed, args.budget_s, args.cost_model)
        print(json.dumps({"search_median_speedup": out["search"]["median_speedup"]}))
        if args.md:
            Path(args.md).write_text(search_markdown(out["search"]))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main()
