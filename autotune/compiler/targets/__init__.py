"""Compilation targets (see base.py): `get_target(name)` -> Target, `get_spec(name)` -> TargetSpec.

Importing this package registers the shipped targets (tpu.py: `tpu`, `tpu-v2`; cpu.py: `cpu`) and
the H100 spec (h100.py, a spec without a target), then imports every other module of the package,
so a new target is one new module here that calls `register_target` (and its tests).
"""
import importlib as _importlib
import pkgutil as _pkgutil

from autotune.compiler.targets.base import (TARGETS, GiB, KiB, MiB, Target, TargetSpec, UnknownTargetError, get_spec, get_target,
                                            list_specs, register_spec, register_target, target_names,
                                            unregister_target)
from autotune.compiler.targets.fusion_rules import FusionRules
from autotune.compiler.targets.tpu import TPU, TPU_V2, TPU_V3, TpuRules  # (isort: skip) registration order:
from autotune.compiler.targets.cpu import CPU, CpuRules  # noqa: E402  tpu, cpu, then the h100 spec
from autotune.compiler.targets.h100 import H100  # noqa: E402
from autotune.compiler.targets.host import host_cache_path, host_cpu_spec, measure_host  # noqa: E402

__all__ = ["TARGETS", "Target", "TargetSpec", "UnknownTargetError", "get_target", "get_spec", "target_names", "list_specs",
           "register_target", "unregister_target", "register_spec", "FusionRules", "TpuRules", "CpuRules", "TPU",
           "CPU", "TPU_V2", "TPU_V3", "H100", "host_cpu_spec", "measure_host", "host_cache_path", "KiB", "MiB",
           "GiB"]

for _module in _pkgutil.iter_modules(__path__):
    _importlib.import_module(f"{__name__}.{_module.name}")
