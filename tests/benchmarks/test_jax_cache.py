"""benchmarks/jax_cache.py: a real (short) tune fills a cache, a fresh process then hits it with the
same outputs."""
import pytest

pytest.importorskip("jax")

from benchmarks import jax_cache  # noqa: E402


def test_a_cached_tune_gives_the_same_outputs():
    res = jax_cache.measure(runs=1, budget="5s")
    assert res["identical_outputs"] and len(res["hit_s"]) == 1 and res["hit_s"][0] < res["first_s"]
