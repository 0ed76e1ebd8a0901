"""autotune.tuning.verification.race_programs: the end-to-end race's rule, on scripted timings."""
from __future__ import annotations

import pytest

from autotune.tuning.verification import race_programs
from hardware.base import Measurement


class _ScriptedTimer:
    """End-to-end timings from a script per program text (the last value repeats; None = failure);
    each timing advances a fake clock by one second."""

    def __init__(self, script: dict):
        self.script = {k: list(v) for k, v in script.items()}
        self.t = 0.0
        self.calls: list = []
        self.first: list = []

    def clock(self) -> float:
        return self.t

    def __call__(self, text: str, first: bool) -> Measurement:
        self.t += 1.0
        self.calls.append(text)
        if first:
            self.first.append(text)
        seq = self.script[text]
        v = seq.pop(0) if len(seq) > 1 else seq[0]
        return Measurement(v) if v is not None else Measurement.failure("crashed")


def _race(script: dict, order: list, seconds: float, baseline, share: float, **kw):
    timer = _ScriptedTimer(script)
    race = race_programs(timer, iter(order), seconds, baseline, screen_share=share, clock=timer.clock, **kw)
    return race, timer


def test_race_keeps_the_default_when_its_floor_is_lowest():
    # the default's screening run was slowed by interference (1.10); its floor is 0.90. One timing
    # each would keep fast1; racing the two fastest against the default finds the default's floor
    script = {"default": [1.10, 0.90], "fast1": [0.95], "slow": [1.50], "fast2": [0.97]}
    race, timer = _race(script, ["fast1", "slow", "fast2"], 10.0, "default", 0.4)
    assert timer.calls[:4] == ["default", "fast1", "slow", "fast2"]  # baseline, then screened in order
    assert sorted(timer.calls[4:]) == sorted(["fast1", "fast2", "default"] * 2) and race.timings == 10
    assert race.winner == "default" and race.entries["default"].best == 0.90
    assert timer.first == ["default", "fast1", "slow", "fast2"]  # outputs checked once per program


def test_race_never_keeps_a_failed_candidate():
    script = {"default": [1.0], "broken": [None], "fast": [0.8]}
    race, timer = _race(script, ["broken", "fast"], 6.0, "default", 0.5)
    assert race.winner == "fast" and "broken" not in timer.calls[3:]
    assert race.entries["broken"].status == "crashed" and not race.entries["broken"].ok
    # from a random start there is no default to race against: the finalists race each other
    race, timer = _race({"a": [1.05, 0.7], "b": [1.0], "c": [1.1]}, ["a", "b", "c"], 8.0, None, 0.3)
    assert race.winner == "a" and set(timer.calls[3:]) == {"a", "b"}


def test_a_program_failing_a_later_timing_is_dropped():
    race, _ = _race({"default": [1.0], "flaky": [0.5, None]}, ["flaky"], 10.0, "default", 0.3)
    assert race.winner == "default" and race.entries["flaky"].status == "crashed"


def test_first_candidate_and_min_rounds_whatever_the_budget():
    # a budget smaller than one timing still times the baseline and the best prediction, and
    # min_rounds races them once more (one timing each would keep a lucky run)
    race, timer = _race({"default": [1.0, 0.8], "best": [0.9, 0.95], "second": [0.5]}, ["best", "second"],
                        0.5, "default", 2 / 3, min_rounds=1)
    assert "second" not in timer.calls  # screening stops after the first candidate
    assert timer.calls == ["default", "best", "best", "default"] and race.rounds == 1
    assert race.winner == "default"


def test_max_rounds_and_all_failed():
    race, timer = _race({"default": [1.0], "x": [0.9]}, ["x"], None, "default", 2 / 3, max_rounds=3)
    assert race.rounds == 3 and len(timer.calls) == 2 + 3 * 2 and race.winner == "x"
    race, _ = _race({"default": [None], "x": [None]}, ["x"], 5.0, "default", 2 / 3)
    assert race.winner is None and race.timings == 2


def test_candidates_are_produced_lazily():
    made: list = []

    def gen():
        for t in ("a", "b", "c"):
            made.append(t)
            yield t
    timer = _ScriptedTimer({"d": [1.0], "a": [1.0], "b": [1.0], "c": [1.0]})
    race_programs(timer, gen(), 2.5, "d", screen_share=0.5, clock=timer.clock)
    assert made == ["a", "b"]  # "c" was never emitted: the screening share was spent


@pytest.mark.parametrize("finalists", [1, 2, 3])
def test_finalists_count(finalists):
    script = {"d": [2.0], "a": [1.0], "b": [1.1], "c": [1.2], "e": [1.3]}
    race, timer = _race(script, ["a", "b", "c", "e"], 100.0, "d", 0.5, finalists=finalists, max_rounds=1)
    assert set(timer.calls[5:]) == set(["a", "b", "c"][:finalists]) | {"d"}


def test_one_lucky_round_does_not_win_the_race():
    # "lucky" ran once at half its usual time (a frequency boost, a warm cache): its minimum would win;
    # the median of its interleaved timings does not
    script = {"default": [1.0], "lucky": [1.1, 0.5, 1.1, 1.1]}
    race, timer = _race(script, ["lucky"], None, "default", 2 / 3, max_rounds=3, min_rounds=3)
    assert len(race.entries["lucky"].timings) == 4 and min(race.entries["lucky"].timings) == 0.5
    assert race.winner == "default" and race.entries["lucky"].best == pytest.approx(1.1)
