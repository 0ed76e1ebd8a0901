"""Tuner callbacks: hook order and info (the BatchInfo payload, the per-configuration hook), stopping
from a callback, early stopping, and the one Tuner over a tile space (checkpoint, resume, fingerprint)."""
from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
import pytest

from autotune.compiler.fusion import FusionSpace
from autotune.compiler.program import Program
from autotune.compiler.tiles import TileSpace
from autotune.tuning.callbacks import BatchInfo, Callback, EarlyStopping, FunctionCallback
from autotune.tuning.checkpoint import CHECKPOINT
from autotune.tuning.options import TunerOptions
from autotune.tuning.result import TuningError
from autotune.tuning.tuner import Tuner
from search.random import RandomSearch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
HLO = os.path.join(ROOT, "examples", "hlo")


def _kernel_cost(kernels):
    return np.array([2e-6 + (k.bytes_read + k.bytes_written) / 1e11 for k in kernels])


@pytest.fixture(scope="module")
def space():
    return FusionSpace(Program.from_file(os.path.join(HLO, "vae_small_infer.hlo")), "tpu")


@pytest.fixture(scope="module")
def tile_spaces():
    fs = FusionSpace(Program.from_file(os.path.join(HLO, "resnet_small_infer.hlo")), "tpu")
    ks = sorted((k for k in fs.kernels(fs.default()) if not k.is_trivial), key=lambda k: -len(TileSpace(k, "tpu")))
    return TileSpace(ks[0], "tpu"), TileSpace(next(k for k in ks if k.hash != ks[0].hash), "tpu")


class Recorder(Callback):
    def __init__(self, stop_after=None):
        self.events, self.stop_after = [], stop_after

    def on_start(self, tuner):
        self.events.append(("start", tuner.evaluations))

    def on_batch(self, tuner, info):
        self.events.append(("batch", info))
        if self.stop_after is not None and info.evaluations >= self.stop_after:
            tuner.stop("enough")

    def on_end(self, tuner, result):
        self.events.append(("end", result.stopped_by))


def test_hooks_in_order_with_batch_info_and_a_callback_can_stop(space):
    rec = Recorder(stop_after=40)
    r = Tuner(space, _kernel_cost, RandomSearch(space, seed=0), budget=None,
              options=TunerOptions(max_evaluations=400, batch_size=16, progress=False), callbacks=[rec]).run()
    kinds = [e[0] for e in rec.events]
    assert kinds[0] == "start" and kinds[-1] == "end" and set(kinds[1:-1]) == {"batch"}
    assert r.stopped_by == "enough" and rec.events[-1] == ("end", "enough")
    assert 40 <= r.evaluations < 400
    info = rec.events[1][1]
    assert isinstance(info, BatchInfo)  # the one typed payload, frozen
    assert list(info.as_dict()) == ["t", "evaluations", "batch", "new", "batch_best_s", "best_s", "kernels_priced"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        info.best_s = 0.0
    evals = [e[1].evaluations for e in rec.events if e[0] == "batch"]
    assert evals == sorted(evals) and evals[-1] == r.evaluations


def test_early_stopping_after_patience_without_improvement(space):
    stopper = EarlyStopping(patience=48)
    r = Tuner(space, _kernel_cost, RandomSearch(space, seed=1), budget=None,
              options=TunerOptions(max_evaluations=5000, batch_size=16, progress=False), callbacks=[stopper]).run()
    assert r.stopped_by == "early_stopping"
    found_at = min(e for _, e, c in r.history if c == r.best_cost)  # evaluations when the best was found
    assert 48 <= r.evaluations - found_at < 48 + 16 and r.evaluations < 5000
    with pytest.raises(ValueError):
        EarlyStopping(patience=0)


def test_tile_space_checkpoint_resume_and_fingerprint(tile_spaces, tmp_path):
    from costmodels.analytical import AnalyticalCostModel
    ts, other = tile_spaces
    model = AnalyticalCostModel("tpu")
    a = Tuner(ts, model, RandomSearch(ts, seed=0), budget=None,
              options=TunerOptions(max_evaluations=12, batch_size=4, progress=False, out_dir=tmp_path))
    ra = a.run()
    assert (tmp_path / CHECKPOINT).exists() and (tmp_path / "log.jsonl").read_text().count("\n") >= 3
    assert ra.evaluations == 12 and ts.is_valid(ra.best)
    assert a.fingerprint["program"] == f"kernel:{ts.kernel.hash}"
    b = Tuner(ts, model, RandomSearch(ts, seed=0), budget=None,
              options=TunerOptions(max_evaluations=24, batch_size=4, progress=False))
    b.resume(tmp_path)
    assert b.evaluations == 12 and b.best == ra.best
    rb = b.run()
    assert rb.evaluations == 24 and rb.best_cost <= ra.best_cost
    c = Tuner(other, model, RandomSearch(other, seed=0), budget=None, options=TunerOptions(progress=False))
    with pytest.raises(TuningError, match="another program"):
        c.resume(tmp_path)


def test_per_configuration_hook_sees_every_fresh_configuration_once(space, tmp_path):
    """`on_config` (a Callback method, or FunctionCallback's function) is called once per configuration
    priced for the first time, before the batch's `on_batch`; log.jsonl holds BatchInfo's fields in order."""
    seen, batches = [], []

    class Both(Callback):
        def on_config(self, tuner, cfg, cost):
            seen.append((space.encode(cfg), cost))

        def on_batch(self, tuner, info):
            batches.append(info)
            assert len(seen) == info.evaluations  # this batch's fresh configurations came first

    also = []
    t = Tuner(space, _kernel_cost, RandomSearch(space, seed=2), budget=None,
              options=TunerOptions(max_evaluations=64, batch_size=16, progress=False, out_dir=tmp_path),
              callbacks=[Both(), FunctionCallback(on_config=lambda cfg, cost: also.append(cost),
                                                  on_batch=lambda info: also.append(info.evaluations))])
    r = t.run()
    assert len(seen) == r.evaluations == 64 and len({k for k, _ in seen}) == 64
    assert all(np.isfinite(c) for _, c in seen)
    assert [c for c in also if isinstance(c, float)] == [c for _, c in seen]
    lines = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert [list(d) for d in lines] == [list(BatchInfo.__dataclass_fields__)] * len(batches)
    assert [d["evaluations"] for d in lines] == [b.evaluations for b in batches]
    assert [d["t"] for d in lines] == [round(b.t, 4) for b in batches]
