"""Strategy base class helpers and the registry (names, entry points, module:Class, file.py:Class)."""
from __future__ import annotations

import math
import os
import pickle

import numpy as np
import pytest

import search.base as base
from search.annealing import SimulatedAnnealing
from search.base import Best, Strategy, UnknownStrategyError, get_strategy, list_strategies, register_strategy
from search.genetic import GeneticSearch
from search.random import RandomSearch
from search.topk import TopKTileSearch

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize("name, cls", [("random", RandomSearch), ("annealing", SimulatedAnnealing),
                                       ("genetic", GeneticSearch), ("topk", TopKTileSearch),
                                       ("  Annealing ", SimulatedAnnealing)])
def test_builtin_names(name, cls):
    assert get_strategy(name) is cls


def test_builtins_resolve_without_entry_points(monkeypatch):
    monkeypatch.setattr(base.STRATEGIES, "entry_points", lambda: {})
    monkeypatch.setattr(base.STRATEGIES, "_registered", {})
    assert get_strategy("genetic") is GeneticSearch
    assert {"random", "annealing", "genetic", "topk"} <= set(list_strategies())


def test_module_colon_class():
    assert get_strategy("search.random:RandomSearch") is RandomSearch


def test_class_passes_through():
    assert get_strategy(GeneticSearch) is GeneticSearch


def test_file_path_and_bare_module_name(monkeypatch):
    cls = get_strategy(os.path.join(REPO, "examples", "custom_strategy.py") + ":HillClimb")
    assert issubclass(cls, Strategy) and cls.name == "hillclimb"
    monkeypatch.chdir(REPO)
    assert get_strategy("examples/custom_strategy.py:HillClimb") is cls  # same file, same module
    bare = get_strategy("custom_strategy:HillClimb")  # found as examples/custom_strategy.py
    assert bare.__name__ == "HillClimb" and issubclass(bare, Strategy)


def test_unknown_name_lists_known():
    with pytest.raises(ValueError, match=r"unknown strategy 'nope' \(known: .*annealing.*genetic.*random"):
        get_strategy("nope")
    with pytest.raises(UnknownStrategyError):
        get_strategy("no_such_module_xyz:Thing")
    with pytest.raises(UnknownStrategyError, match="no attribute"):
        get_strategy("search.random:Nope")
    with pytest.raises(UnknownStrategyError, match="not found"):
        get_strategy("missing/dir/file.py:X")
    with pytest.raises(UnknownStrategyError, match="not a strategy"):
        get_strategy("math:pi")
    with pytest.raises(UnknownStrategyError):
        get_strategy("")


def test_register_and_entry_points(monkeypatch):
    class Mine(RandomSearch):
        name = "mine"

    monkeypatch.setattr(base.STRATEGIES, "_registered", dict(base.STRATEGIES._registered))
    assert register_strategy("Mine", Mine) is Mine
    assert get_strategy("MINE") is Mine

    class FakeEP:
        def __init__(self, obj):
            self.obj = obj

        def load(self):
            if isinstance(self.obj, Exception):
                raise self.obj
            return self.obj

    monkeypatch.setattr(base.STRATEGIES, "entry_points", lambda: {"plug": FakeEP(GeneticSearch),
                                                        "broken": FakeEP(ImportError("boom"))})
    assert get_strategy("plug") is GeneticSearch
    assert "plug" in list_strategies()
    with pytest.raises(UnknownStrategyError, match="boom"):
        get_strategy("broken")


def test_best_helper():
    b = Best()
    assert b.config is None and b.cost == math.inf
    assert not b.update(["a"], [math.inf])  # failures never become the best
    assert b.update(["a", "b", "c"], [3.0, 1.0, 2.0]) and (b.config, b.cost) == ("b", 1.0)
    assert not b.update(["d"], [1.0])  # ties keep the first


def test_observe_and_base_state(space):
    s = RandomSearch(space, seed=3)
    cfgs = s.ask(3)
    arr = s.observe(cfgs, [2.0, float("nan"), 1.0])
    assert arr.tolist() == [2.0, math.inf, 1.0] and s.n_told == 3
    assert s.best.config is cfgs[2]
    with pytest.raises(ValueError, match="3 configurations but 2 costs"):
        s.observe(cfgs, [1.0, 2.0])
    d = pickle.loads(pickle.dumps(s.state_dict()))
    t = RandomSearch(space, seed=0)
    t.load_state_dict(d)
    assert t.best.cost == 1.0 and t.best.config.key() == cfgs[2].key()
    assert t.rng.random() == s.rng.random()


def test_strategy_is_abstract(space):
    with pytest.raises(TypeError):
        Strategy(space)  # type: ignore[abstract]

    class Minimal(Strategy):
        name = "minimal"

        def ask(self, n):
            return [self.space.random(self.rng)]

        def tell(self, configs, costs):
            self.observe(configs, costs)

    m = Minimal(space, seed=1)
    assert not m.finished and isinstance(m.rng, np.random.Generator)
    cfgs = m.ask(4)
    m.tell(cfgs, [1e-3])
    assert m.best.cost == 1e-3
