"""`autotune options`: a clear refusal on a target without compiler options, and one real run on a tiny
program (budget ~10 s) whose report names the candidates and an XLA_FLAGS value that compiles."""
from __future__ import annotations

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
