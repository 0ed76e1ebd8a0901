"""CostModel interface and registry.

A cost model predicts kernel runtimes: `predict(kernels, tiles=None) -> np.ndarray` of seconds, or of
scores where the model is rank-trained (then `predicts_absolute` is False: only the order within a
kernel's tiles is meaningful). Trainable models add `fit(dataset)`, `save(path)`, `load(path)`.

Models are found by name through the `COST_MODELS` registry (autotune/plugins.py): a registered or
built-in name (`register_cost_model`), an entry point in the group `autotune.costmodels`, or
`module:Class` (`module.Class` and `path/to/file.py:Class` also work). Any `Evaluator` can serve as a
cost model through `EvaluatorCostModel` (hardware in the loop; failures become +inf).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import numpy as np

from autotune.plugins import Registry, UnknownPluginError

__all__ = ["CostModel", "EvaluatorCostModel", "register_cost_model", "get_cost_model", "list_cost_models",
           "UnknownCostModelError", "ENTRY_POINT_GROUP", "COST_MODELS", "check_model_scope"]

ENTRY_POINT_GROUP = "autotune.costmodels"


class UnknownCostModelError(UnknownPluginError):
    """A cost-model spec that names nothing known."""


def check_model_scope(path: str, kind: str, have_task: Any, have_target: Any, task: Optional[str],
                      target: Optional[str]) -> None:
    """Refuse a saved model made for another task or target, in one line naming both."""
    if (task is not None and have_task != task) or (target is not None and have_target != target):
        want_task = task if task is not None else have_task
        want_target = target if target is not None else have_target
        raise ValueError(f"{path}: {kind} model for task {have_task}, target {have_target}; "
                         f"this needs task {want_task}, target {want_target}")


class CostModel(ABC):
    """Predicts kernel runtimes (seconds) or rank scores."""

    name: str = "costmodel"
    predicts_absolute: bool = True
    # Whether a search should price equal kernels (same canonical hash) once: worth it for learned
    # models and hardware; a model whose prediction costs less than hashing sets it False.
    dedup_by_hash: bool = True

    @abstractmethod
    def predict(self, kernels: Sequence[Any], tiles: Optional[Sequence[Any]] = None) -> np.ndarray:
        """One value per kernel (with its tile, when given); lower is faster."""

    def fit(self, dataset: Any) -> "CostModel":
        """Train on a dataset; models without parameters return themselves."""
        return self

    def save(self, path: str) -> None:
        raise NotImplementedError(f"{type(self).__name__} cannot be saved")

    @classmethod
    def load(cls, path: str) -> "CostModel":
        raise NotImplementedError(f"{cls.__name__} cannot be loaded")

    def __call__(self, kernels: Sequence[Any], tiles: Optional[Sequence[Any]] = None) -> np.ndarray:
        return self.predict(kernels, tiles)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


class EvaluatorCostModel(CostModel):
    """Any `hardware.base.Evaluator` as a CostModel: measured seconds, +inf for a failure."""

    name = "evaluator"
    predicts_absolute = True

    def __init__(self, evaluator: Any):
        self.evaluator = evaluator
        self.name = f"evaluator:{getattr(evaluator, 'name', type(evaluator).__name__)}"

    def predict(self, kernels: Sequence[Any], tiles: Optional[Sequence[Any]] = None) -> np.ndarray:
        kernels = list(kernels)
        if not kernels:
            return np.zeros(0)
        try:
            ms = self.evaluator.measure(kernels, tiles)
        except Exception:  # noqa: BLE001 - an evaluator must not crash the search
            return np.full(len(kernels), np.inf)
        out = np.full(len(kernels), np.inf)
        for i, m in enumerate(ms):
            if m is not None and getattr(m, "ok", False):
                out[i] = float(m.seconds)
        return out


# --------------------------------------------------------------------------------------------------
SHIPPED_DIR = Path(__file__).resolve().parent / "shipped"  # the models shipped with autotune


def shipped_file(stem: str, task: str, target: str) -> Optional[Path]:
    """The shipped model file `costmodels/shipped/{stem}_{task}_{target}.{pt,json,ubj}` (stem gnn or xgb),
    or None."""
    for ext in (".pt", ".json", ".ubj"):
        p = SHIPPED_DIR / f"{stem}_{task}_{target}{ext}"
        if p.exists():
            return p
    return None


# --------------------------------------------------------------------------------------------------
# Registry (autotune.plugins): a name resolves to a CostModel class or factory, instantiated with **kw.

def _as_cost_model_factory(obj: Any, spec: str) -> Any:
    from hardware.base import Evaluator
    if isinstance(obj, (CostModel, Evaluator)) or callable(obj):
        return obj
    raise UnknownCostModelError(f"{spec!r} is not a CostModel class or factory")


COST_MODELS = Registry("cost model", ENTRY_POINT_GROUP, builtins={
    "analytical": "costmodels.analytical:AnalyticalCostModel",
    "gnn": "costmodels.gnn:GnnCostModel",
    "xgboost": "costmodels.xgb:XgbCostModel",
    "sim": "hardware.simulator:SimulatorCostModel",
}, aliases={"xgb": "xgboost", "simulator": "sim"}, check=_as_cost_model_factory, error=UnknownCostModelError)


def register_cost_model(name: str, cls: Callable[..., CostModel]) -> None:
    """Register a cost-model class (or factory) under a name (case-insensitive)."""
    COST_MODELS.register(name, cls)


def list_cost_models() -> list[str]:
    """Registered, built-in and entry-point names."""
    return COST_MODELS.names()


def _instantiate(obj: Any, spec: str, kw: dict) -> CostModel:
    from hardware.base import Evaluator
    if isinstance(obj, CostModel):
        return obj
    if isinstance(obj, Evaluator):
        return EvaluatorCostModel(obj)
    inst = obj(**kw)
    if isinstance(inst, Evaluator):
        return EvaluatorCostModel(inst)
    if not isinstance(inst, CostModel) and not callable(getattr(inst, "predict", None)):
        raise UnknownCostModelError(f"{spec!r} made a {type(inst).__name__}, which has no predict()")
    return inst


def get_cost_model(spec: "str | CostModel | Any", **kw: Any) -> CostModel:
    """Resolve a cost model: an instance passes through (an Evaluator is wrapped); a class is
    instantiated with **kw; a string is a registered or built-in name, an entry point of group
    `autotune.costmodels`, `module:Class` or `path/to/file.py:Class` (see autotune.plugins)."""
    if not isinstance(spec, str):
        return _instantiate(COST_MODELS.get(spec), getattr(spec, "__name__", type(spec).__name__), kw)
    if not spec.strip():
        raise UnknownCostModelError(f"cost model spec must be a name or module:Class, not {spec!r}")
    return _instantiate(COST_MODELS.get(spec), spec.strip(), kw)
