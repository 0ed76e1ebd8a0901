"""TopKTileSearch with fake tile spaces, cost models and evaluators (duck typing), plus one real run
through autotune.compiler.tiles when it is importable."""
from __future__ import annotations

import math
import pickle
from dataclasses import dataclass
from typing import Optional

import numpy as np
import pytest

from search.base import get_strategy
from search.topk import TopKTileSearch, order_by_prediction, select_best_measured


@dataclass(frozen=True)
class FakeKernel:
    hash: str
    size: int


class FakeTileSpace:
    """Tiles are ints 1..size; encode/decode as strings."""

    def __init__(self, kernel: FakeKernel, target=None):
        self.kernel = kernel
        self.target = target

    def tiles(self) -> list:
        return list(range(1, self.kernel.size + 1))

    def encode(self, t) -> str:
        return str(t)

    def decode(self, s: str) -> int:
        return int(s)


class FakeModel:
    """Predicts (tile - best)^2 with the best tile at size // 3; counts calls."""

    def __init__(self):
        self.calls = []

    def predict(self, kernels, tiles=None):
        self.calls.append(len(kernels))
        assert tiles is not None and len(tiles) == len(kernels)
        return np.array([(t - k.size // 3) ** 2 + 0.01 * t for k, t in zip(kernels, tiles)], float)


@dataclass
class Measurement:
    seconds: Optional[float]
    status: str = "ok"

    @property
    def ok(self) -> bool:
        return self.status == "ok" and self.seconds is not None


class FakeEvaluator:
    def __init__(self, seconds: dict, fail: set = frozenset()):
        self.seconds, self.fail, self.calls = seconds, fail, 0

    def measure(self, kernels, tiles=None):
        self.calls += 1
        return [Measurement(None, "crash: x") if t in self.fail else Measurement(self.seconds.get(t, 1.0))
                for t in tiles]


KERNELS = [FakeKernel("a", 30), FakeKernel("b", 3), FakeKernel("c", 12)]


def test_candidates_are_the_k_best_in_predicted_order():
    model = FakeModel()
    s = TopKTileSearch(cost_model=model, k=4, space_factory=FakeTileSpace)
    cands = s.candidates(KERNELS)
    assert cands[0] == [10, 9, 11, 8]
    assert cands[1] == [1, 2, 3]  # fewer tiles than K: all of them
    assert cands[2] == [4, 3, 5, 2]
    assert model.calls == [45]  # one batched call for all kernels
    ranked = s.rank(KERNELS[:1])[0]
    assert len(ranked[0]) == 30 and list(ranked[1]) == sorted(ranked[1])


def test_batching_gives_the_same_answer():
    model = FakeModel()
    small = TopKTileSearch(cost_model=model, k=5, space_factory=FakeTileSpace, max_batch=7)
    assert small.candidates(KERNELS) == TopKTileSearch(cost_model=FakeModel(), k=5,
                                                       space_factory=FakeTileSpace).candidates(KERNELS)
    assert max(model.calls) <= 7 and sum(model.calls) == 45


def test_nonfinite_predictions_go_last_and_ties_are_stable():
    assert order_by_prediction([3.0, float("nan"), 1.0, math.inf, 1.0]).tolist() == [2, 4, 0, 1, 3]


def test_bad_model_output_and_missing_model():
    class Short:
        def predict(self, kernels, tiles=None):
            return np.zeros(len(kernels) - 1)

    with pytest.raises(ValueError, match="predictions"):
        TopKTileSearch(cost_model=Short(), space_factory=FakeTileSpace).candidates(KERNELS[:1])
    with pytest.raises(ValueError, match="cost_model"):
        TopKTileSearch()


def test_select_best_measured():
    k = KERNELS[0]
    ev = FakeEvaluator({10: 3.0, 9: 2.0, 11: 2.0, 8: 5.0}, fail={9})
    best, ms = select_best_measured(k, [10, 9, 11, 8], ev)
    assert best == 11 and len(ms) == 4 and not ms[1].ok and ev.calls == 1
    assert select_best_measured(k, [9], ev)[0] is None  # all failed: caller keeps its default
    assert select_best_measured(k, [], ev) == (None, [])


def test_as_a_strategy_on_one_kernel():
    space = FakeTileSpace(KERNELS[2])
    s = get_strategy("topk")(space, seed=0, cost_model=FakeModel(), k=5)
    assert s.ask(2) == [4, 3]
    state = pickle.loads(pickle.dumps(s.state_dict()))
    assert s.ask(10) == [5, 2, 6] and s.finished
    s.tell([4, 3, 5], [2.0, 1.0, math.inf])
    assert s.best.config == 3
    r = TopKTileSearch(FakeTileSpace(KERNELS[2]), cost_model=FakeModel(), k=5)
    r.load_state_dict(state)
    assert r.ask(10) == [5, 2, 6] and r.finished


def test_with_real_tile_spaces(program):
    """Integration with autotune.compiler.tiles and the analytical model (skipped while they are unavailable)."""
    from autotune.compiler.fusion import FusionSpace
    from autotune.compiler.tiles import TileSpace
    from costmodels.analytical import AnalyticalCostModel
    space = FusionSpace(program, "tpu")
    kernels = space.kernels(space.default())[:4]
    model = AnalyticalCostModel("tpu")
    spaces = [TileSpace(k, "tpu") for k in kernels]
    s = TopKTileSearch(cost_model=model, k=3, target="tpu")
    cands = s.candidates(kernels)
    for k, sp, c in zip(kernels, spaces, cands):
        assert 1 <= len(c) <= 3 and all(t in set(sp.tiles()) for t in c)
        pred = model.predict([k] * len(c), c)
        assert list(pred) == sorted(pred)
