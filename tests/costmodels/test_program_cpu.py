"""costmodels/program_cpu.py: configuration totals of the kernel geometry, and the model's fit, predict,
save and load (both kinds)."""
from __future__ import annotations

import numpy as np
import pytest

from costmodels.program_cpu import ProgramModel, program_features, relative_costs


def _space():
    from pathlib import Path

    from autotune.compiler.fusion import FusionSpace
    from autotune.compiler.program import Program
    root = Path(__file__).resolve().parents[2]
    return FusionSpace(Program.from_file(str(root / "examples" / "hlo" / "vae_small_infer.hlo")), "cpu")


def test_features_are_program_totals():
    space = _space()
    ks = space.kernels(space.default())
    one, two = program_features([ks, ks + ks])
    assert one.shape == two.shape and np.all(two >= one)
    # doubling every kernel adds one to log2(1 + total) of each count column, roughly (log2(1 + 2x))
    i = np.argmax(one)
    assert two[i] == pytest.approx(np.log2(1 + 2 * (2 ** one[i] - 1)))
    sums = program_features([ks], {"unit": lambda kk: np.full(len(kk), 1e-9)})
    assert sums.shape[1] == one.shape[0] + 1 and sums[0, -1] == pytest.approx(np.log2(1 + len(ks)), rel=0.2)


@pytest.mark.parametrize("kind", ["ridge", "xgboost"])
def test_fit_predict_save_load(tmp_path, kind):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 5))
    y = 0.3 * X[:, 0] - 0.2 * X[:, 1]
    m = ProgramModel(kind=kind, n_estimators=50).fit(X, y)
    p = m.predict(X)
    assert np.corrcoef(p, y)[0, 1] > 0.9
    m.save(str(tmp_path / "m.json"))
    again = ProgramModel.load(str(tmp_path / "m.json"))
    assert np.allclose(again.predict(X), p, atol=1e-5)
    with pytest.raises(ValueError, match="feature differences"):
        m.predict(X[:, :3])


def test_relative_costs_of_the_default_is_its_prediction_at_zero():
    space = _space()
    ks = space.kernels(space.default())
    d = program_features([ks]).shape[1]
    m = ProgramModel(kind="ridge").fit(np.zeros((4, d)) + np.arange(4)[:, None], np.arange(4) * 0.1)
    c = relative_costs(m, [ks], ks)
    assert c.shape == (1,) and c[0] == pytest.approx(float(np.exp(m.predict(np.zeros((1, d)))[0])))
