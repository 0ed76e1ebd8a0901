"""Command-line commands for learned cost models: `dataset build`, `train`, `evaluate`.

They are plain click commands (not attached to a group here); autotune/cli/app.py attaches them to the
`autotune` group:

    autotune dataset build --programs DIR --task fusion|tile --evaluator sim|xla [--target T]
                           [--configs-per-program N] [--split-file F] --out DIR
    autotune train --model gnn|xgboost --task fusion|tile --data DIR --out MODEL [--seed S]
                   [--n-estimators N] [--max-depth D] [--min-runtime-us U] [--threads T]  (XGBoost)
                   [--epochs N] [--reduction node|column|lstm|transformer] [--encoder sage|gat|none]
                   [--loss rank|mse] [--no-static-features] [--edge-direction both|in|out]
                   [--no-kernel-features] [--geometry-features] [--hidden H] [--layers K] [--batch-size B] [--lr LR]
    autotune evaluate --model M [--model M2 ...] --data DIR [--split test|validation|train|all] [--json]

In `evaluate`, M is "analytical" (the predictions stored in the dataset; on the fusion task scaled per
kernel kind by factors fitted on the train split, as the paper's baseline; "analytical-raw" unscaled),
"gnn" or "xgboost" (a fresh
model with default settings trained on the dataset's train split), or a saved model file. Errors are
one line on stderr with exit status 2.
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any, Optional, Sequence

import click
import numpy as np

from autotune.cli.errors import UserError, friendly

__all__ = ["dataset", "build", "train", "evaluate", "LearnError", "load_model_file", "evaluate_models"]


# One error type and one wrapper for every command (autotune/cli/errors.py).
LearnError = UserError
_friendly = friendly


# --------------------------------------------------------------------------------------------------
@click.group("dataset")
def dataset() -> None:
    """Generate and inspect training datasets for learned cost models."""


@dataset.command("build")
@click.option("--programs", "programs_dir", required=True, type=click.Path(exists=True),
              help="Directory of .hlo programs (or one .hlo file).")
@click.option("--task", type=click.Choice(["fusion", "tile"]), required=True)
@click.option("--evaluator", type=click.Choice(["sim", "xla"]), default="sim", show_default=True)
@click.option("--target", default="tpu", show_default=True)
@click.option("--configs-per-program", type=click.IntRange(1, 100000), default=8, show_default=True,
              help="Fusion configurations sampled per program (tile task: at most 4 are used).")
@click.option("--max-tiles", type=click.IntRange(1, 100000), default=64, show_default=True,
              help="Tile task: at most this many tiles per kernel (random subset + the default).")
@click.option("--split-file", type=click.Path(exists=True, dir_okay=False), default=None,
              help='JSON {"train": [...], "validation": [...], "test": [...]} of program names.')
@click.option("--program", "only", multiple=True, help="Only these programs (names; repeatable).")
@click.option("--store", default=None, help="Measurement store path ('none' for memory); default: the "
              "default store for xla, none for sim.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False))
@_friendly
def build(programs_dir: str, task: str, evaluator: str, target: str, configs_per_program: int, max_tiles: int,
          split_file: Optional[str], only: Sequence[str], store: Optional[str], seed: int, out_dir: str) -> None:
    """Measure random fusion configurations' kernels (or every tile of kernels) into a dataset."""
    from autotune.tuning.dataset import build_dataset
    from autotune.tuning.store import open_store

    st = None
    if store is not None or evaluator == "xla":
        st = open_store(store)

    def log(name: str, rec: dict) -> None:
        click.echo(f"{name}: {rec['n_kernels']} kernels, {rec['n_samples']} samples "
                   f"({rec['n_failed']} failed) -> {rec['split']}", err=True)

    ds = build_dataset(programs_dir, task, evaluator, target, configs_per_program, out_dir, split_file, seed,
                       max_tiles_per_kernel=max_tiles, programs=list(only) or None, store=st,
                       progress=sys.stderr.isatty(), log=log)
    counts = {s: len(ds.programs_in(s)) for s in ("train", "validation", "test")}
    click.echo(f"wrote {out_dir}: {len(ds.programs)} programs ({counts['train']} train, {counts['validation']} "
               f"validation, {counts['test']} test), {len(ds)} samples")


# --------------------------------------------------------------------------------------------------
def _make_model(model: str, task: str, target: str, opts: dict) -> Any:
    if model == "gnn":
        from costmodels.gnn import GnnCostModel
        return GnnCostModel(task, target, reduction=opts.get("reduction"), encoder=opts.get("encoder"),
                            loss=opts.get("loss"), static_features=opts.get("static_features", True),
                            edge_direction=opts.get("edge_direction"), hidden=opts.get("hidden"),
                            layers=opts.get("layers"), seed=opts.get("seed", 0),
                            graph_features=opts.get("kernel_features", True),
                            geometry_features=opts.get("geometry_features", False))
    if model in ("xgboost", "xgb"):
        from costmodels.xgb import XgbCostModel
        kw = {k: opts[k] for k in ("max_depth", "nthread") if opts.get(k)}
        if opts.get("lr"):
            kw["learning_rate"] = opts["lr"]
        return XgbCostModel(task, target, seed=opts.get("seed", 0), static_features=opts.get("static_features", True),
                            n_estimators=opts.get("n_estimators") or 300,
                            min_runtime_s=(opts.get("min_runtime_us") or 0.0) * 1e-6, **kw)
    raise ValueError(f"unknown model {model!r} (use gnn or xgboost)")


def _fit(m: Any, ds: Any, opts: dict) -> None:
    from costmodels.gnn import GnnCostModel
    if isinstance(m, GnnCostModel):
        m.fit(ds, epochs=opts.get("epochs") or 20, batch_size=opts.get("batch_size") or 64,
              lr=opts.get("lr") or 1e-3, seed=opts.get("seed", 0), progress=sys.stderr.isatty())
    else:
        m.fit(ds)


@click.command("train")
@click.option("--model", type=click.Choice(["gnn", "xgboost"]), required=True)
@click.option("--task", type=click.Choice(["fusion", "tile"]), required=True)
@click.option("--data", "data_dir", required=True, type=click.Path(exists=True, file_okay=False))
@click.option("--out", "out_path", required=True, type=click.Path(dir_okay=False))
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--epochs", type=click.IntRange(1, 100000), default=None, help="GNN epochs (default 20).")
@click.option("--batch-size", type=click.IntRange(2, 100000), default=None)
@click.option("--lr", type=float, default=None, help="Learning rate (GNN default 1e-3, XGBoost eta default 0.1).")
@click.option("--hidden", type=click.IntRange(1, 4096), default=None)
@click.option("--layers", type=click.IntRange(0, 64), default=None)
@click.option("--reduction", type=click.Choice(["node", "per-node", "column", "lstm", "transformer"]), default=None)
@click.option("--encoder", type=click.Choice(["sage", "gat", "none"]), default=None)
@click.option("--loss", type=click.Choice(["rank", "mse"]), default=None,
              help="Default: rank for tiles, mse (log runtime) for fusion.")
@click.option("--no-static-features", is_flag=True, help="Drop the static performance features.")
@click.option("--edge-direction", type=click.Choice(["both", "in", "out"]), default=None)
@click.option("--no-kernel-features", is_flag=True,
              help="GNN: no kernel-level features joined before the head (graph information only).")
@click.option("--geometry-features", is_flag=True,
              help="GNN: join the kernel's default-tile geometry features (costmodels.features) before the head.")
@click.option("--n-estimators", type=click.IntRange(1, 100000), default=None, help="XGBoost rounds (default 300).")
@click.option("--max-depth", type=click.IntRange(1, 64), default=None, help="XGBoost tree depth (default 6).")
@click.option("--min-runtime-us", type=click.FloatRange(0.0), default=None,
              help="XGBoost, fusion: train (and early-stop) on kernels at least this slow (the paper's metric: 5).")
@click.option("--threads", type=click.IntRange(1, 4096), default=None, help="XGBoost threads (default: all cores).")
@_friendly
def train(model: str, task: str, data_dir: str, out_path: str, seed: int, epochs: Optional[int],
          batch_size: Optional[int], lr: Optional[float], hidden: Optional[int], layers: Optional[int],
          reduction: Optional[str], encoder: Optional[str], loss: Optional[str], no_static_features: bool,
          edge_direction: Optional[str], no_kernel_features: bool, geometry_features: bool, n_estimators: Optional[int],
          max_depth: Optional[int], min_runtime_us: Optional[float], threads: Optional[int]) -> None:
    """Train a GNN or XGBoost cost model on a dataset's train split (validation for model selection)."""
    from autotune.tuning.dataset import Dataset
    ds = Dataset.open(data_dir)
    if ds.task != task:
        raise LearnError(f"{data_dir} is a {ds.task} dataset, not {task}")
    opts = dict(seed=seed, epochs=epochs, batch_size=batch_size, lr=lr, hidden=hidden, layers=layers,
                reduction=reduction, encoder=encoder, loss=loss, static_features=not no_static_features,
                edge_direction=edge_direction, n_estimators=n_estimators, kernel_features=not no_kernel_features,
                max_depth=max_depth, min_runtime_us=min_runtime_us, nthread=threads, geometry_features=geometry_features)
    m = _make_model(model, task, ds.target, opts)
    _fit(m, ds, opts)
    m.save(out_path)
    extra = ""
    hist = getattr(m, "history", None)
    if hist and "best_epoch" in hist[-1]:
        extra = f" (best epoch {hist[-1]['best_epoch']}, validation {hist[-1]['best_val']:.4g})"
    click.echo(f"wrote {out_path}: {model} {task} model{extra}")


# --------------------------------------------------------------------------------------------------
def load_model_file(path: str, task: Optional[str] = None, target: Optional[str] = None) -> Any:
    """A saved GNN (torch) or XGBoost (JSON) cost model, by content."""
    from costmodels.gnn import GnnCostModel
    from costmodels.xgb import XgbCostModel
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"model file {path} does not exist")
    head = p.read_bytes()[:64].lstrip()
    loader = XgbCostModel.load if head.startswith(b"{") else GnnCostModel.load
    return loader(str(p), task=task, target=target)


def _nan_to_none(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _nan_to_none(v) for k, v in x.items()}
    return x


_KINDS = ("kLoop", "kInput", "kOutput")


def _graph_kind(g: Any) -> int:
    """Fusion kind index of a kernel graph (as the `tpu` rules: dot/conv kOutput, reduce kInput)."""
    from costmodels.features import OPCODE_INDEX
    ops = set(np.asarray(g.opcode).tolist())
    if ops & {OPCODE_INDEX.get("dot", -1), OPCODE_INDEX.get("convolution", -1)}:
        return 2
    if ops & {OPCODE_INDEX.get("reduce", -1), OPCODE_INDEX.get("reduce-window", -1)}:
        return 1
    return 0


def fit_analytical_scales(ds: Any, split: str = "train") -> dict:
    """Per-kind scales of the analytical model fitted on a split's measurements (least squares in
    log space, as the paper fits its analytical fusion baseline): {kind: scale}."""
    logs: dict = {k: [] for k in range(len(_KINDS))}
    for _, s in ds.iter_programs(split):
        if s.analytical is None:
            continue
        for i in range(len(s)):
            y, p = float(s.runtime[i]), float(s.analytical[i])
            if math.isfinite(y) and y > 0 and math.isfinite(p) and p > 0:
                logs[_graph_kind(s.graphs[int(s.graph[i])])].append(math.log(y) - math.log(p))
    return {_KINDS[k]: (math.exp(float(np.mean(v))) if v else 1.0) for k, v in logs.items()}


class FittedAnalytical:
    """The dataset's stored analytical predictions times per-kind scales fitted on the train split."""

    def __init__(self, scales: dict):
        self.scales = scales

    def apply(self, s: Any) -> np.ndarray:
        sc = np.array([self.scales[_KINDS[_graph_kind(s.graphs[int(g)])]] for g in s.graph])
        return np.asarray(s.analytical, float) * sc


def evaluate_models(models: dict, ds: Any, split: str = "test") -> dict:
    """{"programs": {name: {model: {metric: value}}}, "summary": {model: {metric: mean}},
    "median": {model: {metric: median}}, "pooled": {model: {metric: value over every kernel of the
    split at once}} (fusion task, absolute predictions)}; `models` maps a label to a model or "analytical"."""
    from costmodels.metrics import fusion_metrics, tile_metrics
    names = ds.programs_in(split)
    if not names:
        raise ValueError(f"dataset {ds.root} has no programs in the {split} split")
    per: dict = {}
    pooled_pred: dict = {label: [] for label in models}
    pooled_true: list = []
    for name, s in ds.iter_programs(split):
        ok = np.isfinite(s.runtime) & (s.runtime > 0)
        if not ok.any():
            continue
        s = s.select(np.nonzero(ok)[0])
        row: dict = {}
        for label, m in models.items():
            if isinstance(m, str) and m == "analytical":
                pred, absolute = s.analytical, True
            elif isinstance(m, FittedAnalytical):
                pred, absolute = m.apply(s), True
            else:
                pred = m.predict_graphs(s.sample_graphs(), s.tile_feat)
                absolute = bool(getattr(m, "predicts_absolute", True))
            if ds.task == "fusion":
                pooled_pred[label].append(np.asarray(pred, float) if absolute else None)
                met = fusion_metrics(pred, s.runtime)
                if not absolute:
                    met.pop("mape")
                    met.pop("mape_all")
            else:
                met = tile_metrics(pred, s.runtime, s.graph, absolute=absolute)
                met.pop("pair_acc", None)
            row[label] = met
        per[name] = row
        pooled_true.append(np.asarray(s.runtime, float))
    pooled: dict = {}
    if ds.task == "fusion" and pooled_true:  # every test kernel in one pool (no per-program weighting)
        true = np.concatenate(pooled_true)
        for label, preds in pooled_pred.items():
            if preds and all(p is not None for p in preds):
                met = fusion_metrics(np.concatenate(preds), true)
                pooled[label] = {"mape": met["mape"], "kendall": met["kendall"], "n_kernels": met["n_kernels"],
                                 "mape_all": met["mape_all"], "kendall_all": met["kendall_all"]}
    summary: dict = {}
    median: dict = {}
    for label in models:
        keys = sorted({k for r in per.values() for k in r.get(label, {})})
        summary[label], median[label] = {}, {}
        for k in keys:
            vals = np.array([r[label][k] for r in per.values() if k in r.get(label, {})], float)
            vals = vals[np.isfinite(vals)]
            summary[label][k] = float(vals.mean()) if len(vals) else float("nan")
            median[label][k] = float(np.median(vals)) if len(vals) else float("nan")
    return {"task": ds.task, "split": split, "programs": per, "summary": summary, "median": median,
            "pooled": pooled}


_ORDER = ("mape", "kendall", "mape_all", "kendall_all", "tile_ape", "top1", "top5", "top10")


def _fmt(k: str, v: Optional[float]) -> str:
    if v is None or not math.isfinite(v):
        return "-"
    if k in ("mape", "mape_all", "tile_ape"):
        return f"{v:.1f}%"
    if k.startswith("top"):
        return f"{100 * v:.1f}%"
    return f"{v:.3f}"


def _table(res: dict) -> str:
    models = list(res["summary"])
    cols = [(m, k) for m in models for k in _ORDER if k in res["summary"][m]]
    header = ["program"] + [f"{m}:{k}" for m, k in cols]
    rows = []
    for name, r in sorted(res["programs"].items()):
        rows.append([name] + [_fmt(k, r.get(m, {}).get(k)) for m, k in cols])
    rows.append(["median"] + [_fmt(k, res["median"][m].get(k)) for m, k in cols])
    rows.append(["mean"] + [_fmt(k, res["summary"][m].get(k)) for m, k in cols])
    if res.get("pooled"):
        rows.append(["pooled"] + [_fmt(k, res["pooled"].get(m, {}).get(k)) for m, k in cols])
    widths = [max(len(x[i]) for x in [header] + rows) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths)))
             for line in [header] + rows]
    lines.insert(1, "-" * len(lines[0]))
    lines.insert(len(lines) - (3 if res.get("pooled") else 2), "-" * len(lines[0]))
    return "\n".join(lines)


@click.command("evaluate")
@click.option("--model", "model_specs", multiple=True, required=True,
              help="gnn, xgboost, analytical, or a saved model file (repeatable).")
@click.option("--data", "data_dir", required=True, type=click.Path(exists=True, file_okay=False))
@click.option("--split", type=click.Choice(["test", "validation", "train", "all"]), default="test", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.option("--seed", type=int, default=0, show_default=True)
@_friendly
def evaluate(model_specs: Sequence[str], data_dir: str, split: str, as_json: bool, seed: int) -> None:
    """Per-program accuracy of cost models on a dataset split (the paper's Table 2 metrics)."""
    from autotune.tuning.dataset import Dataset
    ds = Dataset.open(data_dir)
    models: dict = {}
    for spec in model_specs:
        key = spec.strip().lower()
        if key == "analytical":
            if ds.task == "fusion" and ds.programs_in("train"):
                # The paper's fusion baseline: per-kind scales fitted on the train split.
                scales = fit_analytical_scales(ds, "train")
                click.echo("analytical: per-kind scales fitted on the train split: " +
                           ", ".join(f"{k} {v:.3g}" for k, v in scales.items()), err=True)
                models["analytical"] = FittedAnalytical(scales)
            else:
                models["analytical"] = "analytical"
        elif key in ("analytical-raw", "analytical-unscaled"):
            models["analytical-raw"] = "analytical"
        elif key in ("gnn", "xgboost", "xgb"):
            click.echo(f"training a default {key} model on the train split of {data_dir}", err=True)
            m = _make_model(key, ds.task, ds.target, {"seed": seed})
            _fit(m, ds, {"seed": seed})
            models[key] = m
        else:
            m = load_model_file(spec, task=ds.task, target=ds.target)
            label = Path(spec).name
            while label in models:
                label += "'"
            models[label] = m
    res = evaluate_models(models, ds, split)
    if as_json:
        click.echo(json.dumps(_nan_to_none(res), indent=2, sort_keys=True))
    else:
        click.echo(_table(res))
