"""Public factories shared by the command line, the benchmarks and users.

Every way the CLI turns a name into an object lives here, once:

    from autotune import api
    program = api.load_program("model.hlo")
    ev = api.make_evaluator("sim", "tpu")
    model = api.make_cost_model("gnn", task="fusion", target="tpu")      # the shipped GNN
    strategy = api.make_strategy("annealing", space, seed=0)

Cost-model specs mean the same thing in every command (`--cost-model` of `fusion`, `tile`, `evaluate`):
- `analytical`: the analytical model of the target;
- `gnn`, `xgboost` (also `shipped:gnn`, `shipped:xgboost`): the model shipped for the task and target
  (costmodels/shipped/); a clear error when none is shipped;
- `hardware`: the evaluator itself (every prediction a measurement; fusion search);
- a saved model file (.pt GNN, .json XGBoost), checked against the task and target;
- any other registered name, an entry point of `autotune.costmodels`, `module:Class` or `path.py:Class`.
`train:KIND` (KIND = gnn, xgboost, analytical) means a fresh model fitted on a dataset's train split;
only `autotune evaluate` has a dataset to fit it on (see `train_model`).

Errors are ValueErrors in one line (the CLI prints them with exit status 2).
"""
from __future__ import annotations

import hashlib
import inspect
import os
from pathlib import Path
from typing import Any, Optional

from autotune.compiler.targets import get_target, target_names as list_targets
from autotune.plugins import Registry, UnknownPluginError, load_object
from costmodels.base import SHIPPED_DIR as _SHIPPED_DIR, shipped_file

__all__ = [
    "LEARNED_KINDS", "SHIPPED_DIR", "TRAINABLE_KINDS",
    "load_program", "get_target", "list_targets",
    "shipped_model", "shipped_models", "load_model_file", "resolve_cost_model", "make_cost_model", "is_learned_spec",
    "new_model", "train_model", "make_evaluator", "default_evaluator", "list_evaluators",
    "make_strategy", "list_strategies", "list_cost_models", "make_transfer", "transfer_fingerprint", "takes_prior", "TRANSFER_CHOICES",
    "PROGRAM_MODEL_SPEC", "make_program_cost", "model_identity",
    "Registry", "UnknownPluginError", "load_object",
]

LEARNED_KINDS = ("gnn", "xgboost")                       # cost models that are shipped and trained
TRAINABLE_KINDS = LEARNED_KINDS + ("analytical",)        # `train:KIND`: analytical = per-kind scales
SHIPPED_DIR = _SHIPPED_DIR
_FILE_STEM = {"gnn": "gnn", "xgboost": "xgb"}
_KIND_ALIASES = {"xgb": "xgboost"}
_MODEL_FILE_SUFFIXES = (".pt", ".json", ".ubj", ".xgb")


def _learned_kind(name: str) -> Optional[str]:
    key = name.strip().lower()
    key = _KIND_ALIASES.get(key, key)
    return key if key in LEARNED_KINDS else None


# ------------------------------------------------------------------------------------------ programs
def load_program(path: "str | os.PathLike[str]") -> Any:
    """Parse and normalize an HLO text file into a Program (errors name file:line:column)."""
    from autotune.compiler.program import Program
    return Program.from_file(str(path))


# ---------------------------------------------------------------------------------------- cost models
def shipped_model(kind: str, task: str, target: str) -> Optional[Path]:
    """The model file shipped for a learned kind (gnn, xgboost), task and target, or None."""
    key = _learned_kind(kind)
    if key is None:
        raise ValueError(f"unknown learned model kind {kind!r} (known: {', '.join(LEARNED_KINDS)})")
    return shipped_file(_FILE_STEM[key], task, target)


def shipped_models(task: str, target: str) -> dict[str, Path]:
    """{kind: file} of every model shipped for the task and target."""
    found = {kind: shipped_model(kind, task, target) for kind in LEARNED_KINDS}
    return {k: p for k, p in found.items() if p is not None}


def load_model_file(path: "str | os.PathLike[str]", task: Optional[str] = None, target: Optional[str] = None) -> Any:
    """A saved GNN (.pt) or XGBoost (.json) cost model; other names are told apart by content.
    With task/target given, a model made for another task or target is a one-line ValueError."""
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"model file {path} does not exist")
    ext = p.suffix.lower()
    if ext == ".pt":
        xgb = False
    elif ext == ".json":
        xgb = True
    else:
        with open(p, "rb") as f:
            xgb = f.read(64).lstrip().startswith(b"{")
    if xgb:
        from costmodels.xgb import XgbCostModel, read_model_doc
        if task == "layout" or (task is None and read_model_doc(str(p)).get("task") == "layout"):
            from costmodels.xgb_layout import LayoutXgbModel
            return LayoutXgbModel.load(str(p), target=target)
        return XgbCostModel.load(str(p), task=task, target=target)
    from costmodels.gnn.layout import LayoutGnnModel, is_layout_model_file
    if is_layout_model_file(str(p)):
        if task not in (None, "layout"):
            raise ValueError(f"{path} is a layout GNN model, not a {task} model")
        m = LayoutGnnModel.load(str(p))
        if target is not None and m.target != target:
            raise ValueError(f"{path}: GNN model for task layout, target {m.target}; this needs task layout, "
                             f"target {target}")
        return m
    from costmodels.gnn import GnnCostModel
    return GnnCostModel.load(str(p), task=task, target=target)


def resolve_cost_model(spec: Optional[str], task: str, target: str) -> str:
    """The canonical form of a cost-model spec: the default (the shipped GNN when there is one, else
    `analytical`) filled in, `gnn`/`xgboost`/`shipped:KIND` replaced by the shipped file's path."""
    if spec is None:
        default = shipped_model("gnn", task, target)
        return str(default) if default is not None else "analytical"
    text = spec.strip()
    shipped = text.lower().startswith("shipped:")
    name = text.split(":", 1)[1] if shipped else text
    kind = _learned_kind(name)
    if shipped and kind is None:
        raise ValueError(f"cost model {spec!r}: only learned models are shipped ({', '.join(LEARNED_KINDS)})")
    if text.lower().startswith("train:"):
        raise ValueError(f"cost model {spec!r}: train:KIND needs a dataset to train on (autotune evaluate --data)")
    if kind is not None:
        path = shipped_model(kind, task, target)
        if path is None:
            raise ValueError(f"no shipped {kind} model for task {task!r} and target {target!r}; train one with "
                             f"`autotune train --model {kind}` and pass its path")
        return str(path)
    return text


def is_learned_spec(spec: Optional[str]) -> bool:
    """Whether a cost-model spec names a learned model: gnn, xgboost, shipped:KIND or a model file."""
    if spec is None:
        return False
    text = spec.strip()
    name = text.split(":", 1)[1] if text.lower().startswith("shipped:") else text
    return _learned_kind(name) is not None or (os.path.isfile(text) and text.lower().endswith(_MODEL_FILE_SUFFIXES))


def _supported(factory: Any, **kw: Any) -> dict:
    """The keywords of kw that factory's signature names (a plug-in need not take task or target)."""
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return {}
    return {k: v for k, v in kw.items() if k in params}


def make_cost_model(spec: Optional[str], task: str = "fusion", target: str = "tpu", evaluator: Any = None) -> Any:
    """A cost model from a spec (see the module doc); plug-ins get `task` and `target` when they take them."""
    from costmodels.base import COST_MODELS, EvaluatorCostModel, get_cost_model
    text = resolve_cost_model(spec, task, target)
    key = text.lower()
    if key == "hardware":
        if evaluator is None:
            raise ValueError("the hardware cost model measures on an evaluator: give one (make_evaluator)")
        return EvaluatorCostModel(evaluator)
    if os.path.isfile(text):
        return load_model_file(text, task, target)
    if key.endswith(_MODEL_FILE_SUFFIXES) and ":" not in key:
        raise ValueError(f"model file {text} does not exist")
    found = COST_MODELS.get(text)
    return get_cost_model(found, **(_supported(found, task=task, target=target) if callable(found) else {}))


PROGRAM_MODEL_SPEC = "program"  # the shipped whole-program model (cpu): prices whole fusion configurations


def make_program_cost(space: Any, target: str) -> tuple[Any, str]:
    """(pricer, model file) for the cost model `program`: the shipped whole-program cpu model
    (costmodels/program_cpu.py) pricing whole configurations of `space` (autotune/tuning/program_cost.py)."""
    from autotune.tuning.program_cost import LearnedProgramCost
    from costmodels.program_cpu import ProgramModel
    if get_target(target).name != "cpu":
        raise ValueError(f"--cost-model program: the whole-program model is trained on XLA:CPU; --target {target} "
                         "has none (use gnn, xgboost or analytical)")
    path = shipped_file("program", "fusion", "cpu")
    if path is None:
        raise ValueError("--cost-model program: no shipped whole-program model "
                         "(costmodels/shipped/program_fusion_cpu.json)")
    pm = ProgramModel.load(str(path))
    kernel_models = {m: make_cost_model(m, "fusion", "cpu").predict for m in pm.kernel_models}
    # a model without kernel sums: the analytical kernel sum of the default sets the scale
    scale = None if kernel_models else make_cost_model("analytical", "fusion", "cpu").predict
    return LearnedProgramCost(space, pm, kernel_models, scale), str(path)


def model_identity(model_name: str) -> str:
    """What a resumed run's cost model must equal: a model file's sha256, else its name."""
    if os.path.isfile(model_name):
        with open(model_name, "rb") as f:
            return "sha256:" + hashlib.sha256(f.read()).hexdigest()
    return model_name


def list_cost_models() -> list[str]:
    """Names `make_cost_model` resolves without a path (besides `hardware` and shipped files)."""
    from costmodels.base import list_cost_models as names
    return names()


def new_model(kind: str, task: str, target: str, **options: Any) -> Any:
    """An untrained GNN or XGBoost cost model; options as `autotune train` (seed, hidden, layers, reduction,
    encoder, loss, rank_loss, static_features, edge_direction, kernel_features, geometry_features; n_estimators,
    max_depth, lr, nthread, min_runtime_us, drop_groups)."""
    key = _learned_kind(kind)
    if task == "layout":
        if key == "xgboost":
            from costmodels.xgb_layout import LayoutXgbModel
            kw = {k: options[k] for k in ("max_depth", "n_estimators") if options.get(k)}
            if options.get("lr"):
                kw["learning_rate"] = options["lr"]
            return LayoutXgbModel(target, seed=options.get("seed", 0), nthread=options.get("nthread") or 1, **kw)
        if key != "gnn":
            raise ValueError(f"unknown model kind {kind!r} for the layout task (known: {', '.join(LEARNED_KINDS)}); "
                             "its analytical baseline is the dataset's stored analytical prices (--cost-model analytical)")
        from costmodels.gnn.layout import LayoutGnnModel
        return LayoutGnnModel(target, hops=options.get("prune_hops"), segments=options.get("segments") or 1,
                              residual=bool(options.get("residual")),
                              encoder=options.get("encoder"), loss=options.get("loss"),
                              rank_loss=options.get("rank_loss"), edge_direction=options.get("edge_direction"),
                              hidden=options.get("hidden"), layers=options.get("layers"), seed=options.get("seed", 0))
    if key == "gnn":
        from costmodels.gnn import GnnCostModel
        return GnnCostModel(task, target, reduction=options.get("reduction"), encoder=options.get("encoder"),
                            loss=options.get("loss"), rank_loss=options.get("rank_loss"),
                            static_features=options.get("static_features", True),
                            edge_direction=options.get("edge_direction"), hidden=options.get("hidden"),
                            layers=options.get("layers"), seed=options.get("seed", 0),
                            graph_features=options.get("kernel_features", True),
                            geometry_features=options.get("geometry_features"),
                            residual=options.get("residual"), head_layers=options.get("head_layers"),
                            head_hidden=options.get("head_hidden"), ple_bins=options.get("ple_bins"),
                            embedding=options.get("embedding"), dropout=options.get("dropout"))
    if key == "xgboost":
        from costmodels.xgb import XgbCostModel
        kw = {k: options[k] for k in ("max_depth", "nthread") if options.get(k)}
        if options.get("lr"):
            kw["learning_rate"] = options["lr"]
        return XgbCostModel(task, target, seed=options.get("seed", 0),
                            static_features=options.get("static_features", True),
                            n_estimators=options.get("n_estimators") or 300,
                            min_runtime_s=(options.get("min_runtime_us") or 0.0) * 1e-6,
                            drop_groups=xgboost_feature_groups(options.get("drop_groups") or ()), **kw)
    raise ValueError(f"unknown model kind {kind!r} to train (known: {', '.join(LEARNED_KINDS)})")


def xgboost_feature_groups(names: Any) -> list:
    """XGBoost feature groups (`costmodels.xgb.FEATURE_GROUPS`) named by a comma-separated string or a list;
    a name ending in `*` stands for every group it prefixes (`cpu_*`: the cpu geometry rows)."""
    from costmodels.xgb import FEATURE_GROUPS
    items = [n.strip() for n in (names.split(",") if isinstance(names, str) else names) if n.strip()]
    out: list = []
    for n in items:
        hits = [g for g in FEATURE_GROUPS if g.startswith(n[:-1])] if n.endswith("*") else [n] if n in FEATURE_GROUPS else []
        if not hits:
            raise ValueError(f"unknown XGBoost feature group {n!r} (known: {', '.join(FEATURE_GROUPS)})")
        out.extend(g for g in hits if g not in out)
    return out


# `costmodels.gnn.train.fit_gnn` options `train_model` passes on when given (None: fit_gnn's default)
GNN_FIT_OPTIONS = ("weight_decay", "patience", "large_weight", "select", "lr_schedule", "min_runtime_s", "draws")


def gnn_training_options(task: str, options: dict, target: Optional[str] = None) -> dict:
    """`options` with the training recipe's values (`costmodels.gnn.FUSION_RECIPE`) where an option is not
    given (None), for a GNN trained on log runtime for the fusion task; other tasks' options as given.
    The recipe's piecewise-linear encoding is of the tpu tile geometry: off for targets whose geometry
    block holds something else (cpu) or nothing."""
    from costmodels.features import geometry_layout
    from costmodels.gnn import FUSION_RECIPE
    if task != "fusion" or options.get("loss") not in (None, "mse"):
        return dict(options)
    out = {**options, **{k: v for k, v in FUSION_RECIPE.items() if options.get(k) is None}}
    if options.get("ple_bins") is None and (out.get("geometry_features") is False
                                            or out.get("kernel_features") is False
                                            or (target is not None and geometry_layout(target) != "tpu")):
        out["ple_bins"] = 0  # the recipe's piecewise-linear encoding is of the tile geometry: none to encode
    return out


def train_model(kind: str, dataset: Any, progress: bool = False, **options: Any) -> Any:
    """A model of `kind` fitted on the dataset's train split (validation split for model selection).

    kind gnn / xgboost: `new_model` options plus epochs, batch_size, lr and log (GNN: called with each
    epoch's record); a GNN for the fusion task takes `costmodels.gnn.FUSION_RECIPE` for the options not
    given (`gnn_training_options`). Kind analytical: the dataset's analytical predictions with
    per-kernel-kind scales fitted on the train split."""
    if kind.strip().lower() == "analytical":
        if dataset.task == "layout":
            raise ValueError("the layout task's analytical baseline is not fitted: use --cost-model analytical "
                             "(the analytical prices stored in the dataset)")
        from autotune.tuning.evaluation import FittedAnalytical
        return FittedAnalytical.fit(dataset, "train")
    if _learned_kind(kind) == "gnn":
        options = gnn_training_options(dataset.task, options, dataset.target)
    model = new_model(kind, dataset.task, dataset.target, **options)
    if dataset.task == "layout":
        return model.fit(dataset, epochs=options.get("epochs") or 20, lr=options.get("lr") or 1e-3,
                         configs_per_step=options.get("configs_per_step") or 16, seed=options.get("seed", 0),
                         **({"patience": options["patience"]} if options.get("patience") else {}))
    from costmodels.gnn import GnnCostModel
    if isinstance(model, GnnCostModel):
        fit_kw = {k: options[k] for k in GNN_FIT_OPTIONS if options.get(k) is not None}
        if options.get("log") is not None:
            fit_kw["log"] = options["log"]
        model.fit(dataset, epochs=options.get("epochs") or 20, batch_size=options.get("batch_size") or 64,
                  lr=options.get("lr") or 1e-3, seed=options.get("seed", 0), progress=progress, **fit_kw)
    else:
        model.fit(dataset)
    return model


# ----------------------------------------------------------------------------------------- evaluators
def default_evaluator(target: str) -> str:
    """The evaluator a target measures on by default (its Target's first evaluator: sim for TPUs, xla for cpu)."""
    return get_target(target).default_evaluator


def list_evaluators() -> list[str]:
    from hardware.base import EVALUATORS
    return EVALUATORS.names()


def make_evaluator(name: Optional[str], target: str, store: Any = None, seed: int = 0, budget: Any = None,
                   noise: Optional[float] = None, scheduler: Optional[str] = None, workers: int = 1) -> Any:
    """An evaluator by name for a target: `sim` (TPU-like simulator), `xla` (real XLA on this machine),
    or a plug-in (entry point of `autotune.evaluators`, `module:Class`); `store` is a path, 'none' or a store."""
    from autotune.tuning.store import open_store
    from hardware.base import create_evaluator
    st = open_store(store) if store is None or isinstance(store, (str, os.PathLike)) else store
    try:
        return create_evaluator(name or default_evaluator(target), target, budget=budget, store=st, seed=seed,
                                noise=noise, scheduler=scheduler, n_workers=workers)
    except (RuntimeError, OSError) as e:  # worker start-up, or a dask scheduler that cannot be reached
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ValueError(f"the {name or default_evaluator(target)} evaluator could not start: {first}") from None


# ----------------------------------------------------------------------------------------- strategies
def make_strategy(spec: Any, space: Any, seed: Optional[int] = 0, **params: Any) -> Any:
    """A search strategy over `space`: a name (annealing, genetic, random, topk, ...), `module:Class`,
    `path.py:Class` or a Strategy class; params go to its constructor."""
    from search.base import get_strategy
    return get_strategy(spec)(space, seed=seed, **params)


def list_strategies() -> list[str]:
    from search.base import list_strategies as names
    return names()


def takes_prior(strategy_cls: Any) -> bool:
    """Whether a strategy class accepts a `prior` (transfer learning; the model-based strategy does)."""
    try:
        return "prior" in inspect.signature(strategy_cls.__init__).parameters
    except (TypeError, ValueError):
        return False


# ------------------------------------------------------------------------------------------ transfer
TRANSFER_CHOICES = ("auto", "store", "none")


def transfer_fingerprint(info: dict) -> str:
    """What a checkpoint records of the transfer a run used (`make_transfer`'s report entry): "none",
    "model SPEC" (with the file's sha256 when SPEC is a file) or the store history's identity - its
    programs (their digest), evaluator namespace and machine filter. Rows are left out: they shrink
    while the run records kernels that history programs share with it."""
    source = info.get("source")
    if source == "model":
        spec = str(info["model"])
        if os.path.isfile(spec):
            with open(spec, "rb") as f:
                spec += f" (sha256 {hashlib.sha256(f.read()).hexdigest()[:12]})"
        return f"model {spec}"
    if source == "store":
        return (f"store (history of {info['programs']} program{'s' if info['programs'] != 1 else ''}, "
                f"sha256 {info['programs_sha256'][:12]}, {info['namespace']}, {info['machine_filter']})")
    return "none"


def make_transfer(spec: Optional[str], task: str, target: str, evaluator: Any, program: str,
                  any_machine: bool = False, seed: int = 0) -> tuple[Any, dict, list]:
    """The global model of transfer learning (autotune/tuning/history.py) and what the report says.

    `spec`: "none"; "store" or "auto" (the evaluator's store: measurements of the same target,
    evaluator namespace and machine - every machine with `any_machine` - of programs other than
    `program`, a sha256); or a cost-model spec / model file (`make_cost_model`). Returns
    (model or None, report dict, warning lines). "auto" without enough history is no warning;
    "store" without it is one (the search runs without a prior). Errors: one-line ValueError."""
    from autotune.tuning.history import MIN_HISTORY_ROWS, fit_global_model, load_history
    key = (spec or "auto").strip()
    if key.lower() == "none":
        return None, {"source": None, "reason": "--transfer none"}, []
    if key.lower() not in ("auto", "store"):
        resolved = resolve_cost_model(key, task, target)
        return make_cost_model(resolved, task, target, evaluator), {"source": "model", "model": resolved}, []
    from hardware.base import Evaluator
    info: dict[str, Any]
    if not isinstance(evaluator, Evaluator) or evaluator.store is None:
        info = {"source": None, "reason": "the evaluator has no measurement store"}
        return None, info, ([f"--transfer store: {info['reason']}; searching without history"]
                            if key.lower() == "store" else [])
    store, namespace = evaluator.store, evaluator.store_namespace
    machine = None if any_machine else evaluator.machine
    history = load_history(store, task, target, namespace, machine, exclude_programs=[program])
    info = {"source": "store", "store": str(getattr(store, "path", None) or "memory"), **history.describe()}
    if history.rows < MIN_HISTORY_ROWS:
        info = {"source": None, "reason": f"{history.rows} usable history rows in the store (fewer than "
                                          f"{MIN_HISTORY_ROWS}) for {target}, {namespace} on "
                                          f"{info['machine_filter']}", "history": info}
        return None, info, ([f"--transfer store: {info['reason']}; searching without history"]
                            if key.lower() == "store" else [])
    return fit_global_model(history, seed), info, []
