"""Contract suites for plug-in authors, after scikit-learn's `check_estimator`: `check_cost_model` and
`check_strategy` run the small checks that autotune relies on, on a real program, and raise AssertionError
with a one-line message naming the contract a plug-in breaks.

    from autotune.testing.contracts import check_cost_model, check_strategy
    def test_my_model():
        check_cost_model(MyModel)                         # a class, a factory, an instance or a name
    def test_my_strategy():
        check_strategy(MyStrategy, params={"width": 4})   # a class or a name

Both return the names of the contracts they checked (a contract that does not apply is left out: save and
load for a model that cannot be saved, tiles for a fusion-only model). docs/plugins.md describes each.
"""
from __future__ import annotations

import inspect
import math
import os
import pickle
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import numpy as np

__all__ = ["check_cost_model", "check_strategy", "contract_program", "contract_kernels", "contract_dataset",
           "SyntheticFusionCost", "COST_MODEL_CONTRACTS", "STRATEGY_CONTRACTS", "UNKNOWN_PARAMETER"]

PROGRAM = Path(__file__).resolve().parent / "programs" / "dot_product_attention_bf16.hlo"
UNKNOWN_PARAMETER = "no_such_parameter_xyz"  # what the "unknown parameter" contracts pass

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
STRATEGY_CONTRACTS = (
    "unknown parameter is an error",
    "ask returns 1..n distinct valid configurations",
    "tell tolerates order, subsets, failures and strangers",
    "no configuration proposed twice",
    "all failures leave no best",
    "same seed same asks",
    "state_dict round trip resumes identically",
    "global random state untouched",
)


def _fail(subject: str, contract: str, detail: str) -> None:
    detail = " ".join(str(detail).split())
    raise AssertionError(f"{subject} breaks the contract '{contract}': {detail}")


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0] if text else ''}"


# ------------------------------------------------------------------------------------------ inputs
def contract_program() -> Any:
    """The small real program the contracts run on (an attention block, shipped with autotune)."""
    from autotune.compiler.program import Program
    return Program.from_file(str(PROGRAM))


def contract_kernels(target: str = "tpu", program: Any = None, configs: int = 4, seed: int = 0) -> list:
    """Distinct fusion kernels of a program (default: `contract_program`): those of its default configuration
    and of `configs` random ones."""
    from autotune.compiler.fusion import FusionSpace
    space = FusionSpace(program if program is not None else contract_program(), target)
    rng = np.random.default_rng(seed)
    out: dict = {}
    for cfg in [space.default()] + [space.random(rng) for _ in range(configs)]:
        for k in space.kernels(cfg):
            out.setdefault(k.hash, k)
    return list(out.values())


_DATASETS: dict = {}


def contract_dataset(task: str, target: str = "tpu") -> Any:
    """A tiny dataset of `contract_program` measured on the simulator (every program in the train split),
    built once per process in a temporary directory: enough to check that a learned model fits."""
    key = (task, target)
    if key not in _DATASETS:
        import json
        from autotune.tuning.dataset import build_dataset
        root = Path(tempfile.mkdtemp(prefix=f"autotune-contract-{task}-"))
        (root / "programs").mkdir()
        (root / "programs" / PROGRAM.name).write_text(PROGRAM.read_text())
        (root / "split.json").write_text(json.dumps({"train": [PROGRAM.stem], "validation": [], "test": []}))
        _DATASETS[key] = build_dataset(root / "programs", task, "sim", target=target, configs_per_program=6,
                                       out_dir=root / "dataset", split_file=str(root / "split.json"), seed=0,
                                       max_tiles_per_kernel=8)
    return _DATASETS[key]


def _global_random_state() -> tuple:
    """numpy's and (once imported) torch's global random states. (Not Python's `random`: importing some
    libraries draws from it, xgboost among them.)"""
    torch = sys.modules.get("torch")
    return np.random.get_state(), (torch.random.get_rng_state() if torch is not None else None)


def _same_random_state(a: tuple, b: tuple) -> bool:
    (np_a, torch_a), (np_b, torch_b) = a, b
    if np_a[0] != np_b[0] or not np.array_equal(np_a[1], np_b[1]) or np_a[2:] != np_b[2:]:
        return False
    return torch_a is None or torch_b is None or bool((torch_a == torch_b).all())


def _same_params(a: dict, b: dict) -> bool:
    if a.keys() != b.keys():
        return False
    for k in a:
        try:
            if not bool(np.all(a[k] == b[k])):
                return False
        except Exception:  # noqa: BLE001 - values that do not compare: the same object or not
            if a[k] is not b[k]:
                return False
    return True


# -------------------------------------------------------------------------------------- cost models
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
class SyntheticFusionCost:
    """A cheap, structured cost of fusion configurations (seconds): per kernel a launch overhead, a cost
    growing with its size and a superlinear penalty for oversized kernels, plus a little noise derived from
    the kernel's hash; memoized by kernel hash. The default (maximal fusion) is not optimal, and local moves
    have a gradient to follow."""

    def __init__(self, space: Any):
        self.space = space
        self.cache: dict = {}
        self.calls = 0

    @staticmethod
    def kernel_cost(h: str, n: int) -> float:
        u = int(h[:8], 16) / 16 ** 8
        return 1.0 + 0.02 * n + 0.5 * (n / 32.0) ** 2 + 0.2 * u

    def __call__(self, cfg: Any) -> float:
        self.calls += 1
        total = 0.0
        for ref in self.space.state(cfg).refs():
            c = self.cache.get(ref.hash)
            if c is None:
                c = self.cache[ref.hash] = self.kernel_cost(ref.hash, len(ref.members))
            total += c * self.space.multiplicity[ref.comp]
        return total * 1e-6

    def many(self, configs: Sequence[Any]) -> list:
        return [self(c) for c in configs]


class _ModelCost:
    """The analytical model's seconds of the tiles of a tile space's kernel."""

    def __init__(self, space: Any):
        from costmodels.analytical import AnalyticalCostModel
        self.space, self.model = space, AnalyticalCostModel(getattr(space, "target", "tpu"))

    def many(self, configs: Sequence[Any]) -> list:
        if not len(configs):
            return []
        return [float(x) for x in self.model.predict([self.space.kernel] * len(configs), list(configs))]


def _default_cost(space: Any) -> Any:
    if callable(getattr(space, "state", None)):
        return SyntheticFusionCost(space)
    if getattr(space, "kernel", None) is not None:
        return _ModelCost(space)
    raise ValueError(f"check_strategy has no cost for a {type(space).__name__}: give cost=")


class _Subject:
    """The strategy under check: its class, parameters, spaces and costs."""

    def __init__(self, cls: type, params: dict, space_factory: Callable[[], Any], cost_of: Callable[[Any], Any]):
        self.cls, self.params, self.space_factory, self.cost_of = cls, params, space_factory, cost_of

    def make(self, space: Any, seed: int = 0, **extra: Any) -> Any:
        return self.cls(space, seed=seed, **self.params, **extra)


def check_strategy(strategy_cls_or_name: Any, *, params: Optional[dict] = None,
                   space_factory: Optional[Callable[[], Any]] = None,
                   cost: Optional[Callable[[Any], Any]] = None) -> list:
    """Check a search strategy against the ask/tell contracts of search/base.py; returns the names checked.

    `strategy_cls_or_name`: a Strategy class or a spec of `search.base.get_strategy`; `params`: its keyword
    parameters (small ones keep the check fast); `space_factory()`: a new space each call (default: the fusion
    space of `contract_program` on tpu); `cost(space)`: an object whose `many(configs)` gives their seconds
    (default: `SyntheticFusionCost` for a fusion space, the analytical model for a tile space).
    """
    from search.base import get_strategy
    state_before = _global_random_state()
    cls = get_strategy(strategy_cls_or_name)
    if space_factory is None:
        from autotune.compiler.fusion import FusionSpace
        program = contract_program()

        def space_factory() -> Any:
            return FusionSpace(program, "tpu")
    subject = _Subject(cls, dict(params or {}), space_factory, cost or _default_cost)
    done = []
    for name, check in STRATEGY_CHECKS:
        check(subject, lambda detail, name=name: _fail(cls.__name__, name, detail))
        done.append(name)
    if not _same_random_state(state_before, _global_random_state()):
        _fail(cls.__name__, "global random state untouched", "the strategy changed numpy's or torch's global "
                                                             "random state (draw from self.rng)")
    done.append("global random state untouched")
    return done


def _key_of(space: Any) -> Callable[[Any], Any]:
    """A hashable key of a configuration: its `space.encode`."""
    def key(cfg: Any) -> Any:
        k = space.encode(cfg)
        return k if isinstance(k, (bytes, str, int, tuple)) else pickle.dumps(k)
    return key


def _drive(strategy: Any, cost: Any, steps: int, key: Callable, n: int = 16) -> list:
    """ask/tell for `steps` rounds (or until the strategy is finished); the asked keys in order."""
    keys = []
    for _ in range(steps):
        cfgs = strategy.ask(n)
        if not cfgs and strategy.finished:
            break
        keys += [key(c) for c in cfgs]
        strategy.tell(cfgs, cost.many(cfgs))
    return keys


def _valid(space: Any, cfg: Any) -> bool:
    check = getattr(space, "is_valid", None)
    return bool(check(cfg)) if callable(check) else True


def _check_strategy_unknown_parameter(sub: _Subject, fail: Callable) -> None:
    try:
        sub.make(sub.space_factory(), **{UNKNOWN_PARAMETER: 3})
    except (TypeError, ValueError) as e:
        if UNKNOWN_PARAMETER not in str(e):
            fail(f"the error does not name the parameter ({_first_line(e)})")
        return
    fail(f"{UNKNOWN_PARAMETER}=3 was accepted (pass unknown parameters on to Strategy.__init__, which refuses them)")


def _check_ask(sub: _Subject, fail: Callable) -> None:
    space = sub.space_factory()
    s, cost, key = sub.make(space), sub.cost_of(space), _key_of(space)
    for n in (1, 3, 64, 2):
        cfgs = s.ask(n)
        if not cfgs and s.finished:
            return
        if not 1 <= len(cfgs) <= n:
            fail(f"ask({n}) returned {len(cfgs)} configurations (and finished is False)")
        if len({key(c) for c in cfgs}) != len(cfgs):
            fail(f"ask({n}) returned the same configuration twice")
        if not all(_valid(space, c) for c in cfgs):
            fail(f"ask({n}) returned an invalid configuration")
        s.tell(cfgs, cost.many(cfgs))


def _check_tell(sub: _Subject, fail: Callable) -> None:
    space = sub.space_factory()
    s, cost = sub.make(space), sub.cost_of(space)
    cfgs = s.ask(8)
    if len(cfgs) < 3 and not s.finished:  # e.g. a hill climber's first ask is its starting point alone
        s.tell(cfgs, cost.many(cfgs))
        cfgs = s.ask(8)
    costs = cost.many(cfgs)
    # reversed order, one never told, one failure (inf), one NaN, plus a configuration never asked
    told, tc = list(reversed(cfgs[1:])), list(reversed(costs[1:]))
    if tc:
        tc[0] = math.inf
    if len(tc) > 1:
        tc[1] = float("nan")
    stranger = space.random(np.random.default_rng(99))
    try:
        s.tell(told + [stranger], tc + cost.many([stranger]))
        for _ in range(3):
            more = s.ask(8)
            if not more and s.finished:
                break
            if not more or not all(_valid(space, c) for c in more):
                fail("after such a tell, ask returned nothing or an invalid configuration")
            s.tell(more, cost.many(more))
    except AssertionError:
        raise
    except Exception as e:  # noqa: BLE001 - any other failure is the contract's
        fail(f"raised {_first_line(e)}")
    if not math.isfinite(getattr(getattr(s, "best", None), "cost", math.inf)):
        fail("best.cost is not the best finite cost told (call self.observe in tell)")
    try:
        s.tell([stranger], [1.0, 1.0])
    except ValueError:
        return
    fail("tell with more costs than configurations did not raise ValueError")


def _check_no_repeats(sub: _Subject, fail: Callable) -> None:
    space = sub.space_factory()
    keys = _drive(sub.make(space), sub.cost_of(space), 20, _key_of(space))
    if len(keys) != len(set(keys)):
        fail(f"{len(keys) - len(set(keys))} of {len(keys)} asked configurations (all told) had been asked before")


def _check_all_failures(sub: _Subject, fail: Callable) -> None:
    s = sub.make(sub.space_factory())
    for _ in range(3):
        cfgs = s.ask(4)
        s.tell(cfgs, [math.inf] * len(cfgs))
    best = getattr(s, "best", None)
    if best is None or best.config is not None or best.cost != math.inf:
        fail("after only failures (inf) the strategy has a best configuration")
    if not s.ask(4) and not s.finished:
        fail("after only failures ask returned nothing (and finished is False)")


def _check_same_seed(sub: _Subject, fail: Callable) -> None:
    asked = []
    for _ in range(2):
        space = sub.space_factory()  # separate spaces: no shared caches
        asked.append(_drive(sub.make(space, seed=7), sub.cost_of(space), 8, _key_of(space)))
    if asked[0] != asked[1]:
        fail("two instances with seed 7 asked different configurations for the same costs")


def _check_state_round_trip(sub: _Subject, fail: Callable) -> None:
    for pending in (False, True):
        space, other = sub.space_factory(), sub.space_factory()
        cost, other_cost = sub.cost_of(space), sub.cost_of(other)
        a = sub.make(space, seed=5)
        _drive(a, cost, 6, _key_of(space))
        cfgs = a.ask(16) if pending else []
        when = "between ask and tell" if pending else "after tell"
        try:
            state = pickle.loads(pickle.dumps(a.state_dict()))
            b = sub.make(other, seed=12345)  # another seed: everything must come from the state
            b.load_state_dict(state)
        except Exception as e:  # noqa: BLE001 - any failure here is the contract's
            fail(f"state_dict {when} did not pickle and load ({_first_line(e)})")
        if b.best.cost != a.best.cost:
            fail(f"the strategy loaded {when} has another best cost")
        if pending:
            costs = cost.many(cfgs)
            a.tell(cfgs, costs)
            b.tell([other.decode(space.encode(c)) for c in cfgs], costs)
        if _drive(a, cost, 6, _key_of(space)) != _drive(b, other_cost, 6, _key_of(other)):
            fail(f"a strategy loaded from its state_dict {when} asks differently from the original")


STRATEGY_CHECKS = (
    ("unknown parameter is an error", _check_strategy_unknown_parameter),
    ("ask returns 1..n distinct valid configurations", _check_ask),
    ("tell tolerates order, subsets, failures and strangers", _check_tell),
    ("no configuration proposed twice", _check_no_repeats),
    ("all failures leave no best", _check_all_failures),
    ("same seed same asks", _check_same_seed),
    ("state_dict round trip resumes identically", _check_state_round_trip),
)
