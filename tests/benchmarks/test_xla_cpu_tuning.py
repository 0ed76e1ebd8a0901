"""benchmarks/xla_cpu_tuning.py: a short tune of a tiny program on XLA:CPU, the tuner's verification, the
interleaved rounds and the paired re-measurements, one row with every field."""
from pathlib import Path

import pytest

pytest.importorskip("jax")

from benchmarks import xla_cpu_tuning  # noqa: E402

PROGRAM = str(Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "hlo" / "small" / "two_outputs.hlo")


def test_a_tiny_program_end_to_end(tmp_path, capsys):
    res = xla_cpu_tuning.main(["--programs", PROGRAM, "--search-seconds", "1", "--hw-seconds", "3", "--verify", "2",
                               "--rounds", "1", "--remeasure-seconds", "0.3", "--json", str(tmp_path / "x.json")])
    (row,) = res["rows"]
    assert row["program"] == "two_outputs" and "verification" in row
    if "min_s" in row:  # verified: the three programs timed, the claims re-measured
        assert set(row["min_s"]) == {"xla_default", "ours_default", "tuned"}
        assert {"speedup", "interval", "status"} <= set(row["remeasured_written"])
    assert (tmp_path / "x.json").exists() and "| program | XLA default (ms) |" in capsys.readouterr().out
