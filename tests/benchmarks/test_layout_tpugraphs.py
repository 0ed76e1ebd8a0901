"""benchmarks/layout_tpugraphs.py: the ranking of a few runs of the TpuGraphs layout sample, and a tiny layout
search."""
import json

from benchmarks import layout_tpugraphs


def test_ranking_and_a_tiny_search(tmp_path):
    out = layout_tpugraphs.main(["--ranking-runs", "6", "--programs", "vae_small_infer", "--evals", "4",
                                 "--md", str(tmp_path / "s.md"), "--json", str(tmp_path / "s.json")])
    assert set(out) == {"ranking", "search"}
    assert out["ranking"]["runs_with_runtime"] in (6, 7) and -1 <= out["ranking"]["kendall_sim"] <= 1
    (prog,) = out["search"]["programs"]
    assert prog["program"] == "vae_small_infer" and prog["speedup"] > 0 and prog["evaluations"] >= 1
    assert json.loads((tmp_path / "s.json").read_text())["search"]["median_speedup"] == out["search"]["median_speedup"]
    assert "| program | configurable nodes |" in (tmp_path / "s.md").read_text()
