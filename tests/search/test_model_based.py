"""The AutoTVM-style model-based strategy: it beats random search on a fixed tile-tuning problem
with the TPU simulator as the hardware, works on fusion spaces, and keeps its helpers' contracts."""
from __future__ import annotations

import os

import numpy as np
import pytest

pytest.importorskip("xgboost")

from search.base import get_strategy  # noqa: E402
from search.model_based import (ModelBasedSearch, diverse_batch, failures_last, prior_margin,  # noqa: E402
                               select_batch)

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
    from autotune.tuning.options import TunerOptions
    from autotune.tuning.tuner import Tuner
    from hardware.simulator import TpuSimulator
    space = FusionSpace(Program.from_file(os.path.join(REPO, "examples", "hlo", "gnn_small_infer.hlo")), "tpu")
    strat = ModelBasedSearch(space, seed=0, sa_chains=8, sa_steps=10)
    result = Tuner(space, TpuSimulator(noise=0.0), strat, budget=None,
                   options=TunerOptions(max_evaluations=320, batch_size=16, progress=False)).run()
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


def test_epsilon_share_is_binomial_and_drawn_from_the_rest():
    """Over many batches the random share averages epsilon; random picks are never the greedy ones."""
    rng = np.random.default_rng(1)
    score = np.arange(200, dtype=float)
    shares = []
    for _ in range(400):
        greedy, eps = select_batch(score, np.arange(200), 20, 0.25, rng)
        assert len(greedy) + len(eps) == 20 and not set(greedy) & set(eps)
        assert greedy == list(range(len(greedy)))  # the greedy part is the best scored
        shares.append(len(eps) / 20)
    assert abs(np.mean(shares) - 0.25) < 0.02  # binomial(20, 0.25): sd of the mean ~0.005


def test_diverse_batch_picks_distinct_knob_values():
    """The 6 best-scored candidates are near-duplicates (same knob values); with diversity on, the
    batch takes slightly worse ones that cover new (knob, value) pairs; with weight 0 it is the top-k."""
    knobs = np.array([[1, 1, 1]] * 6 + [[2, 1, 1], [1, 2, 1], [1, 1, 2], [3, 3, 3]], dtype=float)
    score = np.array([0.0, 0.01, 0.02, 0.03, 0.04, 0.05, 0.2, 0.21, 0.22, 0.3])
    top = diverse_batch(score, knobs, np.arange(10), 4, weight=0.0, pool=3)
    assert top == [0, 1, 2, 3]
    div = diverse_batch(score, knobs, np.arange(10), 4, weight=1.0, pool=3)
    assert div[0] == 0 and len(div) == 4 and len(set(div)) == 4
    covered = lambda idx: len({(j, v) for i in idx for j, v in enumerate(knobs[i])})  # noqa: E731
    assert covered(div) >= covered(top) + 3  # at most one near-duplicate of the best
    assert sum(i < 6 for i in div) == 1
    # the pool bounds how far down the ranking diversity may reach
    assert max(diverse_batch(score, knobs, np.arange(10), 2, weight=5.0, pool=2)) < 4


def test_model_based_diversity_option_widens_tile_batches(tile_problem):
    """Same seed, same measurements: the diversity-aware batch covers more tile extents per dimension."""
    from autotune.compiler.tiles import TileSpace
    kernel, truth, _ = tile_problem

    def batch(diversity: float) -> list:
        s = ModelBasedSearch(TileSpace(kernel, "tpu"), seed=3, epsilon=0.0, diversity=diversity)
        for _ in range(2):
            cfgs = s.ask(8)
            s.tell(cfgs, [truth[c.key()] for c in cfgs])
        return s.ask(8)

    pairs = lambda cfgs: len({(i, d) for c in cfgs for i, d in enumerate(c.dims)})  # noqa: E731
    assert pairs(batch(2.0)) > pairs(batch(0.0))


def test_prior_margin_follows_the_prior_only_when_it_helps():
    y = np.array([0.0, 1.0, 2.0, 3.0, 4.0])
    good = prior_margin(y * 10 + 5, y)
    assert good.weight == pytest.approx(1.0) and np.all(np.diff(good(y * 10 + 5)) > 0)
    bad = prior_margin(-y, y)  # anti-correlated: ignored
    assert bad.weight == 0.0 and np.all(bad(np.array([1.0, -3.0])) == 0.0)
    # a prior in log seconds enters as it is (slope 1 in log time), in units of the measured spread
    logs = prior_margin(0.5 * y + 7.0, y, log_seconds=True)
    assert logs.weight == 1.0
    assert np.allclose(np.diff(logs(0.5 * y + 7.0)), 0.5 / y.std())


def test_prior_chooses_the_first_batch_and_transfers(tile_problem):
    """With the true costs as the prior, the first batch already holds the optimum; a useless prior
    (constant) leaves the search as good as without one."""
    from autotune.compiler.tiles import TileSpace
    kernel, truth, optimum = tile_problem
    s = ModelBasedSearch(TileSpace(kernel, "tpu"), seed=0, epsilon=0.0,
                         prior=lambda cfgs: np.log([truth[c.key()] for c in cfgs]))
    first = s.ask(4)
    assert first[0] == TileSpace(kernel, "tpu").default()
    assert min(truth[c.key()] for c in first) == optimum
    s.tell(first, [truth[c.key()] for c in first])
    s.ask(4)
    assert s.prior_weight > 0.5
    flat = ModelBasedSearch(TileSpace(kernel, "tpu"), seed=0, prior=lambda cfgs: np.zeros(len(cfgs)))
    for _ in range(3):
        cfgs = flat.ask(4)
        flat.tell(cfgs, [truth[c.key()] for c in cfgs])
    assert flat.prior_weight == 0.0


def test_local_model_is_pluggable(tile_problem):
    """`model=` takes a fit callable: here a nearest-neighbour model, called once per round."""
    from autotune.compiler.tiles import TileSpace
    kernel, truth, _ = tile_problem
    calls = []

    def nearest(objective, X, y, seed, base_margin=None):
        calls.append(len(X))
        return lambda Xn, base_margin=None: y[np.argmin(((Xn[:, None, :] - X[None]) ** 2).sum(-1), axis=1)]

    s = ModelBasedSearch(TileSpace(kernel, "tpu"), seed=0, model=nearest)
    for _ in range(3):
        cfgs = s.ask(4)
        s.tell(cfgs, [truth[c.key()] for c in cfgs])
    assert calls == [4, 8]
    with pytest.raises(ValueError, match="model must be one of"):
        ModelBasedSearch(TileSpace(kernel, "tpu"), model="svm")
