"""HLO text parser and printer.

Reads HLO as JAX prints it (`lower(...).as_text(dialect="hlo")`, names without %), as XLA dumps and
`compile().as_text()` print it (names with %, scheduling, stack-frame tables, metadata, backend
configs, `/*index=N*/` comments, elided constants) and headerless modules. Attribute values are kept
verbatim for printing; the ones the analyses need are also parsed (and validated) into Python values.
Errors raise `HloParseError` carrying file:line:col, the offending line and a caret.

`parse_hlo` also runs the verifier (autotune/compiler/verifier.py: shape inference per opcode, names, call
graph) unless `verify=False`, and bounds what any input can cost later: at most `MAX_ELEMENTS`
elements per array, `MAX_TUPLE_DEPTH` nested tuples.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Any, Callable, Iterable, Optional

from autotune.compiler.gc_pause import gc_paused

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


# --------------------------------------------------------------------------------------------------
# Structured attribute values


@dataclass(frozen=True)
class WindowDim:
    size: int = 1
    stride: int = 1
    pad_lo: int = 0
    pad_hi: int = 0
    lhs_dilate: int = 1
    rhs_dilate: int = 1
    reversal: bool = False


@dataclass(frozen=True)
class ConvDimLabels:
    """dim_labels like `b01f_01io->b01f`: batch/feature/spatial dims of input, kernel, output."""

    lhs_batch: int
    lhs_feature: int
    lhs_spatial: tuple
    kernel_input_feature: int
    kernel_output_feature: int
    kernel_spatial: tuple
    out_batch: int
    out_feature: int
    out_spatial: tuple


@dataclass(frozen=True)
class SliceDim:
    start: int
    limit: int
    stride: int = 1


@dataclass(frozen=True)
class PadDim:
    lo: int
    hi: int
    interior: int = 0


class AttributeError_(ValueError):
    """Internal: a malformed attribute value (converted to HloParseError with a position)."""


def _int(s: str) -> int:
    s = s.strip()
    if not re.fullmatch(r"[-+]?\d{1,19}", s) or abs(int(s)) > MAX_ELEMENTS:
        shown = s if len(s) <= 24 else s[:24] + "..."
        raise AttributeError_(f"expected an integer from -2^62 to 2^62, got {shown!r}")
    return int(s)


def parse_int_list(v: str) -> tuple:
    s = v.strip()
    if not (s.startswith("{") and s.endswith("}")):
        raise AttributeError_(f"expected {{ints}}, got {v!r}")
    body = s[1:-1].strip()
    if not body:
        return ()
    return tuple(_int(x.strip()) for x in body.split(","))


def parse_window(v: str) -> tuple:
    s = v.strip()
    if not (s.startswith("{") and s.endswith("}")):
        raise AttributeError_(f"expected window={{...}}, got {v!r}")
    fields: dict[str, list[str]] = {}
    for item in s[1:-1].split():
        if "=" not in item:
            raise AttributeError_(f"bad window field {item!r}")
        k, val = item.split("=", 1)
        if k not in ("size", "stride", "pad", "lhs_dilate", "rhs_dilate", "rhs_reversal"):
            raise AttributeError_(f"unknown window field {k!r}")
        fields[k] = val.split("x")
    n = max((len(x) for x in fields.values()), default=0)
    dims = []
    for i in range(n):
        def get(k, default):
            vals = fields.get(k)
            if vals is None:
                return default
            if len(vals) != n:
                raise AttributeError_(f"window field {k} has {len(vals)} dims, expected {n}")
            return vals[i]
        pad = get("pad", "0_0").split("_")
        if len(pad) != 2:
            raise AttributeError_(f"bad window padding {get('pad', '')!r}")
        dims.append(WindowDim(_int(get("size", "1")), _int(get("stride", "1")), _int(pad[0]), _int(pad[1]),
                              _int(get("lhs_dilate", "1")), _int(get("rhs_dilate", "1")),
                              get("rhs_reversal", "0") == "1"))
    return tuple(dims)


def parse_dim_labels(v: str) -> ConvDimLabels:
    m = re.fullmatch(r"([0-9a-z]+)_([0-9a-z]+)->([0-9a-z]+)", v.strip())
    if not m:
        raise AttributeError_(f"bad dim_labels {v!r}")
    lhs, ker, out = m.groups()

    def spatial(s: str) -> tuple:
        digits = sorted((int(c), i) for i, c in enumerate(s) if c.isdigit())
        return tuple(i for _, i in digits)

    try:
        return ConvDimLabels(lhs.index("b"), lhs.index("f"), spatial(lhs), ker.index("i"), ker.index("o"),
                             spatial(ker), out.index("b"), out.index("f"), spatial(out))
    except ValueError:
        raise AttributeError_(f"bad dim_labels {v!r}") from None


def parse_slice(v: str) -> tuple:
    s = v.strip()
    if not (s.startswith("{") and s.endswith("}")):
        raise AttributeError_(f"expected slice={{[a:b],...}}, got {v!r}")
    out = []
    for m in re.finditer(r"\[([^\]]*)\]", s):
        parts = m.group(1).split(":")
        if len(parts) not in (2, 3):
            raise AttributeError_(f"bad slice {m.group(0)!r}")
        out.append(SliceDim(_int(parts[0]), _int(parts[1]), _int(parts[2]) if len(parts) == 3 else 1))
    if re.sub(r"\[[^\]]*\]|[\s,]", "", s[1:-1]):
        raise AttributeError_(f"bad slice {v!r}")
    return tuple(out)


def parse_padding(v: str) -> tuple:
    out = []
    s = v.strip()
    if not s:
        return ()
    for d in s.split("x"):
        p = d.split("_")
        if len(p) not in (2, 3):
            raise AttributeError_(f"bad padding {v!r}")
        out.append(PadDim(_int(p[0]), _int(p[1]), _int(p[2]) if len(p) == 3 else 0))
    return tuple(out)


def parse_name_list(v: str) -> tuple:
    s = v.strip()
    if s.startswith("{") and s.endswith("}"):
        s = s[1:-1]
    names = tuple(x.strip().lstrip("%") for x in s.split(",") if x.strip())
    for n in names:
        if not _NAME_FULL.fullmatch(n):
            raise AttributeError_(f"bad computation name {n!r}")
    return names


def parse_name(v: str) -> str:
    n = v.strip().lstrip("%")
    if not _NAME_FULL.fullmatch(n):
        raise AttributeError_(f"bad computation name {v!r}")
    return n


def parse_bool(v: str) -> bool:
    if v not in ("true", "false"):
        raise AttributeError_(f"expected true/false, got {v!r}")
    return v == "true"


def parse_backend_config(v: str) -> Any:
    """backend_config is JSON (new style) or a quoted string holding JSON; returns a dict or the raw text."""
    s = v.strip()
    if s.startswith('"'):
        try:
            s = json.loads(s)
        except (json.JSONDecodeError, RecursionError):  # not JSON, or nested too deep for json
            return v
    if isinstance(s, str) and s.startswith("{"):
        try:
            return json.loads(s)
        except (json.JSONDecodeError, RecursionError):
            return s
    return s


_ATTR_PARSERS = {
    "dimensions": parse_int_list, "lhs_contracting_dims": parse_int_list,
    "rhs_contracting_dims": parse_int_list, "lhs_batch_dims": parse_int_list,
    "rhs_batch_dims": parse_int_list, "dynamic_slice_sizes": parse_int_list,
    "offset_dims": parse_int_list, "collapsed_slice_dims": parse_int_list,
    "start_index_map": parse_int_list, "slice_sizes": parse_int_list,
    "update_window_dims": parse_int_list, "inserted_window_dims": parse_int_list,
    "scatter_dims_to_operand_dims": parse_int_list, "operand_batching_dims": parse_int_list,
    "start_indices_batching_dims": parse_int_list, "input_batching_dims": parse_int_list,
    "scatter_indices_batching_dims": parse_int_list, "fft_length": parse_int_list,
    "lhs_ragged_dims": parse_int_list, "rhs_group_dims": parse_int_list,
    "index": _int, "index_vector_dim": _int, "iota_dimension": _int, "feature_group_count": _int,
    "batch_group_count": _int, "exponent_bits": _int, "mantissa_bits": _int, "k": _int,
    "window": parse_window, "dim_labels": parse_dim_labels, "slice": parse_slice,
    "padding": parse_padding, "to_apply": parse_name, "calls": parse_name_list,
    "condition": parse_name, "body": parse_name, "branch_computations": parse_name_list,
    "true_computation": parse_name, "false_computation": parse_name,
    "called_computations": parse_name_list,
    "select": parse_name, "scatter": parse_name, "is_stable": parse_bool,
    "indices_are_sorted": parse_bool, "unique_indices": parse_bool, "largest": parse_bool,
}

# Attributes whose values name computations (in the order XLA prints them).
CALLED_COMPUTATION_ATTRS = ("calls", "to_apply", "condition", "body", "branch_computations",
                            "true_computation", "false_computation", "select", "scatter",
                            "called_computations")  # custom-call's (e.g. the TopK comparator of XLA dumps)

# Which opcodes may name computations, with which attributes (XLA's parser allows no others), and the
# attributes each needs: {opcode: (allowed attributes, required attributes)}.
CALLED_BY_OPCODE: dict = {
    **{op: (("to_apply",), ("to_apply",)) for op in (
        "call", "map", "reduce", "reduce-window", "scatter", "sort", "all-reduce", "all-reduce-start",
        "reduce-scatter", "collective-reduce", "scan")},
    "fusion": (("calls",), ("calls",)), "async-start": (("calls",), ("calls",)),
    "async-update": (("calls",), ()), "async-done": (("calls",), ()),
    "custom-call": (("to_apply", "calls", "called_computations"), ()),
    "while": (("condition", "body"), ("condition", "body")),
    "conditional": (("branch_computations", "true_computation", "false_computation"), ()),
    "select-and-scatter": (("select", "scatter"), ("select", "scatter")),
}
# XLA's async shorthand X-start / X-update / X-done carries the attributes of the X it wraps.
for _op, (_allowed, _required) in list(CALLED_BY_OPCODE.items()):
    if _op not in _NOT_ASYNC_WRAPPABLE and _op in OPCODES:
        CALLED_BY_OPCODE.setdefault(f"{_op}-start", (_allowed, _required))
        CALLED_BY_OPCODE.setdefault(f"{_op}-update", (_allowed, ()))
        CALLED_BY_OPCODE.setdefault(f"{_op}-done", (_allowed, ()))


# --------------------------------------------------------------------------------------------------
# Syntax tree


class HloInstruction:
    """One instruction as written: name, opcode, shape, operand names, attributes (raw and parsed)."""

    __slots__ = ("name", "opcode", "shape", "operands", "attrs", "parsed", "is_root", "literal",
                 "parameter_number", "lineno", "col", "offset")

    def __init__(self, name: str, opcode: str, shape: Shape, operands: list, attrs: Optional[dict] = None,
                 parsed: Optional[dict] = None, is_root: bool = False, literal: Optional[str] = None,
                 parameter_number: Optional[int] = None, offset: int = -1):
        self.name = name
        self.opcode = opcode
        self.shape = shape
        self.operands = operands
        self.attrs = attrs if attrs is not None else {}
        self.parsed = parsed if parsed is not None else {}
        self.is_root = is_root
        self.literal = literal
        self.parameter_number = parameter_number
        self.lineno = 0  # 1-based line and column where the instruction starts (0: unknown; the parser sets them)
        self.col = 0
        self.offset = offset  # byte offset in the parsed text (-1: not parsed from text)

    def attr(self, key: str, default: Any = None) -> Any:
        """Parsed value of a structured attribute (or the raw text for the others)."""
        if key in self.parsed:
            return self.parsed[key]
        return self.attrs.get(key, default)

    def called_computations(self) -> list[str]:
        out: list[str] = []
        for k in CALLED_COMPUTATION_ATTRS:
            if k in self.parsed:
                v = self.parsed[k]
                out.extend(v if isinstance(v, tuple) else (v,))
        return out

    def copy(self, **changes: Any) -> "HloInstruction":
        new = HloInstruction(self.name, self.opcode, self.shape, list(self.operands), dict(self.attrs),
                             dict(self.parsed), self.is_root, self.literal, self.parameter_number, self.offset)
        new.lineno, new.col = self.lineno, self.col
        for k, v in changes.items():
            setattr(new, k, v)
        return new

    def to_text(self, percent: bool = True, metadata: bool = True) -> str:
        p = "%" if percent else ""
        if self.opcode == "parameter":
            args = str(self.parameter_number)
        elif self.opcode == "constant":
            args = self.literal or ""
        else:
            args = ", ".join(p + o for o in self.operands)
        parts = []
        for k, v in self.attrs.items():
            if not metadata and k == "metadata":
                continue
            if k in CALLED_COMPUTATION_ATTRS and percent != _has_percent(v):
                v = _restyle_names(v, percent)
            parts.append(f"{k}={v}")
        text = f"{'ROOT ' if self.is_root else ''}{p}{self.name} = {self.shape.to_text()} {self.opcode}({args})"
        if parts:
            text += ", " + ", ".join(parts)
        return text

    def location(self, filename: str) -> str:
        """`file:line:col` of the instruction (as HloParseError prints positions)."""
        return f"{filename}:{self.lineno}:{self.col}"

    def __repr__(self) -> str:
        return f"HloInstruction({self.to_text(metadata=False)!r})"


def _has_percent(v: str) -> bool:
    return "%" in v


def _restyle_names(v: str, percent: bool) -> str:
    if percent:
        return re.sub(r"(?<![%\w.\-])([A-Za-z_][\w.\-]*)", r"%\1", v)
    return v.replace("%", "")


class HloComputation:
    """A named list of instructions with one root; `is_entry` marks the module's entry."""

    __slots__ = ("name", "instructions", "is_entry", "trailer", "lineno", "col", "offset", "_by_name",
                 "_by_name_of")

    def __init__(self, name: str, instructions: list, is_entry: bool = False, trailer: Optional[dict] = None,
                 lineno: int = 0, col: int = 0, offset: int = -1):
        self.name = name
        self.instructions = instructions
        self.is_entry = is_entry
        self.trailer = trailer or {}
        self.lineno = lineno  # 1-based line and column of the computation's head (0: unknown)
        self.col = col
        self.offset = offset
        self._by_name: Optional[dict] = None
        self._by_name_of: Optional[list] = None  # the instruction list `_by_name` was built from

    @property
    def by_name(self) -> dict:
        """{name: instruction}; rebuilt when `instructions` is replaced (normalization does) or resized."""
        if (self._by_name is None or self._by_name_of is not self.instructions
                or len(self._by_name) != len(self.instructions)):
            self._by_name = {i.name: i for i in self.instructions}
            self._by_name_of = self.instructions
        return self._by_name

    @property
    def root(self) -> HloInstruction:
        for ins in reversed(self.instructions):
            if ins.is_root:
                return ins
        return self.instructions[-1]

    @property
    def parameters(self) -> list:
        ps = [i for i in self.instructions if i.opcode == "parameter"]
        return sorted(ps, key=lambda i: i.parameter_number)

    def signature_text(self, percent: bool) -> str:
        params = ", ".join(f"{i.name}: {i.shape.to_text()}" for i in self.parameters)
        return f"({params}) -> {self.root.shape.to_text()}"

    def to_text(self, percent: bool = True, metadata: bool = True, is_entry: Optional[bool] = None) -> str:
        p = "%" if percent else ""
        entry = self.is_entry if is_entry is None else is_entry
        head = f"{'ENTRY ' if entry else ''}{p}{self.name} {self.signature_text(percent)} {{"
        root = self.root
        lines = []
        for i in self.instructions:
            text = i.to_text(percent, metadata)
            if i is root and not i.is_root:
                text = "ROOT " + text
            lines.append("  " + text)
        body = "\n".join(lines)
        tail = "}"
        if self.trailer:
            tail += ", " + ", ".join(f"{k}={v}" for k, v in self.trailer.items())
        return f"{head}\n{body}\n{tail}"


class HloModule:
    """A parsed module: header attributes, computations in order, optional stack-frame tables."""

    def __init__(self, name: str, computations: list, attrs: Optional[dict] = None, tables: str = "",
                 percent: bool = True, filename: str = "<string>"):
        self.name = name
        self.computations = computations
        self.attrs = attrs or {}
        self.tables = tables
        self.percent = percent
        self.filename = filename

    @property
    def computations(self) -> list:
        """The computations in order (assign a new list to change them: the name index follows)."""
        return self._computations

    @computations.setter
    def computations(self, value: list) -> None:
        self._computations = value
        self._by_name: Optional[dict] = None

    @property
    def computations_by_name(self) -> dict:
        """{name: computation}, built once per list of computations (cost analysis asks it per instruction)."""
        if self._by_name is None or len(self._by_name) != len(self._computations):
            self._by_name = {c.name: c for c in self._computations}
        return self._by_name

    @property
    def entry(self) -> HloComputation:
        for c in self.computations:
            if c.is_entry:
                return c
        return self.computations[-1]

    def instruction_count(self) -> int:
        return sum(len(c.instructions) for c in self.computations)

    def to_text(self, percent: Optional[bool] = None, metadata: bool = True) -> str:
        """Print as HLO text that XLA's parser accepts (and that `parse_hlo` reads back identically)."""
        pct = self.percent if percent is None else percent
        header = f"HloModule {self.name}"
        if self.attrs:
            header += ", " + ", ".join(f"{k}={v}" for k, v in self.attrs.items())
        parts = [header, ""]
        if self.tables and metadata:
            # XLA prints (and only accepts) the stack-frame tables between the header and the bodies.
            parts += [self.tables.strip(), ""]
        entry = self.entry
        for c in self.computations:
            parts.append(c.to_text(pct, metadata, is_entry=c is entry))
            parts.append("")
        return "\n".join(parts)


def reachable_computations(module: HloModule, roots: "list[str]", comps: Optional[dict] = None) -> set:
    """Names of the computations `roots` name and, transitively, call (`comps`: the name -> computation
    map to follow, by default the module's)."""
    comps = module.computations_by_name if comps is None else comps
    return _closure(roots, lambda n: (c for ins in comps[n].instructions for c in ins.called_computations()))


def live_instructions(by_name: "dict[str, HloInstruction]", seeds: Iterable[str]) -> set:
    """Names of the instructions `seeds` name and, transitively, read (the live set of a dead-code pass)."""
    return _closure(seeds, lambda n: by_name[n].operands)


def _closure(seeds: Iterable[str], successors: Callable[[str], Iterable[str]]) -> set:
    """`seeds` and every name reachable from them through `successors` (a worklist walk)."""
    out: set[str] = set()
    stack = list(seeds)
    while stack:
        n = stack.pop()
        if n in out:
            continue
        out.add(n)
        stack.extend(successors(n))
    return out


# --------------------------------------------------------------------------------------------------
# Parser

_WS = re.compile(r"(?:\s+|//[^\n]*|/\*.*?\*/|#[^\n]*)*", re.S)
_NAME = re.compile(r"%?([A-Za-z_][\w.\-]*)")
_NAME_FULL = re.compile(r"[A-Za-z_][\w.\-]*")
_OPCODE = re.compile(r"[a-z][a-z0-9\-]*")
_ARRAY_SHAPE = re.compile(r"([a-z][a-z0-9]*)\[([^\]\n]*)\](?:\{([^{}\n]*)\})?")
_INT = re.compile(r"-?\d+")
_ATTR_KEY = re.compile(r"([A-Za-z_][\w\-]*)\s*=")
_SPECIAL = re.compile(r'[{}()\[\],"]')
_TABLE_HEAD = re.compile(r"(FileNames|FunctionNames|FileLocations|StackFrames)\b")
_COMP_AFTER_TABLE = re.compile(r"^[ \t]*((?:ENTRY\s+)?%?[A-Za-z_][\w.\-]*\s*[({])", re.M)
_CLOSERS = {"}": "{", ")": "(", "]": "["}
_CALLED_NAMES = frozenset(CALLED_COMPUTATION_ATTRS)


class _Parser:
    def __init__(self, text: str, filename: str):
        self.text = text
        self.filename = filename
        self.pos = 0
        self.n = len(text)
        self.shape_cache: dict[str, Shape] = {}
        self.percent_seen = False
        self.tuple_depth = 0
        # For the verifier: computation signatures {name: (result shape, its offset, [(param name,
        # shape, offset)])} and shapes written on operands [(instruction, operand index, shape, offset)].
        self.signatures: dict[str, tuple] = {}
        self.operand_shapes: list[tuple] = []
        self.shapes_by_name: dict[str, dict] = {}  # computation -> {instruction name: its shape}
        # Instructions whose operands all have the result's shape object (interned: same text).
        self.same_shapes: set[HloInstruction] = set()
        # When a dict, `instruction()` records the offsets of its operands and attribute keys there
        # (the verifier re-reads one instruction this way to point at the exact column of an error).
        self.record: Optional[dict] = None

    # -- errors and positions
    def error(self, message: str, pos: Optional[int] = None) -> HloParseError:
        pos = self.pos if pos is None else pos
        pos = min(max(pos, 0), self.n)
        line = self.text.count("\n", 0, pos) + 1
        start = self.text.rfind("\n", 0, pos) + 1
        end = self.text.find("\n", pos)
        end = self.n if end < 0 else end
        return HloParseError(message, self.filename, line, pos - start + 1, self.text[start:end])

    def lineno(self, pos: int) -> int:
        return self.text.count("\n", 0, pos) + 1

    def locate(self, ins: HloInstruction, where: tuple) -> int:
        """Offset of an instruction's operand (("operand", i)) or attribute key (("attr", key)), found by
        reading the instruction again while recording; the instruction's own offset if not found."""
        saved = (self.pos, self.record, self.operand_shapes)
        record: dict = {}
        try:
            self.pos, self.record, self.operand_shapes = ins.offset, record, []
            self.instruction()
        except HloParseError:
            pass
        finally:
            self.pos, self.record, self.operand_shapes = saved
        kind, key = where
        if kind == "operand":
            offsets = record.get("operands", [])
            return offsets[key] if key < len(offsets) else ins.offset
        return record.get("attrs", {}).get(key, ins.offset)

    # -- lexing helpers
    def ws(self) -> None:
        self.pos = _WS.match(self.text, self.pos).end()

    def peek(self, s: str) -> bool:
        self.ws()
        return self.text.startswith(s, self.pos)

    def accept(self, s: str) -> bool:
        if self.peek(s):
            self.pos += len(s)
            return True
        return False

    def expect(self, s: str, what: str = "") -> None:
        if not self.accept(s):
            got = self.text[self.pos:self.pos + 12].split("\n")[0] or "end of input"
            raise self.error(f"expected '{s}'{' ' + what if what else ''}, got '{got}'")

    def name(self, what: str = "name") -> str:
        self.ws()
        m = _NAME.match(self.text, self.pos)
        if not m:
            got = self.text[self.pos:self.pos + 12].split("\n")[0] or "end of input"
            raise self.error(f"expected {what}, got '{got}'")
        if self.text[self.pos] == "%":
            self.percent_seen = True
        self.pos = m.end()
        return m.group(1)

    def balanced(self) -> str:
        """Raw text of one attribute value: up to the next top-level ',' or the end of the line group."""
        self.ws()
        start = self.pos
        text = self.text
        stack: list[str] = []
        pos = self.pos
        while True:
            m = _SPECIAL.search(text, pos)
            # A value without brackets ends at a newline.
            nl = text.find("\n", pos)
            if not stack:
                stop = m.start() if m else self.n
                if nl >= 0 and nl < stop:
                    pos = nl
                    break
            if not m:
                if stack:
                    raise self.error(f"unclosed '{stack[-1]}' in attribute value", start)
                pos = self.n
                break
            c = m.group(0)
            if c == '"':
                pos = self._skip_string(m.start())
                continue
            if c in "{([":
                stack.append(c)
            elif c in "})]":
                if not stack:
                    pos = m.start()
                    break
                if stack[-1] != _CLOSERS[c]:
                    raise self.error(f"mismatched '{c}' in attribute value", m.start())
                stack.pop()
            elif c == "," and not stack:
                pos = m.start()
                break
            pos = m.end()
        self.pos = pos
        value = text[start:pos].strip()
        if not value:
            raise self.error("expected an attribute value", start)
        return value

    def _skip_string(self, start: int) -> int:
        i = start + 1
        text = self.text
        while True:
            j = text.find('"', i)
            if j < 0:
                raise self.error("unterminated string", start)
            k = j - 1
            bs = 0
            while k >= start + 1 and text[k] == "\\":
                bs += 1
                k -= 1
            if bs % 2 == 0:
                return j + 1
            i = j + 1

    # -- shapes
    def shape(self) -> Shape:
        self.ws()
        text = self.text
        if text.startswith("(", self.pos):
            if self.tuple_depth >= MAX_TUPLE_DEPTH:
                raise self.error(f"tuple shape nested more than {MAX_TUPLE_DEPTH} deep")
            self.pos += 1
            self.tuple_depth += 1
            subs = []
            self.ws()
            if not text.startswith(")", self.pos):
                while True:
                    subs.append(self.shape())
                    if self.accept(","):
                        continue
                    break
            self.expect(")", "closing the tuple shape")
            self.tuple_depth -= 1
            return Shape("tuple", tuple_shapes=tuple(subs))
        m = _ARRAY_SHAPE.match(text, self.pos)
        if not m:
            if text.startswith("b(", self.pos):
                raise self.error("buffer shapes 'b(...)' (xla_data.proto BUFFER) are not supported")
            got = text[self.pos:self.pos + 12].split("\n")[0] or "end of input"
            raise self.error(f"expected a shape, got '{got}'")
        raw = m.group(0)
        cached = self.shape_cache.get(raw)
        if cached is None:
            cached = self._make_shape(m)
            self.shape_cache[raw] = cached
        self.pos = m.end()
        return cached

    def _make_shape(self, m: re.Match) -> Shape:
        dtype, dims_text, layout = m.group(1), m.group(2), m.group(3)
        if dtype not in DTYPE_BYTES:
            raise self.error(f"unknown element type '{dtype}'", m.start())
        dims: list[int] = []
        dyn: list[bool] = []
        body = dims_text.strip()
        if body:
            for d in body.split(","):
                d = d.strip()
                if d == "?":
                    dims.append(-1)
                    dyn.append(True)
                    continue
                dynamic = d.startswith("<=")
                if dynamic:
                    d = d[2:].strip()
                if not d.isdigit():
                    raise self.error(f"bad dimension '{d}' in shape", m.start(2))
                if len(d) > 19 or int(d) > MAX_ELEMENTS:
                    raise self.error(f"dimension {d[:24]}{'...' if len(d) > 24 else ''} is larger than "
                                     f"2^62", m.start(2))
                dims.append(int(d))
                dyn.append(dynamic)
        n = 1
        for d in dims:
            n *= max(d, 1)
        if n > MAX_ELEMENTS:
            raise self.error(f"shape {m.group(0)} has more than 2^62 elements", m.start())
        if layout is not None:
            head = layout.split(":", 1)[0].strip()
            if head:
                try:
                    mm = [int(x) for x in head.split(",")]
                except ValueError:
                    raise self.error(f"bad layout '{{{layout}}}'", m.start(3)) from None
                if sorted(mm) != list(range(len(dims))):
                    raise self.error(f"layout {{{head}}} does not match rank {len(dims)}", m.start(3))
            elif dims:
                # `{}` on a non-scalar is not a valid minor-to-major order.
                raise self.error(f"empty layout for rank-{len(dims)} shape", m.start(3))
        return Shape(dtype, tuple(dims), layout, tuple(dyn))

    # -- module structure
    def parse_module(self) -> HloModule:
        self.ws()
        name = "module"
        attrs: dict[str, str] = {}
        if self.text.startswith("HloModule", self.pos):
            self.pos += len("HloModule")
            name = self.name("module name")
            while self.accept(","):
                attrs.update(self.attribute())
        computations: list[HloComputation] = []
        tables = ""
        seen: set[str] = set()
        while True:
            self.ws()
            if self.pos >= self.n:
                break
            m = _COMP_AFTER_TABLE.search(self.text, self.pos) if _TABLE_HEAD.match(self.text, self.pos) else None
            if _TABLE_HEAD.match(self.text, self.pos) and (m is None or m.start(1) > self.pos):
                # Stack-frame tables: at the end (JAX) or between the header and the computations
                # (`compile().as_text()`); a table block runs up to the next computation head (a
                # computation named like a table, `FileNames.1 (...`, is a computation: no loop).
                end = m.start(1) if m else self.n
                block = self.text[self.pos:end].strip()
                self._validate_tables(block)
                tables = f"{tables}\n\n{block}" if tables else block
                self.pos = end
                continue
            comp = self.computation()
            if comp.name in seen:
                raise self.error(f"duplicate computation name '{comp.name}'", self._comp_start)
            seen.add(comp.name)
            computations.append(comp)
        if not computations:
            raise self.error("no computations in module")
        mod = HloModule(name, computations, attrs, tables, self.percent_seen, self.filename)
        self._check_module(mod)
        return mod

    def _validate_tables(self, tables: str) -> None:
        for line in tables.splitlines():
            s = line.strip()
            if not s or _TABLE_HEAD.fullmatch(s):
                continue
            if not re.match(r"\d+\s+(\".*\"|\{.*\})\s*$", s):
                pos = self.text.find(line)
                raise self.error("malformed stack-frame table row", pos if pos >= 0 else self.pos)

    def attribute(self) -> dict:
        self.ws()
        m = _ATTR_KEY.match(self.text, self.pos)
        if not m:
            got = self.text[self.pos:self.pos + 12].split("\n")[0] or "end of input"
            raise self.error(f"expected attribute 'key=value', got '{got}'")
        self.pos = m.end()
        return {m.group(1): self.balanced()}

    def computation(self) -> HloComputation:
        self.ws()
        self._comp_start = start = self.pos
        is_entry = False
        if self.text.startswith("ENTRY", self.pos) and not _NAME_FULL.match(self.text, self.pos + 5):
            is_entry = True
            self.pos += 5
        name = self.name("computation name")
        self.ws()
        if self.text.startswith("(", self.pos):
            # Signature: (p0: shape, ...) -> shape; the verifier checks it against the body.
            self.pos += 1
            self.ws()
            params = []
            if not self.text.startswith(")", self.pos):
                while True:
                    self.ws()
                    p_pos = self.pos
                    p_name = self.name("parameter name")
                    self.expect(":")
                    params.append((p_name, self.shape(), p_pos))
                    if not self.accept(","):
                        break
            self.expect(")", "closing the computation signature")
            self.expect("->", "in the computation signature")
            self.ws()
            result_pos = self.pos
            self.signatures[name] = (self.shape(), result_pos, params)
        self.expect("{", "opening the computation body")
        instructions: list[HloInstruction] = []
        names: dict[str, Shape] = {}
        later: list = []  # (instruction, operand) used before its definition or undefined: an error
        same_shapes = self.same_shapes
        while True:
            self.ws()
            if self.text.startswith("}", self.pos):
                self.pos += 1
                break
            if self.pos >= self.n:
                raise self.error(f"computation '{name}' is not closed with '}}'")
            ins_pos = self.pos
            ins = self.instruction()
            if ins.name in names:
                raise self.error(f"duplicate instruction name '{ins.name}'", ins_pos)
            shape = ins.shape
            uniform = True
            for o in ins.operands:
                s = names.get(o)
                if s is not shape:
                    uniform = False
                    if s is None:
                        later.append((ins, o))
            if uniform:
                same_shapes.add(ins)
            names[ins.name] = shape
            instructions.append(ins)
        if not instructions:
            raise self.error(f"computation '{name}' has no instructions", start)
        roots = [i for i in instructions if i.is_root]
        if len(roots) > 1:
            raise self.error(f"computation '{name}' has {len(roots)} ROOT instructions", start)
        trailer: dict[str, str] = {}
        save = self.pos
        self.ws()
        if self.text.startswith(",", self.pos):
            self.pos += 1
            while True:
                trailer.update(self.attribute())
                if not self.accept(","):
                    break
        else:
            self.pos = save
        comp = HloComputation(name, instructions, is_entry, trailer, offset=start)
        self._check_operands(comp, names, later)
        self.shapes_by_name[name] = names
        return comp

    def _check_operands(self, comp: HloComputation, names: dict, later: list) -> None:
        for ins, o in later:  # XLA's parser takes operands defined above their users only
            where = self.locate(ins, ("operand", ins.operands.index(o)))
            if o not in names:
                raise self.error(f"use of undefined value '{o}' in computation '{comp.name}'", where)
            raise self.error(f"'{ins.name}' uses '{o}' before its definition in computation '{comp.name}' "
                             "(XLA's parser takes an operand only after the line that defines it)", where)
        params = [i for i in comp.instructions if i.opcode == "parameter"]
        nums = sorted(i.parameter_number for i in params)
        if nums != list(range(len(nums))):
            raise self.error(f"computation '{comp.name}' has parameter numbers {nums}, expected 0..{len(nums) - 1}",
                             params[0].offset if params else self.pos)

    def instruction(self) -> HloInstruction:
        self.ws()
        is_root = False
        if self.text.startswith("ROOT", self.pos) and not _NAME_FULL.match(self.text, self.pos + 4):
            is_root = True
            self.pos += 4
            self.ws()
        start = self.pos  # the instruction's position: its name
        name = self.name("instruction name")
        self.expect("=", f"after instruction name '{name}'")
        shape = self.shape()
        self.ws()
        m = _OPCODE.match(self.text, self.pos)
        if not m:
            raise self.error("expected an opcode")
        opcode = m.group(0)
        if opcode not in OPCODES and async_sugar(opcode) is None:
            raise self.error(f"unknown opcode '{opcode}'")
        self.pos = m.end()
        self.expect("(", f"after opcode '{opcode}'")
        operands: list[str] = []
        literal = None
        parameter_number = None
        record = self.record
        inline_shapes: list = []
        if opcode == "constant":
            literal = self._literal()
        elif opcode == "parameter":
            self.ws()
            mi = _INT.match(self.text, self.pos)
            if not mi or mi.group(0).startswith("-") or len(mi.group(0)) > 9:
                raise self.error("expected parameter number (0 to 999999999)")
            parameter_number = int(mi.group(0))
            self.pos = mi.end()
            self.expect(")")
        else:
            self.ws()
            if not self.text.startswith(")", self.pos):
                while True:
                    self.ws()
                    c = self.text[self.pos:self.pos + 1]
                    # Operands may carry their shape: `f32[2]{0} %x` or `(f32[], s32[]) %t`.
                    if c == "(" or (_ARRAY_SHAPE.match(self.text, self.pos)
                                    and not _name_then_delim(self.text, self.pos)):
                        shape_pos = self.pos
                        inline_shapes.append((len(operands), self.shape(), shape_pos))
                    if record is not None:
                        self.ws()
                        record.setdefault("operands", []).append(self.pos)
                    operands.append(self.name("operand name"))
                    if self.accept(","):
                        continue
                    break
            self.expect(")", "closing the operand list")
        attrs: dict[str, str] = {}
        parsed: dict[str, Any] = {}
        while True:
            save = self.pos
            self.ws()
            if not self.text.startswith(",", self.pos):
                self.pos = save
                break
            self.pos += 1
            self.ws()
            key_pos = self.pos
            kv = self.attribute()
            (k, v), = kv.items()
            if record is not None:
                record.setdefault("attrs", {})[k] = key_pos
            if k in _CALLED_NAMES and k not in CALLED_BY_OPCODE.get(opcode, ((),))[0]:
                raise self.error(f"attribute '{k}' is not allowed on '{opcode}'", key_pos)
            if k in attrs:
                raise self.error(f"duplicate attribute '{k}'", key_pos)
            attrs[k] = v
            fn = _ATTR_PARSERS.get(k)
            if fn is not None:
                try:
                    parsed[k] = fn(v)
                except AttributeError_ as e:
                    raise self.error(f"attribute '{k}': {e}", key_pos) from None
        ins = HloInstruction(name, opcode, shape, operands, attrs, parsed, is_root, literal,
                             parameter_number, offset=start)
        if inline_shapes:
            for k, written, pos in inline_shapes:
                self.operand_shapes.append((ins, k, written, pos))
        self._check_instruction(ins, start)
        return ins

    def _literal(self) -> str:
        """Raw literal text of a constant, up to its matching ')'."""
        self.ws()
        start = self.pos
        depth = 0
        text = self.text
        pos = self.pos
        while pos < self.n:
            c = text[pos]
            if c == '"':
                pos = self._skip_string(pos)
                continue
            if c in "({[":
                depth += 1
            elif c in ")}]":
                if depth == 0:
                    if c != ")":
                        raise self.error(f"unexpected '{c}' in constant literal", pos)
                    break
                depth -= 1
            pos += 1
        else:
            raise self.error("unclosed constant literal", start)
        lit = text[start:pos].strip()
        self.pos = pos + 1
        if not lit:
            raise self.error("empty constant literal", start)
        if not re.fullmatch(r"[\w\s.,{}()\[\]\-+:\"/*<>=%!']+|\{\.\.\.\}", lit):
            raise self.error("malformed constant literal", start)
        return lit

    def _check_instruction(self, ins: HloInstruction, pos: int) -> None:
        op = ins.opcode
        if op == "get-tuple-element" and "index" not in ins.parsed:
            raise self.error("get-tuple-element needs index=", pos)
        called = CALLED_BY_OPCODE.get(op)
        if called is not None:
            for k in called[1]:
                if k not in ins.parsed:
                    raise self.error(f"'{op}' needs attribute {k}=", pos)
            if op == "conditional" and "branch_computations" not in ins.parsed and not (
                    "true_computation" in ins.parsed and "false_computation" in ins.parsed):
                raise self.error("'conditional' needs branch_computations= (or true_computation= and "
                                 "false_computation=)", pos)

    def _check_module(self, mod: HloModule) -> None:
        comps = mod.computations_by_name
        entries = [c for c in mod.computations if c.is_entry]
        if len(entries) > 1:
            raise self.error("more than one ENTRY computation", entries[1].offset)
        for c in mod.computations:
            for ins in c.instructions:
                for callee in ins.called_computations():
                    if callee not in comps:
                        raise self.error(f"instruction '{ins.name}' calls unknown computation '{callee}'",
                                         ins.offset)


def _name_then_delim(text: str, pos: int) -> bool:
    """True when what looks like a shape at pos is really an operand name (e.g. `f32` is no name).

    An operand shape is always followed by a name; a bare name is followed by ',' or ')'.
    """
    m = _NAME.match(text, pos)
    if not m:
        return False
    rest = _WS.match(text, m.end()).end()
    return rest < len(text) and text[rest] in ",)"


@gc_paused()
def parse_hlo(text: str, filename: str = "<string>", verify: bool = True) -> HloModule:
    """Parse HLO text into an HloModule; raises HloParseError (with file:line:col) on bad input.

    With `verify` (the default), the module is also checked as XLA's HloVerifier does (shapes against
    each opcode's shape inference, names, call graph; autotune/compiler/verifier.py). `verify=False` is for
    re-parsing text this package printed itself.
    """
    p = _Parser(text, filename)
    try:
        mod = p.parse_module()
    except RecursionError:
        raise p.error("nesting too deep") from None
    _assign_positions(mod, text)
    if verify:
        if _module_verifier is None:
            raise RuntimeError("no HLO verifier installed (autotune/compiler/__init__.py installs it)")
        _module_verifier(mod, p)
    return mod


# The checker `parse_hlo(verify=True)` runs: autotune.compiler.verifier.verify_module, installed by the
# package's __init__ so that the parser stays below the verifier in the import graph (docs/architecture.md).
_module_verifier: Optional[Callable[[HloModule, Any], None]] = None


def install_module_verifier(verify: Callable[[HloModule, Any], None]) -> None:
    """Set the checker that `parse_hlo` runs on every module it parses unless `verify=False`."""
    global _module_verifier
    _module_verifier = verify


def _assign_positions(mod: HloModule, text: str) -> None:
    """Set the 1-based line and column of every computation and instruction from its byte offset
    (one pass over the text, in offset order)."""
    items: list = []
    for c in mod.computations:  # in text order already: each computation, then its instructions
        items.append(c)
        items.extend(c.instructions)
    line, last, rfind = 1, 0, text.rfind
    count = text.count
    for x in items:
        off = x.offset
        line += count("\n", last, off)
        last = off
        x.lineno = line
        x.col = off - rfind("\n", 0, off)


def parse_hlo_file(path: str, verify: bool = True) -> HloModule:
    """Read and parse an HLO text file; errors name the file."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except UnicodeDecodeError as e:
        raise HloParseError(f"not UTF-8 text ({e.reason})", str(path), 1, 1) from None
    return parse_hlo(text, str(path), verify)
