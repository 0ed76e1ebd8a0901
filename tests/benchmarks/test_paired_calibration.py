"""benchmarks/paired_calibration.py: a tiny program timed beside itself (the same executable, then a separate
copy), both estimators' ratios and intervals reported."""
from pathlib import Path

import pytest

pytest.importorskip("jax")

from benchmarks import paired_calibration  # noqa: E402

PROGRAM = str(Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "hlo" / "small" / "two_outputs.hlo")


def test_a_program_beside_itself(tmp_path, capsys):
    res = paired_calibration.main(["--programs", PROGRAM, "--requests", "2", "--seconds", "0.2",
                                   "--json", str(tmp_path / "p.json")])
    ok = [r for r in res["rows"] if r["status"] == "ok"]
    assert [r["executable"] for r in ok] == ["same", "separate"]
    for r in ok:
        for est in ("mean of two", "neighbours"):
            assert r[est]["ratio"] > 0 and r[est]["n"] > 0
    assert f"{PROGRAM}|neighbours" in res["summary"] and "all|mean of two" in res["summary"]
    assert (tmp_path / "p.json").exists() and "| program | estimator |" in capsys.readouterr().out
