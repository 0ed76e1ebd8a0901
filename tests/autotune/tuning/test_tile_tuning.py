"""Tile tuning through the Tuner: the race by median (one lucky timing does not win), top-K tuning
equal to measuring the default and the model's K best, online strategies, and `autotune tile`."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest
from click.testing import CliRunner

from autotune.compiler.fusion import FusionSpace
from autotune.compiler.program import Program
from autotune.compiler.tiles import TileSpace
from autotune.tuning.tile_tuning import TileTuningOptions, program_kernels, tune_kernel_tiles, tune_program_tiles
from autotune.tuning.verification import race_tiles
from costmodels.analytical import AnalyticalCostModel
from hardware.base import Evaluator, Measurement
from hardware.simulator import TpuSimulator

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
PROG = os.path.join(ROOT, "examples", "hlo", "resnet_small_infer.hlo")


@pytest.fixture(scope="module")
def kernels():
    fs = FusionSpace(Program.from_file(PROG), "tpu")
    return fs.kernels(fs.default())


class ScriptedEvaluator(Evaluator):
    """Timings per tile from a script (the last value repeats), a fixed default for the others."""

    name = "scripted"

    def __init__(self, script: dict, other: float = 1.0):
        super().__init__("tpu")
        self.script, self.other, self.calls = script, other, []

    def _measure_batch(self, kernels, tiles):
        out = []
        for t in tiles:
            seq = self.script.get(t.key(), [self.other])
            n = sum(1 for c in self.calls if c == t.key())
            self.calls.append(t.key())
            out.append(Measurement(seq[min(n, len(seq) - 1)]))
        return out


def test_one_lucky_timing_does_not_win_the_race(kernels):
    k = max(kernels, key=lambda k: len(TileSpace(k, "tpu")))
    sp = TileSpace(k, "tpu")
    lucky, steady = sp.tiles()[:2]
    ev = ScriptedEvaluator({lucky.key(): [0.5, 1.2, 1.2, 1.2], steady.key(): [0.8, 0.8, 0.8, 0.8]}, other=2.0)
    race = race_tiles(k, sp, [lucky, steady], ev, repeats=3)
    assert race.winner == steady.key()
    assert race.entries[lucky.key()].best == pytest.approx(1.2) and len(race.entries[lucky.key()].timings) == 4
    one_shot = race_tiles(k, sp, [lucky, steady], ScriptedEvaluator(ev.script, other=2.0), repeats=0)
    assert one_shot.winner == lucky.key()  # without repeats the lucky run wins: what racing prevents


def test_topk_tuning_equals_measuring_the_default_and_the_models_k_best(kernels):
    """What `autotune tile` did before the Tuner: measure the default and the K best predicted tiles
    once, keep the fastest (the simulator's timings repeat exactly, so the race picks the same)."""
    model, hw = AnalyticalCostModel("tpu"), TpuSimulator(noise=0.015, seed=3)
    tilings = tune_program_tiles(kernels, model, hw, TileTuningOptions(top_k=5, repeats=2))
    assert len(tilings) == len(program_kernels(kernels))
    for t in tilings:
        tiles = t.space.tiles()
        pred = model.predict([t.kernel] * len(tiles), tiles)
        cands = [t.space.default()] + [tiles[i] for i in np.argsort(pred, kind="stable")[:5]]
        meas = hw.simulate([t.kernel] * len(cands), cands)
        assert t.chosen_s == pytest.approx(float(np.min(meas)))
        assert t.default_s == pytest.approx(float(meas[0]))
        row = t.row()
        assert row["chosen_tile"] == t.chosen_tile.key() and row["timings"] >= row["measured"]
        assert t.result.verification["estimate"] == "median" and t.result.verification["repeats"] == 2


def test_online_model_based_tile_search_measures_its_trials(kernels):
    k = max(kernels, key=lambda k: len(TileSpace(k, "tpu")))
    hw = TpuSimulator(noise=0.015, seed=0)
    r = tune_kernel_tiles(k, None, hw, TileTuningOptions(strategy="model-based", trials=12, top_k=4, repeats=1))
    assert r.evaluations == 12 and r.verification["status"] == "verified"
    assert r.measured_best <= r.measured_default


def test_cli_tile_model_based_and_unknown_strategy(tmp_path):
    from autotune.cli.app import main
    r = CliRunner().invoke(main, ["tile", PROG, "--strategy", "model-based", "--trials", "8", "--store", "none",
                                  "--out", str(tmp_path / "t")])
    assert r.exit_code == 0, r.output
    rep = json.loads((tmp_path / "t" / "report.json").read_text())
    assert rep["strategy"] == "model-based" and rep["trials"] == 8 and rep["kernels_tuned"] == rep["kernels"]
    assert rep["verification"]["repeats"] == 3 and rep["speedup"] >= 1.0
    assert "measured (median of 4 timings per finalist)" in r.output
    r = CliRunner().invoke(main, ["tile", PROG, "--strategy", "nope", "--store", "none", "--out", str(tmp_path / "u")])
    assert r.exit_code == 2 and "unknown strategy 'nope'" in r.output
