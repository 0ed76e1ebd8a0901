"""Tests for hardware/base.py: durations, budgets, and the Evaluator's store/budget/dedup logic."""
from __future__ import annotations

from dataclasses import dataclass

import pytest

from autotune.tuning.store import MemoryStore
from hardware.base import (Budget, BudgetError, Evaluator, KernelLike, Measurement, parse_duration,
                           tile_key)


# ---------------------------------------------------------------------------------------------
# parse_duration
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, seconds", [
    ("30s", 30.0), ("5m", 300.0), ("1h", 3600.0), ("1h30m", 5400.0), ("90", 90.0), ("250ms", 0.25),
    (" 2 min ", 120.0), ("1.5h", 5400.0), ("10sec", 10.0), ("1H", 3600.0), ("0", 0.0), (".5s", 0.5),
    (2.5, 2.5), (7, 7.0), (0, 0.0),
])
def test_parse_duration_forms(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", [None, "inf", "none", "unlimited", " INF "])
def test_parse_duration_unlimited(text):
    assert parse_duration(text) is None


@pytest.mark.parametrize("text", ["", "abc", "5x", "1h 2q", "s", "-5", "5m-", "1,5h", -1, -0.5])
def test_parse_duration_errors(text):
    with pytest.raises(BudgetError):
        parse_duration(text)


def test_budget_error_is_value_error():
    assert issubclass(BudgetError, ValueError)


# ---------------------------------------------------------------------------------------------
# Budget with an injected clock
# ---------------------------------------------------------------------------------------------
class FakeClock:
    def __init__(self, t: float = 100.0):
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, dt: float) -> None:
        self.t += dt


def test_budget_exhaustion_with_fake_clock():
    clock = FakeClock()
    b = Budget("10s", clock=clock)
    assert b.seconds == 10.0 and not b.exhausted and b.remaining == 10.0
    clock.advance(9.5)
    assert not b.exhausted and b.remaining == pytest.approx(0.5) and b.elapsed == pytest.approx(9.5)
    clock.advance(0.5)
    assert b.exhausted and b.remaining == 0.0
    clock.advance(100)
    assert b.exhausted and b.remaining == 0.0
    b.start()  # restart
    assert not b.exhausted and b.remaining == 10.0
    assert "Budget" in repr(b)


def test_budget_unlimited_and_zero():
    clock = FakeClock()
    unlimited = Budget(None, clock=clock)
    clock.advance(1e9)
    assert not unlimited.exhausted and unlimited.remaining == float("inf")
    assert Budget(0, clock=clock).exhausted
    assert Budget("1m", clock=clock).seconds == 60.0
    with pytest.raises(BudgetError):
        Budget("soon")


# ---------------------------------------------------------------------------------------------
# tile_key
# ---------------------------------------------------------------------------------------------
def test_tile_key_forms():
    class Tile:
        def key(self):
            return "T8x128"

    assert tile_key(None) == ""
    assert tile_key((8, 128)) == "8x128"
    assert tile_key([1, 2, 3]) == "1x2x3"
    assert tile_key(Tile()) == "T8x128"
    assert tile_key("4x4") == "4x4"


# ---------------------------------------------------------------------------------------------
# Evaluator with a tiny fake subclass
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class FakeKernel:
    hash: str

    def to_hlo_module(self) -> str:
        return f"HloModule {self.hash}\n"


class FakeEvaluator(Evaluator):
    name = "fake"
    version = "3"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls: list[list[tuple[str, str]]] = []

    def _measure_batch(self, kernels, tiles):
        self.calls.append([(k.hash, tile_key(t)) for k, t in zip(kernels, tiles)])
        out = []
        for k, t in zip(kernels, tiles):
            if k.hash.startswith("bad"):
                out.append(Measurement.failure("compile_error: unsupported op"))
            elif k.hash.startswith("boom"):
                raise RuntimeError("evaluator bug")
            else:
                out.append(Measurement(1e-3 * len(k.hash) + 1e-6 * len(tile_key(t))))
        return out


def test_fake_kernel_is_kernel_like():
    assert isinstance(FakeKernel("a"), KernelLike)


def test_store_hits_are_not_remeasured():
    store = MemoryStore()
    ev = FakeEvaluator(target="tpu", store=store)
    assert ev.store_namespace == "fake/3"
    first = ev.measure([FakeKernel("aa"), FakeKernel("bbb")], [(8, 128), None])
    assert [m.ok for m in first] == [True, True] and not any(m.cached for m in first)
    assert len(ev.calls) == 1 and ev.measured == 2
    assert store.get("tpu", "fake/3", "aa", "8x128", machine=ev.machine).seconds == first[0].seconds

    again = ev.measure([FakeKernel("aa"), FakeKernel("bbb")], [(8, 128), None])
    assert len(ev.calls) == 1, "answered from the store without re-measuring"
    assert all(m.cached for m in again)
    assert [m.seconds for m in again] == [m.seconds for m in first]
    assert ev.measured == 2

    # A new (kernel, tile) is measured alone; the known one still comes from the store.
    mixed = ev.measure([FakeKernel("aa"), FakeKernel("aa")], [(8, 128), (16, 128)])
    assert ev.calls[-1] == [("aa", "16x128")]
    assert mixed[0].cached and not mixed[1].cached


def test_store_is_keyed_by_target_and_version():
    store = MemoryStore()
    FakeEvaluator(target="tpu", store=store).measure([FakeKernel("k")])
    other_target = FakeEvaluator(target="cpu", store=store)
    other_target.measure([FakeKernel("k")])
    assert len(other_target.calls) == 1

    class NewVersion(FakeEvaluator):
        version = "4"

    newer = NewVersion(target="tpu", store=store)
    newer.measure([FakeKernel("k")])
    assert len(newer.calls) == 1


def test_failures_are_values():
    store = MemoryStore()
    ev = FakeEvaluator(store=store)
    res = ev.measure([FakeKernel("bad1"), FakeKernel("good")])
    assert not res[0].ok and res[0].status.startswith("compile_error") and res[0].seconds is None
    assert res[1].ok
    # The failure is stored too, so it is not retried.
    again = ev.measure([FakeKernel("bad1")])
    assert len(ev.calls) == 1 and again[0].status.startswith("compile_error") and again[0].cached


def test_evaluator_exception_becomes_failures():
    ev = FakeEvaluator()
    res = ev.measure([FakeKernel("boom"), FakeKernel("ok")])
    assert all(m.status.startswith("evaluator_error: RuntimeError") for m in res)


def test_evaluator_bugs_are_not_stored():
    """An exception in the evaluator's own code (evaluator_error, or a simulator's `invalid:` item)
    says nothing about the kernel: a later run, with the bug fixed, measures it again."""
    store = MemoryStore()

    class Buggy(FakeEvaluator):
        broken = True

        def _measure_batch(self, kernels, tiles):
            self.calls.append([k.hash for k in kernels])
            return [Measurement.failure("invalid: KeyError: 'lt.2.i3'") if self.broken else Measurement(1.0)
                    for _ in kernels]

    ev = Buggy(store=store)
    assert ev.measure([FakeKernel("k")])[0].status.startswith("invalid:")
    FakeEvaluator(store=store).measure([FakeKernel("boom")])
    assert store.get("tpu", "fake/3", "k", "", machine=ev.machine) is None
    assert store.get("tpu", "fake/3", "boom", "", machine=ev.machine) is None
    ev.broken = False
    again = ev.measure([FakeKernel("k")])
    assert again[0].ok and not again[0].cached and len(ev.calls) == 2


def test_wrong_number_of_results_leaves_no_holes():
    class Short(FakeEvaluator):
        def _measure_batch(self, kernels, tiles):
            return [Measurement(1.0)]

    res = Short().measure([FakeKernel("a"), FakeKernel("b"), FakeKernel("c")])
    assert len(res) == 3 and res[0].ok
    assert all(isinstance(m, Measurement) and m.status.startswith("evaluator_error") for m in res[1:])


def test_zero_budget_returns_budget_exhausted_without_measuring():
    store = MemoryStore()
    ev = FakeEvaluator(target="tpu", budget=0, store=store)
    store.put("tpu", "fake/3", "known", "", Measurement(0.5), machine=ev.machine)
    res = ev.measure([FakeKernel("known"), FakeKernel("new1"), FakeKernel("new2")])
    assert ev.calls == []
    assert res[0].ok and res[0].cached and res[0].seconds == 0.5  # store hits still answered
    assert [m.status for m in res[1:]] == ["budget_exhausted", "budget_exhausted"]
    assert ev.budget_exhausted and ev.measured == 0
    assert store.get("tpu", "fake/3", "new1", "", machine=ev.machine) is None  # budget failures are not stored


def test_budget_runs_out_between_batches():
    clock = FakeClock()
    ev = FakeEvaluator(budget=Budget(5, clock=clock))
    assert ev.measure([FakeKernel("a")])[0].ok
    clock.advance(6)
    assert ev.measure([FakeKernel("b")])[0].status == "budget_exhausted"
    assert len(ev.calls) == 1


def test_duplicates_in_one_batch_are_measured_once():
    store = MemoryStore()
    ev = FakeEvaluator(store=store)
    ks = [FakeKernel("x"), FakeKernel("y"), FakeKernel("x"), FakeKernel("x"), FakeKernel("y")]
    tiles = [(8, 128), None, (8, 128), (16, 128), None]
    res = ev.measure(ks, tiles)
    assert len(ev.calls) == 1
    assert sorted(ev.calls[0]) == sorted([("x", "8x128"), ("y", ""), ("x", "16x128")])
    assert ev.measured == 3
    assert res[0] == res[2] and res[1] == res[4]
    assert res[0] != res[3]  # a different tile is a different measurement
    assert store.count() == 3


def test_tiles_length_mismatch_is_an_error():
    with pytest.raises(ValueError):
        FakeEvaluator().measure([FakeKernel("a")], [None, None])


def test_empty_request():
    ev = FakeEvaluator(budget=0)
    assert ev.measure([]) == [] and ev.calls == []
