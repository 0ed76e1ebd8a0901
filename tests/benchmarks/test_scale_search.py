"""benchmarks/scale_search.py: `autotune fusion` in a fresh process per (program, model, seed), its wall time,
memory and report collected, on a tiny program."""
from pathlib import Path

from benchmarks import scale_search

PROGRAM = str(Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "hlo" / "small" / "two_outputs.hlo")


def test_one_run_per_model_and_seed(tmp_path):
    res = scale_search.main(["--programs", PROGRAM, "--models", "analytical", "--seeds", "0", "--budget", "60",
                             "--hw-budget", "1", "--json", str(tmp_path / "s.json")])
    (run,) = res["runs"]
    assert run["model"] == "analytical" and run["seed"] == 0 and run["exit"] == 0
    assert run["wall_s"] > 0 and run["evaluations"] >= 1 and res["summary"]
    assert (tmp_path / "s.json").exists()
