"""benchmarks/heldout.py: the smoke run works on validation programs only and records nothing; the
ledger refuses a second score of the same model file on the same test set."""
import json

from benchmarks import heldout


def test_quick_run_reads_no_test_program_and_records_nothing(tmp_path, capsys):
    before = heldout.LEDGER.read_text() if heldout.LEDGER.exists() else None
    assert heldout.main(["--quick", "--task", "fusion-tpu", "--work", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "hlo_heldout" not in out and "hlo_library" in out
    assert "| gnn_fusion_tpu.pt |" in out
    assert (heldout.LEDGER.read_text() if heldout.LEDGER.exists() else None) == before


def test_a_scored_model_is_not_scored_again(tmp_path):
    files = heldout.shipped_files("fusion", "tpu")
    sha = {k: heldout.sha256_file(p) for k, p in files.items()}
    ledger = {"scores": [{"task": "fusion-tpu", "test_set": heldout.test_set_digest(), "model_sha256": sha}]}
    assert heldout.already_scored(ledger, "fusion-tpu", files)
    assert not heldout.already_scored(ledger, "tile-tpu", heldout.shipped_files("tile", "tpu"))
    other = {"scores": [{"task": "fusion-tpu", "test_set": "another", "model_sha256": sha}]}
    assert not heldout.already_scored(other, "fusion-tpu", files)


def test_bootstrap_interval_brackets_the_mean():
    lo, hi = heldout.bootstrap_mean([1.0, 2.0, 3.0, 10.0])
    assert lo <= 4.0 <= hi
    assert heldout.bootstrap_mean([1.0]) is None
    ci = heldout.intervals({"programs": {"a": {"m": {"mape": 1.0, "n_kernels": 3}},
                                         "b": {"m": {"mape": 3.0, "n_kernels": 5}}}})
    assert set(ci["m"]) == {"mape"}
    json.dumps(ci)


def test_full_runs_use_the_shipped_recipe(monkeypatch, tmp_path):
    """The options of a full run are the task's recipe, not the smoke run's (a bug of 2026-11-29 built
    the first held-out datasets with 2 configurations and 8 tiles)."""
    calls = []

    class Done:
        stdout = "{}"
    monkeypatch.setattr(heldout, "cli", lambda *a: calls.append(list(a)) or Done())
    for task in ("fusion-tpu", "tile-tpu", "layout-tpu", "fusion-cpu"):
        calls.clear()
        heldout.score(task, tmp_path, quick=False)
        build = calls[0]
        for option, value in zip(heldout.recipe(task)[::2], heldout.recipe(task)[1::2]):
            assert build[build.index(option) + 1] == value, (task, option)
        assert str(heldout.HELDOUT) in build and "--split-file" in build
        calls.clear()
        heldout.score(task, tmp_path, quick=True)
        assert str(heldout.HELDOUT) not in calls[0]


def test_void_entries_do_not_count(tmp_path):
    files = heldout.shipped_files("fusion", "tpu")
    sha = {k: heldout.sha256_file(p) for k, p in files.items()}
    ledger = {"scores": [{"task": "fusion-tpu", "test_set": heldout.test_set_digest(), "model_sha256": sha,
                          "void": "recipe bug"}]}
    assert not heldout.already_scored(ledger, "fusion-tpu", files)
