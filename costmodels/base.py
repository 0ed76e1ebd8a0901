"""CostModel interface and registry.

A cost model predicts kernel runtimes: `predict(kernels, tiles=None) -> np.ndarray` of seconds, or of
scores where the model is rank-trained (then `predicts_absolute` is False: only the order within a
kernel's tiles is meaningful). Trainable models add `fit(dataset)`, `save(path)`, `load(path)`.

Cost models keep scikit-learn's estimator conventions (`Estimator`): `__init__` stores its named parameters
and nothing else (an unknown one is a one-line TypeError), `get_params()` reads them back, and what `fit` or
`load` learns lives in attributes ending in `_`, so `is_fitted()` can tell; a learned model used before it is
fitted raises `NotFittedError`. `autotune.testing.contracts.check_cost_model` checks all of this.

Models are found by name through the `COST_MODELS` registry (autotune/plugins.py): a registered or
built-in name (`register_cost_model`), an entry point in the group `autotune.costmodels`, or
`module:Class` (`module.Class` and `path/to/file.py:Class` also work). Any `Evaluator` can serve as a
cost model through `EvaluatorCostModel` (hardware in the loop; failures become +inf).
"""
from __future__ import annotations

import functools
import inspect
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, Callable, ClassVar, Iterable, Optional, Protocol, Sequence, runtime_checkable

import numpy as np

from autotune.plugins import Registry, UnknownPluginError

__all__ = ["CostModel", "Estimator", "NotFittedError", "OldFittedName", "reject_unknown_parameters", "EvaluatorCostModel", "register_cost_model", "get_cost_model", "list_cost_models",
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


class NotFittedError(ValueError):
    """A learned model used before `fit` or `load` (scikit-learn's NotFittedError; a ValueError, so the
    command line prints it in one line)."""


def reject_unknown_parameters(owner: str, given: Iterable[str], known: Iterable[str]) -> None:
    """A TypeError in one line naming the unknown parameters among `given` and the known ones."""
    known = list(known)
    unknown = sorted(set(given) - set(known))
    if unknown:
        raise TypeError(f"{owner} got unknown parameter(s): {', '.join(unknown)} (accepted: {', '.join(known)})")


class Estimator:
    """scikit-learn's estimator conventions:

    * `__init__` stores each named parameter under its own name and does nothing else: no network is built,
      nothing global (torch's random state) is touched, values are validated where they are used (fit,
      predict, load); only an unknown parameter name is refused at once (`reject_unknown_parameters`);
    * `get_params()` reads the parameters back, so `type(m)(**m.get_params())` is an unfitted twin;
    * what `fit` or `load` learns lives in instance attributes whose names end in `_`, which exist only once
      fitted: `is_fitted()` tells, `check_is_fitted()` raises `NotFittedError` in one line. A model whose
      class sets `requires_fit` False (the default) predicts without fitting.
    """

    requires_fit: ClassVar[bool] = False

    def __init_subclass__(cls, **kw: Any) -> None:
        """A subclass's `__init__` of named parameters refuses unknown ones in one line that lists the accepted
        ones (Python's own TypeError names only the unknown one); one taking **kwargs checks them itself."""
        super().__init_subclass__(**kw)
        init = cls.__dict__.get("__init__")
        if init is None:
            return
        params = inspect.signature(init).parameters
        if any(p.kind is p.VAR_KEYWORD for p in params.values()):
            return
        known = [n for n, p in params.items() if n != "self" and p.kind is not p.VAR_POSITIONAL]

        @functools.wraps(init)
        def checked_init(self: Any, *args: Any, **kwargs: Any) -> None:
            reject_unknown_parameters(type(self).__name__, kwargs, known)
            init(self, *args, **kwargs)

        cls.__init__ = checked_init  # type: ignore[method-assign]

    def get_params(self) -> dict:
        """The constructor's named parameters, read from the attributes of the same names."""
        out = {}
        for name, p in inspect.signature(type(self).__init__).parameters.items():
            if name == "self" or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                continue
            if not hasattr(self, name):
                raise AttributeError(f"{type(self).__name__} keeps no attribute {name!r} for its constructor "
                                     f"parameter {name!r} (store each parameter under its own name, or override "
                                     "get_params)")
            out[name] = getattr(self, name)
        return out

    def fitted_attributes(self) -> list:
        """Names of the instance attributes ending in `_` (what fit or load has set), sorted."""
        return sorted(k for k in vars(self) if k.endswith("_") and not k.startswith("__"))

    def is_fitted(self) -> bool:
        """Whether the model can predict: it needs no fitting, or fit/load has set its `_` attributes."""
        return not self.requires_fit or bool(self.fitted_attributes())

    def check_is_fitted(self, what: Optional[str] = None, attributes: Sequence[str] = ()) -> None:
        """NotFittedError unless `is_fitted()` (and every name in `attributes` is set); `what` names the
        model in the message (default: its class)."""
        if not self.is_fitted() or any(not hasattr(self, a) for a in attributes):
            raise NotFittedError(f"the {what or type(self).__name__} is not trained (fit or load it first)")


class OldFittedName:
    """The name a fitted attribute had before the trailing `_` (scripts written before it read and set it):
    reads the new attribute, or `default()` before fit as the old attribute read, and sets the new one."""

    def __init__(self, new: str, default: Callable[[], Any] = lambda: None):
        self.new, self.default = new, default

    def __get__(self, obj: Any, owner: Any = None) -> Any:
        if obj is None:
            return self
        return obj.__dict__[self.new] if self.new in obj.__dict__ else self.default()

    def __set__(self, obj: Any, value: Any) -> None:
        setattr(obj, self.new, value)


@runtime_checkable
class Predictor(Protocol):
    """Anything that prices kernels as a cost model does: `predict(kernels, tiles=None)` -> seconds (or
    scores) per kernel. Every `CostModel` is one; so is the TPU simulator, which prices without the
    measurement store."""

    def predict(self, kernels: Sequence[Any], tiles: Optional[Sequence[Any]] = None) -> np.ndarray: ...


class LayoutModel(Estimator, ABC):
    """A learned model of a program's layout configurations (TpuGraphs' layout task): it scores a
    program's configurations against one another (lower is faster). `score_scale` is the score units per
    unit of log runtime, which turns score differences into runtime ratios."""

    score_scale: float = 1.0

    @abstractmethod
    def prepare(self, name: str, family: str, arrays: dict, analytical_reference_s: Optional[float] = None) -> Any:
        """A program's layout graph, built once (TpuGraphs npz arrays)."""

    @abstractmethod
    def scores(self, graph: Any) -> np.ndarray:
        """One score per configuration of the prepared graph."""

    @abstractmethod
    def predict_layouts(self, name: str, family: str, arrays: dict) -> np.ndarray:
        """`scores` of the configurations of one program's arrays."""


class CostModel(Estimator, ABC):
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

    predicts_absolute = True

    def __init__(self, evaluator: Any):
        self.evaluator = evaluator

    @property
    def name(self) -> str:  # type: ignore[override]
        return f"evaluator:{getattr(self.evaluator, 'name', type(self.evaluator).__name__)}"

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


def _instantiate(obj: Any, spec: str, kw: dict) -> "CostModel | Predictor":
    from hardware.base import Evaluator
    if isinstance(obj, CostModel):
        return obj
    if isinstance(obj, Evaluator):
        return EvaluatorCostModel(obj)
    inst = obj(**kw)
    if isinstance(inst, Evaluator):
        return EvaluatorCostModel(inst)
    if not isinstance(inst, Predictor):
        raise UnknownCostModelError(f"{spec!r} made a {type(inst).__name__}, which has no predict()")
    return inst


def get_cost_model(spec: "str | CostModel | Any", **kw: Any) -> "CostModel | Predictor":
    """Resolve a cost model: an instance passes through (an Evaluator is wrapped); a class is
    instantiated with **kw; a string is a registered or built-in name, an entry point of group
    `autotune.costmodels`, `module:Class` or `path/to/file.py:Class` (see autotune.plugins)."""
    if not isinstance(spec, str):
        return _instantiate(COST_MODELS.get(spec), getattr(spec, "__name__", type(spec).__name__), kw)
    if not spec.strip():
        raise UnknownCostModelError(f"cost model spec must be a name or module:Class, not {spec!r}")
    return _instantiate(COST_MODELS.get(spec), spec.strip(), kw)
