"""TileRanker: learns a known within-kernel ordering; keeps the default within its margin."""
import numpy as np
import pytest

pytest.importorskip("xgboost")

from costmodels.base import NotFittedError  # noqa: E402
from costmodels.tile_ranker import TileRanker  # noqa: E402


def _synthetic(n_kernels: int, n_tiles: int, rng: np.random.Generator):
    """Runtime is a known function of feature 0 (a U shape with its optimum at 0.3); feature 1 is noise."""
    X, y, g = [], [], []
    for k in range(n_kernels):
        f = rng.uniform(0, 1, size=(n_tiles, 2))
        X.append(f)
        y.append(1.0 + (f[:, 0] - 0.3) ** 2 + rng.uniform(0, 1e-4, n_tiles))
        g += [f"k{k}"] * n_tiles
    return np.concatenate(X), np.concatenate(y), g


def test_learns_known_ordering_on_unseen_kernels():
    rng = np.random.default_rng(0)
    X, y, g = _synthetic(12, 20, rng)
    m = TileRanker(n_estimators=100, seed=0).fit(X, y, g)
    Xt, yt, _ = _synthetic(5, 20, np.random.default_rng(1))
    for i in range(5):
        rows = slice(20 * i, 20 * i + 20)
        pick = m.pick(Xt[rows])
        assert yt[rows][pick] - yt[rows].min() < 0.01  # a random pick loses ~0.1 on average
        s = m.predict(Xt[rows])
        assert np.corrcoef(s, -yt[rows])[0, 1] > 0.7


def test_margin_keeps_default_and_train_groups_recorded():
    rng = np.random.default_rng(2)
    X, y, g = _synthetic(6, 10, rng)
    m = TileRanker(n_estimators=50, margin=float("inf")).fit(X, y, g)
    assert m.train_groups_ == {f"k{k}" for k in range(6)}
    dm = np.zeros(10, bool)
    dm[7] = True
    assert m.pick(X[:10], dm) == 7
    m.margin = -float("inf")  # always leave the default for the best-scored tile
    assert m.pick(X[:10], dm) == int(np.argmax(m.predict(X[:10])))


def test_predict_before_fit_is_an_error():
    with pytest.raises(NotFittedError, match="not trained"):
        TileRanker().predict(np.zeros((2, 2)))


# ---- SimulatorResidual
from costmodels.tile_ranker import (KernelTiles, SimulatorResidual, loko_corrected, loko_gain_error,  # noqa: E402
                                    pick_with_threshold, relative_rows)


def _residual_kernels(n_kernels: int, n_tiles: int, rng: np.random.Generator, penalty: float = 0.3) -> list:
    """The simulator misses a cost: measured log time = simulated + penalty * split (feature 0 of the
    geometry, e.g. a split contraction), so its own favourite is often a split tile that runs slower."""
    out = []
    for k in range(n_kernels):
        split = rng.integers(0, 3, n_tiles).astype(float)
        other = rng.uniform(0, 1, n_tiles)
        sim_log = np.log(1e-5) + rng.uniform(0, 0.2, n_tiles) - 0.1 * split  # the simulator favours splits
        measured = np.exp(sim_log + penalty * split)
        default = int(rng.integers(n_tiles))
        rows = relative_rows(np.column_stack([split, other]), sim_log, default, (1.0, 2.0))
        out.append(KernelTiles(f"k{k}", rows, sim_log, measured, default))
    return out


def test_residual_corrects_a_cost_the_simulator_misses_on_unseen_kernels():
    rng = np.random.default_rng(0)
    train, test = _residual_kernels(10, 30, rng), _residual_kernels(5, 30, rng)
    m = SimulatorResidual(n_estimators=200, seed=0).fit(train)
    assert m.train_groups_ == {k.name for k in train}
    sim_right = corrected_right = 0
    for k in test:
        best = int(np.argmin(k.measured))
        sim_right += int(np.argmin(k.sim_log)) == best
        pick = m.pick(k.rows, k.sim_log, k.default)
        corrected_right += k.measured[pick] <= k.measured.min() * 1.02
        c = m.predict(k.rows, k.sim_log, k.default)
        assert c[k.default] == 0.0  # relative to the default tile
        true = np.log(k.measured) - np.log(k.measured[k.default])
        assert np.corrcoef(c, true)[0, 1] > 0.9
    assert corrected_right == len(test) and sim_right < len(test)


def test_threshold_keeps_the_default_unless_the_gain_is_larger():
    c = np.array([0.0, -0.03, 0.1])
    assert pick_with_threshold(c, 0, 0.0) == 1
    assert pick_with_threshold(c, 0, 0.02) == 1
    assert pick_with_threshold(c, 0, 0.03) == 0  # a gain equal to the threshold is not enough
    assert pick_with_threshold(c, 2, float("inf")) == 2
    rng = np.random.default_rng(3)
    ks = _residual_kernels(4, 12, rng)
    m = SimulatorResidual(n_estimators=30, threshold=float("inf")).fit(ks)
    assert all(m.pick(k.rows, k.sim_log, k.default) == k.default for k in ks)


def test_loko_gain_error_is_small_when_the_simulator_is_right_and_sets_the_threshold():
    rng = np.random.default_rng(4)
    exact = _residual_kernels(5, 12, rng, penalty=0.0)  # measured == simulated: nothing to correct
    assert loko_gain_error(exact, n_estimators=30) < 0.01
    wrong = _residual_kernels(5, 12, np.random.default_rng(4), penalty=0.3)
    corrected = loko_corrected(wrong, n_estimators=30)
    assert set(corrected) == {k.name for k in wrong}
    err = loko_gain_error(wrong, corrected)
    assert err == pytest.approx(loko_gain_error(wrong, n_estimators=30))
    m = SimulatorResidual(n_estimators=30).fit(wrong, threshold="loko_error")
    assert m.threshold_ == pytest.approx(err) and m.threshold == 0.0  # fitted state; the parameter as given
    with pytest.raises(ValueError):
        SimulatorResidual().fit(wrong, threshold="median")
    with pytest.raises(ValueError):
        SimulatorResidual().fit([])
    with pytest.raises(NotFittedError, match="not trained"):
        SimulatorResidual().predict(wrong[0].rows, wrong[0].sim_log, 0)


def test_tile_geometry_features_of_a_real_convolution_filter_tile():
    """On the vendored TpuGraphs fusion.191 (a 3x3 convolution, 192 input features): a filter tile
    over 128 of the 192 input features takes 2 contraction steps over features, one over window
    positions; XLA's default (k3x1x192x384) takes 3 window steps; None is the default tile."""
    import importlib.util
    import os
    from autotune.compiler.tiles import TileConfig, default_tile
    from costmodels.tile_ranker import RESIDUAL_FEATURE_NAMES, tile_geometry_features
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    spec = importlib.util.spec_from_file_location("calibrate_tpugraphs", os.path.join(repo, "benchmarks",
                                                                                     "calibrate_tpugraphs.py"))
    cal = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cal)
    k = next(r for r in cal.load(os.path.join(repo, "data", "tpugraphs", "tile_kernels.json"))
             if r["name"] == "fusion.191")["kernel"]
    tiles = [TileConfig((32, 6, 12, 128), (3, 3, 128, 128)), TileConfig((32, 12, 4, 384), (3, 1, 192, 384)),
             None, TileConfig((32, 6, 12, 128), (3, 3, 192, 128)), TileConfig((32, 6, 12, 128), (3, 3, 64, 128))]
    G = tile_geometry_features(k, tiles)
    assert G.shape == (5, len(RESIDUAL_FEATURE_NAMES)) and np.isfinite(G).all()
    col = {n: i for i, n in enumerate(RESIDUAL_FEATURE_NAMES)}
    assert G[0, col["feature_steps"]] == 1.0 and G[0, col["window_steps"]] == 0.0
    assert G[0, col["k_pad_factor"]] == pytest.approx(0.0)  # 128 + 64 features pad to 256, as 192 does
    # 3 steps of 64 features, each padded to 128 lanes: 384 padded features per window position for 256
    assert G[4, col["feature_steps"]] == pytest.approx(np.log2(3))
    assert G[4, col["k_pad_factor"]] == pytest.approx(np.log2(384 / 256))
    assert G[1, col["feature_steps"]] == 0.0 and G[1, col["window_steps"]] == pytest.approx(np.log2(3))
    assert G[3, col["feature_steps"]] == 0.0 and G[3, col["k_pad_factor"]] == pytest.approx(0.0)
    assert G[1, col["n_tiles"]] == pytest.approx(np.log2(3)) and G[3, col["n_tiles"]] == pytest.approx(np.log2(6))
    np.testing.assert_array_equal(G[2], tile_geometry_features(k, [default_tile(k, "tpu")])[0])
