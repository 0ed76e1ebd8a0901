"""benchmarks/library_fusion.py: `autotune fusion --target cpu` as a user runs it on one tiny program, ending with
a verified result, the JSON and the table written."""
import json
from pathlib import Path

import pytest

pytest.importorskip("jax")

from benchmarks import library_fusion  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def test_one_program_ends_verified(tmp_path):
    rc = library_fusion.main(["--corpus", str(ROOT / "examples" / "idioms"), "--programs", "tiny_exp",
                              "--budget", "20s", "--out", str(tmp_path / "runs"), "--json", str(tmp_path / "l.json"),
                              "--md", str(tmp_path / "l.md")])
    res = json.loads((tmp_path / "l.json").read_text())
    (row,) = res["rows"]
    assert rc == 0 and res["corpus"] == "examples/idioms" and row["program"] == "tiny_exp"
    assert row["exit"] == 0 and row["status"] == "verified" and (tmp_path / "runs" / "tiny_exp" / "report.json").exists()
    assert "1/1 runs ended with a verified result" in (tmp_path / "l.md").read_text()
