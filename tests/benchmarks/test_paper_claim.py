"""benchmarks/paper_claim.py: the section-7 experiment on one small program, one seed, the summary table."""
from pathlib import Path

from benchmarks import paper_claim

PROGRAM = str(Path(__file__).resolve().parents[2] / "examples" / "hlo" / "autoencoder_small_infer.hlo")


def test_one_program_one_seed(tmp_path, capsys):
    res = paper_claim.main(["--programs", PROGRAM, "--seeds", "0", "--hw-budget", "30", "--model-seconds", "0.5",
                            "--workers", "1", "--json", str(tmp_path / "c.json")])
    (row,) = res["rows"]
    assert row["program"] == "autoencoder_small_infer" and row["hw_only_speedup"] > 0 and row["guided_speedup"] > 0
    assert res["programs"] == 1 and 0 <= res["wins"] <= 1 and (tmp_path / "c.json").exists()
    assert "matches or beats hardware only in" in capsys.readouterr().out
