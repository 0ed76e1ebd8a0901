"""benchmarks/scale.py: one committed program size in a fresh process, every stage timed, the table written.
(tests/autotune/compiler/test_scale.py holds the near-linear claim itself.)"""
from benchmarks import scale


def test_one_size_in_a_fresh_process(tmp_path):
    md = tmp_path / "scale.md"
    res = scale.main(["--programs", "transformer:12", "--targets", "tpu", "--md", str(md)])
    ((key, points),) = res["series"].items()
    assert key == "tpu:transformer" and len(points) == 1
    n, times = points[0]
    assert n > 0 and set(scale.STAGES) | {"show"} <= set(times) and all(t >= 0 for t in times.values())
    text = md.read_text()
    assert text.startswith("# Analysis time against program size") and "| tpu | transformer | 12 |" in text
