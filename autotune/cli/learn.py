"""Command-line commands for learned cost models: `dataset build`, `train`, `evaluate`.

They are plain click commands (not attached to a group here); autotune/cli/app.py attaches them to the
`autotune` group:

    autotune dataset build --programs DIR --task fusion|tile|layout --evaluator sim|xla|xla-inprogram [--target T]
                           [--configs-per-program N] [--split-file F] [--searched N --search-model M [--search-model M2]] --out DIR
    autotune train --model gnn|xgboost --task fusion|tile|layout --data DIR --out MODEL [--seed S]
                   [--n-estimators N] [--max-depth D] [--min-runtime-us U] [--threads T] [--drop-groups G1,G2]  (XGBoost)
                   [--epochs N] [--reduction node|column|lstm|transformer] [--encoder sage|gat|none]
                   [--loss rank|listmle|mse] [--no-static-features] [--edge-direction both|in|out]
                   [--no-kernel-features] [--[no-]geometry-features] [--[no-]residual] [--hidden H] [--layers K]
                   [--head-layers L] [--head-hidden W] [--batch-size B] [--lr LR] [--lr-schedule constant|cosine] [--weight-decay W]
                   [--large-kernel-weight W] [--select loss|mape] [--draws families|kernels] [--dropout P]
                   [--ple-bins N]                                                                              (GNN)
                   [--segments K] [--prune-hops H] [--configs-per-step C]  (layout GNN)
    autotune ensemble MODEL.pt MODEL.pt [...] --out MODEL.pt   (a seed ensemble of trained GNN files)
    autotune evaluate --data DIR [--task fusion|tile|layout] [--cost-model M ...] [--train K ...] [--split test|validation|train|all] [--json]

In `evaluate`, M is a cost model as everywhere (autotune/api.py): "gnn" or "xgboost" (the shipped model
for the dataset's task and target; also "shipped:gnn"), "analytical" (the analytical predictions stored
in the dataset), or a saved model file. `--train K` (or M = "train:K") fits a fresh model on the
dataset's train split: gnn, xgboost, or analytical (per-kernel-kind scales, the paper's fusion
baseline). Without M: every shipped model and the analytical model (beside the K asked for). Errors are one line on
stderr with exit status 2.
"""
from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path
from typing import Any, Optional, Sequence

import click

from autotune.api import load_model_file, train_model
from autotune.cli.arguments import DatasetBuildArgs
from autotune.cli.errors import UserError, friendly
from autotune.tuning.evaluation import evaluate_models

__all__ = ["dataset", "build", "train", "ensemble", "evaluate", "LearnError", "load_model_file", "evaluate_models",
           "load_evaluated_models"]


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
@click.option("--task", type=click.Choice(["fusion", "tile", "layout"]), required=True)
@click.option("--evaluator", type=click.Choice(["sim", "xla", "xla-inprogram"]), default="sim", show_default=True,
              help="sim (TPU simulator), xla (each kernel standalone on XLA:CPU) or xla-inprogram (each "
                   "configuration as one XLA:CPU program: in-program kernel times and end-to-end times).")
@click.option("--target", default="tpu", show_default=True)
@click.option("--configs-per-program", type=click.IntRange(1, 100000), default=8, show_default=True,
              help="Fusion (layout) configurations sampled per program (tile task: at most 4 are used).")
@click.option("--max-tiles", type=click.IntRange(1, 100000), default=64, show_default=True,
              help="Tile task: at most this many tiles per kernel (random subset + the default).")
@click.option("--split-file", type=click.Path(exists=True, dir_okay=False), default=None,
              help='JSON {"train": [...], "validation": [...], "test": [...]} of program names.')
@click.option("--program", "only", multiple=True, help="Only these programs (names; repeatable).")
@click.option("--store", default=None, help="Measurement store path ('none' for memory); default: the "
              "default store for xla, none for sim.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--searched", type=click.IntRange(0, 100000), default=0, show_default=True,
              help="Fusion: also measure each program's N best distinct predictions of an annealing search "
                   "priced by --search-model (what searches pick, AutoTVM-style), beside the sampled ones.")
@click.option("--search-model", multiple=True,
              help="Cost model of --searched: gnn, xgboost (the shipped ones for the target), analytical or a file; "
                   "repeatable: N picks of each model's own search.")
@click.option("--search-evals", type=click.IntRange(1, 10_000_000), default=2000, show_default=True,
              help="Configurations each --searched search prices (bounded so that a seed reproduces it).")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False))
@_friendly
def build(**options: Any) -> None:
    """Measure random fusion configurations' kernels (or every tile of kernels) into a dataset.

    Layout task: per program, the default layout configuration, a neighbour walk from it and random
    ones, each priced as the whole rewritten program, written as TpuGraphs layout npz files."""
    from autotune.tuning.dataset import DatasetOptions, build_dataset
    from autotune.tuning.store import open_store

    a = DatasetBuildArgs(**options)
    task, target, searched, search_model, out_dir = a.task, a.target, a.searched, a.search_model, a.out_dir
    st = None
    if a.store is not None or a.evaluator == "xla":
        st = open_store(a.store)

    def log(name: str, rec: dict) -> None:
        what = (f"{rec['n_kernels']} configurable nodes, {rec['n_samples']} configurations" if task == "layout"
                else f"{rec['n_kernels']} kernels, {rec['n_samples']} samples")
        click.echo(f"{name}: {what} ({rec['n_failed']} failed) -> {rec['split']}", err=True)

    model = None
    if search_model and not searched:
        raise LearnError("--search-model is the model of --searched N: give --searched too")
    if searched:
        if task != "fusion":
            raise LearnError("--searched is an option of --task fusion")
        if not search_model:
            raise LearnError("--searched needs --search-model (gnn, xgboost, analytical or a model file)")
        from autotune import api
        model = [api.make_cost_model(m, "fusion", target) for m in search_model]
    ds = build_dataset(a.programs_dir, task, a.evaluator, target, a.configs_per_program, out_dir, DatasetOptions(
        split_file=a.split_file, seed=a.seed, max_tiles_per_kernel=a.max_tiles, programs=list(a.only) or None,
        store=st, searched=searched, search_model=model, search_evaluations=a.search_evals,
        search_model_name=list(search_model) or None),
        progress=sys.stderr.isatty(), log=log, warn=lambda line: click.echo(line, err=True))
    counts = {s: len(ds.programs_in(s)) for s in ("train", "validation", "test")}
    click.echo(f"wrote {out_dir}: {len(ds.programs)} programs ({counts['train']} train, {counts['validation']} "
               f"validation, {counts['test']} test), {len(ds)} samples")


# --------------------------------------------------------------------------------------------------
@click.command("train")
@click.option("--model", type=click.Choice(["gnn", "xgboost"]), required=True)
@click.option("--task", type=click.Choice(["fusion", "tile", "layout"]), required=True)
@click.option("--data", "data_dir", required=True, type=click.Path(exists=True, file_okay=False))
@click.option("--out", "out_path", required=True, type=click.Path(dir_okay=False))
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--epochs", type=click.IntRange(1, 100000), default=None, help="GNN epochs (default 25 for fusion, else 20).")
@click.option("--batch-size", type=click.IntRange(2, 100000), default=None)
@click.option("--lr", type=float, default=None,
              help="Learning rate (GNN default 0.002 for fusion, 1e-3 otherwise; XGBoost eta default 0.1).")
@click.option("--hidden", type=click.IntRange(1, 4096), default=None)
@click.option("--layers", type=click.IntRange(0, 64), default=None)
@click.option("--reduction", type=click.Choice(["node", "per-node", "column", "lstm", "transformer"]), default=None)
@click.option("--encoder", type=click.Choice(["sage", "gat", "none"]), default=None)
@click.option("--loss", type=click.Choice(["rank", "listmle", "mse"]), default=None,
              help="rank: pairwise hinge; listmle: listwise ListMLE (TpuGraphs' baselines); mse: log runtime. "
                   "Default: rank for tiles, mse for fusion.")
@click.option("--no-static-features", is_flag=True, help="Drop the static performance features.")
@click.option("--edge-direction", type=click.Choice(["both", "in", "out"]), default=None)
@click.option("--no-kernel-features", is_flag=True,
              help="GNN: no kernel-level features joined before the head (graph information only).")
@click.option("--geometry-features/--no-geometry-features", default=None,
              help="GNN: join the kernel's default-tile geometry features (costmodels.features) before the head "
                   "[default: on for fusion].")
@click.option("--residual/--no-residual", default=None,
              help="GNN, loss mse: learn the log ratio of the runtime to the tiled analytical model's time "
                   "[default: on for fusion]. Layout GNN (any loss): score = the analytical price's log ratio to "
                   "the default's + a learned correction.")
@click.option("--head-layers", type=click.IntRange(1, 16), default=None,
              help="GNN: hidden layers of the head MLP [default: 2 for fusion, else 1].")
@click.option("--head-hidden", type=click.IntRange(1, 4096), default=None,
              help="GNN: width of the head MLP's hidden layers [default: 256 for fusion, else --hidden].")
@click.option("--large-kernel-weight", "large_weight", type=click.FloatRange(0.0, min_open=True), default=None,
              help="GNN, loss mse: loss weight of kernels >= 5 us against 1 for the others [default: 10 for fusion].")
@click.option("--select", type=click.Choice(["loss", "mape"]), default=None,
              help="GNN checkpoint selection on the validation split: its loss, or the MAPE of kernels >= 5 us "
                   "[default: mape for fusion with loss mse, else loss].")
@click.option("--lr-schedule", type=click.Choice(["constant", "cosine"]), default=None,
              help="GNN learning-rate schedule over the epochs [default: cosine for fusion, else constant].")
@click.option("--weight-decay", type=click.FloatRange(0.0), default=None, help="GNN Adam weight decay.")
@click.option("--patience", type=click.IntRange(1, 100000), default=None,
              help="GNN: stop after this many epochs without a better validation value [default: 25 for fusion with "
                   "the recipe, else 5].")
@click.option("--dropout", type=click.FloatRange(0.0, 1.0, max_open=True), default=None,
              help="GNN: dropout rate in training, after every encoder layer and of the reduced graph vector [default: 0].")
@click.option("--ple-bins", type=click.IntRange(0, 256), default=None,
              help="GNN: also give the head a piecewise-linear encoding of the geometry groups tile, dot and "
                   "analytical on N training-quantile bins per column, 0: off [default: 32 for fusion with the "
                   "geometry features, else 0].")
@click.option("--draws", type=click.Choice(["families", "kernels"]), default=None,
              help="GNN training examples: every model family equally likely per draw (the paper's), or every "
                   "kernel [default: families].")
@click.option("--n-estimators", type=click.IntRange(1, 100000), default=None, help="XGBoost rounds (default 300).")
@click.option("--max-depth", type=click.IntRange(1, 64), default=None, help="XGBoost tree depth (default 6).")
@click.option("--min-runtime-us", type=click.FloatRange(0.0), default=None,
              help="XGBoost, fusion: train (and early-stop) on kernels at least this slow (the paper's metric: 5).")
@click.option("--threads", type=click.IntRange(1, 4096), default=None, help="XGBoost threads (default: all cores).")
@click.option("--drop-groups", default=None, metavar="G1,G2",
              help="XGBoost: train without these feature groups (an ablation; costmodels.xgb.FEATURE_GROUPS, "
                   "`cpu_*` for every group it prefixes).")
@click.option("--segments", type=click.IntRange(1, 100000), default=None,
              help="Layout GNN: graph segment training, K segments per graph (default 1: whole graphs).")
@click.option("--prune-hops", type=click.IntRange(0, 64), default=None,
              help="Layout GNN: prune graphs to the configurable nodes' H-hop neighbourhoods (default: whole graphs).")
@click.option("--configs-per-step", type=click.IntRange(2, 100000), default=None,
              help="Layout GNN: configurations of one program per training step (default 16).")
@_friendly
def train(model: str, task: str, data_dir: str, out_path: str, **options: Any) -> None:
    """Train a GNN or XGBoost cost model on a dataset's train split (validation for model selection).

    A fusion GNN trained on log runtime takes the shipped model's recipe (costmodels.gnn.FUSION_RECIPE) for
    every option not given; the GNN prints one line per epoch on stderr."""
    from autotune.tuning.dataset import Dataset
    ds = Dataset.open(data_dir)
    if ds.task != task:
        raise LearnError(f"{data_dir} is a {ds.task} dataset, not {task}")
    if task != "layout" and (options["segments"] or options["prune_hops"] is not None or options["configs_per_step"]):
        raise LearnError("--segments, --prune-hops and --configs-per-step are options of --task layout")
    if options["drop_groups"] and model != "xgboost":
        raise LearnError("--drop-groups is an option of --model xgboost")
    opts = _training_options(options)
    if model == "gnn":  # one line per epoch: a long training can be followed from its log
        opts["log"] = lambda rec: click.echo(f"epoch {rec['epoch']}: train loss {rec['train_loss']:.4g}, validation "
                                             f"{rec['val']:.4g}, {rec['seconds']:.0f} s", err=True)
    m = train_model(model, ds, progress=sys.stderr.isatty(), **opts)
    m.save(out_path)
    extra = ""
    hist = getattr(m, "history", None)
    if hist and "best_epoch" in hist[-1]:
        extra = f" (best epoch {hist[-1]['best_epoch']}, validation {hist[-1]['best_val']:.4g})"
    click.echo(f"wrote {out_path}: {model} {task} model{extra}")


# `train_model`'s keywords in the order `train` has always passed them (model files record their options)
_TRAINING_OPTIONS = ("seed", "epochs", "batch_size", "lr", "hidden", "layers", "reduction", "encoder", "loss",
                     "rank_loss", "static_features", "edge_direction", "n_estimators", "kernel_features", "max_depth",
                     "min_runtime_us", "nthread", "geometry_features", "residual", "head_layers", "head_hidden",
                     "large_weight", "select", "lr_schedule", "weight_decay", "patience", "dropout", "draws",
                     "ple_bins", "drop_groups", "segments", "prune_hops", "configs_per_step")


def _training_options(flags: dict) -> dict:
    """`train`'s options (besides the model, task, data and output) as `train_model` keywords:
    --no-X flags as X=False, --threads as nthread, --loss listmle as loss rank with rank_loss listmle."""
    unknown = set(flags) - set(_TRAINING_OPTIONS) - {"no_static_features", "no_kernel_features", "threads"}
    if unknown:  # a new flag that does not reach train_model
        raise TypeError(f"train: option(s) {', '.join(sorted(unknown))} not passed to train_model")
    rank_loss = "listmle" if flags["loss"] == "listmle" else None
    derived = {"loss": "rank" if rank_loss else flags["loss"], "rank_loss": rank_loss,
               "static_features": not flags["no_static_features"], "kernel_features": not flags["no_kernel_features"],
               "nthread": flags["threads"]}
    return {k: derived[k] if k in derived else flags[k] for k in _TRAINING_OPTIONS}


# --------------------------------------------------------------------------------------------------
@click.command("ensemble")
@click.argument("members", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--out", "out_path", required=True, type=click.Path(dir_okay=False))
@_friendly
def ensemble(members: Sequence[str], out_path: str) -> None:
    """Combine trained GNN files (seeds of one recipe, `autotune train --model gnn --seed S`) into one seed
    ensemble: its prediction is exp of the mean of the members' predicted log runtimes; kernels are featurized
    once and every member's network runs on the same batches. The members must share task, target, configuration
    (the seed aside) and training split."""
    from costmodels.gnn import GnnCostModel
    if len(members) < 2:
        raise LearnError(f"an ensemble needs at least two GNN model files, got {len(members)}")
    folder = Path(out_path).parent
    if not folder.is_dir():  # checked before any work (as `autotune emit -o`)
        raise LearnError(f"--out {out_path}: folder {folder} does not exist")
    if os.path.abspath(out_path) in {os.path.abspath(p) for p in members}:
        raise LearnError(f"--out {out_path} is one of the members: write the ensemble to a new file")
    models = []
    for p in members:
        m = load_model_file(p)
        if type(m) is not GnnCostModel:
            raise LearnError(f"{p} is not a fusion/tile GNN model file ({type(m).__name__}): an ensemble combines GNN files")
        models.append(m)
    e = GnnCostModel.ensemble(models, names=list(members))
    e.save(out_path)
    click.echo(f"wrote {out_path}: gnn {e.task} model, ensemble of {e.members} (" +
               ", ".join(f"{Path(p).name} seed {m.config.get('seed')}" for p, m in zip(members, models)) + ")")


# --------------------------------------------------------------------------------------------------
def _nan_to_none(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _nan_to_none(v) for k, v in x.items()}
    return x


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
@click.option("--cost-model", "--model", "model_specs", multiple=True,
              help="A cost model as in `fusion --cost-model`: gnn or xgboost (the shipped model; also "
                   "shipped:gnn), analytical, or a saved model file; train:KIND = --train KIND (repeatable) "
                   "[default: every shipped model for the dataset's task and target, and analytical].")
@click.option("--train", "train_kinds", multiple=True, type=click.Choice(["gnn", "xgboost", "xgb", "analytical"]),
              help="Fit a fresh model on the dataset's train split and evaluate it: gnn, xgboost (default "
                   "settings), or analytical (per-kernel-kind scales, the paper's fusion baseline) (repeatable).")
@click.option("--data", "data_dir", required=True, type=click.Path(exists=True, file_okay=False))
@click.option("--task", type=click.Choice(["fusion", "tile", "layout"]), default=None,
              help="Check that the dataset is of this task [default: the dataset's task].")
@click.option("--split", type=click.Choice(["test", "validation", "train", "all"]), default="test", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the models --train fits.")
@_friendly
def evaluate(model_specs: Sequence[str], train_kinds: Sequence[str], data_dir: str, task: Optional[str], split: str,
             as_json: bool, seed: int) -> None:
    """Per-program accuracy of cost models on a dataset split (the paper's Table 2 metrics).

    `autotune evaluate --data DS` evaluates the shipped models (and the analytical model) on DS's test split.
    Layout datasets: Kendall's tau per program over its configurations (TpuGraphs' layout metric) and the
    top-1 slowdown (runtime of the best-scored configuration over the fastest, minus 1)."""
    from autotune.tuning.dataset import Dataset
    ds = Dataset.open(data_dir)
    if task is not None and ds.task != task:
        raise LearnError(f"{data_dir} is a {ds.task} dataset, not {task}")
    models = load_evaluated_models(ds, model_specs, train_kinds, seed,
                                   log=lambda line: click.echo(line, err=True))
    res = evaluate_models(models, ds, split)
    if as_json:
        click.echo(json.dumps(_nan_to_none(res), indent=2, sort_keys=True))
    else:
        click.echo(_table(res))


def load_evaluated_models(ds: Any, specs: Sequence[str], train_kinds: Sequence[str] = (), seed: int = 0,
                          log: Any = None) -> dict:
    """{label: model} for `evaluate`: cost-model specs (shipped by name, files, analytical) and fresh models
    fitted on the train split (`train:KIND` or train_kinds); no spec but train:KIND: every shipped model and
    analytical as well."""
    from autotune import api
    log = log or (lambda line: None)
    specs = list(specs)
    trains = list(train_kinds)
    if not [s for s in specs if not s.strip().lower().startswith("train:")]:
        shipped = api.shipped_models(ds.task, ds.target)
        if not shipped:
            log(f"no shipped model for task {ds.task} and target {ds.target}: evaluating the analytical model only")
        specs = specs + [f"shipped:{kind}" for kind in shipped] + ["analytical"]
    models: dict = {}

    def add(label: str, model: Any) -> None:
        while label in models:
            label += "'"
        models[label] = model

    for spec in specs:
        text = spec.strip()
        key = text.lower()
        if key.startswith("train:"):
            trains.append(key.split(":", 1)[1])
        elif key in ("analytical", "analytical-raw", "analytical-unscaled"):
            if ds.task == "fusion" and "analytical" not in models:
                log("analytical: the analytical model's predictions stored in the dataset, unscaled "
                    "(the paper's fitted baseline is --train analytical)")
            add("analytical", "analytical")
        else:
            path = api.resolve_cost_model(text, ds.task, ds.target)
            kind = key.split(":", 1)[1] if key.startswith("shipped:") else key
            if kind in ("gnn", "xgboost", "xgb"):
                label = f"shipped:{'xgboost' if kind == 'xgb' else kind}"
                log(f"{label}: {path}")
            elif os.path.isfile(path) or Path(path).suffix.lower() in (".pt", ".json") or os.sep in path:
                label = Path(path).name  # a missing file is one line from load_model_file
            else:
                raise LearnError(f"--cost-model {text}: evaluate needs a saved model file, a shipped model "
                                 "(gnn, xgboost) or analytical")
            add(label, api.load_model_file(path, task=ds.task, target=ds.target))
    for kind in trains:
        kind = "xgboost" if kind == "xgb" else kind
        if kind == "analytical" and ds.task == "layout":
            raise LearnError("the layout task's analytical baseline is the dataset's stored analytical prices "
                             "(--cost-model analytical)")
        if kind == "analytical" and ds.task != "fusion":
            raise LearnError("--train analytical fits per-kind scales of fusion kernels; the tile task has none "
                             "(use --cost-model analytical)")
        if kind not in api.TRAINABLE_KINDS:
            raise LearnError(f"train:{kind}: can train {', '.join(api.TRAINABLE_KINDS)}")
        if not ds.programs_in("train"):
            raise LearnError(f"--train {kind}: dataset {ds.root} has no programs in its train split")
        log(f"train:{kind}: fitting on the train split of {ds.root}")
        model = api.train_model(kind, ds, seed=seed)
        if kind == "analytical":
            log("train:analytical: per-kind scales " + ", ".join(f"{k} {v:.3g}" for k, v in model.scales.items()))
        add(f"train:{kind}", model)
    return models
