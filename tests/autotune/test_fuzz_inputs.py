"""Fuzzing bad input: mutated real programs either go through show/emit/measure-sim or fail with one
line naming file:line:col; never another exception, never past a time limit.

A fast slice runs here (seeded mutants of the smaller corpus files, plus hypothesis-driven
mutations); benchmarks/fuzz_inputs.py runs >= 10,000 mutants through the CLI in worker processes.
"""
from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autotune.testing.fuzz import (HANG, OK, POSITIONED, TRACEBACK, Mutator, check, classify, corpus_files,
                                   mutants)

SEEDS = corpus_files(max_bytes=120_000)  # the smaller programs: the slice stays fast
CASE_SECONDS = 10.0


def _assert_clean(outcome: str, detail: str, what: str) -> None:
    assert outcome in (OK, POSITIONED), f"{outcome}: {detail} ({what})"
    if outcome == POSITIONED:
        assert "\n" not in detail


def test_corpus_seeds_pass_unmutated():
    assert len(SEEDS) >= 20
    for path in SEEDS:
        outcome, detail = check(open(path).read(), os.path.basename(path), CASE_SECONDS)
        assert outcome == OK, f"{path}: {outcome}: {detail}"


def test_seeded_mutants_fail_cleanly():
    """300 mutants (syntactic and semantic), round-robin over the seeds."""
    seen = {OK: 0, POSITIONED: 0}
    for m in mutants(SEEDS, 300, seed=16):
        outcome, detail = check(m.text, os.path.basename(m.source), CASE_SECONDS)
        _assert_clean(outcome, detail, f"{m.source} seed {m.seed}: {m.mutations}")
        seen[outcome] += 1
    assert seen[OK] > 0 and seen[POSITIONED] > 0  # both outcomes occur: the mutations are not all fatal


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(SEEDS), st.randoms(use_true_random=False), st.integers(1, 3))
def test_hypothesis_mutants_fail_cleanly(path, rnd, count):
    text, what = Mutator(rnd, syntactic_share=0.2).mutate(open(path).read(), count)
    outcome, detail = check(text, os.path.basename(path), CASE_SECONDS)
    _assert_clean(outcome, detail, f"{path}: {what}")


def test_mutants_are_reproducible():
    a = [m.text for m in mutants(SEEDS[:3], 6, seed=5)]
    b = [m.text for m in mutants(SEEDS[:3], 6, seed=5)]
    assert a == b
    text = open(SEEDS[0]).read()
    kinds = set()
    for s in range(40):
        _, what = Mutator(s).mutate(text, 1)
        kinds.add(what[0].split()[0])
    assert {"shape", "dtype", "operand", "attribute"} & kinds and {"delete", "swap", "duplicate"} & kinds


def test_classify_tells_bugs_from_user_errors():
    from autotune.compiler.hlo import HloParseError
    from autotune.compiler.program import ProgramError
    from autotune.testing.fuzz import CaseTimeout
    assert classify(HloParseError("bad", "f.hlo", 3, 4))[0] == POSITIONED
    assert classify(ProgramError("bad"))[0] != POSITIONED  # no instruction: no position
    assert classify(KeyError("x"))[0] == TRACEBACK
    assert classify(CaseTimeout("more than 1 s"))[0] == HANG


def test_time_limit_catches_a_hang():
    import time

    from autotune.testing.fuzz import CaseTimeout, time_limit
    with pytest.raises(CaseTimeout):
        with time_limit(0.2):
            time.sleep(2)
