"""`autotune options`: a clear refusal on a target without compiler options, and one real run on a tiny
program (budget ~10 s) whose report names the candidates and an XLA_FLAGS value that compiles."""
from __future__ import annotations

import contextlib
import hashlib
import json

import pytest
from click.testing import CliRunner

from autotune.cli.app import main

TINY = """HloModule tiny

ENTRY main {
  x = f32[256,64] parameter(0)
  y = f32[64,32] parameter(1)
  d = f32[256,32] dot(x, y), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  e = f32[256,32] exponential(d)
  ROOT t = f32[256,32] tanh(e)
}
"""


def test_tpu_has_no_compiler_options(tmp_path):
    prog = tmp_path / "tiny.hlo"
    prog.write_text(TINY)
    r = CliRunner().invoke(main, ["options", str(prog), "--target", "tpu", "--budget", "10s"])
    assert r.exit_code == 2
    assert "declares no compiler options" in r.output and len(r.output.strip().splitlines()) == 1


def test_options_smoke_run(tmp_path):
    pytest.importorskip("jax")
    from autotune.tuning.options_search import parse_xla_flags
    from hardware.xla import compile_hlo
    prog = tmp_path / "tiny.hlo"
    prog.write_text(TINY)
    out = tmp_path / "run"
    r = CliRunner().invoke(main, ["options", str(prog), "--target", "cpu", "--budget", "6s", "--out", str(out)])
    assert r.exit_code == 0, r.output
    line = r.output.strip().splitlines()[0]
    assert line.startswith("tiny.hlo: ") and ("use XLA_FLAGS=" in line or "keep XLA's defaults" in line)
    rep = json.loads((out / "report.json").read_text())
    assert rep["target"] == "cpu" and rep["candidates"]
    for c in rep["candidates"]:
        assert {"name", "flags", "xla_flags", "status", "speedup", "output_error"} <= set(c)
    assert rep["keep_defaults"] == (rep["winner"] is None) == (rep["xla_flags"] == "")
    checked = [c for c in rep["candidates"] if not c["status"].startswith("skipped")]
    assert checked, "the budget checked no candidate"
    # every candidate's XLA_FLAGS value (the winner's, where there is one) compiles
    lines = [rep["xla_flags"]] if rep["xla_flags"] else [checked[0]["xla_flags"]]
    for value in lines:
        compile_hlo(TINY, xla_flags=parse_xla_flags(value))


@pytest.mark.parametrize("extra, message", [
    (["--target", "tpu", "--options-budget", "5s"], "declares no compiler options"),
    (["--target", "cpu", "--options-budget", "5s", "--hw-budget", "0"], "needs verification"),
    (["--target", "cpu", "--options-budget", "5s", "--evaluator", "xla-inprogram"], "needs --evaluator xla"),
    (["--target", "cpu", "--options-budget", "9s", "--budget", "10s"], "leave nothing of --budget"),
])
def test_fusion_options_budget_refusals(tmp_path, extra, message):
    prog = tmp_path / "tiny.hlo"
    prog.write_text(TINY)
    r = CliRunner().invoke(main, ["fusion", str(prog), "--no-progress", "--out", str(tmp_path / "o"), *extra])
    assert r.exit_code == 2, r.output
    assert message in r.output and len(r.output.strip().splitlines()) == 1


def test_options_check_of_a_rewritten_program_is_against_the_original():
    """check_compile_options with base options (an emission compiled with fusion off) and the original as
    the reference: a faithful rewrite passes, a wrong one is refused."""
    pytest.importorskip("jax")
    from autotune.compiler.emission import EMITTED_CPU_COMPILE_OPTIONS
    from hardware.xla import XlaEvaluator
    wrong = TINY.replace("tanh(e)", "negate(e)")
    with XlaEvaluator(target="cpu") as ev:
        good = ev.check_compile_options(TINY, {"xla_backend_optimization_level": 2},
                                        base_options=EMITTED_CPU_COMPILE_OPTIONS, reference_text=TINY)
        bad = ev.check_compile_options(wrong, {"xla_backend_optimization_level": 2},
                                       base_options=EMITTED_CPU_COMPILE_OPTIONS, reference_text=TINY)
    assert good.ok, good.status
    assert bad.status.startswith("output_mismatch"), bad.status


def test_fusion_with_the_options_stage_writes_what_it_verified(tmp_path):
    """`autotune fusion --target cpu` with the compiler-options stage: the report says what was searched and
    decided; fused.hlo compiled with the report's compile options computes what the original computes, and
    `autotune.load` runs it; the store remembers the settings for the next program."""
    pytest.importorskip("jax")
    import numpy as np

    import autotune
    from autotune.compiler.emission import EMITTED_CPU_COMPILE_OPTIONS
    from autotune.tuning.store import MeasurementStore
    from hardware.xla import compile_hlo, verification_inputs
    prog = tmp_path / "tiny.hlo"
    prog.write_text(TINY)
    out, store = tmp_path / "run", tmp_path / "store.sqlite"
    r = CliRunner().invoke(main, ["fusion", str(prog), "--target", "cpu", "--budget", "10s", "--options-budget", "4s",
                                  "--out", str(out), "--store", str(store), "--no-progress"])
    assert r.exit_code == 0, r.output
    rep = json.loads((out / "report.json").read_text())
    stage = rep["verification"]["compiler_options"]
    assert stage["decision"] and stage["candidates"] and rep["options_budget_s"] == 4.0
    opts = rep["compile_options"] or ({"disable_fusion": False, "xla_flags": {}} if rep["keep_original"]
                                      else EMITTED_CPU_COMPILE_OPTIONS)
    assert (rep["XLA_FLAGS"] is None) == (rep["compile_options"] is None)
    fused = (out / "fused.hlo").read_text()
    assert hashlib.sha256(fused.encode()).hexdigest() == rep["verification"]["fused_hlo_sha256"]  # the file written
    inputs = verification_inputs(TINY, 0)
    want = compile_hlo(TINY)(*inputs)
    got = compile_hlo(fused, **opts)(*inputs)
    assert all(np.allclose(a, b, rtol=1e-4, atol=1e-5) for a, b in zip(got, want))
    with pytest.warns(UserWarning) if rep["keep_original"] else contextlib.nullcontext():
        tuned = autotune.load(out)
    assert all(np.allclose(a, b, rtol=1e-4, atol=1e-5) for a, b in zip(tuned(*inputs), want))
    with MeasurementStore(store) as s:
        assert any(row.namespace.startswith("options/") for row in s.iter_rows(target="cpu"))
