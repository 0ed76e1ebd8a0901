"""A stage before fusion that runs past its share of the budget (a loaded machine) does not lose the run:
the fusion stage searches a token budget, verifies, writes its outputs and says the run overran."""
from __future__ import annotations

import time
from pathlib import Path

from autotune.run import RunOptions, Stage, StageResult, tune
from autotune.run.fusion import SEARCH_FLOOR_S

ROOT = Path(__file__).resolve().parents[3]
PROGRAM = ROOT / "tests" / "fixtures" / "hlo" / "frontend_idioms" / "identity_broadcast.hlo"


class SlowStage(Stage):
    """Reserves a second, takes twelve (a stage on an overloaded machine)."""

    name = "slow"

    def reserve_s(self, settings):
        return 1.0

    def run(self, state, budget):
        time.sleep(12.0)
        return StageResult(report={"slow": {"slept_s": 12.0}})


def test_fusion_after_an_overrun_searches_a_token_budget_and_writes_its_outputs(tmp_path):
    run = tune(PROGRAM, "tpu", cost_model="analytical", strategy="random", budget="10s",
               stages=[SlowStage, "fusion"], options=RunOptions(out_dir=tmp_path / "run", store="none",
                                                                progress=False, hw_budget=0))
    assert (tmp_path / "run" / "fused.hlo").exists() and run.report["slow"] == {"slept_s": 12.0}
    assert run.report["budget_split"]["search_budget_s"] == SEARCH_FLOOR_S and "overrun" in run.report["budget_split"]
    assert any("left no time for the fusion search" in w for w in run.report["warnings"])
