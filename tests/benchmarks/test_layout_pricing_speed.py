"""benchmarks/layout_pricing_speed.py: incremental and from-scratch layout pricing of one small program agree."""
import json

from benchmarks import layout_pricing_speed


def test_both_pricers_run_side_by_side_and_agree(tmp_path):
    rows = layout_pricing_speed.main(["--programs", "vae_small_infer", "--batches", "1", "--batch", "2",
                                      "--md", str(tmp_path / "l.md"), "--json", str(tmp_path / "l.json")])
    (row,) = rows
    assert row["program"] == "vae_small_infer" and row["configs"] > 0
    assert row["from_scratch_per_s"] > 0 and row["incremental_per_s"] > 0 and row["max_rel_diff"] < 1e-6
    assert json.loads((tmp_path / "l.json").read_text()) == rows
    assert (tmp_path / "l.md").read_text().startswith("# Layout pricing speed")
