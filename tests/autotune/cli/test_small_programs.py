"""`autotune fusion` on tiny real programs (1 to 4 fusible edges) with every built-in strategy.

The programs are jax-lowered (tests/fixtures/hlo/small/generate.py): exp+add (1 edge), one
dot+add (4 edges on the TPU target), a tuple of two outputs (4 edges), a donated update (4 edges).
"""
from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner

from autotune.cli.app import main
from autotune.compiler.fusion import FusionSpace
from autotune.compiler.hlo import parse_hlo_file
from autotune.compiler.program import Program

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SMALL = os.path.join(ROOT, "tests", "fixtures", "hlo", "small")
PROGRAMS = ["exp_add", "dot_add", "two_outputs", "donated_update"]


@pytest.mark.parametrize("name", PROGRAMS)
def test_fixtures_have_one_to_four_edges(name):
    space = FusionSpace(Program.from_file(os.path.join(SMALL, f"{name}.hlo")), "tpu")
    assert 1 <= space.n_edges <= 4


@pytest.mark.parametrize("strategy", ["annealing", "genetic", "random"])
@pytest.mark.parametrize("name", PROGRAMS)
def test_fusion_on_small_programs(tmp_path, name, strategy):
    out = tmp_path / "run"
    r = CliRunner().invoke(main, ["fusion", os.path.join(SMALL, f"{name}.hlo"), "--budget", "10s",
                                  "--hw-budget", "1s", "--strategy", strategy, "--cost-model", "analytical",
                                  "--store", "none", "--no-progress", "--seed", "1", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "Traceback" not in r.output and "warning" not in r.output
    rep = json.loads((out / "report.json").read_text())
    assert rep["stopped_by"] in ("budget", "strategy_finished")
    assert rep["best_cost_s"] <= rep["default_cost_s"]
    assert rep["verification"]["status"] == "verified" and rep["verification"]["method"] == "kernel-sum"
    assert rep["verification"]["exact"] and rep["measured_speedup"] >= 1.0
    assert rep["warnings"] == []
    space = FusionSpace(Program.from_file(os.path.join(SMALL, f"{name}.hlo")), "tpu")
    assert rep["evaluations"] <= 2 ** space.n_edges  # a tiny space is exhausted, never re-counted
    parse_hlo_file(str(out / "fused.hlo"))


def test_no_hardware_budget_is_not_a_failure(tmp_path):
    out = tmp_path / "run"
    r = CliRunner().invoke(main, ["fusion", os.path.join(SMALL, "two_outputs.hlo"), "--budget", "10s",
                                  "--hw-budget", "0", "--cost-model", "analytical", "--store", "none",
                                  "--no-progress", "--out", str(out)])
    assert r.exit_code == 0 and r.stderr == "", r.output
    assert "not verified (--hw-budget 0" in r.stdout
    rep = json.loads((out / "report.json").read_text())
    assert rep["verification"]["status"] == "skipped" and rep["measured_speedup"] is None
    assert rep["warnings"] == [] and rep["verified"] == []
