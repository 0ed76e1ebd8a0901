"""TileRanker: learns a known within-kernel ordering; keeps the default within its margin."""
import numpy as np
import pytest

pytest.importorskip("xgboost")

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
    with pytest.raises(RuntimeError):
        TileRanker().predict(np.zeros((2, 2)))
