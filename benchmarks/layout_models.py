"""Learned layout models on held-out program families, and graph segment training's memory and time.

1. ranking: a layout dataset of examples/hlo (`autotune dataset build --task layout --evaluator sim`:
   per program the default layout, a neighbour walk and random configurations, each priced as the
   whole rewritten program on the simulator; programs split by model family), the layout GNN trained
   on the train split with ListMLE, the pairwise hinge loss and MSE (graphs pruned to the configurable
   nodes' `--hops`-hop neighbourhoods), the residual GNN (ListMLE on the analytical model's log ratio
   plus a learned correction), a GST run with `--segments` segments on the same data, the XGBoost
   baseline (costmodels.xgb_layout, rank:pairwise per program) and the analytical model (prices stored
   in the dataset): Kendall's tau per test program over its configurations (TpuGraphs' layout metric),
   mean and median, and the top-1 slowdown; per model the mean over `--seeds` and its spread.
   `--models` picks the models; `--from-json` merges the --json files of several runs into one table.
2. gst: training memory and time on the dataset's largest program (whole graph, no pruning) without
   and with `--segments` segments: each in a fresh process, the same number of steps; the peak RSS
   during training (VmHWM reset just before it) minus the RSS before it, and the seconds per step; the
   trained model's Kendall tau on the program's configurations.

    python -m benchmarks.layout_models [--data DIR] [--configs 40] [--epochs 20] [--hops 1] [--segments 8]
                                       [--seeds 0,1,2] [--models gnn-residual-listmle,xgboost,...]
                                       [--md benchmarks/results/layout_models.md] [--json FILE] [--from-json A,B]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

import numpy as np

from autotune.tuning.dataset import Dataset, add_layout_analytical_terms, build_dataset
from autotune.tuning.evaluation import evaluate_models
from costmodels.gnn.layout import LayoutGnnModel
from costmodels.xgb_layout import LayoutXgbModel

ROOT = Path(__file__).resolve().parent.parent

LOSSES = {"listmle": dict(loss="rank", rank_loss="listmle"), "rank": dict(loss="rank", rank_loss="hinge"),
          "mse": dict(loss="mse")}


def dataset(path: Path, configs: int) -> Dataset:
    """The layout dataset at `path`, built from examples/hlo when it has none."""
    if (path / "manifest.json").is_file():
        ds = Dataset.open(path)
        added = add_layout_analytical_terms(ds)   # a dataset built before the analytical terms were stored
        if added:
            print(f"dataset {path}: analytical terms added to {added} programs", file=sys.stderr)
        return ds
    t0 = time.monotonic()
    ds = build_dataset(ROOT / "examples" / "hlo", "layout", "sim", configs_per_program=configs, out_dir=path)
    print(f"dataset {path}: {len(ds.programs)} programs ({time.monotonic() - t0:.0f} s)", file=sys.stderr)
    return ds


# model name -> (loss, residual over the analytical model, GST); "xgboost" is the XGBoost baseline
MODELS = {"gnn-residual-listmle": ("listmle", True, False), "gnn-listmle": ("listmle", False, False),
          "gnn-rank": ("rank", False, False), "gnn-mse": ("mse", False, False),
          "gnn-listmle-gst": ("listmle", False, True), "xgboost": None}


def ranking(ds: Dataset, epochs: int, hops: int, segments: int, seeds: list, hidden: int, names: list,
            saved: Optional[dict] = None) -> dict:
    """Train `names` x `seeds` (and take the `saved` {label: model file} as they are); Kendall tau on the test split."""
    from autotune.api import load_model_file
    models, train_s = {"analytical": "analytical"}, {}
    for label, path in (saved or {}).items():
        models[label] = load_model_file(path, "layout", ds.target)
    for name in names:
        for seed in seeds:
            label = name.replace("-gst", f"-gst{segments}") + f"-s{seed}"
            t0 = time.monotonic()
            if MODELS[name] is None:
                m = LayoutXgbModel(seed=seed, nthread=1).fit(ds)
                note = f"{m.best_iteration_} rounds"
            else:
                loss, residual, gst_on = MODELS[name]
                m = LayoutGnnModel(hops=hops, segments=segments if gst_on else 1, residual=residual, seed=seed,
                                   hidden=hidden, layers=3, **LOSSES[loss])
                m.fit(ds, epochs=epochs, configs_per_step=16, lr=1e-3, seed=seed, patience=6)
                note = f"best epoch {m.history[-1]['best_epoch']}"
            train_s[label] = time.monotonic() - t0
            print(f"{label}: trained in {train_s[label]:.0f} s ({note})", file=sys.stderr)
            models[label] = m
    res = evaluate_models(models, ds, "test")
    return {"summary": res["summary"], "median": res["median"], "programs": res["programs"], "train_s": train_s,
            "test_programs": ds.programs_in("test"), "train_programs": ds.programs_in("train"),
            "validation_programs": ds.programs_in("validation")}


def _proc_status_kb(key: str) -> int:
    """A /proc/self/status memory value (kB): VmRSS now, VmHWM the peak since the last reset."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise SystemExit(f"no {key} in /proc/self/status (the GST memory measurement needs Linux)")


def _reset_peak_rss() -> None:
    """Reset VmHWM to the current RSS (Linux clear_refs 5), so the peak is the training's own."""
    Path("/proc/self/clear_refs").write_text("5")


def gst_child(data: str, program: str, segments: int, steps: int, hidden: int) -> dict:
    """One training run on one program (whole graph) in this process: time, memory, tau."""
    from costmodels.gnn.train import fit_layout_gnn
    from costmodels.metrics import kendall
    ds = Dataset.open(data)
    rec = ds.load_layout(program)
    m = LayoutGnnModel(segments=segments, seed=0, hidden=hidden, layers=3, loss="rank", rank_loss="listmle")
    g = m.prepare(program, ds.programs[program]["family"], rec.arrays)
    import torch
    torch.set_num_threads(1)
    from costmodels.features import FeatureScaler
    m.scaler_ = FeatureScaler().fit([g.raw])
    # warm-up (torch's first-use costs are not training's): one step of a throwaway model on 64 tiny segments
    warm = LayoutGnnModel(segments=64, seed=0, hidden=hidden, layers=3, loss="rank", rank_loss="listmle")
    fit_layout_gnn(warm, [warm.prepare(program, "warm-up", rec.arrays)], None, epochs=1, steps_per_epoch=1,
                   configs_per_step=2)
    rss0 = _proc_status_kb("VmRSS")
    _reset_peak_rss()
    t0 = time.monotonic()
    fit_layout_gnn(m, [g], None, epochs=1, steps_per_epoch=steps, configs_per_step=16, lr=1e-3)
    dt = time.monotonic() - t0
    rss1 = _proc_status_kb("VmHWM")
    return {"program": program, "nodes": g.num_nodes, "configs": g.num_configs, "segments": len(g.bounds),
            "steps": steps, "seconds": dt, "seconds_per_step": dt / steps, "peak_rss_mb": rss1 / 1024,
            "rss_before_mb": rss0 / 1024, "training_mb": (rss1 - rss0) / 1024,
            "kendall_own_configs": kendall(m.scores(g), g.runtime)}


def gst(ds: Dataset, segments: int, steps: int, hidden: int) -> list:
    sizes = {p: int(ds.load_layout(p).node_feat.shape[0]) for p in ds.programs}
    largest = max(sizes, key=sizes.get)
    out = []
    for k in (1, segments):
        cmd = [sys.executable, "-m", "benchmarks.layout_models", "--gst-child", "--data", str(ds.root), "--program", largest,
               "--segments", str(k), "--steps", str(steps), "--hidden", str(hidden)]
        r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=dict(os.environ, OMP_NUM_THREADS="1"))
        if r.returncode:
            raise SystemExit(f"gst child failed: {r.stderr.strip().splitlines()[-1] if r.stderr else r.returncode}")
        out.append(json.loads(r.stdout.strip().splitlines()[-1]))
        print(f"gst segments={k}: {out[-1]}", file=sys.stderr)
    return out


def merge(results: list) -> dict:
    """One ranking result from several runs' (--json) ranking parts (the same dataset and split)."""
    out = {"summary": {}, "median": {}, "programs": {}, "train_s": {}, "test_programs": []}
    for r in results:
        for key in ("summary", "median", "train_s"):
            out[key].update(r[key])
        for p, row in r["programs"].items():
            out["programs"].setdefault(p, {}).update(row)
        out["test_programs"] = r["test_programs"] or out["test_programs"]
    return out


def by_model(rank: dict) -> dict:
    """{model: {seed label: summary}} of a ranking result, seeds grouped (labels end in -sN)."""
    groups: dict = {}
    for label, s in rank["summary"].items():
        base = label.rsplit("-s", 1)[0] if "-s" in label and label.rsplit("-s", 1)[1].isdigit() else label
        groups.setdefault(base, {})[label] = s
    return groups


def markdown(rank: dict, gst_rows: list, args: argparse.Namespace) -> str:
    lines = ["# Layout models (benchmarks/layout_models.py)", "",
             (f"merged runs: `python -m benchmarks.layout_models --from-json {args.from_json}`" if args.from_json else
              f"`python -m benchmarks.layout_models --configs {args.configs} --epochs {args.epochs} --hops {args.hops} "
              f"--segments {args.segments} --seeds {args.seeds} --models {args.models}`"), "",
             f"test programs (held-out families): {', '.join(rank['test_programs'])}", "",
             "| model | seeds | Kendall tau mean per seed | mean over seeds | spread (max - min) | median tau (mean) | "
             "top-1 slowdown (mean) | train s (mean) |", "|---|---:|---|---:|---:|---:|---:|---:|"]
    for base, runs in by_model(rank).items():
        taus = np.array([s["kendall"] for s in runs.values()])
        med = np.mean([rank["median"][label]["kendall"] for label in runs])
        top1 = np.mean([s["top1"] for s in runs.values()])
        secs = np.mean([rank["train_s"].get(label, 0.0) for label in runs])
        lines.append(f"| {base} | {len(runs)} | {' / '.join(f'{t:.3f}' for t in taus)} | {taus.mean():.3f} | "
                     f"{taus.max() - taus.min():.3f} | {med:.3f} | {100 * top1:.1f}% | {f'{secs:.0f}' if secs else '-'} |")
    lines += ["", "| program | " + " | ".join(rank["summary"]) + " |", "|---|" + "---:|" * len(rank["summary"])]
    for p, row in sorted(rank["programs"].items()):
        lines.append(f"| {p} | " + " | ".join(f"{row[m]['kendall']:.3f}" for m in rank["summary"]) + " |")
    if gst_rows:
        lines += ["", "| GST on the largest program | nodes | segments | steps | s/step | peak RSS MB | "
                  "training MB (peak - before) | tau on its configs |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for r in gst_rows:
            lines.append(f"| {r['program']} | {r['nodes']} | {r['segments']} | {r['steps']} | {r['seconds_per_step']:.2f} | "
                         f"{r['peak_rss_mb']:.0f} | {r['training_mb']:.0f} | {r['kendall_own_configs']:.3f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default="/tmp/autotune_layout_ds", help="layout dataset directory (built if missing)")
    ap.add_argument("--configs", type=int, default=40, help="configurations per program when building")
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--hops", type=int, default=1)
    ap.add_argument("--segments", type=int, default=8)
    ap.add_argument("--seeds", default="0", help="comma-separated seeds (e.g. 0,1,2; empty: none)")
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--steps", type=int, default=20, help="GST: training steps on the largest program")
    ap.add_argument("--models", default=",".join(MODELS),
                    help=f"comma-separated models to train and rank ({', '.join(MODELS)})")
    ap.add_argument("--saved", action="append", default=[], metavar="LABEL=FILE",
                    help="also rank a saved layout model file (e.g. the shipped one) as LABEL (repeatable)")
    ap.add_argument("--from-json", default=None,
                    help="comma-separated --json files of earlier runs: merge their results into one table, train nothing")
    ap.add_argument("--skip-ranking", action="store_true")
    ap.add_argument("--skip-gst", action="store_true")
    ap.add_argument("--md", default=None)
    ap.add_argument("--json", default=None)
    ap.add_argument("--gst-child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--program", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.gst_child:
        print(json.dumps(gst_child(args.data, args.program, args.segments, args.steps, args.hidden)))
        return
    if args.from_json:
        docs = [json.loads(Path(p).read_text()) for p in args.from_json.split(",")]
        rank = merge([d["ranking"] for d in docs if d.get("ranking")])
        gst_rows = [row for d in docs for row in d.get("gst", [])]
    else:
        import torch
        torch.set_num_threads(1)
        ds = dataset(Path(args.data), args.configs)
        seeds = [int(s) for s in str(args.seeds).split(",") if s.strip()]
        names = [n.strip() for n in args.models.split(",") if n.strip()]
        unknown = [n for n in names if n not in MODELS]
        if unknown:
            raise SystemExit(f"--models: unknown model {unknown[0]!r} (known: {', '.join(MODELS)})")
        saved = dict(item.split("=", 1) for item in args.saved)
        rank = ranking(ds, args.epochs, args.hops, args.segments, seeds, args.hidden, names, saved) \
            if not args.skip_ranking else None
        gst_rows = gst(ds, args.segments, args.steps, args.hidden) if not args.skip_gst else []
    if rank is None:
        rank = {"summary": {}, "median": {}, "programs": {}, "train_s": {}, "test_programs": []}
    md = markdown(rank, gst_rows, args)
    print(md)
    if args.md:
        Path(args.md).write_text(md)
    if args.json:
        Path(args.json).write_text(json.dumps({"ranking": rank, "gst": gst_rows}, indent=1, default=float))


if __name__ == "__main__":
    main()
