"""Fusion search space: one bit per fusible producer->consumer edge, kernels, legality repair.

Units: config.py (FusionConfig), kernels.py (KernelRef and its materialized form Kernel),
space.py (FusionSpace: structure, kernel-set cache) with its base classes hashing.py (canonical
kernel hashes), moves.py (search moves) and repair.py (default configuration, validity, repair),
state.py (FusionState, KernelMap). Legality itself is the target's: autotune/compiler/targets/
(FusionRules and each target's rules); opcode classes are in autotune/compiler/opcodes.py. The
names below are re-exported for `from autotune.compiler.fusion import X`.
"""
from autotune.compiler.fusion.config import FusionConfig
from autotune.compiler.fusion.kernels import Kernel, KernelRef
from autotune.compiler.fusion.space import FusionSpace, get_rules
from autotune.compiler.fusion.state import FusionState, KernelMap
from autotune.compiler.opcodes import (ELEMENTWISE, EXPENSIVE, FREE, NODE_FUSIBLE, TRANSCENDENTAL, is_elementwise,
                                       is_scalar_constant)
from autotune.compiler.targets import CpuRules, FusionRules, TpuRules

__all__ = ["FusionSpace", "FusionConfig", "FusionState", "KernelMap", "KernelRef", "Kernel", "FusionRules",
           "TpuRules", "CpuRules", "get_rules", "ELEMENTWISE", "TRANSCENDENTAL", "EXPENSIVE", "FREE", "NODE_FUSIBLE",
           "is_elementwise", "is_scalar_constant"]
