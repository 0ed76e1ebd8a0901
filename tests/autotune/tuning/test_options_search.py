"""The compiler-options search (autotune/tuning/options_search.py) driven by a fake XLA evaluator: a
deterministic clock, a true speed per setting, paired ratios with a little noise."""
from __future__ import annotations

import dataclasses
import hashlib

import numpy as np
import pytest

from autotune.compiler.targets import get_target
from autotune.compiler.targets.base import CompilerOption
from autotune.compiler.targets.cpu import CPU_COMPILER_OPTIONS
from autotune.tuning.options_search import (DEFAULT_REFERENCE_OPTIONS, OptionsPrior, options_prior,
                                            parse_xla_flags, record_options, search_options, trials_to_reach,
                                            xla_flags_line)
from autotune.tuning.store import MemoryStore
from hardware.base import Budget, Measurement, ProgramEvaluator

TEXT = "HloModule fake\n"


class _Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class _FakeXla(ProgramEvaluator):
    """A stand-in for XlaEvaluator: a setting's true time ratio over the default compile is the product
    of ``factors[(name, value)]`` over its flags (1 where not listed); paired timings answer that ratio
    with 2% noise, 8 ratios per call, and advance the clock by the seconds asked; an output check costs
    ``check_s`` and fails for flags listed in ``mismatch``. Records every call's flags."""

    hand_fusions = True
    name = "fake-xla"
    platform = "cpu"

    def __init__(self, clock: _Clock, factors: dict, mismatch: tuple = (), check_s: float = 0.5,
                 noise: float = 0.02):
        super().__init__(target="cpu")
        self.budget = Budget(None)
        self.clock, self.factors, self.mismatch, self.check_s, self.noise = clock, factors, mismatch, check_s, noise
        self.rng = np.random.default_rng(0)
        self.checked: list = []
        self.check_calls: list = []
        self.paired: list = []
        self.paired_calls: list = []
        self.fused_ratio = 1.0  # a tuned emission's time over the original's (both without options)

    def _measure_batch(self, kernels, tiles):
        raise AssertionError("no kernels here")

    def measure_program(self, hlo_text, *, reference=None, disable_fusion=None, xla_flags=None):
        raise AssertionError("the options search checks outputs with check_compile_options")

    def true_ratio(self, flags: dict) -> float:
        r = 1.0
        for k, v in flags.items():
            r *= self.factors.get((k, v), 1.0)
        return r

    def check_compile_options(self, hlo_text, xla_flags, *, base_options=None, reference_text=None):
        self.checked.append(dict(xla_flags))
        self.check_calls.append((hlo_text, dict(base_options or {}), reference_text))
        self.clock.t += self.check_s
        if any((k, v) in self.mismatch for k, v in xla_flags.items()):
            return Measurement(None, "output_mismatch: outputs differ", extra={"error": 0.5, "accurate": False})
        return Measurement(0.1, extra={"error": 1e-7, "identical": False, "accurate": True})

    def measure_paired(self, reference_text, hlo_text, seconds, *, disable_fusion=None, xla_flags=None,
                       pairs=4, min_block_ms=1.0, reference_options=None):
        self.paired_calls.append((reference_text, hlo_text, disable_fusion, dict(reference_options or {})))
        ref_flags = dict((reference_options or {}).get("xla_flags") or {})
        flags = {k: v for k, v in (xla_flags or {}).items() if k not in ref_flags}
        self.paired.append((flags, seconds))
        self.clock.t += seconds
        r = self.true_ratio(flags) * (self.fused_ratio if hlo_text != reference_text else 1.0)
        ratios = list(r * (1 + self.noise * self.rng.standard_normal(8)))
        return Measurement(float(np.median(ratios)), extra={"ratios": ratios})


A = CompilerOption("opt_a", (0, 1), doc="a")
B = CompilerOption("opt_b", (False, True), doc="b")
C = CompilerOption("opt_c", ("X", "Y", "Z"), doc="c")


def _target(*options: CompilerOption):
    return dataclasses.replace(get_target("cpu"), compiler_options=tuple(options))


def test_picks_a_truly_faster_option():
    clock = _Clock()
    ev = _FakeXla(clock, {("opt_b", True): 0.8, ("opt_c", "Z"): 1.1})
    res = search_options(TEXT, _target(A, B, C), ev, 60.0, clock=clock)
    assert all(c == (TEXT, TEXT, False, DEFAULT_REFERENCE_OPTIONS) for c in ev.paired_calls)  # beside XLA's own
    assert res.flags == {"opt_b": True} and not res.keep_defaults
    assert res.xla_flags == "--opt_b=true"
    assert res.speedup == pytest.approx(1.25, rel=0.03)
    assert 1.0 < res.speedup_interval[0] <= res.speedup <= res.speedup_interval[1]
    assert res.message.startswith("use XLA_FLAGS='--opt_b=true'")
    names = {c.name: c for c in res.candidates}
    assert set(names) == {"opt_a=1", "opt_b=true", "opt_c=Y", "opt_c=Z"}  # one faster single: no pairs
    assert names["opt_b=true"].chosen and names["opt_c=Z"].speedup < 1
    d = res.as_dict()
    assert d["candidates"][1]["chosen"] and d["XLA_FLAGS"] == "XLA_FLAGS='--opt_b=true'"


def test_pairs_of_the_best_singles_when_budget_remains():
    clock = _Clock()
    ev = _FakeXla(clock, {("opt_a", 1): 0.9, ("opt_b", True): 0.85})
    res = search_options(TEXT, _target(A, B), ev, 60.0, clock=clock)
    pair = [c for c in res.candidates if c.phase == "pair"]
    assert [c.name for c in pair] == ["opt_b=true+opt_a=1"]
    assert res.flags == {"opt_b": True, "opt_a": 1}
    assert res.speedup == pytest.approx(1 / (0.9 * 0.85), rel=0.03)


def test_refuses_an_option_whose_outputs_mismatch():
    clock = _Clock()
    ev = _FakeXla(clock, {("opt_b", True): 0.7, ("opt_a", 1): 0.9}, mismatch=(("opt_b", True),))
    res = search_options(TEXT, _target(A, B), ev, 60.0, clock=clock)
    bad = next(c for c in res.candidates if c.name == "opt_b=true")
    assert bad.status.startswith("output_mismatch") and bad.speedup is None and bad.output_error == 0.5
    assert all(f.get("opt_b") is not True for f, _ in ev.paired)  # never timed
    assert res.flags == {"opt_a": 1}


def test_keeps_defaults_when_nothing_is_faster_beyond_the_interval():
    clock = _Clock()
    ev = _FakeXla(clock, {("opt_a", 1): 0.995, ("opt_b", True): 1.2}, noise=0.05)
    res = search_options(TEXT, _target(A, B), ev, 30.0, clock=clock)
    assert res.keep_defaults and res.flags == {} and res.xla_flags == "" and res.speedup is None
    assert res.message.startswith("keep XLA's defaults") and "\n" not in res.message
    assert res.as_dict()["XLA_FLAGS"] is None


def test_respects_the_budget():
    clock = _Clock()
    ev = _FakeXla(clock, {("opt_c", "Y"): 0.8}, check_s=2.0)
    res = search_options(TEXT, _target(A, B, C), ev, 5.0, clock=clock)
    assert clock.t <= 5.0 + 1e-9  # nothing started that the budget could not hold
    assert any(c.status.startswith("skipped") for c in res.candidates)
    assert res.elapsed_s <= 5.0 + 1e-9


def test_honours_requires():
    clock = _Clock()
    nans = next(o for o in CPU_COMPILER_OPTIONS if o.requires)
    ev = _FakeXla(clock, {("xla_cpu_fast_math_honor_nans", False): 0.7})
    res = search_options(TEXT, _target(nans), ev, 20.0, clock=clock)
    assert ev.checked == [{"xla_cpu_enable_fast_math": True, "xla_cpu_fast_math_honor_nans": False}]
    assert all(f["xla_cpu_enable_fast_math"] is True for f, _ in ev.paired)
    assert res.xla_flags == "--xla_cpu_enable_fast_math=true --xla_cpu_fast_math_honor_nans=false"


def test_a_target_without_options_is_refused():
    with pytest.raises(ValueError, match="declares no compiler options"):
        search_options(TEXT, get_target("tpu"), _FakeXla(_Clock(), {}), 10.0)


def test_xla_flags_line_round_trips():
    flags = {o.name: o.values[1] for o in CPU_COMPILER_OPTIONS}
    line = xla_flags_line(flags)
    assert "--xla_cpu_opt_preset=CPU_OPT_PRESET_FAST_COMPILE" in line
    assert "--xla_cpu_use_fusion_emitters=false" in line
    assert parse_xla_flags(line) == flags


# -- learning across programs: the machine-keyed store's options rows ---------------------------------------

def _searched(store, program: str, factors: dict, target, prior=None, budget=60.0, machine=None):
    clock = _Clock()
    ev = _FakeXla(clock, factors)
    if machine is not None:
        type(ev).machine = property(lambda self: machine)
    res = search_options(TEXT, target, ev, budget, clock=clock, prior=prior)
    record_options(store, ev, target.name, program, res)
    return ev, res


def test_a_second_program_tries_what_won_on_the_first_first():
    store = MemoryStore()
    target = _target(A, B, C)
    factors = {("opt_c", "Z"): 0.8}
    cold_ev, cold = _searched(store, "p1", factors, target)
    assert cold_ev.checked[0] == {"opt_a": 1}  # declared order without a prior
    prior = options_prior(store, cold_ev, target.name, exclude_program="p2")
    assert prior is not None and prior.programs == 1
    assert prior.score("opt_c=Z") > 0 > prior.score("opt_a=1") or prior.score("opt_a=1") <= 0
    ev, warm = _searched(store, "p2", factors, target, prior=prior)
    assert ev.checked[0] == {"opt_c": "Z"}  # the winner elsewhere comes first
    assert warm.prior_programs == 1 and warm.flags == {"opt_c": "Z"}
    assert trials_to_reach(warm.trace, warm.speedup) == 1 < trials_to_reach(cold.trace, cold.speedup)
    # its own rows never inform a program's prior; another machine's rows never inform this one's
    assert options_prior(store, cold_ev, target.name, exclude_program="p1").programs == 1
    other = _FakeXla(_Clock(), {})
    type(other).machine = property(lambda self: "another machine")
    assert options_prior(store, other, target.name) is None


def test_pairs_that_won_elsewhere_are_tried_early():
    prior = OptionsPrior({"opt_a=1": (0.1, 2), "opt_b=true": (0.1, 2), "opt_b=true+opt_a=1": (0.2, 2),
                          "opt_c=Y": (-0.1, 2)}, programs=2)
    assert prior.winning_pairs() == ["opt_b=true+opt_a=1"]
    clock = _Clock()
    ev = _FakeXla(clock, {("opt_a", 1): 0.9, ("opt_b", True): 0.85})
    res = search_options(TEXT, _target(A, B, C), ev, 60.0, clock=clock, prior=prior)
    assert ev.checked[0] == {"opt_b": True, "opt_a": 1}
    assert ev.checked[-1] != {"opt_b": True, "opt_a": 1}  # not tried twice
    assert [c.name for c in res.candidates].count("opt_b=true+opt_a=1") == 1
    assert res.flags == {"opt_b": True, "opt_a": 1}


def test_options_of_a_rewritten_program_compile_on_its_base_and_are_checked_against_the_original():
    clock = _Clock()
    ev = _FakeXla(clock, {("opt_b", True): 0.8})
    base = {"disable_fusion": True, "xla_flags": {"xla_disable_hlo_passes": "reshape-mover"}}
    res = search_options("HloModule emitted\n", _target(A, B), ev, 60.0, clock=clock, base_options=base,
                         reference_text=TEXT)
    assert all(c == ("HloModule emitted\n", base, TEXT) for c in ev.check_calls)
    assert all(ref == hlo == "HloModule emitted\n" and df is True and ropts == base
               for ref, hlo, df, ropts in ev.paired_calls)  # timed beside itself without the options
    assert res.flags == {"opt_b": True}


# -- the compiler-options stage of a fusion run (autotune/tuning/compiler_options.py) ------------------------

def _verified_result(keep_original: bool, fused_speedup: float = 1.0):
    from autotune.tuning.result import TuningResult, keep_original_text
    r = TuningResult(best=None, best_cost=1.0, default_cost=1.0, evaluations=1, elapsed_s=1.0)
    r.verification = {"status": "verified", "method": "end-to-end", "winner": "original" if keep_original else 0}
    r.measured_original = 1e-3
    r.keep_original = keep_original
    if keep_original:
        r.fused_text = keep_original_text(TEXT, "nothing faster")
    else:
        r.fused_text = '// header\n// XLA_FLAGS="--xla_disable_hlo_passes=fusion"\nHloModule emitted\n'
        r.paired = {"faster": True, "speedup": fused_speedup, "speedup_interval": [fused_speedup * 0.99,
                                                                                    fused_speedup * 1.01]}
    return r


def test_stage_writes_the_original_with_the_options_found():
    from autotune.tuning.compiler_options import tune_compiler_options
    from autotune.tuning.result import ORIGINAL_WITH_OPTIONS
    clock = _Clock()
    ev = _FakeXla(clock, {("opt_b", True): 0.8})
    r = _verified_result(keep_original=True)
    store = MemoryStore()
    tune_compiler_options(r, _target(A, B), ev, TEXT, 60.0, program_sha="p", store=store, clock=clock)
    assert not r.keep_original and r.verification["winner"] == ORIGINAL_WITH_OPTIONS
    assert r.compile_options == {"disable_fusion": False, "xla_flags": {"opt_b": True}}
    assert r.xla_flags_text == "--opt_b=true" and r.fused_text.endswith(TEXT)
    assert "XLA_FLAGS='--opt_b=true'" in r.fused_text.split("HloModule")[0]
    assert r.measured_speedup == pytest.approx(1.25, rel=0.03) and r.measured_speedup_interval[0] > 1
    assert r.verification["compiler_options"]["decision"].startswith("written: the original program")
    assert r.verification["fused_hlo_sha256"] == hashlib.sha256(r.fused_text.encode()).hexdigest()
    assert len(store) == 2  # every setting tried is remembered for the next program


def test_stage_keeps_a_tuned_configuration_with_options_only_when_faster_than_it_alone():
    from autotune.compiler.emission import EMITTED_CPU_COMPILE_OPTIONS
    from autotune.tuning.compiler_options import tune_compiler_options
    for option_factor, kept in ((0.8, True), (1.0, False)):
        clock = _Clock()
        ev = _FakeXla(clock, {("opt_b", True): option_factor} if option_factor != 1.0 else {})
        ev.fused_ratio = 1 / 1.1
        r = _verified_result(keep_original=False, fused_speedup=1.1)
        emitted = r.fused_text
        tune_compiler_options(r, _target(A, B), ev, TEXT, 60.0, program_sha="p", store=None, clock=clock)
        assert ev.check_calls[0] == (emitted, EMITTED_CPU_COMPILE_OPTIONS, TEXT)
        if kept:
            final = ev.paired_calls[-1]
            assert final[:3] == (TEXT, emitted, True) and final[3] == {"disable_fusion": False, "xla_flags": {}}
            assert r.compile_options["disable_fusion"] is True and r.compile_options["xla_flags"]["opt_b"] is True
            assert r.measured_speedup == pytest.approx(1.1 / 0.8, rel=0.03)
            assert '--opt_b=true"' in r.fused_text.split("HloModule")[0]
            assert r.verification["fused_hlo_sha256"] == hashlib.sha256(r.fused_text.encode()).hexdigest()
        else:
            assert r.compile_options is None and r.fused_text == emitted and r.measured_speedup == 1.1
            assert r.verification["compiler_options"]["decision"].startswith("keep the compile as verified")


def test_stage_does_not_run_without_a_verified_baseline():
    from autotune.tuning.compiler_options import tune_compiler_options
    from autotune.tuning.result import TuningResult
    r = TuningResult(best=None, best_cost=1.0, default_cost=1.0, evaluations=1, elapsed_s=1.0)
    r.verification = {"status": "failed"}
    ev = _FakeXla(_Clock(), {})
    assert tune_compiler_options(r, _target(A, B), ev, TEXT, 10.0, program_sha="p") is None
    assert ev.checked == [] and r.warnings == []  # the failed verification's own line says it
    assert r.verification["compiler_options"]["decision"].startswith("not searched")
