"""benchmarks/trip_counts: the project's while-loop trip counts against XLA's own analysis (the
`known_trip_count` of its optimized module) on a JAX scan and a TensorFlow-style loop."""
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.xla
def test_every_count_xla_knows_is_known_with_the_same_value():
    pytest.importorskip("jax")
    from benchmarks.trip_counts import compare
    r = compare((ROOT / "examples" / "hlo" / "lstm_small_infer.hlo").read_text())
    assert r["xla_known"] >= 1 and r["matched"] == r["xla_known"] and not r["missing"]


@pytest.mark.xla
def test_a_condition_through_a_call_is_known_to_the_project_where_xla_does_not_know_it():
    pytest.importorskip("jax")
    from benchmarks.trip_counts import compare
    r = compare((ROOT / "tests" / "fixtures" / "hlo" / "frontend_idioms" / "while_condition_call.hlo").read_text())
    assert r["xla_known"] == 0 and not r["missing"]
    assert r["only_ours"] == [{"while": "w", "ours": 16, "source": "evaluated"}]
