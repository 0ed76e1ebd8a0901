"""CostModel interface and registry.

A cost model predicts kernel runtimes: `predict(kernels, tiles=None) -> np.ndarray` of seconds, or of
scores where the model is rank-trained (then `predicts_absolute` is False: only the order within a
kernel's tiles is meaningful). Trainable models add `fit(dataset)`, `save(path)`, `load(path)`.

Models are found by name: a registered name (`register_cost_model`), an entry point in the group
`autotune.costmodels`, or `module:Class` (`module.Class` also works). Any `Evaluator` can serve as a
cost model through `EvaluatorCostModel` (hardware in the loop; failures become +inf).
"""
from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from typing import Any, Callable, Optional, Sequence

import numpy as np

__all__ = ["CostModel", "EvaluatorCostModel", "register_cost_model", "get_cost_model", "list_cost_models",
           "UnknownCostModelError", "ENTRY_POINT_GROUP", "check_model_scope"]

ENTRY_POINT_GROUP = "autotune.costmodels"


class UnknownCostModelError(ValueError):
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
_REGISTRY: dict[str, Callable[..., CostModel]] = {}
_BUILTIN_MODULES = {"analytical": "costmodels.analytical", "sim": "hardware.simulator",
                    "simulator": "hardware.simulator", "gnn": "costmodels.gnn", "xgboost": "costmodels.xgb",
                    "xgb": "costmodels.xgb"}


def register_cost_model(name: str, cls: Callable[..., CostModel]) -> None:
    """Register a cost-model class (or factory) under a name (case-insensitive)."""
    if not name or not isinstance(name, str):
        raise ValueError("cost model name must be a non-empty string")
    _REGISTRY[name.strip().lower()] = cls


def _entry_points() -> dict:
    try:
        from importlib.metadata import entry_points
        eps = entry_points()
        group = eps.select(group=ENTRY_POINT_GROUP) if hasattr(eps, "select") else eps.get(ENTRY_POINT_GROUP, [])
        return {ep.name.lower(): ep for ep in group}
    except Exception:  # noqa: BLE001 - broken metadata must not break look-ups
        return {}


def list_cost_models() -> list[str]:
    """Registered names and entry-point names (builtins included)."""
    for mod in set(_BUILTIN_MODULES.values()):
        try:
            importlib.import_module(mod)
        except Exception:  # noqa: BLE001
            pass
    return sorted(set(_REGISTRY) | set(_entry_points()))


def _load_object(spec: str) -> Any:
    if ":" in spec:
        mod_name, _, attr = spec.partition(":")
    else:
        mod_name, _, attr = spec.rpartition(".")
    if not mod_name or not attr:
        raise UnknownCostModelError(f"bad cost model spec {spec!r}: use a name or module:Class")
    try:
        mod = importlib.import_module(mod_name)
    except ImportError as exc:
        raise UnknownCostModelError(f"cannot import module {mod_name!r} for cost model {spec!r}: {exc}") from None
    obj = mod
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise UnknownCostModelError(f"module {mod_name!r} has no attribute {attr!r} (cost model {spec!r})")
        obj = getattr(obj, part)
    return obj


def _instantiate(obj: Any, spec: str, kw: dict) -> CostModel:
    from hardware.base import Evaluator
    if isinstance(obj, CostModel):
        return obj
    if isinstance(obj, Evaluator):
        return EvaluatorCostModel(obj)
    if not callable(obj):
        raise UnknownCostModelError(f"{spec!r} is not a CostModel class or factory")
    inst = obj(**kw)
    if isinstance(inst, Evaluator):
        return EvaluatorCostModel(inst)
    if not isinstance(inst, CostModel) and not callable(getattr(inst, "predict", None)):
        raise UnknownCostModelError(f"{spec!r} made a {type(inst).__name__}, which has no predict()")
    return inst


def get_cost_model(spec: "str | CostModel | Any", **kw: Any) -> CostModel:
    """Resolve a cost model: an instance passes through (an Evaluator is wrapped); a string is a
    registered name, an entry point of group `autotune.costmodels`, or `module:Class`."""
    from hardware.base import Evaluator
    if isinstance(spec, CostModel):
        return spec
    if isinstance(spec, Evaluator):
        return EvaluatorCostModel(spec)
    if isinstance(spec, type):
        return _instantiate(spec, spec.__name__, kw)
    if not isinstance(spec, str) or not spec.strip():
        raise UnknownCostModelError(f"cost model spec must be a name or module:Class, not {spec!r}")
    text = spec.strip()
    key = text.lower()
    if key not in _REGISTRY and key in _BUILTIN_MODULES:
        importlib.import_module(_BUILTIN_MODULES[key])
    if key in _REGISTRY:
        return _instantiate(_REGISTRY[key], text, kw)
    eps = _entry_points()
    if key in eps:
        try:
            obj = eps[key].load()
        except Exception as exc:  # noqa: BLE001
            raise UnknownCostModelError(f"entry point {key!r} ({ENTRY_POINT_GROUP}) failed to load: {exc}") from None
        return _instantiate(obj, text, kw)
    if ":" in text or "." in text:
        return _instantiate(_load_object(text), text, kw)
    known = ", ".join(list_cost_models()) or "(none)"
    raise UnknownCostModelError(f"unknown cost model {spec!r}; known: {known}; or give module:Class")
