"""Cold featurization of a large program's kernels phase by phase, this tree against a baseline revision's
featurizer side by side in one process (issue 21): CPU microseconds per kernel of each phase, the
minimum over rounds that alternate which side goes first (every cache emptied, fresh Kernel objects).

    python experiments/2026-11-27-featurization-round6/pricing_phases.py [--program examples/scale/transformer_L48.hlo] [--rounds 4]
        [--baseline main] [--md out.md] [--json out.json]

Phases: TilingInfo (`tiling_info` of every kernel), default tiles (`default_tiles`), geometry rows
(`geometry_matrix`), graph gathering (`tables._graph_arrays_many`), kernel rows (`kernel_graph`). The kernels'
inputs and static costs are worked out before the phases (both sides share the Kernel class). The
baseline is costmodels/features and autotune/compiler/tiles (modules, or packages since their split) of
`--baseline`, loaded as private modules (`pricing_speed.load_baseline`).
"""
from __future__ import annotations

import argparse
import gc
import os
import sys
import time
from pathlib import Path
from typing import Optional


ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from benchmarks.pricing_speed import collect_kernels, fresh, graph_arrays_many, load_baseline  # noqa: E402
from benchmarks.tables import emit_results  # noqa: E402

PHASES = ("TilingInfo", "default tiles", "geometry rows", "graph gathering", "kernel rows")


def main(argv: Optional[list] = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--program", default=str(ROOT / "examples/scale/transformer_L48.hlo"))
    ap.add_argument("--random", type=int, default=20)
    ap.add_argument("--walk", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--baseline", default="main")
    ap.add_argument("--md", default=None)
    ap.add_argument("--json", dest="json_out", default=None)
    a = ap.parse_args(argv)
    if a.rounds < 1:
        raise SystemExit("pricing_phases: --rounds must be >= 1")
    from autotune.compiler import tiles
    from costmodels import features
    space, kernels = collect_kernels(a.program, a.random, a.walk, 0)
    space.node_costs
    paths = {"this tree": (features, tiles), f"baseline {a.baseline}": load_baseline(a.baseline)}
    load = [os.getloadavg()[0]]
    us: dict = {name: {p: [] for p in PHASES} for name in paths}
    for r in range(a.rounds):
        for name in (list(paths) if r % 2 == 0 else list(reversed(paths))):
            F, T = paths[name]
            for f2, t2 in paths.values():
                f2.clear_cache()
                t2.clear_caches()
            ks = fresh(kernels)
            for k in ks:
                k.inputs, k.cost, k.output_shape, k.input_shapes, k.is_trivial  # noqa: B018 - shared Kernel work
            gc.disable()  # as inside GnnCostModel.predict
            try:
                def phase(p: str, fn):
                    c = time.process_time()
                    out = fn()
                    us[name][p].append((time.process_time() - c) / len(ks) * 1e6)
                    return out
                phase("TilingInfo", lambda: [T.tiling_info(k, "tpu") for k in ks])
                phase("default tiles", lambda: T.default_tiles(ks, "tpu"))
                geo = phase("geometry rows", lambda: F.geometry_matrix(ks, "tpu"))
                arrays = phase("graph gathering", lambda: graph_arrays_many(F)(ks))
                phase("kernel rows", lambda: [F.kernel_graph(k, "tpu", geom=g, arrays=x)
                                              for k, g, x in zip(ks, geo, arrays)])
            finally:
                gc.enable()
    load.append(os.getloadavg()[0])
    res = {"program": Path(a.program).name, "kernels": len(kernels), "rounds": a.rounds, "baseline": a.baseline,
           "load_average_1min": [round(x, 2) for x in load],
           "us_per_kernel_min": {n: {p: float(min(v)) for p, v in d.items()} for n, d in us.items()},
           "us_per_kernel": {n: {p: [round(x, 1) for x in v] for p, v in d.items()} for n, d in us.items()}}
    lines = [f"{len(kernels):,} unique kernels of {res['program']}, CPU microseconds per kernel, minimum of {a.rounds} "
             f"interleaved rounds; load average (1 min) {res['load_average_1min'][0]} at the start, "
             f"{res['load_average_1min'][1]} at the end", "",
             "| featurizer | " + " | ".join(PHASES) + " | sum |", "|---|" + "---:|" * (len(PHASES) + 1)]
    for n, d in res["us_per_kernel_min"].items():
        lines.append(f"| {n} | " + " | ".join(f"{d[p]:.0f}" for p in PHASES) + f" | {sum(d.values()):.0f} |")
    emit_results("\n".join(lines), res, a.md, a.json_out)
    return res


if __name__ == "__main__":
    main()
