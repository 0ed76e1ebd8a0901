"""The plug-in examples of docs/architecture.md (a cost model, an evaluator, a target; the strategy is
tests/search/test_strategies.py's) run through `autotune fusion` as a user would name them."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from autotune.cli import main

ROOT = Path(__file__).resolve().parents[2]
PROGRAM = str(ROOT / "tests" / "fixtures" / "hlo" / "small" / "dot_add.hlo")


@pytest.mark.parametrize("option,value,report_key,expected", [
    ("--cost-model", "examples/custom_cost_model.py:BandwidthModel", "cost_model", None),
    ("--evaluator", "examples/custom_evaluator.py:RooflineEvaluator", "evaluator", None),
    ("--target", "examples/custom_target.py:TPU_SMALL", "target", "tpu-small"),
])
def test_plugin_example_runs_through_fusion(tmp_path, monkeypatch, option, value, report_key, expected):
    monkeypatch.chdir(ROOT)
    out = tmp_path / "run"
    args = ["fusion", PROGRAM, "--budget", "20s", "--max-evals", "128", "--store", "none", "--no-progress", "--out", str(out), option, value]
    if option != "--cost-model":
        args += ["--cost-model", "analytical"]
    try:
        r = CliRunner().invoke(main, args)
        assert r.exit_code == 0, r.output
        report = json.loads((out / "report.json").read_text())
        assert str(report[report_key]) == (expected or value)
        assert report["measured_best_s"] and report["verification"]["status"] == "verified"
        assert (out / "fused.hlo").exists()
    finally:
        if option == "--target":
            from autotune.compiler.targets import unregister_target
            unregister_target("tpu-small")


def test_custom_target_changes_the_spec():
    from autotune.compiler.targets import get_spec, unregister_target
    import importlib.util
    spec = importlib.util.spec_from_file_location("custom_target_example", ROOT / "examples" / "custom_target.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    try:
        assert get_spec("tpu-small").scratchpad_bytes * 4 == get_spec("tpu").scratchpad_bytes
        assert mod.TPU_SMALL.default_evaluator == "sim"
    finally:
        unregister_target("tpu-small")
