"""Equivalent formulation of an HLO `reduce-window` (pooling): `shifted_reduce`, one strided slice of the
padded operand per window position, combined with the reducer's own operation (add, maximum, minimum,
multiply), then with the init value. Average and max pools of XLA:CPU run far below this machine's limits
(benchmarks/results/operation_map.md); this is what they compute, written as plain elementwise work.

Sums of 16-bit floats accumulate in f32 and round once at the end (at least as accurate as the original
against float64); maximum/minimum are exact in any type; integer sums wrap and commute (identical)."""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Optional

from autotune.compiler.hlo import HloInstruction, Shape

__all__ = ["ReduceWindowGeometry", "REDUCE_WINDOW_FORMULATIONS", "REDUCERS", "write_reduce_window"]

REDUCE_WINDOW_FORMULATIONS = ("shifted_reduce",)
REDUCERS = ("add", "maximum", "minimum", "multiply")  # a reducer computation that is one of these on its params
MAX_POSITIONS = 64


@dataclass(frozen=True)
class ReduceWindowGeometry:
    """One reduce-window: its operand and output shapes, window, and reducer opcode (None: not one of REDUCERS)."""

    operand: Shape
    out: Shape
    window: tuple
    reducer: Optional[str]
    operands: int

    @property
    def positions(self) -> int:
        return math.prod(w.size for w in self.window)

    def padded(self, i: int) -> int:
        w, s = self.window[i], self.operand.dims[i]
        return (s - 1) * w.lhs_dilate + 1 + w.pad_lo + w.pad_hi if s > 0 else w.pad_lo + w.pad_hi

    def refusal(self, formulation: str) -> Optional[str]:
        if formulation not in REDUCE_WINDOW_FORMULATIONS:
            return f"unknown formulation {formulation!r}"
        if self.operands != 2 or self.out.is_tuple:
            return "a variadic reduce-window (several operands)"
        if self.reducer is None:
            return f"the reducer is not one of {', '.join(REDUCERS)} of its two parameters"
        if self.operand.dtype in ("pred", "c64", "c128") or self.operand.dtype.startswith("f8"):
            return f"element type {self.operand.dtype} is not rewritten"
        if len(self.window) != self.operand.rank:
            return "the window's rank differs from the operand's"
        if any(d <= 0 for d in self.operand.dims + self.out.dims):
            return "an empty dimension"
        for i, w in enumerate(self.window):
            if w.stride < 1 or w.lhs_dilate < 1 or w.rhs_dilate < 1 or w.reversal:
                return "a window stride or dilation below 1, or a reversal"
            span = (w.size - 1) * w.rhs_dilate + 1
            if self.padded(i) < span or (self.padded(i) - span) // w.stride + 1 != self.out.dims[i]:
                return "the output size does not follow from the window"
        if self.positions == 1:
            return "a 1-element window (nothing to reduce)"
        if self.positions > MAX_POSITIONS:
            return f"{self.positions} window positions (at most {MAX_POSITIONS} slices)"
        return None

    def applicable(self) -> tuple:
        return tuple(f for f in REDUCE_WINDOW_FORMULATIONS if self.refusal(f) is None)


def _identity(reducer: str, dtype: str) -> str:
    """The literal of `reducer`'s identity element in `dtype`."""
    if reducer == "add":
        return "0"
    if reducer == "multiply":
        return "1"
    if dtype.startswith(("s", "u")):
        bits = int(dtype[1:])
        lo, hi = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if dtype[0] == "s" else (0, 2 ** bits - 1)
        return str(lo if reducer == "maximum" else hi)
    return "-inf" if reducer == "maximum" else "inf"


def write_reduce_window(ins: HloInstruction, operand: Shape, reducer: Optional[str], formulation: str,
                        taken: set) -> list:
    """The instructions that compute the reduce-window `ins` as `formulation`; the last one has `ins`'s
    name and shape. Raises ValueError when it does not apply."""
    from autotune.compiler.formulations.convolution import _Writer
    g = ReduceWindowGeometry(operand, ins.shape, tuple(ins.attr("window") or ()), reducer, len(ins.operands))
    why = g.refusal(formulation)
    if why:
        raise ValueError(f"{ins.name}: {formulation} does not apply: {why}")
    assert reducer is not None
    dtype = operand.dtype
    acc = "f32" if reducer in ("add", "multiply") and dtype in ("bf16", "f16") else dtype
    w = _Writer(ins.name, taken)
    x = w.convert((ins.operands[0], operand.dims), dtype, acc)
    init = w.convert((ins.operands[1], ()), dtype, acc)
    if any(wd.pad_lo or wd.pad_hi or wd.lhs_dilate > 1 for wd in g.window):
        # padded positions take no part in a window (XLA's semantics): the reducer's identity, not the init
        ident = w.add("constant", acc, (), [], literal=_identity(reducer, acc))
        pads = [f"{wd.pad_lo}_{wd.pad_hi}" + (f"_{wd.lhs_dilate - 1}" if wd.lhs_dilate > 1 else "") for wd in g.window]
        x = w.add("pad", acc, tuple(g.padded(i) for i in range(operand.rank)), [x[0], ident[0]],
                  {"padding": "x".join(pads)})
    out_dims = tuple(ins.shape.dims)
    total: Optional[tuple] = None
    for p in itertools.product(*(range(wd.size) for wd in g.window)):
        spec = []
        for i, wd in enumerate(g.window):
            start = p[i] * wd.rhs_dilate
            spec.append((start, start + (out_dims[i] - 1) * wd.stride + 1, wd.stride))
        s = w.slice(x, spec, acc)
        total = s if total is None else w.add(reducer, acc, out_dims, [total[0], s[0]])
    assert total is not None
    b = w.broadcast(init, out_dims, (), acc)
    y = w.add(reducer, acc, out_dims, [total[0], b[0]])
    y = w.convert(y, acc, dtype)
    return w.in_place_of(ins, y)
