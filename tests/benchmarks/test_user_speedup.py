"""benchmarks.user_speedup: a program timed in this process as a fresh timing process does, the written
program's outputs judged against the original's, and the summary and table over rows."""
from __future__ import annotations

import pytest

from benchmarks import user_speedup as us

TINY = """HloModule tiny

ENTRY main {
  x = f32[64,32] parameter(0)
  e = f32[64,32] exponential(x)
  ROOT t = f32[64,32] tanh(e)
}
"""


def test_time_one_and_output_check(tmp_path):
    pytest.importorskip("jax")
    prog = tmp_path / "tiny.hlo"
    prog.write_text(TINY)
    t = us.time_one(str(prog), '{"disable_fusion": false, "xla_flags": {"xla_backend_optimization_level": 2}}', 0.05)
    assert t["seconds"] > 0 and t["repeats"] >= 3
    assert us.check_outputs(prog, prog, {"disable_fusion": True, "xla_flags": {}})["ok"]
    wrong = tmp_path / "wrong.hlo"
    wrong.write_text(TINY.replace("tanh(e)", "negate(e)"))
    assert not us.check_outputs(prog, wrong, {})["ok"]


def test_summary_and_table_say_what_was_measured():
    rows = [{"program": "a", "corpus": "hlo", "speedup": 1.2, "interval": [1.1, 1.3], "claimed_speedup": 1.25,
             "winner": 0, "XLA_FLAGS": "--xla_disable_hlo_passes=fusion --x=1", "outputs": {"ok": True}},
            {"program": "b", "corpus": "hlo", "speedup": 0.9, "interval": [0.85, 0.95], "winner": "original",
             "outputs": {"ok": False, "error": 1.0}},
            {"program": "c", "corpus": "hlo", "error": "no report"}]
    s = us.summarize(rows)
    assert s["timed"] == 2 and s["faster_beyond_interval"] == 1 and s["slower_beyond_interval"] == 1
    assert s["wrong_outputs"] == 1 and s["failed_runs"] == 1 and s["tuned_fusion_written"] == 1 and s["options_written"] == 1
    md = us.markdown({"summary": s, "rows": rows, "budget": "2m", "machine": "m", "date": "d", "commit": "c",
                      "rounds": 5, "seconds": 0.7})
    assert "| a | hlo | 1.200 [1.100, 1.300] | 1.250 | 0 | --x=1 | ok |" in md
    assert "WRONG" in md and "no report" in md


def test_compare_two_runs_per_corpus_on_the_shared_programs(tmp_path):
    import json

    def run(budget, speedups):
        return {"budget": budget, "commit": "c", "date": "d",
                "rows": [{"program": p, "corpus": corpus, "speedup": x, "interval": [x - 0.01, x + 0.01],
                          "winner": "original", "outputs": {"ok": True}} for p, corpus, x in speedups]}
    a = run("2m", [("p1", "hlo", 1.0), ("p2", "hlo", 1.1), ("q1", "lib", 1.2), ("gone", "lib", 1.5)])
    b = run("5m", [("p1", "hlo", 1.1), ("p2", "hlo", 1.21), ("q1", "lib", 1.2)])
    c = us.compare(a, b)
    assert set(c["groups"]) == {"hlo", "lib", "pooled"} and c["groups"]["pooled"]["programs"] == 3
    assert c["groups"]["hlo"]["b"]["median"] == pytest.approx(1.155)
    assert c["groups"]["hlo"]["median_b_over_a"] == pytest.approx(1.1)
    assert c["groups"]["lib"]["a"]["timed"] == 1  # "gone" is only in A: left out of both sides
    (tmp_path / "a.json").write_text(json.dumps(a))
    (tmp_path / "b.json").write_text(json.dumps(b))
    out = us.main(["--compare", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--md", str(tmp_path / "c.md")])
    assert out["groups"]["pooled"]["programs"] == 3 and "| p2 | hlo | 1.100" in (tmp_path / "c.md").read_text()


def test_the_cost_model_reaches_the_tuning_command_and_names_both_runs(tmp_path, monkeypatch):
    import argparse
    import subprocess
    seen = []

    def fake_run(cmd, **kw):
        seen.append(cmd)
        return subprocess.CompletedProcess(cmd, 2, "", "autotune: error: stop here")
    monkeypatch.setattr(us.subprocess, "run", fake_run)
    args = argparse.Namespace(budget="2m", seed=0, cost_model="program")
    row = us.run_program(tmp_path / "p.hlo", args, tmp_path, tmp_path / "store.sqlite")
    assert seen[0][seen[0].index("--cost-model") + 1] == "program" and row["error"] == "autotune: error: stop here"
    us.run_program(tmp_path / "p.hlo", argparse.Namespace(budget="2m", seed=0, cost_model=None), tmp_path,
                   tmp_path / "store.sqlite")
    assert "--cost-model" not in seen[1]
    a = {"budget": "2m", "commit": "c", "date": "d", "rows": []}
    md = us.compare_markdown(us.compare(a, {**a, "cost_model": "program"}))
    assert "A = budget 2m (" in md and "B = budget 2m, --cost-model program" in md
