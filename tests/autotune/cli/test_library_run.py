"""The library run (autotune.run.tune) and `autotune fusion` are one run: the same settings give the same
fingerprint from Python and the command line and each resumes the other; `--stages` runs a subset; a
plug-in stage in a file outside the package runs from both and keeps the stage contracts (check_stage)."""
from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner

from autotune.cli.app import main
from autotune.run import RunError, RunOptions, Stage, StageResult, register_stage, tune
from autotune.run.stages import STAGES
from autotune.testing.contracts import STAGE_CONTRACTS, check_stage

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SMALL = os.path.join(ROOT, "tests", "fixtures", "hlo", "small")
DOT_ADD = os.path.join(SMALL, "dot_add.hlo")
EXP_ADD = os.path.join(SMALL, "exp_add.hlo")
# no wall-clock budget: the runs do not depend on how loaded the machine is
SETTINGS = ["--budget", "inf", "--hw-budget", "0", "--cost-model", "analytical", "--strategy", "annealing",
            "--store", "none", "--no-progress", "--seed", "1"]
OPTIONS = dict(hw_budget=0, store="none", progress=False, seed=1)

PLUGIN = '''
from autotune.run import Stage, StageResult


class Mark(Stage):
    """Adds a report field saying what it saw (after fusion: the search's result)."""
    name = "mark"

    def run(self, state, budget):
        return StageResult(report={"mark": {"tuned": state.tuning is not None,
                                            "instructions": state.program.instruction_count()}},
                           warnings=["mark ran"])


class Rewrite(Stage):
    """A formulation-like stage: hands the later stages another program (exp -> tanh)."""
    name = "rewrite"

    def run(self, state, budget):
        return StageResult(program_text=state.program_text.replace("exponential(", "tanh("),
                           verification={"status": "verified", "method": "by construction"})
'''


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def report(folder) -> dict:
    return json.loads((folder / "report.json").read_text())


@pytest.fixture
def plugin(tmp_path):
    path = tmp_path / "plugins" / "my_stages.py"
    path.parent.mkdir()
    path.write_text(PLUGIN)
    return path


def test_python_and_cli_runs_share_a_fingerprint_and_resume_each_other(tmp_path):
    cli_out, py_out = tmp_path / "cli", tmp_path / "py"
    r = invoke("fusion", DOT_ADD, *SETTINGS, "--max-evals", "30", "--out", cli_out)
    assert r.exit_code == 0, r.output
    res = tune(DOT_ADD, "tpu", cost_model="analytical", strategy="annealing", budget="inf",
               options=RunOptions(max_evals=30, out_dir=py_out, **OPTIONS))
    assert res.report["fingerprint"] == report(cli_out)["fingerprint"]
    assert res.run_dir == py_out and res.verified and not res.interrupted and res.stages == ("fusion", "options")  # tpu: no formulations by default
    assert res.report == report(py_out) and res.tuning.evaluations == res.report["evaluations"]
    assert set(res.report) == set(report(cli_out))  # the same fields, Python or command line
    # Python resumes the command line's run, and the command line resumes Python's
    n = report(cli_out)["evaluations"]
    lines = []
    again = tune(DOT_ADD, "tpu", cost_model="analytical", strategy="annealing", budget="inf",
                 options=RunOptions(max_evals=60, resume_dir=cli_out, log=lines.append, **OPTIONS))
    assert again.run_dir == cli_out and again.report["resumed_from"]["evaluations"] == n
    assert lines and lines[0].startswith(f"resuming {cli_out}: {n} configurations")
    r = invoke("fusion", DOT_ADD, *SETTINGS, "--max-evals", "60", "--resume", py_out)
    assert r.exit_code == 0, r.output
    assert f"resuming {py_out}: {n} configurations" in r.output and report(py_out)["resumed_from"]["evaluations"] == n
    # another setting is another run: refused in one line, naming it
    r = invoke("fusion", DOT_ADD, *[a if a != "1" else "2" for a in SETTINGS], "--resume", py_out)
    assert r.exit_code == 2 and "--seed 1, not 2" in r.output


def test_stages_subsets_and_their_refusals(tmp_path):
    r = invoke("fusion", EXP_ADD, *SETTINGS, "--max-evals", "5", "--stages", "fusion", "--out", tmp_path / "a")
    assert r.exit_code == 0, r.output
    assert "options_budget_s" not in report(tmp_path / "a") and (tmp_path / "a" / "fused.hlo").exists()
    for stages, message in [("options", "the options stage needs the fusion stage before it"),
                            ("fusion,fusion", "stage fusion is listed twice"),
                            ("fusion,nope", "unknown stage 'nope'"),
                            (",", "give at least one stage")]:
        r = invoke("fusion", EXP_ADD, *SETTINGS, "--stages", stages, "--out", tmp_path / "never")
        assert r.exit_code == 2 and message in r.output and len(r.output.strip().splitlines()) == 1, r.output
    r = invoke("fusion", EXP_ADD, *SETTINGS, "--stages", "fusion", "--options-budget", "5s", "--out", tmp_path / "never")
    assert r.exit_code == 2 and "the options stage is not among the stages run" in r.output
    assert not (tmp_path / "never").exists()
    with pytest.raises(RunError, match="needs the fusion stage"):
        tune(EXP_ADD, stages=["options"], options=RunOptions(out_dir=tmp_path / "never", **OPTIONS))


def test_fusion_alone_on_cpu_leaves_the_compiler_options_alone(tmp_path):
    pytest.importorskip("jax")
    res = tune(EXP_ADD, "cpu", cost_model="analytical", budget="inf", stages="fusion",
               options=RunOptions(hw_budget="2s", store="none", progress=False, max_evals=5, out_dir=tmp_path / "r"))
    assert "compiler_options" not in res.tuning.verification and "options_budget_s" not in res.report
    assert res.state.stage_seconds == {"fusion": 0.0}


def test_a_plugin_stage_from_a_file_runs_from_the_cli_and_from_python(tmp_path, plugin):
    out = tmp_path / "cli"
    r = invoke("fusion", EXP_ADD, *SETTINGS, "--max-evals", "5", "--stages", f"fusion,{plugin}:Mark", "--out", out)
    assert r.exit_code == 0, r.output
    rep = report(out)
    assert rep["mark"] == {"tuned": True, "instructions": rep["mark"]["instructions"]} and "mark ran" in rep["warnings"]
    assert "autotune: warning: mark ran" in r.output
    # a stage before fusion replaces the program fusion searches; verification keeps the user's program
    res = tune(EXP_ADD, cost_model="analytical", budget="inf", stages=[f"{plugin}:Rewrite", "fusion"],
               options=RunOptions(max_evals=5, out_dir=tmp_path / "py", **OPTIONS))
    twin = tmp_path / "twin.hlo"
    twin.write_text(open(EXP_ADD).read().replace("exponential(", "tanh("))
    plain = tune(str(twin), cost_model="analytical", budget="inf", stages="fusion",
                 options=RunOptions(max_evals=5, out_dir=tmp_path / "twin", **OPTIONS))
    assert res.report["fingerprint"]["program"] == plain.report["fingerprint"]["program"]
    assert res.report["program"] == EXP_ADD and res.state.original_text == open(EXP_ADD).read()
    assert "tanh(" in (tmp_path / "py" / "fused.hlo").read_text()
    assert res.state.results["rewrite"].verification["status"] == "verified"


def test_a_registered_stage_runs_by_name(tmp_path):
    class Count(Stage):
        name = "count"

        def run(self, state, budget):
            return StageResult(report={"count": {"evaluations": state.tuning.evaluations}})

    register_stage("count", Count)
    try:
        res = tune(EXP_ADD, cost_model="analytical", budget="inf", stages="fusion,count",
                   options=RunOptions(max_evals=5, out_dir=tmp_path / "r", **OPTIONS))
        assert res.report["count"]["evaluations"] == res.tuning.evaluations and res.stages == ("fusion", "count")
    finally:
        STAGES.unregister("count")


def test_the_stage_contracts(plugin):
    assert check_stage("fusion") == [c for c in STAGE_CONTRACTS if c != "its program parses"]
    assert "its program parses" in check_stage(f"{plugin}:Rewrite")
    check_stage(f"{plugin}:Mark")

    class Clobber(Stage):
        name = "clobber"

        def run(self, state, budget):
            return StageResult(report={"strategy": "mine"})

    class NoName(Stage):
        def run(self, state, budget):
            return StageResult()

    with pytest.raises(AssertionError, match="'its report fields are JSON and its own'.*'strategy'"):
        check_stage(Clobber)
    with pytest.raises(AssertionError, match="a Stage class with a name"):
        check_stage(NoName)
    with pytest.raises(AssertionError, match="a Stage class with a name"):
        check_stage(dict)
