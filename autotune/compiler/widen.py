"""A float64 version of an HLO program: the yardstick for "as accurate as the original".

An emitted program and the original both round where their types (and XLA's excess precision)
say; which of two differing outputs is closer to the exact result is answered by the same program
computed in f64: every 16- and 32-bit float value widened to f64. `bitcast-convert` keeps the bits
it reinterprets (dropout's `f32 bitcast-convert(u32)` becomes that, then a convert to f64), and
`reduce-precision` keeps rounding where the program asks it to. Programs with custom calls or
8-bit floats have no f64 version here (`WidenError`): what a custom call does with f64 is unknown.
"""
from __future__ import annotations

import dataclasses
import re

from autotune.compiler.hlo import HloComputation, HloInstruction, HloModule, Shape, parse_hlo

__all__ = ["WidenError", "widen_to_f64", "WIDENED"]

WIDENED = frozenset({"bf16", "f16", "f32"})
_SAME_IN_F64 = frozenset({"Sharding"})  # custom-call targets that pass their operand through


class WidenError(ValueError):
    """The program has no f64 version (a custom call, an 8-bit float)."""


def _wide(shape: Shape) -> Shape:
    if shape.is_tuple:
        return dataclasses.replace(shape, tuple_shapes=tuple(_wide(s) for s in shape.tuple_shapes))
    if shape.dtype in WIDENED:
        return dataclasses.replace(shape, dtype="f64")
    if shape.dtype.startswith(("f8", "f4", "f6")):
        raise WidenError(f"no f64 version of a program with {shape.dtype} values")
    return shape


_TYPE = re.compile(r"(?<![\w.])(?:bf16|f16|f32)(?=\[)")


def widen_to_f64(text: str) -> str:
    """HLO text of the program with every bf16/f16/f32 value computed in f64 (module docstring)."""
    module = parse_hlo(text)
    comps = []
    for comp in module.computations:
        shapes = {i.name: i.shape for i in comp.instructions}
        out: list[HloInstruction] = []
        for ins in comp.instructions:
            if ins.opcode == "custom-call" and ins.attrs.get("custom_call_target", "").strip('"') \
                    not in _SAME_IN_F64:
                raise WidenError(f"no f64 version of a program with a {ins.opcode} ({ins.name})")
            if ins.opcode == "bitcast-convert":
                src = shapes[ins.operands[0]]
                if ins.shape.dtype in WIDENED or src.dtype in WIDENED:
                    if src.dtype in WIDENED:  # the widened operand back to its own width first
                        narrow = f"{ins.name}.narrow"
                        out.append(HloInstruction(narrow, "convert", src, [ins.operands[0]]))
                        ins = ins.copy(operands=[narrow])
                    if ins.shape.dtype in WIDENED:  # reinterpret as written, then widen
                        bits = f"{ins.name}.bits"
                        out.append(ins.copy(name=bits, is_root=False))
                        out.append(HloInstruction(ins.name, "convert", _wide(ins.shape), [bits],
                                                  is_root=ins.is_root))
                    else:
                        out.append(ins)
                    continue
            out.append(ins.copy(shape=_wide(ins.shape)))
        comps.append(HloComputation(comp.name, out, comp.is_entry, dict(comp.trailer)))
    attrs = {k: (_TYPE.sub("f64", v) if isinstance(v, str) else v) for k, v in module.attrs.items()}
    return HloModule(module.name, comps, attrs, "", module.percent, module.filename).to_text()
