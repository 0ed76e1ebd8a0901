"""Pricing speed of a learned cost model on a large program: kernels/s cold and warm, this tree's
featurizer against a baseline revision's, side by side in one process (issue 21).

    python -m benchmarks.pricing_speed [--program examples/scale/transformer_L48.hlo] [--random 20]
        [--walk 200] [--rounds 3] [--baseline ce12e2a] [--model costmodels/shipped/gnn_fusion_tpu.pt]
        [--search 60] [--phases] [--md out.md] [--json out.json]

Kernels: the unique kernels of the program's default configuration, `--random` random configurations
and a `--walk`-step neighbor walk from the default (the configurations a search visits).
* cold: every featurization cache emptied (kernel graphs, per-program instruction tables, tiling
  infos, default tiles, the model's scaled-feature cache) and fresh Kernel objects: the first time
  a program's kernels are seen; kernels/s of `model.predict(kernels)`.
* warm: the same kernels again (graphs cached by canonical hash): the network's speed.
Cold rates are given per second of wall clock, per second of CPU time (this process's and its
featurization worker's: less affected by other jobs on a shared machine) and per CPU second of
the busiest thread or process (the calling thread, any other thread of this process, the
featurization worker): what unshared cores deliver at best. Paths: "new" is `model.predict` with
`featurize_workers = True` (at least WORKER_MIN_NEW uncached kernels: featurized on a forked worker
process as well, costmodels/feature_worker.py; as shipped, "auto", only when the load average leaves
a core free), "serial" the same on one thread of one process.
The baseline is costmodels/features and autotune/compiler/tiles (modules, or packages since their
split) of `--baseline` (a git revision), loaded as private modules; the same model prices its
graphs. Rounds alternate which path goes first; the table reports medians and the new/old ratio of
each round's rates, and checks that both paths give bit-identical feature arrays and predictions. A
baseline whose featurizer no longer runs against this tree's compiler modules (ce12e2a predates the
TileRows / Target API) is skipped with one warning line, recorded as `baseline_error`.
`--search S` also runs `autotune fusion PROG --budget S --hw-budget 0 --store none` with the
default model and with `--cost-model analytical` (this tree, subprocesses) and reports
configurations evaluated per second of each and their ratio.
"""
from __future__ import annotations

import argparse
import atexit
import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any, Optional

import numpy as np

from benchmarks.tables import emit_results

ROOT = Path(__file__).resolve().parents[1]


def load_baseline(rev: str) -> tuple:
    """(features, tiles) modules of a git revision, the features module bound to that tiles module: the modules
    autotune/compiler/tiles.py and costmodels/features.py, or since their split the packages of those names
    (imported from a temporary copy, every `autotune.compiler.tiles` / `costmodels.features` renamed)."""
    mods = []
    for path, name in (("autotune/compiler/tiles", "_baseline_tiles"), ("costmodels/features", "_baseline_features")):
        package = _package_sources(rev, path)
        if package is not None:
            copy = Path(tempfile.mkdtemp(prefix="pricing_baseline_"))
            atexit.register(shutil.rmtree, copy, True)
            (copy / name).mkdir()
            for file, src in package.items():
                src = src.replace("autotune.compiler.tiles", "_baseline_tiles")
                (copy / name / file).write_text(src.replace("costmodels.features", "_baseline_features"))
            init = copy / name / "__init__.py"
            if not init.exists():
                init.write_text("")
            for loaded in [m for m in sys.modules if m == name or m.startswith(name + ".")]:  # a baseline loaded before
                del sys.modules[loaded]
            # the package's submodules are found through its __path__ (the copy), not through the import path
            spec = importlib.util.spec_from_file_location(name, init, submodule_search_locations=[str(copy / name)])
            mod = importlib.util.module_from_spec(spec)
            sys.modules[name] = mod
            spec.loader.exec_module(mod)
            mods.append(mod)
            continue
        path += ".py"
        if Path(rev).is_dir():  # the two files exported from a revision (a machine without the git history)
            src = (Path(rev) / path).read_text()
        else:
            src = subprocess.run(["git", "show", f"{rev}:{path}"], cwd=ROOT, check=True, capture_output=True,
                                 text=True).stdout
        src = src.replace("autotune.compiler.tiles", "_baseline_tiles")
        mod = ModuleType(name)
        mod.__file__ = f"{rev}:{path}"
        sys.modules[name] = mod
        exec(compile(src, mod.__file__, "exec"), mod.__dict__)
        mods.append(mod)
    return mods[1], mods[0]


def _package_sources(rev: str, path: str) -> Optional[dict]:
    """{file name: source} of the package `path` at `rev` (a git revision, or a directory exported from one);
    None where `rev` has the module `path`.py instead (before the split into packages)."""
    if Path(rev).is_dir():
        files = sorted((Path(rev) / path).glob("*.py"))
        return {f.name: f.read_text() for f in files} if files else None
    listed = subprocess.run(["git", "ls-tree", "--name-only", f"{rev}:{path}"], cwd=ROOT, capture_output=True,
                            text=True)
    if listed.returncode != 0:  # no such directory at rev
        return None
    return {n: subprocess.run(["git", "show", f"{rev}:{path}/{n}"], cwd=ROOT, check=True, capture_output=True,
                              text=True).stdout for n in listed.stdout.split() if n.endswith(".py")}


def graph_arrays_many(features: ModuleType) -> Any:
    """The featurizer's batched graph gathering: `costmodels.features.tables.graph_arrays_many` of this tree; of a
    baseline revision, the same function under the private name it had before it was public
    (`_graph_arrays_many`, in costmodels/features/tables.py since the split into a package, in the module
    costmodels/features.py before)."""
    for module in (sys.modules.get(features.__name__ + ".tables"), features):
        for name in ("graph_arrays_many", "_graph_arrays_many"):
            fn = getattr(module, name, None)
            if fn is not None:
                return fn
    raise AttributeError(f"{features.__name__} has no batched graph gathering")


def collect_kernels(program: str, n_random: int, walk: int, seed: int) -> tuple:
    """(space, unique non-trivial kernels) of the default, random and neighbor-walk configurations."""
    from autotune.compiler.fusion import FusionSpace
    from autotune.compiler.program import Program
    space = FusionSpace(Program.from_file(program), "tpu")
    rng = np.random.default_rng(seed)
    cfgs = [space.default()] + [space.random(rng) for _ in range(n_random)]
    cur = cfgs[0]
    for _ in range(walk):
        cur = space.neighbor(cur, rng)
        cfgs.append(cur)
    kernels: dict = {}
    for c in cfgs:
        for k in space.kernels(c):
            if not k.is_trivial:
                kernels.setdefault(k.hash, k)
    return space, list(kernels.values())


def fresh(kernels: list) -> list:
    """New Kernel objects for the same kernels (their cached inputs and costs dropped)."""
    from autotune.compiler.emission import Kernel
    return [Kernel(k.space, k.comp, k.root, k.members, k.hash) for k in kernels]


def clear_caches(features: Any, tiles: Any, model: Any) -> None:
    """Empty every featurization cache (kernel graphs, per-program tables, tiling infos, default tiles, the model's
    scaled features): this tree's through its public functions; a baseline revision's as far as its code allows
    (revisions older than `clear_caches` kept their caches in private module dicts, emptied by name here)."""
    features.clear_cache()
    if hasattr(tiles, "clear_caches"):  # every tiling cache, the shared pieces included
        tiles.clear_caches()
    if features.__name__.startswith("_baseline"):
        for module, names in ((features, ("_PROGRAM_TABLES", "_GRAPH_CACHE")), (tiles, ("_INFO_CACHE", "_DEFAULT_TILES"))):
            for name in names:
                getattr(module, name, {}).clear()
    model.clear_prepared_cache()


def phase_breakdown(kernels: list, model: Any, rounds: int = 2) -> dict:
    """CPU microseconds per kernel of each phase of cold pricing with this tree's featurizer (caches
    emptied, fresh kernels), each phase timed alone in order; the median over `rounds`."""
    from autotune.compiler import tiles
    from costmodels import features
    out: dict = {}
    for _ in range(rounds):
        clear_caches(features, tiles, model)
        ks = fresh(kernels)

        def phase(name: str, fn: Any) -> Any:
            c = time.process_time()
            r = fn()
            out.setdefault(name, []).append((time.process_time() - c) / len(ks) * 1e6)
            return r
        phase("kernel inputs, cost, shapes", lambda: [(k.inputs, k.cost, k.output_shape, k.input_shapes,
                                                       k.fusion_kind, k.is_trivial) for k in ks])
        phase("TilingInfo", lambda: [tiles.tiling_info(k, "tpu") for k in ks])
        phase("default tiles", lambda: tiles.default_tiles(ks, "tpu"))
        geo = phase("geometry rows", lambda: features.geometry_matrix(ks, "tpu"))
        arrays = phase("graph gathering", lambda: graph_arrays_many(features)(ks))
        graphs = phase("kernel graphs (kernel rows)", lambda: [features.kernel_graph(k, "tpu", geom=g, arrays=a)
                                                               for k, g, a in zip(ks, geo, arrays)])
        preps = phase("scaling", lambda: model.prepare_graphs(graphs))
        phase("network", lambda: model.forward_prepared(preps, np.zeros((len(graphs), features.TILE_DIM), np.float32)))
    return {k: float(np.median(v)) for k, v in out.items()}


def run_search(program: str, seconds: int, cost_model: Optional[str]) -> dict:
    """One `autotune fusion` run of this tree: configurations evaluated and wall time."""
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, "-m", "autotune.cli", "fusion", program, "--budget", f"{seconds}s", "--hw-budget", "0",
               "--store", "none", "--out", out] + (["--cost-model", cost_model] if cost_model else [])
        t0 = time.perf_counter()
        p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if p.returncode != 0:
            raise SystemExit(f"pricing_speed: {' '.join(cmd)} failed (exit {p.returncode}): {p.stderr.strip()[-300:]}")
        evals = None
        rep = Path(out) / "report.json"
        if rep.exists():
            evals = json.loads(rep.read_text()).get("evaluations")
        if evals is None:
            m = re.search(r"([\d,]+)\s+(?:configurations|evaluations)", p.stdout + p.stderr)
            evals = int(m.group(1).replace(",", "")) if m else None
    return {"model": cost_model or "default", "evaluations": evals, "wall_s": wall,
            "configs_per_s": (evals / wall) if evals else None}


def main(argv: Optional[list] = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--program", default=str(ROOT / "examples/scale/transformer_L48.hlo"))
    ap.add_argument("--random", type=int, default=20, help="random configurations")
    ap.add_argument("--walk", type=int, default=200, help="neighbor-walk steps from the default configuration")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--baseline", default="ce12e2a", help="git revision of the old featurizer, or a directory with its "
                    "autotune/compiler/tiles and costmodels/features (none: skip)")
    ap.add_argument("--model", default=str(ROOT / "costmodels/shipped/gnn_fusion_tpu.pt"))
    ap.add_argument("--search", type=int, default=0, help="also time `autotune fusion --budget S` (seconds)")
    ap.add_argument("--phases", action="store_true", help="also time each phase of cold pricing (CPU time)")
    ap.add_argument("--md", default=None, help="write a markdown table here")
    ap.add_argument("--json", dest="json_out", default=None)
    a = ap.parse_args(argv)

    import torch
    torch.set_num_threads(1)
    from autotune.compiler import tiles as new_tiles
    from costmodels import feature_worker
    from costmodels import features as new_features
    from costmodels.gnn import GnnCostModel

    load_before = os.getloadavg()[0]
    t0 = time.perf_counter()
    space, kernels = collect_kernels(a.program, a.random, a.walk, a.seed)
    nodes = sum(len(k.members) for k in kernels)
    print(f"{len(kernels)} unique kernels ({nodes / max(len(kernels), 1):.1f} members mean) of "
          f"{Path(a.program).name}, collected in {time.perf_counter() - t0:.1f} s")
    model = GnnCostModel.load(a.model)
    paths: dict = {"new": (new_features, new_tiles), "serial": (new_features, new_tiles)}
    if a.baseline.lower() != "none":
        paths["old"] = load_baseline(a.baseline)

    def price(name: str, ks: list) -> np.ndarray:
        feats = paths[name][0]
        if name == "new":  # the featurization worker process whatever the load (the shipped "auto" needs a free core)
            model.featurize_workers = True
            try:
                return model.predict(ks)
            finally:
                model.featurize_workers = "auto"
        if name == "serial":  # this tree on one thread of one process: the network after the featurization
            chunk, model.PIPELINE_CHUNK, model.featurize_workers = model.PIPELINE_CHUNK, 10 ** 9, False
            try:
                return model.predict(ks)
            finally:
                model.PIPELINE_CHUNK, model.featurize_workers = chunk, "auto"
        return model.predict_graphs(feats.kernel_graphs(ks, model.target))  # what predict did at the baseline

    space.node_costs  # per-program static costs: part of the fusion space, not of featurization
    baseline_error = None
    for name in list(paths):  # warm-up (imports, torch, memoized layouts), untimed
        try:
            price(name, fresh(kernels[:64]))
        except Exception as e:  # noqa: BLE001 - a baseline written against older compiler modules
            if name != "old":
                raise
            baseline_error = f"{type(e).__name__}: {e}"
            print(f"pricing_speed: warning: baseline {a.baseline}'s featurizer does not run against this tree's "
                  f"compiler modules ({baseline_error}); timing this tree only", file=sys.stderr)
            del paths["old"]
    rates: dict = {n: {"cold": [], "cold_cpu": [], "cold_busiest_thread": [], "warm": []} for n in paths}
    preds: dict = {}
    for r in range(a.rounds):
        order = list(paths) if r % 2 == 0 else list(reversed(paths))
        for name in order:
            for feats, tl in paths.values():  # the baseline's analytical model fills this tree's caches too
                clear_caches(feats, tl, model)
            ks = fresh(kernels)
            feature_worker.WorkerStats.worker_cpu_s = 0.0
            t, c, tc = time.perf_counter(), time.process_time(), time.thread_time()
            y = price(name, ks)
            wall, cpu, main_cpu = time.perf_counter() - t, time.process_time() - c, time.thread_time() - tc
            worker_cpu = feature_worker.WorkerStats.worker_cpu_s  # the featurization worker process's chunks
            rates[name]["cold"].append(len(ks) / wall)
            rates[name]["cold_cpu"].append(len(ks) / (cpu + worker_cpu))
            # two unshared cores run the threads / processes side by side: the busiest one bounds the rate
            rates[name]["cold_busiest_thread"].append(len(ks) / max(main_cpu, cpu - main_cpu, worker_cpu))
            t = time.perf_counter()
            price(name, ks)
            rates[name]["warm"].append(len(ks) / (time.perf_counter() - t))
            preds[name] = y
            print(f"round {r + 1} {name}: cold {rates[name]['cold'][-1]:8,.0f} kernels/s "
                  f"({rates[name]['cold_cpu'][-1]:,.0f}/s of CPU time, "
                  f"{rates[name]['cold_busiest_thread'][-1]:,.0f}/s of the busiest thread's or process's), "
                  f"warm {rates[name]['warm'][-1]:8,.0f} kernels/s", flush=True)
    res: dict = {"program": Path(a.program).name, "kernels": len(kernels), "rounds": a.rounds,
                 "baseline": a.baseline, "python": platform.python_version(), "torch": torch.__version__,
                 "torch_threads": 1, "load_average_1min": [round(load_before, 2), round(os.getloadavg()[0], 2)],
                 "rates": {n: {k: float(np.median(v)) for k, v in d.items()} for n, d in rates.items()}}
    if baseline_error:
        res["baseline_error"] = baseline_error
    if "old" in paths:
        res["ratio"] = {k: float(np.median(np.array(rates["new"][k]) / np.array(rates["old"][k])))
                        for k in ("cold", "cold_cpu", "cold_busiest_thread", "warm")}
        res["ratio_serial"] = {k: float(np.median(np.array(rates["serial"][k]) / np.array(rates["old"][k])))
                               for k in ("cold", "cold_cpu", "cold_busiest_thread", "warm")}
        go, gn = paths["old"][0].kernel_graphs(kernels, "tpu"), new_features.kernel_graphs(kernels, "tpu")
        same = all(np.array_equal(x.node_feat, y.node_feat) and np.array_equal(x.edge_index, y.edge_index)
                   and np.array_equal(x.opcode, y.opcode) and np.array_equal(x.kernel_feat, y.kernel_feat)
                   and np.array_equal(x.geom_feat, y.geom_feat) and x.tiled_dims == y.tiled_dims for x, y in zip(go, gn))
        res["features_identical"] = bool(same)
        res["predictions_identical"] = bool(np.array_equal(preds["old"], preds["new"]))
        res["predictions_max_rel_diff"] = float(np.max(np.abs(preds["old"] - preds["new"]) / np.abs(preds["old"])))
    res["pipelined_identical_to_serial"] = bool(np.array_equal(preds["new"], preds["serial"]))
    if "old" in paths:
        res["serial_predictions_identical"] = bool(np.array_equal(preds["old"], preds["serial"]))
    if a.phases:
        res["phases_us_per_kernel"] = phase_breakdown(kernels, model)
    if a.search:
        runs = [run_search(a.program, a.search, None), run_search(a.program, a.search, "analytical")]
        res["search"] = runs
        if runs[0]["configs_per_s"] and runs[1]["configs_per_s"]:
            res["search_ratio"] = runs[0]["configs_per_s"] / runs[1]["configs_per_s"]
    emit_results(render_md(res), res, a.md, a.json_out)
    return res


def render_md(res: dict) -> str:
    lines = [f"{res['kernels']:,} unique kernels of {res['program']}, shipped fusion GNN, 1 torch thread, "
             f"median of {res['rounds']} interleaved rounds; load average (1 min) {res['load_average_1min'][0]} at the "
             f"start, {res['load_average_1min'][1]} at the end",
             "", "| path | cold kernels/s | cold kernels per CPU second | cold kernels per CPU second of the busiest thread or process "
                 "| warm kernels/s |", "|---|---:|---:|---:|---:|"]
    labels = {"old": f"baseline {res['baseline']}", "new": "this tree, featurization worker process",
              "serial": "this tree, one process, one thread"}
    for name, r in res["rates"].items():
        lines.append(f"| {labels[name]} | {r['cold']:,.0f} | {r['cold_cpu']:,.0f} | {r['cold_busiest_thread']:,.0f} "
                     f"| {r['warm']:,.0f} |")
    if "baseline_error" in res:
        lines += ["", f"baseline {res['baseline']} skipped: {res['baseline_error']}"]
    if "ratio" in res:
        lines.append(f"| ratio this tree / baseline (per round, median) | x{res['ratio']['cold']:.2f} | "
                     f"x{res['ratio']['cold_cpu']:.2f} | x{res['ratio']['cold_busiest_thread']:.2f} | "
                     f"x{res['ratio']['warm']:.2f} |")
        if "ratio_serial" in res:
            rs = res["ratio_serial"]
            lines.append(f"| ratio one process / baseline (per round, median) | x{rs['cold']:.2f} | "
                         f"x{rs['cold_cpu']:.2f} | x{rs['cold_busiest_thread']:.2f} | x{rs['warm']:.2f} |")
        lines += ["", f"feature arrays identical: {res['features_identical']}; predictions identical: "
                      f"{res['predictions_identical']} (max relative difference {res['predictions_max_rel_diff']:.2e})"]
    lines += ["", f"two-process predictions bit-identical to one process's: {res['pipelined_identical_to_serial']}"]
    if "serial_predictions_identical" in res:
        lines += [f"one-process predictions bit-identical to the baseline's: {res['serial_predictions_identical']}"]
    if "phases_us_per_kernel" in res:
        ph = res["phases_us_per_kernel"]
        lines += ["", "Cold pricing by phase (this tree, CPU microseconds per kernel, each phase timed alone):", "",
                  "| " + " | ".join(ph) + " | sum |", "|" + "---:|" * (len(ph) + 1),
                  "| " + " | ".join(f"{v:.0f}" for v in ph.values()) + f" | {sum(ph.values()):.0f} |"]
    if "search" in res:
        lines += ["", "| `autotune fusion` | configurations | wall s | configurations/s |", "|---|---:|---:|---:|"]
        for s in res["search"]:
            cps = f"{s['configs_per_s']:,.1f}" if s["configs_per_s"] else "-"
            lines.append(f"| {s['model']} | {s['evaluations'] or '-'} | {s['wall_s']:.1f} | {cps} |")
        if "search_ratio" in res:
            lines.append(f"\ndefault / analytical configurations per second: {res['search_ratio']:.2f}")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
