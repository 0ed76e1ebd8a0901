"""benchmarks/verifier_speed.py --quick: parse with and without the verifier in fresh processes, the report
written where asked."""
from benchmarks import verifier_speed


def test_quick_run_times_both_in_fresh_processes(tmp_path):
    out = tmp_path / "verifier_speed.md"
    res = verifier_speed.main(["--quick", "--out", str(out)])
    assert res["instructions"] > 0 and res["parse_s"] > 0 and res["corpus_programs"] == 1
    text = out.read_text()
    assert text.startswith("# HLO verifier cost") and "| program | instructions | parse (ms) |" in text
