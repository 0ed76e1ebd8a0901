"""check_evaluator and check_target (autotune.testing.contracts): every registered evaluator and target and
the plug-in examples keep their contracts; deliberately broken ones fail with one line naming the contract."""
from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path

import pytest

from autotune import api
from autotune.compiler.targets import Target, get_target, register_target, unregister_target
from autotune.testing.contracts import EVALUATOR_CONTRACTS, check_evaluator, check_target
from hardware.base import Measurement
from hardware.simulator import TpuSimulator

ROOT = Path(__file__).resolve().parents[2]


def _example(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _needs_jax(name: str) -> bool:
    return name.startswith("xla")


@pytest.mark.parametrize("name", api.list_evaluators())
def test_registered_evaluators_keep_the_contracts(name):
    if _needs_jax(name):
        pytest.importorskip("jaxlib")
    done = check_evaluator(name, target="cpu" if _needs_jax(name) else "tpu")
    assert {"one measurement per kernel, in order", "the store answers repeated requests",
            "an exhausted budget is a failure value"} <= set(done)
    if _needs_jax(name):  # the xla evaluators run whole programs
        assert {"whole programs with outputs checked", "paired timing of two programs"} <= set(done)


def test_the_evaluator_example_keeps_the_contracts():
    done = check_evaluator(_example("custom_evaluator").RooflineEvaluator)
    assert "unknown constructor parameter is refused" in done and set(done) <= set(EVALUATOR_CONTRACTS)


@pytest.mark.parametrize("name", api.list_targets())
def test_registered_targets_keep_the_contracts(name):
    if get_target(name).default_evaluator.startswith("xla"):
        pytest.importorskip("jaxlib")
    assert len(check_target(name)) == 6


def test_the_target_example_keeps_the_contracts():
    target = _example("custom_target").TPU_SMALL
    try:
        assert len(check_target(target)) == 6
    finally:
        unregister_target(target.name)


class DropsOne(TpuSimulator):
    """Answers one kernel fewer than asked."""

    def _measure_batch(self, kernels, tiles):
        return super()._measure_batch(kernels, tiles)[:-1] if len(kernels) > 1 else []


class RaisesWhenBroke(TpuSimulator):
    """Raises instead of answering failures when its budget is spent."""

    def measure(self, kernels, tiles=None):
        if self.budget.exhausted:
            raise RuntimeError("out of budget")
        return super().measure(kernels, tiles)


class NegativeTimes(TpuSimulator):
    def _measure_batch(self, kernels, tiles):
        return [Measurement(-1.0) for _ in kernels]


@pytest.mark.parametrize("broken, contract", [
    (DropsOne, "one measurement per kernel, in order"),
    (RaisesWhenBroke, "an exhausted budget is a failure value"),
    (NegativeTimes, "one measurement per kernel, in order"),
])
def test_a_broken_evaluator_fails_its_contract(broken, contract):
    assert check_evaluator(TpuSimulator)  # the evaluator they break passes
    with pytest.raises(AssertionError) as e:
        check_evaluator(broken)
    msg = str(e.value)
    assert msg.startswith(f"{broken.__name__} breaks the contract '{contract}': ") and "\n" not in msg


def test_a_broken_target_fails_its_contract():
    tpu = get_target("tpu")
    spec = dataclasses.replace(tpu.spec, name="no-scratchpad", scratchpad_bytes=0)
    broken = register_target(Target(name="no-scratchpad", description="a target with no scratchpad",
                                    spec_factory=lambda: spec, fusion_rules=tpu.fusion_rules, evaluators=("sim",)))
    try:
        with pytest.raises(AssertionError, match="target 'no-scratchpad' breaks the contract 'a physical spec': "
                                                 "fields out of range: scratchpad_bytes"):
            check_target(broken, measure=False)
    finally:
        unregister_target("no-scratchpad")
