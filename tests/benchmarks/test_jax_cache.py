"""benchmarks/jax_cache.py: a real (short) tune fills a cache, a fresh process then hits it with the
same outputs."""
import pytest

pytest.importorskip("jax")

from benchmarks import jax_cache  # noqa: E402


def test_a_cached_tune_gives_the_same_outputs():
    # 15 s: the run refuses a budget its start-up and verification would use up (9 s needed on a loaded 2-core VM)
    res = jax_cache.measure(runs=1, budget="15s")
    assert res["identical_outputs"] and len(res["hit_s"]) == 1
    assert res["cache_untouched_by_hits"]  # the hit ran no search (nothing in the entry was rewritten)
