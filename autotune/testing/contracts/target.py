"""`check_target`: the contracts of autotune/compiler/targets a target keeps (docs/plugins.md): found by
its name, a physical spec, fusion rules that give legal configurations of a real program whose emission
parses and verifies, and a default evaluator that measures their kernels."""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from autotune.testing.contracts.common import _fail, _first_line, contract_program

TARGET_CONTRACTS = (
    "found by its name",
    "a physical spec",
    "legal default and random configurations",
    "emission parses and verifies",
    "the analytical model prices its kernels",
    "the default evaluator measures its kernels",
)
_POSITIVE = ("clock_hz", "num_cores", "peak_flops", "vector_flops", "transcendental_per_s", "hbm_bytes_per_s",
             "hbm_bytes", "scratchpad_bytes")
_NON_NEGATIVE = ("mxu_count", "kernel_launch_s", "dma_setup_s", "interconnect_bytes_per_s", "host_link_bytes_per_s")


def check_target(target_or_name: Any, *, measure: bool = True) -> list:
    """Check a target against the contracts autotune relies on; returns the names checked.

    `target_or_name`: a registered Target or its name; `measure`: also measure the default configuration's
    kernels with the target's default evaluator (needs what that evaluator needs, e.g. jaxlib for cpu).
    """
    from autotune.api import make_evaluator
    from autotune.compiler.emission import emit_fused_text
    from autotune.compiler.fusion import FusionSpace
    from autotune.compiler.hlo import parse_hlo
    from autotune.compiler.targets import Target, get_target
    from costmodels.analytical import AnalyticalCostModel
    target = get_target(target_or_name)
    name = f"target {target.name!r}"
    done: list = []

    def fail(contract: str, detail: str) -> None:
        _fail(name, contract, detail)

    if not isinstance(target, Target) or get_target(target.name) is not target:
        fail("found by its name", "get_target(its name) is another object: register it (register_target)")
    done.append("found by its name")
    spec = target.spec
    bad = [f for f in _POSITIVE if not (getattr(spec, f) > 0 and math.isfinite(getattr(spec, f)))]
    bad += [f for f in _NON_NEGATIVE if not getattr(spec, f) >= 0]
    if bad or len(spec.vector_shape) != 2 or min(spec.vector_shape) < 1:
        fail("a physical spec", f"fields out of range: {', '.join(bad) or 'vector_shape'}")
    done.append("a physical spec")
    program = contract_program()
    try:
        space = FusionSpace(program, target.name)
        configs = [space.default()] + [space.random(np.random.default_rng(s)) for s in range(3)]
        kernels = [space.kernels(c) for c in configs]
    except Exception as e:  # noqa: BLE001
        fail("legal default and random configurations", f"raised {_first_line(e)}")
    if not all(kernels):
        fail("legal default and random configurations", "a configuration has no kernels")
    done.append("legal default and random configurations")
    for cfg in configs:
        try:
            parse_hlo(emit_fused_text(space, cfg), "emitted.hlo")
        except Exception as e:  # noqa: BLE001
            fail("emission parses and verifies", f"raised {_first_line(e)}")
    done.append("emission parses and verifies")
    seconds = AnalyticalCostModel(target.name).predict(kernels[0])
    if len(seconds) != len(kernels[0]) or not np.all(np.isfinite(seconds)) or not np.all(seconds > 0):
        fail("the analytical model prices its kernels", "not one finite positive time per kernel")
    done.append("the analytical model prices its kernels")
    if measure:
        ev = make_evaluator(target.default_evaluator, target.name, store="none")
        try:
            ms = ev.measure(kernels[0][:6])
        finally:
            ev.close()
        if not all(m.ok for m in ms):
            fail("the default evaluator measures its kernels",
                 f"{target.default_evaluator}: {next(m.status for m in ms if not m.ok)}")
        done.append("the default evaluator measures its kernels")
    return done
