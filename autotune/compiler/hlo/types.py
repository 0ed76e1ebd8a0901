"""Element types, shapes, async-op sugar, the input limits and `HloParseError`: the vocabulary the
parser and every analysis share."""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Iterable, Optional


# --------------------------------------------------------------------------------------------------
# Element types and opcodes

DTYPE_BYTES: dict[str, float] = {
    "pred": 1, "s1": 0.125, "u1": 0.125, "s2": 0.25, "u2": 0.25, "s4": 0.5, "u4": 0.5, "s8": 1, "u8": 1,
    "s16": 2, "u16": 2,
    "s32": 4, "u32": 4, "s64": 8, "u64": 8, "f16": 2, "bf16": 2, "f32": 4, "f64": 8, "c64": 8,
    "c128": 16, "f8e4m3fn": 1, "f8e5m2": 1, "f8e4m3b11fnuz": 1, "f8e5m2fnuz": 1, "f8e4m3fnuz": 1,
    "f8e4m3": 1, "f8e3m4": 1, "f8e8m0fnu": 1, "f4e2m1fn": 0.5, "token": 0, "opaque": 0,
}


def dtype_bytes(dtype: str) -> float:
    """Bytes per element of an element type as stored (packed: s4 0.5, fp8 1); 4 for an unknown name."""
    return DTYPE_BYTES.get(dtype, 4)

# Every opcode of XLA's HLO text format (xla/hlo/ir/hlo_opcode.h, HLO_OPCODE_LIST, as of XLA at
# jaxlib 0.10.2 plus the newer atan, collective-reduce and shuffle), by their text names.
OPCODES: frozenset[str] = frozenset("""
abs acos acosh add add-dependency after-all all-gather all-gather-done all-gather-start all-reduce
all-reduce-done all-reduce-start all-to-all and asin asinh async-done async-start async-update atan
atan2 atanh batch-norm-grad batch-norm-inference batch-norm-training bitcast bitcast-convert
broadcast call cbrt ceil cholesky clamp collective-broadcast collective-permute
collective-permute-done collective-permute-start collective-reduce compare complex concatenate
conditional constant convert convolution copy copy-done copy-start cosh cosine count-leading-zeros
custom-call divide domain dot dynamic-reshape dynamic-slice dynamic-update-slice erf exponential
exponential-minus-one fft floor fusion gather get-dimension-size get-tuple-element imag infeed iota
is-finite log log-plus-one logistic map maximum minimum mulhi multiply negate not opt-barrier or
outfeed pad parameter partition-id popcnt power ragged-all-to-all ragged-dot real recv recv-done
reduce reduce-precision reduce-scatter reduce-window remainder replica-id reshape reverse rng
rng-bit-generator rng-get-and-update-state round-nearest-afz round-nearest-even rsqrt scaled-dot scan
scatter select select-and-scatter send send-done set-dimension-size shift-left
shift-right-arithmetic shift-right-logical shuffle sign sine sinh slice sort sqrt stochastic-convert
subtract tan tanh topk transpose triangular-solve tuple while xor
""".split())


_NOT_ASYNC_WRAPPABLE = frozenset({"parameter", "constant", "async-start", "async-update", "async-done"})


@lru_cache(maxsize=None)
def async_sugar(opcode: str) -> Optional[tuple]:
    """(wrapped opcode, phase) of XLA's async shorthand `X-start` / `X-update` / `X-done` (an
    async-start / async-update / async-done wrapping one X instruction, as XLA prints it, e.g.
    `custom-call-start`, `reduce-scatter-done`); None for anything else, opcodes included."""
    if opcode in OPCODES:
        return None
    base, _, phase = opcode.rpartition("-")
    if phase in ("start", "update", "done") and base in OPCODES and base not in _NOT_ASYNC_WRAPPABLE:
        return base, phase
    return None


# Limits on what a program may declare (each gives one clear error): the element count of one array
# (so sizes stay exact in 64-bit integers and finite as floats), and tuple nesting.
MAX_ELEMENTS = 2 ** 62
MAX_TUPLE_DEPTH = 64


class HloParseError(ValueError):
    """Malformed HLO text; carries the file, 1-based line and column, the line, and a caret."""

    def __init__(self, message: str, filename: str = "<string>", line: int = 0, col: int = 0,
                 line_text: str = ""):
        self.message = message
        self.filename = filename
        self.line = line
        self.col = col
        self.line_text = line_text
        super().__init__(self._full())

    def one_line(self) -> str:
        return f"{self.filename}:{self.line}:{self.col}: error: {self.message}"

    def _full(self) -> str:
        caret = ""
        if self.line:
            shown = self.line_text if len(self.line_text) <= 200 else self.line_text[: max(200, self.col + 20)]
            caret = f"\n    {shown}\n    {' ' * max(0, self.col - 1)}^"
        return self.one_line() + caret


# --------------------------------------------------------------------------------------------------
# Shapes


@lru_cache(maxsize=65536)
def _minor_to_major(layout: Optional[str], rank: int) -> tuple:
    """`Shape.minor_to_major` of a layout text and rank (memoized: featurization asks it per use)."""
    if layout:
        head = layout.split(":", 1)[0].strip()
        if head:
            try:
                return tuple(int(x) for x in head.split(","))
            except ValueError:
                pass
    return tuple(range(rank - 1, -1, -1))


@dataclass(frozen=True)
class Shape:
    """An array shape (dtype, dims, layout text) or a tuple of shapes.

    `dynamic[i]` is True for a bounded-dynamic dim `<=N` (dims[i] holds the bound); `-1` in dims is
    an unbounded `?` dim. `layout` is the text between braces, verbatim (tiling suffixes included).
    """

    dtype: str
    dims: tuple = ()
    layout: Optional[str] = None
    dynamic: tuple = ()
    tuple_shapes: Optional[tuple] = None

    @property
    def is_tuple(self) -> bool:
        return self.tuple_shapes is not None

    @property
    def rank(self) -> int:
        return len(self.dims)

    @cached_property
    def elements(self) -> int:
        """Product of the dims (a `?` dim counts 0); computed once per shape (the tile geometry and the
        featurizer ask it per use)."""
        n = 1
        for d in self.dims:
            n *= max(d, 0)
        return n

    @property
    def bytes(self) -> float:
        """Size in bytes; a tuple counts its leaves (XLA counts tuple index tables separately)."""
        if self.tuple_shapes is not None:
            return sum(s.bytes for s in self.tuple_shapes)
        return self.elements * dtype_bytes(self.dtype)

    def leaves(self) -> list["Shape"]:
        if self.tuple_shapes is None:
            return [self]
        out: list[Shape] = []
        for s in self.tuple_shapes:
            out.extend(s.leaves())
        return out

    def minor_to_major(self) -> tuple:
        """Minor-to-major dim order from the layout, default descending (row-major)."""
        return _minor_to_major(self.layout, len(self.dims))

    def without_layout(self) -> "Shape":
        if self.tuple_shapes is not None:
            return Shape("tuple", tuple_shapes=tuple(s.without_layout() for s in self.tuple_shapes))
        return Shape(self.dtype, self.dims, None, self.dynamic)

    def to_text(self, layout: bool = True) -> str:
        if self.tuple_shapes is not None:
            return "(" + ", ".join(s.to_text(layout) for s in self.tuple_shapes) + ")"
        dims = []
        for i, d in enumerate(self.dims):
            if d == -1:
                dims.append("?")
            elif self.dynamic and self.dynamic[i]:
                dims.append(f"<={d}")
            else:
                dims.append(str(d))
        text = f"{self.dtype}[{','.join(dims)}]"
        if layout and self.layout is not None:
            text += "{" + self.layout + "}"
        return text

    __str__ = to_text


def array_shape(dtype: str, dims: Iterable[int], layout: Optional[str] = None) -> Shape:
    dims = tuple(int(d) for d in dims)
    return Shape(dtype, dims, layout, (False,) * len(dims))


def default_layout(rank: int) -> str:
    return ",".join(str(i) for i in range(rank - 1, -1, -1))


_NAME_FULL = re.compile(r"[A-Za-z_][\w.\-]*")  # an instruction or computation name, without %
