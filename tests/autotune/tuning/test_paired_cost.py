"""Paired end-to-end trials (`PairedProgramCost`): a configuration's cost is its emitted program's
ratio to the default's, timed beside it, times the default's time; the Tuner takes it as the space's
pricer; trials are memoized and shared between runs through a cache; failures cost inf; a model-based
search learns from these costs (a fake machine, no XLA)."""
from __future__ import annotations

import math
import os

import numpy as np
import pytest

from autotune.compiler.fusion import FusionSpace
from autotune.compiler.emission import emit_fused_text
from autotune.compiler.program import Program
from autotune.tuning.paired_cost import PairedProgramCost
from autotune.tuning.pricing import space_cost
from autotune.tuning.callbacks import FunctionCallback
from autotune.tuning.options import TunerOptions
from autotune.tuning.tuner import Tuner
from hardware.base import Measurement, ProgramEvaluator
from search.base import get_strategy

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
TWO_OUTPUTS = os.path.join(ROOT, "tests", "fixtures", "hlo", "small", "two_outputs.hlo")


class _PairedMachine(ProgramEvaluator):
    """measure_program: the default's time (once); measure_paired: a ratio that is a function of the
    candidate text (its number of `fusion` instructions: more fused = faster here), or a failure for
    texts holding `fail_marker`."""

    def _measure_batch(self, kernels, tiles):
        raise AssertionError("a whole-program fake measures no kernels")

    def __init__(self, default_s: float = 2e-3, fail_all_paired: bool = False):
        super().__init__(target="cpu")
        self.default_s = default_s
        self.program_calls = 0
        self.paired_calls: list = []
        self.fail_all_paired = fail_all_paired

    def measure_program(self, text, reference=None, **opts):
        self.program_calls += 1
        assert opts.get("disable_fusion") is True  # emitted programs compile with EMITTED_CPU_COMPILE_OPTIONS
        return Measurement(self.default_s, extra={"output_error": 0.0})

    def measure_paired(self, reference_text, text, seconds, **opts):
        self.paired_calls.append((reference_text, text, seconds))
        if self.fail_all_paired:
            return Measurement.failure("runtime_error: boom")
        ratio = 1.0 / (1.0 + 0.1 * text.count(" fusion("))
        return Measurement(ratio, extra={"ratios": [ratio] * 8, "candidate_s": ratio * self.default_s,
                                         "reference_s": self.default_s})


@pytest.fixture()
def space():
    return FusionSpace(Program.from_file(TWO_OUTPUTS), "cpu")


def test_costs_are_paired_ratios_times_the_default(space):
    ev = _PairedMachine()
    cost = PairedProgramCost(space, ev, 0.2, reference_text="orig")
    assert space_cost(space, cost) is cost  # a configuration-level pricer is used as it is
    default = space.default()
    cfgs = [default] + [space.random(np.random.default_rng(s)) for s in range(4)]
    out = cost(cfgs)
    assert out[0] == pytest.approx(ev.default_s)  # the default: its own time, never paired with itself
    default_text = emit_fused_text(space, default, header=True)
    for c, v in zip(cfgs[1:], out[1:]):
        text = emit_fused_text(space, c, header=True)
        assert v == pytest.approx(ev.default_s / (1.0 + 0.1 * text.count(" fusion(")))
        assert cost.ratio(c) == pytest.approx(v / ev.default_s)
    assert all(ref == default_text and s == 0.2 for ref, _, s in ev.paired_calls)
    n = len(ev.paired_calls)
    again = cost(cfgs)  # memoized: nothing timed again
    assert np.array_equal(again, out) and len(ev.paired_calls) == n and ev.program_calls == 1
    assert cost.is_priced(cfgs[2]) and cost.describe()["trial_cost"] == "paired"


def test_failures_cost_inf_and_the_cache_is_shared(space):
    ev = _PairedMachine(fail_all_paired=True)
    cache: dict = {}
    cost = PairedProgramCost(space, ev, 0.1, cache=cache)
    c = space.random(np.random.default_rng(0))
    assert math.isinf(cost([c])[0]) and "boom" in cost.records[space.config_digest(c)]["status"]
    other = PairedProgramCost(space, ev, 0.1, cache=cache)
    assert not other.is_priced(c)  # fresh for another run ...
    assert math.isinf(other([c])[0]) and len(ev.paired_calls) == 1 and ev.program_calls == 1  # ... not re-timed


def test_a_default_that_cannot_be_timed_fails_every_trial(space):
    class _NoDefault(_PairedMachine):
        def measure_program(self, text, reference=None, **opts):
            return Measurement.failure("budget_exhausted")
    ev = _NoDefault()
    cost = PairedProgramCost(space, ev, 0.1)
    out = cost([space.default(), space.random(np.random.default_rng(0))])
    assert np.all(np.isinf(out)) and not ev.paired_calls
    assert cost.describe()["default_status"] == "budget_exhausted"


def test_rejects_an_evaluator_that_cannot_pair(space):
    with pytest.raises(ValueError, match="measure_paired"):
        PairedProgramCost(space, object())
    with pytest.raises(ValueError, match="seconds"):
        PairedProgramCost(space, _PairedMachine(), 0.0)


def test_tuner_counts_paired_trials_and_model_based_search_is_told_them(space):
    ev = _PairedMachine()
    cache: dict = {}
    seen = []
    for seed in (0, 1):
        cost = PairedProgramCost(space, ev, 0.05, cache=cache)
        measured = []
        t = Tuner(space, cost, get_strategy("model-based")(space, seed=seed, sa_chains=4, sa_steps=5), budget=None,
                  options=TunerOptions(max_evaluations=10, batch_size=4, progress=False),
                  callbacks=[FunctionCallback(on_config=lambda c, v: measured.append(c))])
        res = t.run()
        assert len(measured) == t.evaluations <= 10  # every fresh configuration is one trial (shared cache or not)
        assert res.best_cost == pytest.approx(min(cost.config_cost.values()))
        strat = t.strategy  # what the model-based search learns from: the paired costs, per configuration
        told = sorted(v for _, v in strat._told.values())
        assert told == pytest.approx(sorted(cost.config_cost[space.config_digest(c)] for c, _ in strat._told.values()))
        seen.append(len(ev.paired_calls))
    assert seen[1] <= seen[0] + 10  # the second run times only configurations the first did not


class _DisturbedMachine(_PairedMachine):
    """The default's blocks run 3.5x slower in the first `disturbed` paired calls (its ratio 1/3.5 of
    the true one), as on a loaded machine (docs/lab-notes/2026-11-27-autotvm-xla-cpu-64-trials.md)."""

    def __init__(self, disturbed: int):
        super().__init__()
        self.disturbed = disturbed

    def measure_paired(self, reference_text, text, seconds, **opts):
        m = super().measure_paired(reference_text, text, seconds, **opts)
        if len(self.paired_calls) <= self.disturbed:
            return Measurement(m.seconds / 3.5, extra={**m.extra, "reference_s": 3.5 * self.default_s})
        return m


def test_a_trial_with_a_disturbed_default_is_timed_again(space):
    c = space.random(np.random.default_rng(1))
    true = _PairedMachine().measure_paired("", emit_fused_text(space, c, header=True), 0.1).seconds
    ev = _DisturbedMachine(disturbed=1)
    cost = PairedProgramCost(space, ev, 0.1)
    assert cost([c])[0] == pytest.approx(true * ev.default_s)  # the retry's ratio, not the disturbed one
    rec = cost.records[space.config_digest(c)]
    assert rec["retried"] == 1 and "reference_disturbed" not in rec and len(ev.paired_calls) == 2
    assert cost.describe()["retried_disturbed"] == 1 and cost.describe()["kept_disturbed"] == 0
    assert cost.describe()["trials"] == 1  # one configuration: one trial, timed twice
    # still disturbed after the retry: kept (a cost is needed) and flagged
    ev2 = _DisturbedMachine(disturbed=5)
    cost2 = PairedProgramCost(space, ev2, 0.1)
    cost2([c])
    assert cost2.records[space.config_digest(c)]["reference_disturbed"] is True
    assert len(ev2.paired_calls) == 2 and cost2.describe()["kept_disturbed"] == 1
