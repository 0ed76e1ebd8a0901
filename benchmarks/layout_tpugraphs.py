"""Layout costs against real TPU runs, and layout search on the simulator.

1. ranking: the TpuGraphs layout sample (data/tpugraphs: one module, 62 configurable nodes, 122 TPU
   runs of which 112 have a runtime) - every recorded configuration decoded into our LayoutSpace,
   priced as the program rewritten with its layouts (autotune.compiler.layouts) by the noise-free
   simulator and by the analytical model; Kendall's tau-b of predicted vs measured runtime over the
   runs (TpuGraphs' layout metric). Also how our default rule compares with the recorded default.
2. search: `autotune layout`'s search (annealing, simulator as cost model, a fixed number of
   configurations) on a few example programs; speedup of the best over the default layout
   (predicted by the noise-free simulator), median over the programs.

    python benchmarks/layout_tpugraphs.py [--evals 200] [--programs vae_small_infer,...]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from autotune.compiler.layouts import LayoutSpace, complete_layout  # noqa: E402
from autotune.compiler.program import load_program  # noqa: E402
from autotune.tuning.tuner import LayoutCost, Tuner  # noqa: E402
from costmodels.analytical import AnalyticalCostModel  # noqa: E402
from costmodels.metrics import kendall  # noqa: E402
from hardware.simulator import TpuSimulator  # noqa: E402
from search.base import get_strategy  # noqa: E402

SAMPLE = ROOT / "data" / "tpugraphs"
PROGRAMS = ("vae_small_infer", "autoencoder_small_infer", "lstm_small_infer", "resnet_small_infer",
            "efficientnet_small_infer", "inception_small_infer")


def ranking() -> dict:
    summary = json.loads((SAMPLE / "tile_layout_summary.json").read_text())
    space = LayoutSpace(load_program(SAMPLE / "layout_module.hlo"), "tpu")
    runs = [r for r in summary["runs"] if not r["error"]]
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


def search(programs: list, evals: int, seed: int) -> dict:
    sim = TpuSimulator("tpu", noise=0.0)
    rows = []
    for name in programs:
        space = LayoutSpace(load_program(ROOT / "examples" / "hlo" / f"{name}.hlo"), "tpu")
        t0 = time.time()
        r = Tuner(space, sim.simulate, get_strategy("annealing")(space, seed=seed), budget=None,
                  max_evaluations=evals, progress=False, batch_size=16).run()
        rows.append({"program": name, "nodes": len(space.nodes), "free_tensors": len(space.free_slots),
                     "default_ms": r.default_cost * 1e3, "best_ms": r.best_cost * 1e3, "speedup": r.speedup,
                     "copies_default": space.copies(space.default()), "copies_best": space.copies(r.best),
                     "evaluations": r.evaluations, "seconds": time.time() - t0})
        print(json.dumps(rows[-1]), flush=True)
    return {"programs": rows, "median_speedup": float(np.median([r["speedup"] for r in rows]))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--evals", type=int, default=200, help="configurations per program in the search part")
    ap.add_argument("--programs", default=",".join(PROGRAMS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--skip-search", action="store_true")
    args = ap.parse_args()
    rank = ranking()
    print(json.dumps({"ranking": rank}, indent=1), flush=True)
    if not args.skip_search:
        res = search([p for p in args.programs.split(",") if p], args.evals, args.seed)
        print(json.dumps({"search_median_speedup": res["median_speedup"]}))


if __name__ == "__main__":
    main()
