"""`check_evaluator`: the contracts of hardware/base.py an evaluator keeps (docs/plugins.md): one
Measurement per kernel, failures as values, the budget and the measurement store honoured, and, for a
`ProgramEvaluator`, whole programs timed with their outputs checked."""
from __future__ import annotations

import math
from typing import Any, Callable, Optional

from autotune.testing.contracts.common import UNKNOWN_PARAMETER, _fail, _first_line, contract_kernels, contract_program

EVALUATOR_CONTRACTS = (
    "unknown constructor parameter is refused",
    "one measurement per kernel, in order",
    "empty input",
    "names what measured",
    "the store answers repeated requests",
    "an exhausted budget is a failure value",
    "whole programs with outputs checked",
    "paired timing of two programs",
    "close is idempotent",
)


def _resolve(evaluator: Any, target: str) -> tuple[Callable[..., Any], str]:
    """(factory(**options) -> a new evaluator, its name): a class, a factory or a registered name."""
    from hardware.base import EVALUATORS, create_evaluator
    if isinstance(evaluator, str):
        name = EVALUATORS.canonical(evaluator)
        return (lambda **kw: create_evaluator(name, target, **kw)), name
    if callable(evaluator):
        return (lambda **kw: evaluator(target=target, **kw)), getattr(evaluator, "__name__", type(evaluator).__name__)
    raise TypeError(f"check_evaluator takes an Evaluator class, a factory or a registered name, not {evaluator!r}")


def check_evaluator(evaluator_class_or_name: Any, *, target: str = "tpu", kernels: Optional[list] = None) -> list:
    """Check an evaluator against the contracts of hardware/base.py; returns the names checked.

    `evaluator_class_or_name`: an Evaluator class, a factory called as factory(target=..., budget=..., store=...,
    seed=...), or a registered name (sim, xla, ...); `target`: the target it measures; `kernels`: what to measure
    (default: a few kernels of `contract_program` on that target).
    """
    from autotune.tuning.store import MemoryStore
    from hardware.base import Budget, Evaluator, Measurement, ProgramEvaluator
    factory, name = _resolve(evaluator_class_or_name, target)
    done: list = []

    def fail(contract: str, detail: str) -> None:
        _fail(name, contract, detail)

    if not isinstance(evaluator_class_or_name, str):  # a registered factory filters its options itself
        try:
            factory(**{UNKNOWN_PARAMETER: 1})
        except (TypeError, ValueError):
            pass
        else:
            fail("unknown constructor parameter is refused", f"{UNKNOWN_PARAMETER}=1 was accepted silently")
        done.append("unknown constructor parameter is refused")
    ks = list(kernels) if kernels is not None else contract_kernels(target, configs=1)[:6]
    ev = factory(budget=None, store=None, seed=0)
    if not isinstance(ev, Evaluator):
        fail("one measurement per kernel, in order", f"the factory made a {type(ev).__name__}, not an Evaluator")
    try:
        ms = ev.measure(ks)
        if len(ms) != len(ks) or not all(isinstance(m, Measurement) for m in ms):
            fail("one measurement per kernel, in order", f"{len(ks)} kernels gave {len(ms)} answers")
        for k, m in zip(ks, ms):
            if not isinstance(m.status, str):
                fail("one measurement per kernel, in order", f"a status is {m.status!r}, not a string")
            # 0 is a time: a kernel XLA folded into another runs no code of its own (xla-inprogram)
            if m.ok and not (math.isfinite(m.seconds) and m.seconds >= 0):
                fail("one measurement per kernel, in order", f"kernel {k.hash[:12]}: ok with {m.seconds!r} seconds")
        if not any(m.ok for m in ms):
            fail("one measurement per kernel, in order", f"no kernel measured ({ms[0].status})")
        again = ev.measure(list(reversed(ks)))
        if [m.ok for m in again] != [m.ok for m in reversed(ms)]:
            fail("one measurement per kernel, in order", "the answers of reversed kernels are not reversed")
        done.append("one measurement per kernel, in order")
        if ev.measure([]) != []:
            fail("empty input", "measure([]) is not []")
        done.append("empty input")
        if not (isinstance(ev.machine, str) and ev.machine and isinstance(ev.store_namespace, str)):
            fail("names what measured", f"machine {ev.machine!r}, store_namespace {ev.store_namespace!r}")
        done.append("names what measured")
        if isinstance(ev, ProgramEvaluator):
            _check_programs(ev, fail)
            done += ["whole programs with outputs checked", "paired timing of two programs"]
    except AssertionError:
        raise
    except Exception as e:  # noqa: BLE001 - a failure is a value, never an exception
        fail("one measurement per kernel, in order", f"raised {_first_line(e)}")
    finally:
        ev.close()
    ev.close()
    done.append("close is idempotent")
    store = MemoryStore()
    ev = factory(budget=None, store=store, seed=0)
    try:
        first = ev.measure(ks)
        fresh = ev.measured
        second = ev.measure(ks)
        if ev.measured != fresh:
            fail("the store answers repeated requests", f"{ev.measured - fresh} kernels measured again")
        if [m.seconds for m in first if m.ok] != [m.seconds for m in second if m.ok]:
            fail("the store answers repeated requests", "the store's answers differ from the first ones")
    finally:
        ev.close()
    done.append("the store answers repeated requests")
    ev = factory(budget=Budget(1e-9).start(), store=None, seed=0)
    try:
        try:
            ms = ev.measure(ks)
        except Exception as e:  # noqa: BLE001
            fail("an exhausted budget is a failure value", f"raised {_first_line(e)}")
        if any(m.ok for m in ms) or not ev.budget_exhausted:
            fail("an exhausted budget is a failure value", "measured past an exhausted budget")
    finally:
        ev.close()
    done.append("an exhausted budget is a failure value")
    return done


def _check_programs(ev: Any, fail: Callable[[str, str], None]) -> None:
    text = contract_program().module.to_text()
    m = ev.measure_program(text, reference=text)
    if not m.ok or not (math.isfinite(m.seconds) and m.seconds > 0):
        fail("whole programs with outputs checked", f"the contract program: {m.status}")
    if m.extra.get("outputs_match") is not True:
        fail("whole programs with outputs checked", "a program against itself does not match its outputs")
    p = ev.measure_paired(text, text, 0.2)
    ratios = p.extra.get("ratios") if p.ok else None
    if not p.ok or not ratios or not all(math.isfinite(r) and r > 0 for r in ratios):
        fail("paired timing of two programs", f"the program beside itself: {p.status}, ratios {ratios!r}")
