"""Measurement history for transfer learning (autotune/tuning/history.py): kernels recorded while
measuring, history joined per target/namespace/machine with programs left out, a global model fitted
on it that ranks unseen kernels, and the prior it gives the model-based strategy."""
from __future__ import annotations

import os

import numpy as np
import pytest

pytest.importorskip("xgboost")

from autotune.tuning.history import (HistoryRecorder, RecordingCostModel, fit_global_model,  # noqa: E402
                                     load_history, transfer_prior)
from autotune.tuning.store import MemoryStore  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def program_space(name: str):
    from autotune.compiler.fusion import FusionSpace
    from autotune.compiler.program import Program
    return FusionSpace(Program.from_file(os.path.join(ROOT, "examples", "hlo", name + ".hlo")), "tpu")


@pytest.fixture(scope="module")
def measured_store():
    """Default-tile measurements of the kernels of 12 configurations of three programs, recorded."""
    from costmodels.base import EvaluatorCostModel
    from hardware.simulator import TpuSimulator
    store = MemoryStore()
    sim = TpuSimulator(noise=0.0, store=store)
    rng = np.random.default_rng(0)
    for name in ("gnn_small_infer", "lstm_small_infer", "vae_small_infer"):
        space = program_space(name)
        model = RecordingCostModel(EvaluatorCostModel(sim), HistoryRecorder(store, "tpu", f"sha-{name}", name))
        cfg = space.default()
        for _ in range(12):
            model.predict(space.kernels(cfg))
            cfg = space.neighbor(cfg, rng)
    return store, sim


def test_history_leaves_out_programs_and_other_machines(measured_store):
    store, sim = measured_store
    full = load_history(store, "fusion", "tpu", sim.store_namespace, sim.machine)
    assert full.rows == store.count(machine=sim.machine) > 50 and full.unfeatured_rows == 0
    assert set(full.programs.values()) == {"gnn_small_infer", "lstm_small_infer", "vae_small_infer"}
    part = load_history(store, "fusion", "tpu", sim.store_namespace, sim.machine, ["sha-lstm_small_infer"])
    assert set(part.programs.values()) == {"gnn_small_infer", "vae_small_infer"}
    assert part.rows + part.excluded_rows == full.rows and part.excluded_rows > 0
    assert load_history(store, "fusion", "tpu", sim.store_namespace, "another machine").rows == 0
    assert load_history(store, "fusion", "tpu", "sim/other", sim.machine).rows == 0
    assert load_history(store, "tile", "tpu", sim.store_namespace, sim.machine).rows == 0  # default tiles only
    d = part.describe()
    assert d["machines"] == {sim.machine: part.rows} and d["machine_filter"] == sim.machine


def test_global_model_ranks_kernels_of_an_unseen_program(measured_store):
    """Trained without lstm_small_infer, the global model still orders lstm's kernels well."""
    from scipy.stats import spearmanr
    store, sim = measured_store
    hist = load_history(store, "fusion", "tpu", sim.store_namespace, sim.machine, ["sha-lstm_small_infer"])
    model = fit_global_model(hist)
    lstm = program_space("lstm_small_infer")
    kernels = lstm.kernels(lstm.default())
    rho = spearmanr(model.predict(kernels), sim.simulate(kernels)).statistic
    assert rho > 0.6, rho
    with pytest.raises(ValueError, match="fewer than"):
        fit_global_model(load_history(store, "fusion", "tpu", sim.store_namespace, "nobody"))


def test_transfer_prior_is_log_program_time(measured_store):
    store, sim = measured_store
    space = program_space("gnn_small_infer")
    prior = transfer_prior(space, sim)  # any cost model: here the simulator itself
    cfgs = [space.default(), space.neighbor(space.default(), np.random.default_rng(1))]
    want = [np.log(sum(k.multiplicity * t for k, t in zip(space.kernels(c), sim.simulate(space.kernels(c)))))
            for c in cfgs]
    assert prior.log_seconds and np.allclose(prior(cfgs), want)
