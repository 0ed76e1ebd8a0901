"""The compiler-options search (autotune/tuning/options_search.py) driven by a fake XLA evaluator: a
deterministic clock, a true speed per setting, paired ratios with a little noise."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from autotune.compiler.targets import get_target
from autotune.compiler.targets.base import CompilerOption
from autotune.compiler.targets.cpu import CPU_COMPILER_OPTIONS
from autotune.tuning.options_search import (DEFAULT_REFERENCE_OPTIONS, parse_xla_flags, search_options,
                                            xla_flags_line)
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
        self.paired: list = []

    def _measure_batch(self, kernels, tiles):
        raise AssertionError("no kernels here")

    def measure_program(self, hlo_text, *, reference=None, disable_fusion=None, xla_flags=None):
        raise AssertionError("the options search checks outputs with check_compile_options")

    def true_ratio(self, flags: dict) -> float:
        r = 1.0
        for k, v in flags.items():
            r *= self.factors.get((k, v), 1.0)
        return r

    def check_compile_options(self, hlo_text, xla_flags):
        self.checked.append(dict(xla_flags))
        self.clock.t += self.check_s
        if any((k, v) in self.mismatch for k, v in xla_flags.items()):
            return Measurement(None, "output_mismatch: outputs differ", extra={"error": 0.5, "accurate": False})
        return Measurement(0.1, extra={"error": 1e-7, "identical": False, "accurate": True})

    def measure_paired(self, reference_text, hlo_text, seconds, *, disable_fusion=None, xla_flags=None,
                       pairs=4, min_block_ms=1.0, reference_options=None):
        assert reference_text == hlo_text == TEXT
        assert reference_options == DEFAULT_REFERENCE_OPTIONS  # the reference: XLA's own compile
        self.paired.append((dict(xla_flags or {}), seconds))
        self.clock.t += seconds
        r = self.true_ratio(xla_flags or {})
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
