"""`check_strategy`: the ask/tell contracts of search/base.py a strategy keeps (docs/plugins.md)."""
from __future__ import annotations

import math
import pickle
from typing import Any, Callable, Optional, Sequence

import numpy as np


from autotune.testing.contracts.common import (UNKNOWN_PARAMETER, _fail, _first_line, _global_random_state,
    _same_random_state, contract_program)

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
