"""benchmarks/emission_parity.py: one small idiom program, cpu, the default configuration and one random one,
XLA's default options: every case compiles and matches the original; the JSON and markdown are written."""
import json

import pytest

pytest.importorskip("jax")

from benchmarks import emission_parity  # noqa: E402


def test_one_program_passes_and_the_reports_are_written(tmp_path, capsys):
    rc = emission_parity.main(["--corpus", "idioms", "--programs", "tiny_exp", "--targets", "cpu", "--configs", "1",
                               "--modes", "xla", "--jobs", "1", "--json", str(tmp_path / "e.json"),
                               "--md", str(tmp_path / "e.md")])
    rows = json.loads((tmp_path / "e.json").read_text())
    assert rc == 0 and len(rows) == 2 and {r["config"] for r in rows} == {"default", "random:0"}
    assert all(r["target"] == "cpu" and r["mode"] == "xla" for r in rows)
    assert "2/2 cases ok over 1 programs" in (tmp_path / "e.md").read_text()
    assert "| tiny_exp | cpu | 2/2 |" in capsys.readouterr().out
