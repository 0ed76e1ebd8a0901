"""The AutoTVM-style model-based strategy: it beats random search on a fixed tile-tuning problem
with the TPU simulator as the hardware, works on fusion spaces, and keeps its helpers' contracts."""
from __future__ import annotations

import os

import numpy as np
import pytest

pytest.importorskip("xgboost")

from search.base import get_strategy  # noqa: E402
from search.model_based import ModelBasedSearch, failures_last, select_batch  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def tile_problem():
    """The kernel with the most valid tiles of segmentation_medium_train (108 tiles)."""
    from autotune.compiler.fusion import FusionSpace
    from autotune.compiler.program import Program
    from autotune.compiler.tiles import TileSpace
    from hardware.simulator import TpuSimulator
    fs = FusionSpace(Program.from_file(os.path.join(REPO, "examples", "hlo", "segmentation_medium_train.hlo")), "tpu")
    kernel = max(fs.kernels(fs.default()), key=lambda k: len(TileSpace(k, "tpu")))
    tiles = TileSpace(kernel, "tpu").tiles()
    true = TpuSimulator(noise=0.0).simulate([kernel] * len(tiles), tiles)
    return kernel, {t.key(): float(v) for t, v in zip(tiles, true)}, float(np.min(true))


def shipped_quality(name: str, kernel, truth: dict, optimum: float, seed: int, trials: int = 20) -> float:
    """Noise-free time of the best *measured* tile after `trials` measurements / the optimum."""
    from autotune.compiler.tiles import TileSpace
    from hardware.simulator import TpuSimulator
    hw = TpuSimulator(noise=0.015, seed=seed)
    s = get_strategy(name)(TileSpace(kernel, "tpu"), seed=seed)
    best, best_m, n = None, np.inf, 0
    while n < trials:
        cfgs = s.ask(4)
        ms = hw.simulate([kernel] * len(cfgs), cfgs)
        s.tell(cfgs, ms)
        n += len(cfgs)
        for c, m in zip(cfgs, ms):
            if m < best_m:
                best, best_m = c, m
    return truth[best.key()] / optimum


def test_model_based_beats_random_search_on_the_simulator(tile_problem):
    """Mean over 6 seeds of the shipped tile's distance to the optimum, 20 noisy measurements each."""
    kernel, truth, optimum = tile_problem
    mb = [shipped_quality("model-based", kernel, truth, optimum, seed) for seed in range(6)]
    rnd = [shipped_quality("random", kernel, truth, optimum, seed) for seed in range(6)]
    assert np.mean(mb) < np.mean(rnd), (mb, rnd)
    assert np.mean(mb) < 1.02


def test_model_based_scores_whole_tile_spaces_and_never_repeats(tile_problem):
    from autotune.compiler.tiles import TileSpace
    kernel, truth, _ = tile_problem
    s = ModelBasedSearch(TileSpace(kernel, "tpu"), seed=0, epsilon=0.0)
    seen = set()
    while not s.finished:
        cfgs = s.ask(16)
        keys = [c.key() for c in cfgs]
        assert not seen & set(keys)
        seen |= set(keys)
        s.tell(cfgs, [truth[k] for k in keys])
    assert len(seen) == len(truth)
    assert s.fits >= 1


def test_model_based_through_the_tuner_improves_a_fusion_on_the_simulator():
    """Fusion space: annealing on the model proposes; the simulator prices every configuration."""
    from autotune.compiler.fusion import FusionSpace
    from autotune.compiler.program import Program
    from autotune.tuning.tuner import Tuner
    from hardware.simulator import TpuSimulator
    space = FusionSpace(Program.from_file(os.path.join(REPO, "examples", "hlo", "gnn_small_infer.hlo")), "tpu")
    strat = ModelBasedSearch(space, seed=0, sa_chains=8, sa_steps=10)
    result = Tuner(space, TpuSimulator(noise=0.0), strat, budget=None, max_evaluations=320, batch_size=16,
                   progress=False).run()
    assert result.evaluations == 320
    assert result.best_cost < result.default_cost
    assert strat.fits >= 4


def test_select_batch_takes_the_best_and_an_epsilon_share():
    rng = np.random.default_rng(0)
    score = np.arange(100, dtype=float)
    greedy, eps = select_batch(score, np.arange(100), 10, 0.0, rng)
    assert greedy == list(range(10)) and eps == []
    greedy, eps = select_batch(score, np.arange(100), 10, 1.0, rng)
    assert greedy == [] and len(set(eps)) == 10


def test_failures_rank_below_every_success():
    y = failures_last(np.log([1.0, np.inf, 3.0]))
    assert y[1] > y[2] > y[0]


def test_bad_objective_is_an_error(tile_problem):
    from autotune.compiler.tiles import TileSpace
    with pytest.raises(ValueError, match="objective"):
        ModelBasedSearch(TileSpace(tile_problem[0], "tpu"), objective="huber")
