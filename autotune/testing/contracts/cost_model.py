"""`check_cost_model`: the contracts of costmodels/base.py a cost model keeps (docs/plugins.md)."""
from __future__ import annotations

import inspect
import os
import tempfile
from typing import Any, Callable, Optional

import numpy as np


from autotune.testing.contracts.common import (UNKNOWN_PARAMETER, _fail, _first_line, _global_random_state,
    _same_params, _same_random_state, contract_dataset, contract_kernels)

COST_MODEL_CONTRACTS = (
    "get_params round trip",
    "__init__ only stores its parameters",
    "unknown constructor parameter is refused",
    "predict before fit is one clear error",
    "fit marks fitted state",
    "one finite value per kernel",
    "deterministic predictions",
    "empty input",
    "order equivariance",
    "batch independence",
    "tiles are priced",
    "save and load round trip",
    "fitting is reproducible",
    "global random state untouched",
)


def _resolve_model(model_or_factory: Any, task: Optional[str], target: Optional[str]) -> tuple:
    """(model, factory or None): a name through autotune.api.make_cost_model (a learned name is its shipped
    model), a class or factory called with the task and target it takes, an instance as it is."""
    from autotune import api
    from costmodels.base import COST_MODELS
    if isinstance(model_or_factory, str):
        found = COST_MODELS.get(model_or_factory) if ":" in model_or_factory else None
        if found is not None and callable(found) and not api.is_learned_spec(model_or_factory):
            model_or_factory = found
        else:
            return api.make_cost_model(model_or_factory, task or "fusion", target or "tpu"), None
    if callable(model_or_factory) and not callable(getattr(model_or_factory, "predict", None)) \
            or isinstance(model_or_factory, type):
        factory = model_or_factory
        kw = {k: v for k, v in (("task", task), ("target", target)) if v is not None}
        try:
            names = inspect.signature(factory).parameters
            kw = {k: v for k, v in kw.items() if k in names}
        except (TypeError, ValueError):
            kw = {}
        return factory(**kw), (lambda **more: factory(**kw, **more))
    return model_or_factory, None


def _twin_factory(model: Any, factory: Optional[Callable]) -> Optional[Callable]:
    """Makes unfitted copies: the model's class from its `get_params()`, else the factory given."""
    get_params = getattr(model, "get_params", None)
    if callable(get_params):
        return lambda **more: type(model)(**get_params(), **more)
    return factory


def _is_learned(model: Any) -> bool:
    return bool(getattr(model, "requires_fit", False))


def _is_fitted(model: Any) -> bool:
    check = getattr(model, "is_fitted", None)
    return bool(check()) if callable(check) else True


def _can_save(model: Any) -> bool:
    from costmodels.base import CostModel
    save, load = getattr(type(model), "save", None), getattr(type(model), "load", None)
    if save is None or load is None:
        return False
    return not (isinstance(model, CostModel) and save is CostModel.save)


def check_cost_model(model_or_factory: Any, *, task: Optional[str] = None, target: Optional[str] = None,
                     program: Any = None, dataset: Any = None, fit_params: Optional[dict] = None) -> list:
    """Check a cost model against autotune's contracts; returns the names of the contracts checked.

    `model_or_factory`: an instance, a class or factory (called with the `task` and `target` it takes), or a
    cost-model spec of `autotune.api.make_cost_model` (`gnn` is the shipped GNN). `task` ("fusion" or "tile";
    default the model's `task`, else fusion) and `target` (default the model's, else tpu) choose the kernels, of
    `program` (default `contract_program`). A learned model (`requires_fit`) that is not fitted is fitted on
    `dataset` (default `contract_dataset`, on the simulator: tpu targets) with `fit_params`.
    """
    state_before = _global_random_state()
    model, factory = _resolve_model(model_or_factory, task, target)
    subject = type(model).__name__
    task = task or getattr(model, "task", None) or "fusion"
    target = target or getattr(model, "target", None) or "tpu"
    target = target if isinstance(target, str) else getattr(target, "name", str(target))
    if task not in ("fusion", "tile"):
        raise ValueError(f"check_cost_model checks kernel cost models (task fusion or tile), not task {task!r}")
    done: list = []

    def fail(contract: str, detail: str) -> None:
        _fail(subject, contract, detail)

    if callable(getattr(model, "get_params", None)):
        _check_params(model, fail)
        done += ["get_params round trip", "__init__ only stores its parameters"]
    twin = _twin_factory(model, factory)
    if twin is not None:
        _check_unknown_parameter(twin, fail)
        done.append("unknown constructor parameter is refused")

    kernels = contract_kernels(target, program)
    if _is_learned(model):
        if twin is not None:
            _check_unfitted(twin(), kernels, fail)
            done.append("predict before fit is one clear error")
        if not _is_fitted(model):
            ds = dataset if dataset is not None else contract_dataset(task, target)
            model.fit(ds, **(fit_params or {}))
            fitted = getattr(model, "fitted_attributes", lambda: [k for k in vars(model) if k.endswith("_")])()
            if not _is_fitted(model) or not fitted:
                fail("fit marks fitted state", "after fit no attribute ends in '_' (or is_fitted() is False)")
            done.append("fit marks fitted state")
            if twin is not None:
                other = twin().fit(ds, **(fit_params or {}))
                a, b = np.asarray(model.predict(kernels)), np.asarray(other.predict(kernels))
                if not np.array_equal(a, b):
                    fail("fitting is reproducible", f"two fits with the same parameters predict differently "
                                                    f"(largest difference {np.max(np.abs(a - b)):.3g})")
                done.append("fitting is reproducible")

    absolute = bool(getattr(model, "predicts_absolute", True))
    _check_predictions(model, kernels, absolute, fail)
    done += ["one finite value per kernel", "deterministic predictions", "empty input", "order equivariance",
             "batch independence"]
    if task == "tile":
        _check_tiles(model, kernels, target, fail)
        done.append("tiles are priced")
    if _can_save(model) and _is_fitted(model):
        _check_save_load(model, kernels, fail)
        done.append("save and load round trip")
    if not _same_random_state(state_before, _global_random_state()):
        fail("global random state untouched", "constructing, fitting or predicting changed numpy's or torch's "
                                              "global random state (seed a local generator instead)")
    done.append("global random state untouched")
    return done


def _check_unknown_parameter(twin: Callable, fail: Callable) -> None:
    contract = "unknown constructor parameter is refused"
    try:
        twin(**{UNKNOWN_PARAMETER: 1})
    except (TypeError, ValueError) as e:
        if UNKNOWN_PARAMETER not in str(e) or "\n" in str(e).strip():
            fail(contract, f"the error does not name the parameter in one line ({_first_line(e)})")
        return
    fail(contract, f"{UNKNOWN_PARAMETER}=1 was accepted (raise a TypeError naming it and the known parameters)")


def _check_params(model: Any, fail: Callable) -> None:
    try:
        params = model.get_params()
        twin = type(model)(**params)
    except Exception as e:  # noqa: BLE001 - any failure here is the contract's
        fail("get_params round trip", f"type(model)(**model.get_params()) failed ({_first_line(e)})")
    if not _same_params(twin.get_params(), params):
        fail("get_params round trip", "a twin made from get_params() has other parameters")
    extra = sorted(k for k in vars(twin) if not k.startswith("_") and k not in params)
    if extra:
        fail("__init__ only stores its parameters", f"__init__ sets attribute(s) {', '.join(extra)} that are not its "
                                                    "parameters (fitted state ends in '_' and is set by fit or load)")


def _check_unfitted(model: Any, kernels: list, fail: Callable) -> None:
    contract = "predict before fit is one clear error"
    if _is_fitted(model):
        fail(contract, "a model made from its parameters already says it is fitted")
    try:
        model.predict(kernels[:2])
    except ValueError as e:
        if not str(e).strip() or "\n" in str(e).strip():
            fail(contract, f"the error is not one line ({_first_line(e)})")
        return
    except Exception as e:  # noqa: BLE001
        fail(contract, f"raised {_first_line(e)}, not a ValueError (costmodels.base.NotFittedError)")
    fail(contract, "an unfitted learned model predicted")


def _check_predictions(model: Any, kernels: list, absolute: bool, fail: Callable) -> None:
    n = len(kernels)
    out = model.predict(kernels)
    if not isinstance(out, np.ndarray) or out.shape != (n,) or not np.issubdtype(out.dtype, np.floating):
        got = f"{type(out).__name__} of shape {getattr(out, 'shape', None)}, dtype {getattr(out, 'dtype', None)}"
        fail("one finite value per kernel", f"predict of {n} kernels returned {got}, not a float array of shape ({n},)")
    if not np.isfinite(out).all():
        fail("one finite value per kernel", f"{int((~np.isfinite(out)).sum())} of {n} predictions are not finite")
    if absolute and (out < 0).any():
        fail("one finite value per kernel", f"{int((out < 0).sum())} of {n} predicted seconds are negative")
    again = np.asarray(model.predict(kernels))
    if not np.array_equal(again, out):
        fail("deterministic predictions", "predicting the same kernels twice gave different values")
    empty = model.predict([])
    if not isinstance(empty, np.ndarray) or empty.shape != (0,):
        fail("empty input", f"predict([]) returned {type(empty).__name__} of shape {getattr(empty, 'shape', None)}")
    scale = float(np.max(np.abs(out))) if n else 1.0
    reverse = np.asarray(model.predict(kernels[::-1]))[::-1]
    if not np.allclose(reverse, out, rtol=1e-6, atol=1e-9 * scale):
        fail("order equivariance", "predictions of the kernels in reverse order are not the reversed predictions")
    for i in (0, n // 2, n - 1):
        alone = np.asarray(model.predict([kernels[i]]))
        if alone.shape != (1,) or not np.allclose(alone, out[i:i + 1], rtol=1e-6, atol=1e-9 * scale):
            fail("batch independence", f"kernel {i} predicted alone differs from kernel {i} predicted among {n}")


def _check_tiles(model: Any, kernels: list, target: str, fail: Callable) -> None:
    from autotune.compiler.tiles import TileSpace, default_tile
    contract = "tiles are priced"
    spaces = [(k, TileSpace(k, target).tiles()) for k in kernels]
    k, tiles = max(spaces, key=lambda kt: len(kt[1]))
    if len(tiles) < 2:
        return
    items = [(k, t) for k, ts in spaces for t in ts[:4]]
    out = model.predict([k for k, _ in items], [t for _, t in items])
    if not isinstance(out, np.ndarray) or out.shape != (len(items),) or not np.isfinite(out).all():
        fail(contract, f"predict of {len(items)} (kernel, tile) pairs did not return as many finite values")
    pair = np.asarray(model.predict([k, k], [None, default_tile(k, target)]))
    if pair.shape != (2,) or not np.allclose(pair[0], pair[1], rtol=1e-6):
        fail(contract, "a tile of None is not priced as the kernel's default tile (autotune.compiler.tiles.default_tile)")
    mine = np.asarray(model.predict([k] * len(tiles), tiles))
    if np.ptp(mine) == 0:
        fail(contract, f"the {len(tiles)} tiles of one kernel all get the same value (the tiles are ignored)")


def _check_save_load(model: Any, kernels: list, fail: Callable) -> None:
    contract = "save and load round trip"
    before = np.asarray(model.predict(kernels))
    with tempfile.TemporaryDirectory(prefix="autotune-contract-") as d:
        path = os.path.join(d, "saved-model")
        try:
            model.save(path)
            back = type(model).load(path)
        except Exception as e:  # noqa: BLE001
            fail(contract, f"save then load failed ({_first_line(e)})")
    if not _is_fitted(back):
        fail(contract, "the loaded model says it is not fitted")
    after = np.asarray(back.predict(kernels))
    if not np.array_equal(after, before):
        fail(contract, "the loaded model predicts differently from the saved one")


# --------------------------------------------------------------------------------------- strategies
