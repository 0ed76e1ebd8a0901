"""The shipped GNN fine-tuned on measured configurations (the model-based strategy's `model="gnn"`):
readouts reproduce the shipped model, fitting orders the measured configurations better than the
shipped head, fits are bounded in steps and time, and the strategy runs with it on fusion and tile
spaces through the Tuner."""
from __future__ import annotations

import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from costmodels.gnn.finetune import GnnFineTune  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def pair_accuracy(score: np.ndarray, y: np.ndarray) -> float:
    i, j = np.triu_indices(len(y), 1)
    keep = y[i] != y[j]
    return float(np.mean(np.sign(score[i] - score[j])[keep] == np.sign(y[i] - y[j])[keep]))


@pytest.fixture(scope="module")
def fusion_case():
    """gnn_small_infer's fusion space with 40 configurations near the default and their simulated times."""
    from autotune.compiler.fusion import FusionSpace
    from autotune.compiler.program import Program
    from autotune.tuning.pricing import ProgramCost
    from hardware.simulator import TpuSimulator
    space = FusionSpace(Program.from_file(os.path.join(REPO, "examples", "hlo", "gnn_small_infer.hlo")), "tpu")
    rng = np.random.default_rng(0)
    configs = [space.default()]
    while len(configs) < 40:
        c = configs[int(rng.integers(len(configs)))]
        configs.append(space.neighbor(c, rng))
    sim = TpuSimulator(noise=0.0)
    truth = ProgramCost(space, lambda ks: sim.simulate(ks))(configs)
    return space, configs, np.log(truth)


def test_readout_and_head_reproduce_the_shipped_model(fusion_case):
    """Before any fit, a configuration's value is the log of the shipped GNN's program time."""
    from autotune.tuning.pricing import ProgramCost
    space, configs, _ = fusion_case
    local = GnnFineTune(space)
    rows, weights = local._rows(configs[:5])
    with torch.no_grad():
        mine = local._values(local.gnn.net_.head, rows, weights).numpy()
    shipped = np.log(ProgramCost(space, local.gnn.predict)(configs[:5]))
    np.testing.assert_allclose(mine, shipped, rtol=1e-4)


def test_fine_tuning_orders_the_measurements_better_than_the_shipped_head(fusion_case):
    space, configs, y = fusion_case
    local = GnnFineTune(space, steps=60, time_limit_s=30.0, lr=3e-3)
    rows, weights = local._rows(configs)
    with torch.no_grad():
        before = local._values(local.gnn.net_.head, rows, weights).numpy()
    score = local("reg", configs, y, seed=0)
    after = score(configs)
    assert local.last_fit["steps"] == 60
    assert pair_accuracy(after, y) > pair_accuracy(before, y)
    assert np.corrcoef(after, y)[0, 1] > 0.8
    # the shipped head is untouched: the next fit starts from it again
    with torch.no_grad():
        again = local._values(local.gnn.net_.head, rows, weights).numpy()
    np.testing.assert_allclose(again, before)
    # a base margin shifts the score as it is given
    margin = np.linspace(0, 1, len(configs))
    np.testing.assert_allclose(score(configs, margin) - after, margin)


def test_a_fit_stops_at_its_time_limit(fusion_case):
    space, configs, y = fusion_case
    local = GnnFineTune(space, steps=1000, time_limit_s=0.0)
    local("rank", configs[:10], y[:10], seed=0)
    assert local.last_fit["steps"] == 1


def test_model_based_with_the_gnn_on_fusion_and_tile_spaces(fusion_case):
    from autotune.compiler.tiles import TileSpace
    from autotune.tuning.options import TunerOptions
    from autotune.tuning.tuner import Tuner
    from hardware.simulator import TpuSimulator
    from search.model_based import ModelBasedSearch
    space = fusion_case[0]
    strat = ModelBasedSearch(space, seed=0, model="gnn", sa_chains=8, sa_steps=8)
    result = Tuner(space, TpuSimulator(noise=0.0), strat, budget=None,
                   options=TunerOptions(max_evaluations=40, batch_size=8, progress=False)).run()
    assert result.evaluations == 40 and strat.fits >= 3
    assert strat.fit_local.last_fit["steps"] >= 1
    kernel = max(space.kernels(space.default()), key=lambda k: len(TileSpace(k, "tpu")))
    tiles = TileSpace(kernel, "tpu")
    strat = ModelBasedSearch(tiles, seed=0, model="gnn")
    seen = set()
    while not strat.finished:
        cfgs = strat.ask(2)
        assert not seen & {c.key() for c in cfgs}
        seen |= {c.key() for c in cfgs}
        strat.tell(cfgs, TpuSimulator(noise=0.0).simulate([kernel] * len(cfgs), cfgs))
    assert strat.fits >= 1 and len(seen) == len(tiles.tiles())


def test_a_space_without_a_gnn_readout_is_an_error():
    class Knobs:
        target = "tpu"

    with pytest.raises(ValueError, match="model gnn: no GNN readout"):
        GnnFineTune(Knobs())


def test_readouts_are_forgotten_past_the_cap(fusion_case, monkeypatch):
    import costmodels.gnn.finetune as F
    space, configs, y = fusion_case
    local = GnnFineTune(space, steps=2)
    score = local("reg", configs[:10], y[:10], seed=0)
    assert len(local._row_of) > 0
    monkeypatch.setattr(F, "MAX_READOUT_ROWS", 1)
    rows_before = len(local._row_of)
    score = local("reg", configs[:3], y[:3], seed=0)  # starts afresh: only these configurations' kernels
    assert 0 < len(local._row_of) < rows_before
    assert np.isfinite(score(configs)).all()


def test_the_readout_cap_is_also_a_memory_budget(fusion_case, monkeypatch):
    import costmodels.gnn.finetune as F
    space, configs, y = fusion_case
    local = GnnFineTune(space, steps=2)
    local("reg", configs[:10], y[:10], seed=0)
    width = (local._readouts[0] if local._readouts else local._z).shape[1]
    assert local._max_rows() == min(F.MAX_READOUT_ROWS, F.MAX_READOUT_BYTES // (4 * width))
    monkeypatch.setattr(F, "MAX_READOUT_BYTES", 4 * width * 2)  # two readouts' worth
    assert local._max_rows() == 2
