"""benchmarks/fuzz_inputs.py: a few mutants through the real CLI in a worker process, every outcome counted,
the report and the failures file written."""
from benchmarks import fuzz_inputs


def test_a_few_mutants_through_a_worker(tmp_path):
    out = tmp_path / "fuzz.md"
    res = fuzz_inputs.main(["--files", "3", "--timeout", "120", "--max-bytes", "4000", "--out", str(out)])
    assert res["files"] == 3 and sum(res["counts"].values()) == 3
    assert set(res["counts"]) <= set(fuzz_inputs.OUTCOMES)
    assert out.read_text().startswith("#") and (tmp_path / "fuzz_failures.jsonl").exists()
