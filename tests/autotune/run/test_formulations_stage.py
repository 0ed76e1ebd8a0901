"""The formulations stage (autotune/run/formulations.py): its contracts, its budget, what it writes and
reports, the transfer of its timings to a second program, and the run writing its program when the fusion
stage keeps the original. Timings decide the choices, so the tests check what holds whatever they are."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from autotune.run import RunOptions, tune
from autotune.run.formulations import FormulationsStage, adopt_formulated, formulated_header
from autotune.run.settings import RunError, RunSettings
from autotune.run.stages import RunState
from autotune.testing.contracts import check_stage
from autotune.tuning.result import TuningResult

ROOT = Path(__file__).resolve().parents[3]
DEPTHWISE = ROOT / "examples" / "idioms" / "depthwise_separable_train.hlo"


def _settings(target="cpu", evaluator="xla", total=300.0, **opts):
    return RunSettings(target=target, cost_model=None, strategy="annealing", evaluator_name=evaluator,
                       budget_text=f"{total}s", total_s=total, hw_s=total / 10, hw_text="", options=RunOptions(**opts))


def test_the_stage_keeps_the_stage_contracts():
    assert "a Stage class with a name" in check_stage("formulations")


def test_its_budget_is_30_percent_of_the_run_at_most_three_minutes_where_it_can_time():
    st = FormulationsStage()
    assert st.reserve_s(_settings(total=300.0)) == pytest.approx(90.0)
    assert st.reserve_s(_settings(total=3600.0)) == pytest.approx(180.0)
    assert st.reserve_s(_settings(target="tpu", evaluator="sim")) == 0.0
    assert st.reserve_s(_settings(formulations_budget="0")) == 0.0
    assert st.reserve_s(_settings(formulations_budget="45s")) == 45.0
    with pytest.raises(RunError, match="--formulations-budget 10s: formulations are timed with --evaluator xla"):
        st.reserve_s(_settings(target="tpu", evaluator="sim", formulations_budget="10s"))


def test_a_formulations_budget_without_the_stage_is_refused(tmp_path):
    with pytest.raises(RunError, match="the formulations stage is not among the stages run"):
        tune(DEPTHWISE, "cpu", stages="fusion,options", budget="1m",
             options=RunOptions(formulations_budget="10s", out_dir=tmp_path / "run", store="none"))


@pytest.mark.xla
@pytest.mark.slow
def test_a_run_of_the_stage_reports_each_choice_and_a_second_program_reuses_its_timings(tmp_path):
    pytest.importorskip("jax")
    from hardware.xla import run_hlo, verification_inputs
    store = tmp_path / "store.sqlite"
    run = tune(DEPTHWISE, "cpu", stages="formulations", budget="10m",
               options=RunOptions(formulations_budget="30s", out_dir=tmp_path / "a", store=str(store), progress=False))
    rep = run.report["formulations"]
    assert rep["sites"] == 5 and rep["tunable"] == 5 and rep["decision"]
    timed = [c for c in rep["choices"] if c.get("timed") == "now"]  # a loaded machine may reach fewer
    assert timed and all(c.get("timed") == "now" or c["why"].startswith("not timed") for c in rep["choices"])
    for c in rep["choices"]:  # every alternative timed was checked against the original alone
        assert c["choice"] == "original" or c["alternatives"][c["choice"]]["status"] == "ok"
    written = tmp_path / "a" / "formulated.hlo"
    if written.exists():  # rewritten: it computes what the original computes, and was timed faster beside it
        original = DEPTHWISE.read_text()
        inputs = verification_inputs(original, 0)
        got, ref = run_hlo(written.read_text(), inputs), run_hlo(original, inputs)
        for a, b in zip(got, ref):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-4)
        assert rep["end_to_end"]["faster"] and rep["end_to_end"]["speedup"] > 1
    # the same operations in another program: timed before on this machine, not timed again
    other = tmp_path / "other.hlo"
    other.write_text(DEPTHWISE.read_text().replace("HloModule ", "HloModule other_", 1))
    again = tune(other, "cpu", stages="formulations", budget="10m",
                 options=RunOptions(formulations_budget="30s", out_dir=tmp_path / "b", store=str(store), progress=False))
    rows = {c["instruction"]: c for c in again.report["formulations"]["choices"]}
    complete = [c for c in timed if all(a["status"] == "ok" for a in c["alternatives"].values())]
    assert complete  # every alternative timed: stored, so not timed again, and chosen alike
    for c in complete:
        assert rows[c["instruction"]]["timed"].startswith("stored") and rows[c["instruction"]]["choice"] == c["choice"]


def _kept_original_result() -> TuningResult:
    r = TuningResult(best=None, best_cost=1.0, default_cost=1.0, evaluations=1, elapsed_s=0.1)
    r.keep_original = True
    r.measured_original = 2e-3
    r.fused_text = "// autotune: keep the original program.\nHloModule m"
    r.verification = {"status": "verified", "winner": "original", "keep_original": "the original won the race"}
    r.warnings = ["keep the original: no tuned program was shown faster than XLA's own compile of it (...)", "other"]
    return r


def test_where_fusion_keeps_the_original_the_run_writes_the_verified_formulations():
    from autotune.compiler.formulations import FormulationSpace
    from autotune.compiler.program import Program
    text = DEPTHWISE.read_text()
    space = FormulationSpace(text)
    site = next(s for s in space.sites if "shifted_multiply_add" in s.choices)
    chosen = {site.key: "shifted_multiply_add"}
    new = space.apply(chosen)
    check = {"status": "ok", "speedup": 2.5, "speedup_interval": [2.2, 2.8], "confidence": 0.95, "faster": True,
             "seconds": 1.0, "requests": 3, "measured_s": 8e-4}
    state = RunState(program_path=str(DEPTHWISE), original_text=text, program_text=new,
                     program=Program.from_text(new), target="cpu", settings=_settings())
    state.extra["formulations"] = {"space": space, "text": new, "check": check, "chosen": chosen}
    result = _kept_original_result()
    assert adopt_formulated(result, state)
    assert not result.keep_original and result.fused_text == formulated_header(check, 1) + new
    assert result.compile_options == {"disable_fusion": False, "xla_flags": {}}
    assert result.measured_speedup == 2.5 and result.measured_speedup_interval == [2.2, 2.8]
    ver = result.verification
    assert ver["winner"] == "formulations" and "keep_original" not in ver and ver["fusion_kept_original"]
    assert result.warnings == ["other"]
    # nothing to adopt where the fusion stage wrote a tuned program, or the formulations kept the program
    tuned = _kept_original_result()
    tuned.keep_original = False
    assert not adopt_formulated(tuned, state)
    state.extra["formulations"] = {"space": space}
    assert not adopt_formulated(_kept_original_result(), state)


def test_the_default_stages_time_formulations_only_where_the_hardware_can():
    from autotune.run.stages import default_stages
    assert default_stages("cpu") == ("formulations", "fusion", "options")
    assert default_stages("tpu") == ("fusion", "options")


def test_on_the_simulator_the_choices_are_the_cost_models_and_the_run_says_so(tmp_path):
    run = tune(DEPTHWISE, "tpu", cost_model="analytical", stages="formulations,fusion", budget="inf",
               options=RunOptions(out_dir=tmp_path / "run", store="none", progress=False, hw_budget=0, max_evals=20))
    rep = run.report["formulations"]
    assert rep["choices"] and all(c["timed"].startswith("predicted") for c in rep["choices"])
    assert all(set(c["predicted_s"]) >= {"original"} for c in rep["choices"])
    if any(c["choice"] != "original" for c in rep["choices"]):
        assert any("not timed on hardware" in w for w in run.report["warnings"])
        assert run.state.program_text != run.state.original_text


def test_a_resumed_run_takes_the_program_its_first_part_wrote(tmp_path):
    from autotune.compiler.formulations import FormulationSpace
    from autotune.compiler.program import Program
    text = DEPTHWISE.read_text()
    space = FormulationSpace(text)
    site = next(s for s in space.sites if "shifted_multiply_add" in s.choices)
    new = space.apply({site.key: "shifted_multiply_add"})

    def resumed(folder):
        state = RunState(program_path=str(DEPTHWISE), original_text=text, program_text=text,
                         program=Program.from_text(text), target="cpu",
                         settings=_settings(resume_dir=str(folder), store="none"))
        FormulationsStage().prepare(state)
        return FormulationsStage()._resumed(state, folder, {"choices": []}), state
    kept, _ = resumed(tmp_path)  # its first part kept the program as written
    assert kept.program_text is None and "kept the program as written" in kept.report["formulations"]["decision"]
    (tmp_path / "formulated.hlo").write_text(new)
    (tmp_path / "formulated.json").write_text('{"check": {"speedup": 2.0}, "chosen": {}}')
    taken, state = resumed(tmp_path)
    assert taken.program_text == new and state.extra["formulations"]["check"] == {"speedup": 2.0}
