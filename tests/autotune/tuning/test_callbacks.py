"""Tuner callbacks: hook order and info, stopping from a callback, early stopping, and the one
Tuner over a tile space (checkpoint, resume, fingerprint)."""
from __future__ import annotations

import os

import numpy as np
import pytest

from autotune.compiler.fusion import FusionSpace
from autotune.compiler.program import Program
from autotune.compiler.tiles import TileSpace
from autotune.tuning.callbacks import Callback, EarlyStopping
from autotune.tuning.checkpoint import CHECKPOINT
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
        self.events.append(("batch", dict(info)))
        if self.stop_after is not None and info["evaluations"] >= self.stop_after:
            tuner.stop("enough")

    def on_end(self, tuner, result):
        self.events.append(("end", result.stopped_by))


def test_hooks_in_order_with_batch_info_and_a_callback_can_stop(space):
    rec = Recorder(stop_after=40)
    r = Tuner(space, _kernel_cost, RandomSearch(space, seed=0), budget=None, max_evaluations=400, batch_size=16,
              progress=False, callbacks=[rec]).run()
    kinds = [e[0] for e in rec.events]
    assert kinds[0] == "start" and kinds[-1] == "end" and set(kinds[1:-1]) == {"batch"}
    assert r.stopped_by == "enough" and rec.events[-1] == ("end", "enough")
    assert 40 <= r.evaluations < 400
    info = rec.events[1][1]
    assert {"t", "evaluations", "batch", "new", "batch_best_s", "best_s", "kernels_priced"} <= set(info)
    evals = [e[1]["evaluations"] for e in rec.events if e[0] == "batch"]
    assert evals == sorted(evals) and evals[-1] == r.evaluations


def test_early_stopping_after_patience_without_improvement(space):
    stopper = EarlyStopping(patience=48)
    r = Tuner(space, _kernel_cost, RandomSearch(space, seed=1), budget=None, max_evaluations=5000, batch_size=16,
              progress=False, callbacks=[stopper]).run()
    assert r.stopped_by == "early_stopping"
    found_at = min(e for _, e, c in r.history if c == r.best_cost)  # evaluations when the best was found
    assert 48 <= r.evaluations - found_at < 48 + 16 and r.evaluations < 5000
    with pytest.raises(ValueError):
        EarlyStopping(patience=0)


def test_tile_space_checkpoint_resume_and_fingerprint(tile_spaces, tmp_path):
    from costmodels.analytical import AnalyticalCostModel
    ts, other = tile_spaces
    model = AnalyticalCostModel("tpu")
    a = Tuner(ts, model, RandomSearch(ts, seed=0), budget=None, max_evaluations=12, batch_size=4,
              progress=False, out_dir=tmp_path)
    ra = a.run()
    assert (tmp_path / CHECKPOINT).exists() and (tmp_path / "log.jsonl").read_text().count("\n") >= 3
    assert ra.evaluations == 12 and ts.is_valid(ra.best)
    assert a.fingerprint["program"] == f"kernel:{ts.kernel.hash}"
    b = Tuner(ts, model, RandomSearch(ts, seed=0), budget=None, max_evaluations=24, batch_size=4, progress=False)
    b.resume(tmp_path)
    assert b.evaluations == 12 and b.best == ra.best
    rb = b.run()
    assert rb.evaluations == 24 and rb.best_cost <= ra.best_cost
    c = Tuner(other, model, RandomSearch(other, seed=0), budget=None, progress=False)
    with pytest.raises(TuningError, match="another program"):
        c.resume(tmp_path)
