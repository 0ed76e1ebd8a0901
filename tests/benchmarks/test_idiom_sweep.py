"""benchmarks/idiom_sweep.py: one idiom program through every command as a user runs them, then the emitted
and tuned programs compiled and compared with the original on XLA:CPU."""
import json

import pytest

pytest.importorskip("jax")

from benchmarks import idiom_sweep  # noqa: E402


@pytest.mark.slow
def test_one_program_through_every_command(tmp_path):
    assert idiom_sweep.main(["--programs", "tiny_exp", "--budget", "60s", "--out", str(tmp_path / "s.md"),
                             "--json", str(tmp_path / "s.json")]) == 0
    rows = json.loads((tmp_path / "s.json").read_text())
    commands = [r["command"].split()[0] for r in rows]
    assert {"show", "emit", "measure", "fusion"} <= set(commands) and all(r["program"] == "tiny_exp" for r in rows)
    assert all(r["outcome"].startswith("ok") for r in rows), [r for r in rows if not r["outcome"].startswith("ok")]
    assert (tmp_path / "s.md").read_text().startswith("# Idiom corpus sweep")
