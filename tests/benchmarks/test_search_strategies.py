"""benchmarks/search_strategies.py: its resume log survives a kill mid-write (a torn last line is skipped
and the next append starts on its own line)."""
import json

from benchmarks.search_strategies import _read_log


def test_a_torn_last_line_is_skipped_and_appends_start_clean(tmp_path):
    path = tmp_path / "runs.jsonl"
    whole = {"program": "mlp", "strategy": "random", "seed": 0, "speedup": 1.2, "budget_s": 60.0}
    path.write_text(json.dumps(whole) + "\n" + '{"program": "cnn", "strat')
    assert _read_log(str(path)) == [whole]
    with open(path, "a") as f:
        f.write(json.dumps(dict(whole, program="cnn")) + "\n")
    assert [r["program"] for r in _read_log(str(path))] == ["mlp", "cnn"]


def test_rows_without_a_run_key_are_not_taken_for_runs(tmp_path):
    path = tmp_path / "runs.jsonl"
    path.write_text('[1, 2]\n{"program": "mlp"}\n\n')
    assert _read_log(str(path)) == []
