"""benchmarks/pricing_speed.py: cold and warm pricing of a small program's kernels, this tree against a baseline
loaded as private modules (here this tree's own files, exported to a folder: the same features and predictions),
and the phase breakdown."""
import json
from pathlib import Path

from benchmarks import pricing_speed

ROOT = Path(__file__).resolve().parents[2]


def test_one_round_against_a_baseline_folder(tmp_path):
    res = pricing_speed.main(["--program", str(ROOT / "examples/hlo/autoencoder_small_infer.hlo"), "--random", "1",
                              "--walk", "5", "--rounds", "1", "--baseline", str(ROOT), "--phases",
                              "--json", str(tmp_path / "p.json"), "--md", str(tmp_path / "p.md")])
    assert set(res["rates"]) == {"new", "serial", "old"} and "baseline_error" not in res
    assert all(r["cold"] > 0 and r["warm"] > 0 for r in res["rates"].values())
    assert res["features_identical"] and res["predictions_identical"]
    assert {"TilingInfo", "graph gathering", "network"} <= set(res["phases_us_per_kernel"])
    assert json.loads((tmp_path / "p.json").read_text())["kernels"] == res["kernels"] > 0
