"""HLO opcode classes the fusion rules, the kernels and the emitter share, and per-instruction
predicates after XLA's (HloInstruction::IsElementwise, InstructionFusion::IsExpensive)."""
from __future__ import annotations

from autotune.compiler.hlo import DTYPE_BYTES, HloInstruction
from autotune.compiler.program import Computation

ELEMENTWISE = frozenset("""
abs add and atan2 bitcast-convert cbrt ceil clamp compare complex convert copy cosine
count-leading-zeros divide erf exponential exponential-minus-one floor imag is-finite log
log-plus-one logistic map maximum minimum multiply negate not or popcnt power real
reduce-precision remainder round-nearest-afz round-nearest-even rsqrt select shift-left
shift-right-arithmetic shift-right-logical sign sine sqrt stochastic-convert subtract tan tanh xor
acos acosh asin asinh atan atanh cosh sinh mulhi
""".split())

# Ops XLA treats as expensive (InstructionFusion::IsExpensive): not duplicated into several kernels.
EXPENSIVE = frozenset("""
atan2 cbrt cosine divide erf exponential exponential-minus-one log log-plus-one logistic power
remainder rsqrt sine sqrt tan tanh convolution dot fft reduce-window sort custom-call
acos acosh asin asinh atanh cosh
""".split())

TRANSCENDENTAL = frozenset("""
atan2 cbrt cosine erf exponential exponential-minus-one log log-plus-one logistic power rsqrt sine
sqrt tan tanh acos acosh asin asinh atan atanh cosh sinh
""".split())

FREE = frozenset("""
parameter constant get-tuple-element tuple after-all add-dependency opt-barrier domain partition-id
replica-id
""".split())
CONTROL = frozenset({"while", "conditional", "call", "async-start", "async-update", "async-done"})
LAYOUT = frozenset({"broadcast", "reshape", "bitcast", "transpose", "slice", "pad", "concatenate",
                    "reverse", "iota", "dynamic-slice", "gather"})

# How a fusion space classifies an instruction: never a kernel (free), a call boundary (control),
# a kernel that fuses with nothing (opaque), or a candidate for fusion (fusible).
NODE_FREE, NODE_CONTROL, NODE_OPAQUE, NODE_FUSIBLE = 0, 1, 2, 3


def changes_bit_width(ins: HloInstruction, operand: HloInstruction) -> bool:
    """A bitcast-convert between element types of different sizes (it changes the rank)."""
    return DTYPE_BYTES.get(ins.shape.dtype, 0) != DTYPE_BYTES.get(operand.shape.dtype, 0)


def is_scalar_constant(ins: HloInstruction) -> bool:
    """A scalar constant: never a kernel, cloned into the kernels that read it."""
    return ins.opcode == "constant" and not ins.shape.is_tuple and ins.shape.rank == 0


def is_elementwise(comp: Computation, n: int) -> bool:
    """XLA's HloInstruction::IsElementwise for instruction n (a bitcast-convert that changes the
    element width changes the shape, so it is not)."""
    ins = comp.instructions[n]
    if ins.opcode == "bitcast-convert":
        return not changes_bit_width(ins, comp.instructions[comp.operands[n][0]])
    return ins.opcode in ELEMENTWISE


__all__ = ["ELEMENTWISE", "EXPENSIVE", "TRANSCENDENTAL", "FREE", "CONTROL", "LAYOUT", "NODE_FREE", "NODE_CONTROL",
           "NODE_OPAQUE", "NODE_FUSIBLE", "changes_bit_width", "is_scalar_constant", "is_elementwise"]
