"""`autotune fusion --target cpu` verifies the program it writes: fused.hlo is, byte for byte, the
program that was compiled, run end to end and checked against the original's outputs; failures are
warnings in report.json, and nothing verified is exit status 3. Also `measure --end-to-end` on a
program with donated buffers. Real XLA:CPU through jaxlib (skipped without jax)."""
from __future__ import annotations

import hashlib
import json
import os

import numpy as np
import pytest
from click.testing import CliRunner

pytest.importorskip("jax")

from autotune.cli.app import main  # noqa: E402
from autotune.compiler.fusion import FusionSpace  # noqa: E402
from autotune.compiler.emission import EMITTED_CPU_COMPILE_OPTIONS, emit_fused_text  # noqa: E402
from autotune.compiler.program import Program  # noqa: E402
from autotune.tuning.options import TunerOptions, VerifyOptions  # noqa: E402
from autotune.tuning.result import ORIGINAL_WITH_OPTIONS  # noqa: E402
from autotune.tuning.tuner import Tuner  # noqa: E402
from hardware import xla as X  # noqa: E402

pytestmark = pytest.mark.xla

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SMALL = os.path.join(ROOT, "tests", "fixtures", "hlo", "small")
DONATED = os.path.join(SMALL, "donated_update.hlo")
FAST = X.TimingOptions(number=1, repeat=3, min_repeat_ms=1.0, warmup=1)


def _fusion(tmp_path, program: str, *extra: str):
    out = tmp_path / "run"
    r = CliRunner().invoke(main, ["fusion", program, "--target", "cpu", "--budget", "10s", "--hw-budget", "2s",
                                  "--cost-model", "analytical", "--store", "none", "--no-progress",
                                  "--out", str(out), *extra])
    return r, out


def test_fused_hlo_is_the_verified_program(tmp_path):
    r, out = _fusion(tmp_path, DONATED)
    assert r.exit_code == 0, r.output
    # at most the one line saying to keep the original (nothing tuned shown faster than XLA's own compile)
    assert all("keep the original" in w for w in r.stderr.splitlines() if "warning" in w), r.stderr
    assert "measured (end to end" in r.stdout
    rep = json.loads((out / "report.json").read_text())
    ver = rep["verification"]
    assert ver["status"] == "verified" and ver["method"] == "end-to-end" and ver["exact"]
    assert ver["compile_options"] == json.loads(json.dumps(EMITTED_CPU_COMPILE_OPTIONS))
    assert ver["baseline_compile_options"] == {"disable_fusion": False, "xla_flags": {}}
    assert rep["measured_original_s"] > 0 and rep["measured_baseline_s"] == rep["measured_original_s"]
    fused = (out / "fused.hlo").read_bytes()
    assert hashlib.sha256(fused).hexdigest() == ver["fused_hlo_sha256"]
    original = open(DONATED).read()
    inputs = X.verification_inputs(original)
    if rep["keep_original"]:  # the original, unchanged, after a header saying to keep it
        assert ver["winner"] == "original" and fused.decode().endswith(original)
        assert fused.decode().startswith("// autotune: keep the original program.")
        assert rep["measured_speedup"] == pytest.approx(1.0)
        assert any(v["status"] == "ok" and v["output_error"] <= X.OUTPUT_TOL for v in rep["verified"])
        return
    if ver["winner"] == ORIGINAL_WITH_OPTIONS:  # the original, compiled with XLA:CPU options timed faster beside it
        text = fused.decode()
        assert text.startswith("// autotune: the original program, unchanged, compiled with compiler options")
        assert text.endswith(original) and ver["paired"]["speedup"] > 1.0
        flags = rep["verification"]["compiler_options"]["flags"]
        got = X.compile_hlo(original, disable_fusion=False, xla_flags=flags)(*inputs)
        assert X.output_error(got, X.compile_hlo(original)(*inputs))[1]
        return
    winner = next(v for v in rep["verified"] if v["rank"] == ver["winner"])
    assert winner["sha256"] == ver["fused_hlo_sha256"] and winner["status"] == "ok"
    assert winner["output_error"] <= X.OUTPUT_TOL and winner["timings"] >= 2  # raced, not a single lucky run
    lo, hi = rep["measured_speedup_interval"]  # kept: its speedup timed beside XLA's own compile
    assert 1.0 < lo <= rep["measured_speedup"] == ver["paired"]["speedup"] <= hi
    # independently: fused.hlo compiles as the report says and computes what the original computes
    got = X.compile_hlo(fused.decode(), **EMITTED_CPU_COMPILE_OPTIONS)(*inputs)
    assert X.output_error(got, X.compile_hlo(original)(*inputs))[1]


def test_nothing_verified_exits_3_with_one_warning(tmp_path, monkeypatch):
    monkeypatch.setenv(X.FAULT_ENV, "crash:*")  # every program crashes the measuring worker
    r, out = _fusion(tmp_path, os.path.join(SMALL, "exp_add.hlo"))
    assert r.exit_code == 3, r.output
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("autotune: warning: verification failed"), r.stderr
    rep = json.loads((out / "report.json").read_text())
    assert rep["verification"]["status"] == "failed" and rep["measured_speedup"] is None
    assert rep["measured_best_s"] is None and any("verification failed" in w for w in rep["warnings"])
    assert all(v["status"].startswith("crash") for v in rep["verified"])
    for f in ("best_config.json", "fused.hlo", "search.png", "log.jsonl"):  # outputs written all the same
        assert (out / f).exists(), f


def test_failed_best_prediction_is_skipped_and_said(monkeypatch):
    program = Program.from_file(os.path.join(SMALL, "two_outputs.hlo"))
    space = FusionSpace(program, "cpu")

    def fewer_fusions(kernels):  # a model that prefers the unfused program (not the default)
        return np.array([1e-6 * len(k.members) for k in kernels])
    from search.base import get_strategy
    t = Tuner(space, fewer_fusions, get_strategy("random")(space, seed=0), budget=5,
              options=TunerOptions(progress=False, max_evaluations=20),
              verify=VerifyOptions(top_k=3, hw_budget=3.0))
    result = t.run()
    best_text = emit_fused_text(space, t.top_predicted()[0][1], header=True)  # as fused.hlo is written
    assert best_text != emit_fused_text(space, space.default(), header=True)
    monkeypatch.setenv(X.FAULT_ENV, "crash:" + hashlib.sha1(best_text.encode()).hexdigest())
    with X.XlaEvaluator(timing=FAST) as ev:
        t.evaluator = ev
        t.verify(result)
    assert result.verification["status"] == "verified"
    first = next(v for v in result.verified if v["rank"] == 0)
    assert first["status"].startswith("crash") and first["measured_s"] is None
    assert result.fused_text is not None and result.fused_text != best_text
    assert [w for w in result.warnings if "best predicted configuration failed" in w]


def test_measure_end_to_end_donated_program(monkeypatch):
    r = CliRunner().invoke(main, ["measure", DONATED, "--target", "cpu", "--end-to-end", "--store", "none", "--json"])
    assert r.exit_code == 0, r.output
    e2e = json.loads(r.stdout)["end_to_end"]
    assert e2e["config_s"] > 0 and e2e["xla_default_s"] > 0 and e2e["config_output_error"] <= X.OUTPUT_TOL
    monkeypatch.setenv(X.FAULT_ENV, "crash:*")
    r = CliRunner().invoke(main, ["measure", DONATED, "--target", "cpu", "--end-to-end", "--store", "none"])
    assert r.exit_code == 3
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("autotune: error: measurement failed"), r.stderr


def test_race_winner_is_timed_beside_the_original(monkeypatch):
    """Whatever the race crowns is timed beside XLA's own compile of the original on real XLA:CPU
    within what is left of the hardware budget, and kept exactly when its paired interval is above 1
    (the race is forced to crown a tuned program, as a drift could); otherwise the original is kept."""
    import autotune.tuning.verifier as V  # where Tuner.verify's end-to-end path looks race_programs up
    program = Program.from_file(os.path.join(SMALL, "two_outputs.hlo"))
    space = FusionSpace(program, "cpu")

    def fewer_fusions(kernels):
        return np.array([1e-6 * len(k.members) for k in kernels])
    from search.base import get_strategy
    hw = 4.0
    t = Tuner(space, fewer_fusions, get_strategy("random")(space, seed=0), budget=5,
              options=TunerOptions(progress=False, max_evaluations=20),
              verify=VerifyOptions(top_k=2, hw_budget=hw, paired_share=0.5))
    result = t.run()
    race_programs = V.race_programs

    def crowned(*a, **kw):  # the race as it ran, with a tuned program crowned
        race = race_programs(*a, **kw)
        race.winner = next(text for text, e in race.entries.items() if text != race.baseline and e.ok)
        return race
    monkeypatch.setattr(V, "race_programs", crowned)
    with X.XlaEvaluator(timing=FAST) as ev:
        t.evaluator = ev
        t.verify(result)
    ver = result.verification
    paired = ver["paired"]
    original = program.module.to_text()
    if paired["status"].startswith("skipped"):  # the race overran the budget (compiles on a loaded machine)
        assert result.keep_original and result.fused_text.endswith(original) and ver["winner"] == "original"
        assert sum("not timed beside the original: the paired timing was skipped (no hardware budget left"
                   in w for w in result.warnings) == 1
        return
    assert paired["status"] == "ok" and paired["ratios"] >= 8 and paired["seconds"] <= hw + 1.0
    lo, hi = paired["ratio_interval"]
    assert 0 < lo <= paired["ratio"] <= hi and hi / lo < 1.5  # a tight interval from real pairs
    if paired["faster"]:
        assert hi < 1.0 and not result.keep_original and result.measured_speedup == paired["speedup"]
    else:
        assert hi >= 1.0 and result.keep_original and ver["winner"] == "original"
        assert result.fused_text.endswith(original)
        assert sum("keep the original" in w for w in result.warnings) == 1


def test_paired_trials_cost_the_search_end_to_end(tmp_path):
    """`--trial-cost paired`: every configuration the search measures is its whole emitted program timed
    beside the default's; report.json says so, and the default costs its own end-to-end time."""
    r, out = _fusion(tmp_path, DONATED, "--cost-model", "hardware", "--evaluator", "xla", "--trial-cost", "paired",
                     "--trial-seconds", "0.02", "--max-evals", "4", "--strategy", "model-based", "--hw-budget", "0", "--budget", "90s",
                     "--transfer", "none")
    assert r.exit_code == 0, r.output
    rep = json.loads((out / "report.json").read_text())
    tc = rep["trial_cost"]
    assert tc["trial_cost"] == "paired" and tc["seconds_per_trial"] == 0.02 and tc["default_s"] > 0
    assert rep["evaluations"] == tc["trials"] == 4  # each a paired timing; the default, timed once absolutely,
    # is priced before the search and is no evaluation
    assert rep["default_cost_s"] == pytest.approx(tc["default_s"])
