"""HLO verifier: what XLA's HloVerifier and ShapeInference check, run on every parsed module.

What: for every instruction, the operand count, element types and shapes its opcode accepts, the
attributes it needs (dimension numbers in range and unique, windows, slices, padding, ...), the
signatures of the computations it calls (reducers, comparators, while bodies and conditions,
branches, fused computations), and the result shape inferred from all of that, which must equal the
declared one (dims and element type; layouts are ignored, bounded-dynamic `<=N` and `?` dims match
any size). Module-wide: computation signatures against their bodies, operand shapes written inline
against the operands, no instruction cycles, no recursion through the call graph (any cycle
length), call nesting at most `MAX_CALL_DEPTH`.

Why: a well-formed but wrong program (operand shapes that do not match the declared shapes,
dimension numbers out of range) must be rejected with one clear error, not priced with made-up
numbers, crash an analysis, or make it loop. `autotune.compiler.hlo.parse_hlo` runs it by default.

Errors are `HloParseError`s at the exact file:line:column of the instruction (or of the operand or
attribute at fault when the text is at hand), e.g.
`prog.hlo:12:3: error: add 'add.1': operand 1 has shape f32[8,4], expected f32[8,8]`.

The rules follow xla/service/shape_inference.cc and xla/service/hlo_verifier.cc (openxla/xla). XLA
allows mixed floating-point precision (a declared f32 where bf16 is inferred) only when the backend
asks for it: so here, only in modules with TPU tiled layouts (`{...:T(8,128)}`), as XLA:TPU runs
the verifier; elsewhere element types must match exactly. Custom calls are checked for nothing but
their target name (their result is whatever the target produces). Verification is linear in the
program's size; verdicts are memoized per distinct (opcode, shapes, attributes, called signatures),
so repeated layers cost a dictionary lookup (benchmarks/verifier_speed.py).
"""
from __future__ import annotations

import functools
import re
from typing import Any, Callable, Optional, Sequence

from autotune.compiler.analysis import CONV_POSITIONS_LIMIT
from autotune.compiler.hlo import (CALLED_BY_OPCODE, CALLED_COMPUTATION_ATTRS, DTYPE_BYTES, MAX_ELEMENTS, OPCODES, AttributeError_,
                  ConvDimLabels, HloComputation, HloInstruction, HloModule, HloParseError, Shape, parse_int_list)

__all__ = ["verify_module", "MAX_CALL_DEPTH", "compatible"]

# Calls (fusion, call, while, conditional, reducers, ...) nested deeper than this are refused: the
# analyses walk called computations recursively.
MAX_CALL_DEPTH = 100

_FLOAT = frozenset(("f16", "bf16", "f32", "f64", "f8e4m3fn", "f8e5m2", "f8e4m3b11fnuz", "f8e5m2fnuz",
                    "f8e4m3fnuz", "f8e4m3", "f8e3m4", "f8e8m0fnu", "f4e2m1fn"))
_COMPLEX_PART = {"c64": "f32", "c128": "f64"}
_COMPLEX = frozenset(_COMPLEX_PART)
_SIGNED_INT = frozenset(("s2", "s4", "s8", "s16", "s32", "s64"))
_UNSIGNED_INT = frozenset(("u2", "u4", "u8", "u16", "u32", "u64"))
_INTEGRAL = _SIGNED_INT | _UNSIGNED_INT
_NUMERIC = _INTEGRAL | _FLOAT | _COMPLEX
_ARRAY_TYPES = _NUMERIC | {"pred"}
_BITS = {t: int(b * 8) for t, b in DTYPE_BYTES.items()}

_TYPE_NAMES = {_FLOAT: "a floating-point type", _FLOAT | _COMPLEX: "a floating-point or complex type",
               _INTEGRAL: "an integral type", _INTEGRAL | {"pred"}: "pred or an integral type",
               _UNSIGNED_INT: "an unsigned integral type", _COMPLEX: "a complex type",
               _NUMERIC: "a numeric type (not pred)",
               _SIGNED_INT | _FLOAT | _COMPLEX: "a signed, floating-point or complex type",
               _ARRAY_TYPES: "an array type"}


class _Fail(Exception):
    """Internal: one verification failure; `where` is ("operand", i), ("attr", key) or None."""

    def __init__(self, message: str, where: Optional[tuple] = None):
        super().__init__(message)
        self.message = message
        self.where = where


# --------------------------------------------------------------------------------------------------
# Shapes


def _txt(s: Shape) -> str:
    return s.to_text(layout=False)


def _array(dtype: str, dims: Sequence[int], dynamic: Optional[Sequence[bool]] = None) -> Shape:
    dims = tuple(dims)
    return Shape(dtype, dims, None, tuple(dynamic) if dynamic is not None else (False,) * len(dims))


def _tuple(shapes: Sequence[Shape]) -> Shape:
    return Shape("tuple", tuple_shapes=tuple(shapes))


def _dyn(s: Shape) -> tuple:
    return s.dynamic if len(s.dynamic) == len(s.dims) else (False,) * len(s.dims)


def _dims_match(a: Shape, b: Shape) -> bool:
    """Same rank and sizes; a dynamic dim (`<=N` or `?`) on either side matches any size."""
    ad, bd = a.dims, b.dims
    if ad == bd:
        return True
    if len(ad) != len(bd):
        return False
    ay, by = _dyn(a), _dyn(b)
    for i in range(len(ad)):
        if ad[i] != bd[i] and not (ay[i] or by[i]):
            return False
    return True


def compatible(a: Shape, b: Shape, ignore_fp_precision: bool = False) -> bool:
    """XLA's ShapeUtil::Compatible plus dynamic dims: equal ignoring layouts (recursively for tuples);
    with `ignore_fp_precision`, any two floating-point element types match."""
    if a is b:
        return True
    if a.tuple_shapes is not None or b.tuple_shapes is not None:
        if a.tuple_shapes is None or b.tuple_shapes is None or len(a.tuple_shapes) != len(b.tuple_shapes):
            return False
        return all(compatible(x, y, ignore_fp_precision) for x, y in zip(a.tuple_shapes, b.tuple_shapes))
    if a.dtype != b.dtype and not (ignore_fp_precision and a.dtype in _FLOAT and b.dtype in _FLOAT):
        return False
    return _dims_match(a, b)


def _elements(s: Shape) -> Optional[int]:
    """Element count (bounds for bounded-dynamic dims), None with an unbounded `?` dim."""
    n = 1
    for d in s.dims:
        if d < 0:
            return None
        n *= d
    return n


def _is_array(s: Shape) -> bool:
    return s.tuple_shapes is None and s.dtype in _ARRAY_TYPES


def _scalar(dtype: str) -> Shape:
    return _array(dtype, ())


# --------------------------------------------------------------------------------------------------
# Checks shared by the rules


def _need_array(ops: Sequence[Shape], i: int, what: str = "") -> Shape:
    s = ops[i]
    if not _is_array(s):
        raise _Fail(f"operand {i}{' (' + what + ')' if what else ''} must be an array, got {_txt(s)}",
                    ("operand", i))
    return s


def _need_type(ops: Sequence[Shape], i: int, allowed: frozenset) -> None:
    s = ops[i]
    if s.dtype not in allowed:
        name = _TYPE_NAMES.get(allowed) or "one of " + ", ".join(sorted(allowed))
        raise _Fail(f"operand {i} has element type {s.dtype}, expected {name}", ("operand", i))


def _count(ops: Sequence[Shape], lo: int, hi: Optional[int] = -1) -> None:
    """Operand count in [lo, hi] (hi=-1: exactly lo; hi=None: no upper bound)."""
    n = len(ops)
    if hi == -1:
        if n != lo:
            raise _Fail(f"expects {lo} operand{'s' if lo != 1 else ''}, got {n}")
    elif n < lo or (hi is not None and n > hi):
        span = f"at least {lo}" if hi is None else f"{lo} to {hi}"
        raise _Fail(f"expects {span} operands, got {n}")


def _expect_operand(ops: Sequence[Shape], i: int, expected: Shape) -> None:
    if not compatible(ops[i], expected):
        raise _Fail(f"operand {i} has shape {_txt(ops[i])}, expected {_txt(expected)}", ("operand", i))


def _attr_value(ins: HloInstruction, key: str, default: Any, parse: Callable[[str], Any], shown: str) -> Any:
    """An attribute's parsed value (from the parser, else parsed from its text here), else `default`;
    a missing attribute without a default is "needs attribute key=<shown>"."""
    v = ins.parsed.get(key)
    if v is not None:
        return v
    raw = ins.attrs.get(key)
    if raw is None:
        if default is None:
            raise _Fail(f"needs attribute {key}={shown}")
        return default
    return parse(raw)


def _parse_int_list_attr(key: str) -> Callable[[str], tuple]:
    def parse(raw: str) -> tuple:
        try:
            return parse_int_list(raw)
        except AttributeError_ as e:
            raise _Fail(f"attribute '{key}': {e}", ("attr", key)) from None
    return parse


def _int_list(ins: HloInstruction, key: str, default: Optional[tuple] = None) -> tuple:
    return _attr_value(ins, key, default, _parse_int_list_attr(key), "{...}")


def _int_attr(ins: HloInstruction, key: str, default: Optional[int] = None) -> int:
    def parse(raw: str) -> int:
        if not re.fullmatch(r"-?\d{1,18}", raw.strip()):
            raise _Fail(f"attribute '{key}': expected an integer, got {raw!r}", ("attr", key))
        return int(raw)
    return _attr_value(ins, key, default, parse, "")


def _enum_attr(ins: HloInstruction, key: str, allowed: Sequence[str], default: Optional[str] = None) -> str:
    raw = ins.attrs.get(key)
    if raw is None:
        if default is None:
            raise _Fail(f"needs attribute {key}= (one of {', '.join(allowed)})")
        return default
    if raw not in allowed:
        raise _Fail(f"attribute '{key}' is {raw}, expected one of {', '.join(allowed)}", ("attr", key))
    return raw


def _dims_in_range(dims: Sequence[int], rank: int, key: str, unique: bool = True, what: str = "") -> None:
    for d in dims:
        if not 0 <= d < rank:
            raise _Fail(f"{key} {{{','.join(map(str, dims))}}}: dimension {d} out of range for "
                        f"{what or 'rank ' + str(rank)}", ("attr", key))
    if unique and len(set(dims)) != len(dims):
        raise _Fail(f"{key} {{{','.join(map(str, dims))}}}: repeated dimension", ("attr", key))


def _sorted_unique(dims: Sequence[int], key: str) -> None:
    if list(dims) != sorted(set(dims)):
        raise _Fail(f"{key} {{{','.join(map(str, dims))}}} must be sorted and unique", ("attr", key))


def _dilated(bound: int, dilation: int) -> int:
    return 0 if bound == 0 else (bound - 1) * dilation + 1


def _strided(bound: int, window: int, stride: int) -> int:
    return 0 if bound == 0 or window > bound else (bound - window) // stride + 1


def _window_output(base: Shape, window: tuple, dtype: str, key: str = "window") -> Shape:
    """XLA's InferWindowOutputShape."""
    if len(window) != base.rank:
        raise _Fail(f"window has {len(window)} dimensions, the operand has rank {base.rank}", ("attr", key))
    out = []
    volume = 1
    for i, w in enumerate(window):
        volume *= max(w.size, 1)
        if volume > MAX_ELEMENTS:
            raise _Fail("window has more than 2^62 elements", ("attr", key))
        if w.size <= 0 or w.stride <= 0 or w.lhs_dilate < 1 or w.rhs_dilate < 1:
            raise _Fail(f"window dimension {i}: size, stride and dilations must be positive "
                        f"(size={w.size} stride={w.stride} lhs_dilate={w.lhs_dilate} rhs_dilate={w.rhs_dilate})",
                        ("attr", key))
        d = base.dims[i]
        if d < 0:
            out.append(-1)
            continue
        padded = w.pad_lo + _dilated(d, w.lhs_dilate) + w.pad_hi
        out.append(_strided(padded, _dilated(w.size, w.rhs_dilate), w.stride))
    return _array(dtype, out, [o < 0 or y for o, y in zip(out, _dyn(base))])


class _Signature:
    """A called computation's parameter shapes (by number) and root shape."""

    __slots__ = ("name", "params", "result")

    def __init__(self, name: str, params: list, result: Shape):
        self.name = name
        self.params = params
        self.result = result

    def text(self) -> str:
        return f"({', '.join(_txt(p) for p in self.params)}) -> {_txt(self.result)}"


def _reducer(sig: _Signature, inits: Sequence[Shape], input_types: Sequence[str], key: str) -> list:
    """XLA's VerifyReducerShape: (acc..., x...) -> acc for N inputs; returns the accumulator shapes."""
    n = len(inits)
    where = ("attr", key)
    if len(sig.params) != 2 * n:
        raise _Fail(f"{key} computation '{sig.name}' must take {2 * n} parameters, takes {len(sig.params)}",
                    where)
    res = sig.result
    if res.tuple_shapes is None:
        if n != 1:
            raise _Fail(f"{key} computation '{sig.name}' must return a tuple of {n} scalars, "
                        f"returns {_txt(res)}", where)
        accs = [res]
    else:
        if len(res.tuple_shapes) != n:
            raise _Fail(f"{key} computation '{sig.name}' must return {n} values, returns {_txt(res)}", where)
        accs = list(res.tuple_shapes)
    for i in range(n):
        acc = accs[i]
        if acc.tuple_shapes is not None or acc.rank != 0:
            raise _Fail(f"{key} computation '{sig.name}' must return scalars, returns {_txt(res)}", where)
        if not compatible(acc, sig.params[i]):
            raise _Fail(f"{key} computation '{sig.name}': parameter {i} is {_txt(sig.params[i])}, "
                        f"its result {_txt(acc)}", where)
        if inits[i].tuple_shapes is not None or inits[i].rank != 0:
            raise _Fail(f"init value {i} must be a scalar, got {_txt(inits[i])}", where)
        if inits[i].dtype != acc.dtype:
            raise _Fail(f"init value {i} is {_txt(inits[i])}, {key} computation '{sig.name}' "
                        f"accumulates {_txt(acc)}", where)
        p = sig.params[n + i]
        if p.tuple_shapes is not None or p.rank != 0 or p.dtype != input_types[i]:
            raise _Fail(f"{key} computation '{sig.name}': parameter {n + i} is {_txt(p)}, expected "
                        f"{input_types[i]}[] (the input's element type)", where)
    return accs


def _check_callee(sig: _Signature, ops: Sequence[Shape], key: str) -> None:
    """Parameters of a called computation (call, fusion, async) against the operands."""
    if len(sig.params) != len(ops):
        raise _Fail(f"computation '{sig.name}' has {len(sig.params)} parameters, called with {len(ops)} "
                    f"operands", ("attr", key))
    for i, (p, o) in enumerate(zip(sig.params, ops)):
        if not compatible(p, o):
            raise _Fail(f"operand {i} has shape {_txt(o)}, parameter {i} of '{sig.name}' is {_txt(p)}",
                        ("operand", i))


# --------------------------------------------------------------------------------------------------
# Rules: (verifier, instruction, operand shapes) -> inferred result shape, or None when the rule
# checked the result itself (or it is unconstrained). Raise _Fail on an error.

Rule = Callable[["_Verifier", HloInstruction, list], Optional[Shape]]
_RULES: dict[str, Rule] = {}


def _rule(*opcodes: str) -> Callable[[Rule], Rule]:
    def register(fn: Rule) -> Rule:
        for op in opcodes:
            _RULES[op] = fn
        return fn
    return register


def _elementwise(ins: HloInstruction, ops: list, result_type: str, operand_type: Optional[str],
                 first_index: int = 0) -> None:
    """Elementwise operands against each other and the result: when the operands agree, the result must
    be their dims with `result_type`; otherwise each operand must have the result's dims (and
    `operand_type`, when given), and the first that does not is the error. `ops[0]` is operand
    `first_index` of the instruction."""
    res = ins.shape
    if res.tuple_shapes is not None:
        raise _Fail(f"result must be an array, got {_txt(res)}")
    first = ops[0]
    if all(o is first or (o.dtype == first.dtype and _dims_match(o, first)) for o in ops):
        if res.dtype != result_type or not _dims_match(first, res):
            raise _Fail(f"result shape is {_txt(res)}, expected {_txt(_array(result_type, first.dims, _dyn(first)))}")
        return
    for i, o in enumerate(ops, first_index):
        want = _array(operand_type or o.dtype, res.dims, _dyn(res))
        if not compatible(o, want):
            raise _Fail(f"operand {i} has shape {_txt(o)}, expected {_txt(want)}", ("operand", i))
    for i, o in enumerate(ops[1:], first_index + 1):
        if o.dtype != first.dtype:
            raise _Fail(f"operand {i} has element type {o.dtype}, operand {first_index} {first.dtype}",
                        ("operand", i))


_UNARY_TYPES: dict = {
    "floor": _FLOAT, "ceil": _FLOAT, "round-nearest-afz": _FLOAT, "round-nearest-even": _FLOAT,
    "erf": _FLOAT, "cbrt": _FLOAT,
    "cosine": _FLOAT | _COMPLEX, "sine": _FLOAT | _COMPLEX, "tan": _FLOAT | _COMPLEX,
    "exponential": _FLOAT | _COMPLEX, "exponential-minus-one": _FLOAT | _COMPLEX, "log": _FLOAT | _COMPLEX,
    "log-plus-one": _FLOAT | _COMPLEX, "logistic": _FLOAT | _COMPLEX, "rsqrt": _FLOAT | _COMPLEX,
    "sqrt": _FLOAT | _COMPLEX, "tanh": _FLOAT | _COMPLEX,
    "acos": _FLOAT | _COMPLEX, "acosh": _FLOAT | _COMPLEX, "asin": _FLOAT | _COMPLEX,
    "asinh": _FLOAT | _COMPLEX, "atan": _FLOAT | _COMPLEX, "atanh": _FLOAT | _COMPLEX,
    "cosh": _FLOAT | _COMPLEX, "sinh": _FLOAT | _COMPLEX,
    "count-leading-zeros": _INTEGRAL, "popcnt": _INTEGRAL,
    "negate": _NUMERIC, "sign": _SIGNED_INT | _FLOAT | _COMPLEX, "not": _INTEGRAL | {"pred"},
}


@_rule(*_UNARY_TYPES)
def _unary(v: "_Verifier", ins: HloInstruction, ops: list) -> Optional[Shape]:
    _count(ops, 1)
    _need_array(ops, 0)
    _need_type(ops, 0, _UNARY_TYPES[ins.opcode])
    _elementwise(ins, ops, ops[0].dtype, ins.shape.dtype)
    return None


@_rule("abs")
def _abs(v, ins, ops):
    _count(ops, 1)
    s = _need_array(ops, 0)
    _need_type(ops, 0, _SIGNED_INT | _FLOAT | _COMPLEX)
    return _array(_COMPLEX_PART.get(s.dtype, s.dtype), s.dims, _dyn(s))


@_rule("real", "imag")
def _real_imag(v, ins, ops):
    _count(ops, 1)
    s = _need_array(ops, 0)
    _need_type(ops, 0, _FLOAT | _COMPLEX)
    return _array(_COMPLEX_PART.get(s.dtype, s.dtype), s.dims, _dyn(s))


@_rule("is-finite")
def _is_finite(v, ins, ops):
    _count(ops, 1)
    s = _need_array(ops, 0)
    _need_type(ops, 0, _FLOAT)
    return _array("pred", s.dims, _dyn(s))


@_rule("copy", "domain", "opt-barrier")
def _same_as_operand(v, ins, ops):
    _count(ops, 1)
    return ops[0]


@_rule("reduce-precision")
def _reduce_precision(v, ins, ops):
    _count(ops, 1)
    _need_array(ops, 0)
    _need_type(ops, 0, _FLOAT)
    if _int_attr(ins, "exponent_bits") < 1:
        raise _Fail("exponent_bits must be at least 1", ("attr", "exponent_bits"))
    if _int_attr(ins, "mantissa_bits") < 0:
        raise _Fail("mantissa_bits must not be negative", ("attr", "mantissa_bits"))
    return ops[0]


@_rule("convert")
def _convert(v, ins, ops):
    _count(ops, 1)
    s = _need_array(ops, 0)
    out = ins.shape.dtype
    if out not in _ARRAY_TYPES:
        raise _Fail(f"cannot convert to {out}")
    if s.dtype in _COMPLEX and out not in _COMPLEX:
        raise _Fail(f"conversion from complex {s.dtype} to real {out} is not defined (use real/imag)")
    return _array(out, s.dims, _dyn(s))


@_rule("bitcast-convert")
def _bitcast_convert(v, ins, ops):
    _count(ops, 1)
    s = _need_array(ops, 0)
    out = ins.shape.dtype
    if out not in _ARRAY_TYPES:
        raise _Fail(f"cannot bitcast-convert to {out}")
    if (s.dtype in _COMPLEX) != (out in _COMPLEX):
        raise _Fail(f"bitcast-convert between complex and real types ({s.dtype} to {out})")
    a, b = _BITS[s.dtype], _BITS[out]
    if max(a, b) % min(a, b):
        raise _Fail(f"bitcast-convert between {a}-bit {s.dtype} and {b}-bit {out}: widths do not divide")
    if a == b:
        return _array(out, s.dims, _dyn(s))
    if a > b:
        return _array(out, s.dims + (a // b,), _dyn(s) + (False,))
    if not s.dims or s.dims[-1] != b // a:
        raise _Fail(f"bitcast-convert from {s.dtype} to {out} needs a last operand dimension of {b // a}, "
                    f"got {_txt(s)}", ("operand", 0))
    return _array(out, s.dims[:-1], _dyn(s)[:-1])


@_rule("stochastic-convert")
def _stochastic_convert(v, ins, ops):
    _count(ops, 2)
    s = _need_array(ops, 0)
    r = _need_array(ops, 1)
    _need_type(ops, 0, _FLOAT)
    _need_type(ops, 1, _UNSIGNED_INT)
    if _BITS[s.dtype] != _BITS[r.dtype]:
        raise _Fail(f"random operand {_txt(r)} must have as many bits as {s.dtype}", ("operand", 1))
    if not _dims_match(s, r):
        raise _Fail(f"operand 1 has shape {_txt(r)}, expected the dims of {_txt(s)}", ("operand", 1))
    return _array(ins.shape.dtype, s.dims, _dyn(s))


_BINARY_TYPES = {
    "add": _ARRAY_TYPES, "multiply": _ARRAY_TYPES, "maximum": _ARRAY_TYPES, "minimum": _ARRAY_TYPES,
    "subtract": _NUMERIC, "divide": _NUMERIC, "remainder": _NUMERIC, "power": _NUMERIC,
    "atan2": _FLOAT | _COMPLEX, "shift-left": _INTEGRAL, "shift-right-arithmetic": _INTEGRAL,
    "shift-right-logical": _INTEGRAL, "and": _INTEGRAL | {"pred"}, "or": _INTEGRAL | {"pred"},
    "xor": _INTEGRAL | {"pred"}, "mulhi": _INTEGRAL,
}


@_rule(*_BINARY_TYPES)
def _binary(v, ins, ops):
    _count(ops, 2)
    _need_array(ops, 0)
    _need_array(ops, 1)
    _need_type(ops, 0, _BINARY_TYPES[ins.opcode])
    _elementwise(ins, ops, ops[0].dtype, ins.shape.dtype)
    return None


_DIRECTIONS = ("EQ", "NE", "LT", "LE", "GT", "GE")


@_rule("compare")
def _compare(v, ins, ops):
    _count(ops, 2)
    a = _need_array(ops, 0)
    b = _need_array(ops, 1)
    _enum_attr(ins, "direction", _DIRECTIONS)
    if "type" in ins.attrs:
        _enum_attr(ins, "type", ("FLOAT", "TOTALORDER", "SIGNED", "UNSIGNED"))
    if a.dtype != b.dtype:
        raise _Fail(f"operand 1 has element type {b.dtype}, operand 0 {a.dtype}", ("operand", 1))
    _elementwise(ins, ops, "pred", None)
    return None


@_rule("complex")
def _complex(v, ins, ops):
    _count(ops, 2)
    a = _need_array(ops, 0)
    _need_array(ops, 1)
    if a.dtype not in ("f32", "f64"):
        raise _Fail(f"operand 0 has element type {a.dtype}, expected f32 or f64", ("operand", 0))
    _elementwise(ins, ops, "c64" if a.dtype == "f32" else "c128", a.dtype)
    return None


@_rule("select")
def _select(v, ins, ops):
    _count(ops, 3)
    for i in range(3):
        _need_array(ops, i)
    if ops[0].dtype != "pred":
        raise _Fail(f"operand 0 has element type {ops[0].dtype}, expected pred", ("operand", 0))
    _elementwise(ins, ops[1:], ops[1].dtype, ins.shape.dtype, first_index=1)
    if not _dims_match(ops[0], ins.shape):
        want = _array("pred", ins.shape.dims, _dyn(ins.shape))
        raise _Fail(f"operand 0 has shape {_txt(ops[0])}, expected {_txt(want)}", ("operand", 0))
    return None


@_rule("clamp")
def _clamp(v, ins, ops):
    _count(ops, 3)
    for i in range(3):
        _need_array(ops, i)
    x = ops[1]
    _need_type(ops, 1, _ARRAY_TYPES)
    for i in (0, 2):
        b = ops[i]
        if b.dtype != x.dtype or (b.rank != 0 and not _dims_match(b, x)):
            raise _Fail(f"operand {i} has shape {_txt(b)}, expected {x.dtype}[] or {_txt(x)}", ("operand", i))
    return x


@_rule("broadcast")
def _broadcast(v, ins, ops):
    _count(ops, 1)
    s = _need_array(ops, 0)
    res = ins.shape
    dims = _int_list(ins, "dimensions", () if s.rank == 0 else None)
    if len(dims) != s.rank:
        raise _Fail(f"dimensions has {len(dims)} entries, the operand has rank {s.rank}", ("attr", "dimensions"))
    if res.tuple_shapes is not None:
        raise _Fail(f"result must be an array, got {_txt(res)}")
    _dims_in_range(dims, res.rank, "dimensions", what=f"result rank {res.rank}")
    ry = _dyn(res)
    for i, d in enumerate(dims):
        if s.dims[i] != res.dims[d] and not (_dyn(s)[i] or ry[d]):
            raise _Fail(f"operand dimension {i} (size {s.dims[i]}) is broadcast into result dimension {d} "
                        f"of size {res.dims[d]} ({_txt(s)} to {_txt(res)})", ("attr", "dimensions"))
    if res.dtype != s.dtype:
        raise _Fail(f"result shape is {_txt(res)}, expected element type {s.dtype}")
    return None


@_rule("reshape", "bitcast")
def _reshape(v, ins, ops):
    _count(ops, 1)
    s = ops[0]
    res = ins.shape
    if ins.opcode == "bitcast":  # a reinterpretation: same number of bits (layouts aside)
        if s.tuple_shapes is not None or res.tuple_shapes is not None:
            if not compatible(s, res):
                raise _Fail(f"bitcast of tuple {_txt(s)} to {_txt(res)}")
            return None
        a, b = _elements(s), _elements(res)
        if a is not None and b is not None and a * _BITS.get(s.dtype, 0) != b * _BITS.get(res.dtype, 0):
            raise _Fail(f"bitcast changes the size: {_txt(s)} to {_txt(res)}")
        return None
    _need_array(ops, 0)
    if res.tuple_shapes is not None:
        raise _Fail(f"result must be an array, got {_txt(res)}")
    if res.dtype != s.dtype and not (v.mixed_precision and res.dtype in _FLOAT and s.dtype in _FLOAT):
        raise _Fail(f"result shape is {_txt(res)}, expected element type {s.dtype}")
    a, b = _elements(s), _elements(res)
    if a is not None and b is not None and a != b and not (any(_dyn(s)) or any(_dyn(res))):
        raise _Fail(f"reshape changes the element count: {_txt(s)} ({a} elements) to {_txt(res)} "
                    f"({b} elements)")
    return None


@_rule("dynamic-reshape")
def _dynamic_reshape(v, ins, ops):
    _count(ops, 1, None)
    s = _need_array(ops, 0)
    res = ins.shape
    if res.tuple_shapes is not None or res.dtype != s.dtype:
        raise _Fail(f"result shape is {_txt(res)}, expected an array of {s.dtype}")
    if len(ops) != 1 + res.rank:
        raise _Fail(f"expects {1 + res.rank} operands (the operand and one size per result dimension), "
                    f"got {len(ops)}")
    for i in range(1, len(ops)):
        _expect_operand(ops, i, _scalar("s32"))
    return None


@_rule("transpose")
def _transpose(v, ins, ops):
    _count(ops, 1)
    s = _need_array(ops, 0)
    perm = _int_list(ins, "dimensions")
    if sorted(perm) != list(range(s.rank)):
        raise _Fail(f"dimensions {{{','.join(map(str, perm))}}} is not a permutation of the operand's "
                    f"{s.rank} dimensions", ("attr", "dimensions"))
    y = _dyn(s)
    return _array(s.dtype, [s.dims[p] for p in perm], [y[p] for p in perm])


@_rule("reverse")
def _reverse(v, ins, ops):
    _count(ops, 1)
    s = _need_array(ops, 0)
    _dims_in_range(_int_list(ins, "dimensions"), s.rank, "dimensions")
    return s


@_rule("slice")
def _slice(v, ins, ops):
    _count(ops, 1)
    s = _need_array(ops, 0)
    sl = ins.parsed.get("slice")
    if sl is None:
        raise _Fail("needs attribute slice={[start:limit:stride], ...}")
    if len(sl) != s.rank:
        raise _Fail(f"slice has {len(sl)} dimensions, the operand has rank {s.rank}", ("attr", "slice"))
    out = []
    for i, d in enumerate(sl):
        n = s.dims[i]
        if d.stride <= 0 or d.start < 0 or d.start > d.limit or (n >= 0 and d.limit > n):
            raise _Fail(f"slice dimension {i} [{d.start}:{d.limit}:{d.stride}] is out of bounds for size {n}",
                        ("attr", "slice"))
        out.append((d.limit - d.start + d.stride - 1) // d.stride)
    y = _dyn(s)
    return _array(s.dtype, out, [y[i] and out[i] != 1 for i in range(len(out))])


def _index_operands(ops: list, first: int, rank: int, what: str) -> None:
    """Start indices: one integral scalar per dimension (or the old single rank-1 vector form)."""
    idx = ops[first:]
    if len(idx) == 1 and idx[0].tuple_shapes is None and idx[0].rank == 1:
        if idx[0].dtype not in _INTEGRAL or idx[0].dims[0] != rank:
            raise _Fail(f"operand {first} has shape {_txt(idx[0])}, expected s32[{rank}]", ("operand", first))
        return
    if len(idx) != rank:
        raise _Fail(f"expects {first + rank} operands ({what} and {rank} start indices), got {len(ops)}")
    for k, s in enumerate(idx):
        i = first + k
        if s.tuple_shapes is not None or s.rank != 0 or s.dtype not in _INTEGRAL:
            raise _Fail(f"operand {i} (a start index) has shape {_txt(s)}, expected an integral scalar",
                        ("operand", i))
        if s.dtype != idx[0].dtype:
            raise _Fail(f"operand {i} has shape {_txt(s)}, expected {idx[0].dtype}[] like operand {first}",
                        ("operand", i))


@_rule("dynamic-slice")
def _dynamic_slice(v, ins, ops):
    _count(ops, 1, None)
    s = _need_array(ops, 0)
    _index_operands(ops, 1, s.rank, "the operand")
    sizes = _int_list(ins, "dynamic_slice_sizes")
    if len(sizes) != s.rank:
        raise _Fail(f"dynamic_slice_sizes has {len(sizes)} entries, the operand has rank {s.rank}",
                    ("attr", "dynamic_slice_sizes"))
    for i, n in enumerate(sizes):
        if n < 0 or (s.dims[i] >= 0 and n > s.dims[i]):
            raise _Fail(f"dynamic_slice_sizes[{i}] = {n} is out of bounds for size {s.dims[i]}",
                        ("attr", "dynamic_slice_sizes"))
    return _array(s.dtype, sizes)


@_rule("dynamic-update-slice")
def _dynamic_update_slice(v, ins, ops):
    _count(ops, 2, None)
    s = _need_array(ops, 0)
    u = _need_array(ops, 1)
    _index_operands(ops, 2, s.rank, "the operand, the update")
    if u.rank != s.rank or u.dtype != s.dtype:
        raise _Fail(f"operand 1 (the update) has shape {_txt(u)}, expected rank {s.rank} of {s.dtype}",
                    ("operand", 1))
    for i in range(s.rank):
        if s.dims[i] >= 0 and u.dims[i] > s.dims[i]:
            raise _Fail(f"operand 1 (the update) has shape {_txt(u)}, larger than the operand {_txt(s)} "
                        f"in dimension {i}", ("operand", 1))
    return s


@_rule("concatenate")
def _concatenate(v, ins, ops):
    _count(ops, 1, None)
    dims = _int_list(ins, "dimensions")
    first = _need_array(ops, 0)
    if len(dims) != 1 or not 0 <= dims[0] < first.rank:
        raise _Fail(f"dimensions must name one dimension of the rank-{first.rank} operands",
                    ("attr", "dimensions"))
    d = dims[0]
    total = 0
    dyn = list(_dyn(first))
    for i, s in enumerate(ops):
        _need_array(ops, i)
        if s.dtype != first.dtype or s.rank != first.rank or any(
                s.dims[k] != first.dims[k] and not (_dyn(s)[k] or _dyn(first)[k])
                for k in range(first.rank) if k != d):
            want = list(first.dims)
            want[d] = s.dims[d] if s.rank == first.rank else want[d]
            raise _Fail(f"operand {i} has shape {_txt(s)}, expected {_txt(_array(first.dtype, want))} "
                        f"(all dimensions but {d} as operand 0)", ("operand", i))
        total = -1 if total < 0 or s.dims[d] < 0 else total + s.dims[d]
        dyn[d] = dyn[d] or _dyn(s)[d]
    out = list(first.dims)
    out[d] = total
    dyn[d] = dyn[d] or total < 0
    return _array(first.dtype, out, dyn)


@_rule("pad")
def _pad(v, ins, ops):
    _count(ops, 2)
    s = _need_array(ops, 0)
    p = ops[1]
    if p.tuple_shapes is not None or p.rank != 0 or p.dtype != s.dtype:
        raise _Fail(f"operand 1 (the padding value) has shape {_txt(p)}, expected {s.dtype}[]", ("operand", 1))
    cfg = ins.parsed.get("padding")
    if cfg is None:
        raise _Fail("needs attribute padding=lo_hi[_interior]x...")
    if len(cfg) != s.rank:
        raise _Fail(f"padding has {len(cfg)} dimensions, the operand has rank {s.rank}", ("attr", "padding"))
    out = []
    for i, c in enumerate(cfg):
        n = s.dims[i]
        if c.interior < 0:
            raise _Fail(f"padding dimension {i}: interior padding {c.interior} is negative", ("attr", "padding"))
        if n < 0:
            out.append(-1)
            continue
        size = n + c.lo + c.hi + max(n - 1, 0) * c.interior
        if size < 0:
            raise _Fail(f"padding dimension {i} gives a negative size ({size})", ("attr", "padding"))
        out.append(size)
    return _array(s.dtype, out, _dyn(s))


@_rule("iota")
def _iota(v, ins, ops):
    _count(ops, 0)
    res = ins.shape
    if res.tuple_shapes is not None or res.dtype not in _ARRAY_TYPES or res.rank == 0:
        raise _Fail(f"result must be an array of rank 1 or more, got {_txt(res)}")
    d = _int_attr(ins, "iota_dimension")
    if not 0 <= d < res.rank:
        raise _Fail(f"iota_dimension {d} is out of range for rank {res.rank}", ("attr", "iota_dimension"))
    return None


def _same_dims_arrays(ops: list, n: int) -> Shape:
    """The first `n` operands: arrays with the dims of operand 0 (element types may differ)."""
    first = _need_array(ops, 0)
    for i in range(1, n):
        _need_array(ops, i)
        if not _dims_match(ops[i], first):
            raise _Fail(f"operand {i} has shape {_txt(ops[i])}, expected the dims of {_txt(first)}", ("operand", i))
    return first


def _inputs_and_inits(ops: list) -> tuple:
    """Reduce-like operands: N arrays of equal dims, then N init values; returns (N, operand 0)."""
    if len(ops) < 2 or len(ops) % 2:
        raise _Fail(f"expects an even number of operands (inputs, then init values), got {len(ops)}")
    n = len(ops) // 2
    return n, _same_dims_arrays(ops, n)


@_rule("reduce")
def _reduce(v, ins, ops):
    n, first = _inputs_and_inits(ops)
    dims = _int_list(ins, "dimensions")
    _dims_in_range(dims, first.rank, "dimensions")
    accs = _reducer(v.signature(ins.parsed["to_apply"]), ops[n:], [o.dtype for o in ops[:n]], "to_apply")
    keep = [i for i in range(first.rank) if i not in dims]
    y = _dyn(first)
    outs = [_array(a.dtype, [first.dims[i] for i in keep], [y[i] for i in keep]) for a in accs]
    return outs[0] if n == 1 else _tuple(outs)


@_rule("reduce-window")
def _reduce_window(v, ins, ops):
    n, first = _inputs_and_inits(ops)
    accs = _reducer(v.signature(ins.parsed["to_apply"]), ops[n:], [o.dtype for o in ops[:n]], "to_apply")
    window = ins.parsed.get("window")
    if window is None:
        raise _Fail("needs attribute window={...}")
    outs = [_window_output(first, window, a.dtype) for a in accs]
    return outs[0] if n == 1 else _tuple(outs)


@_rule("select-and-scatter")
def _select_and_scatter(v, ins, ops):
    _count(ops, 3)
    s = _need_array(ops, 0)
    src = _need_array(ops, 1)
    sel = v.signature(ins.parsed["select"])
    elem = _scalar(s.dtype)
    if len(sel.params) != 2 or not all(compatible(p, elem) for p in sel.params) \
            or not compatible(sel.result, _scalar("pred")):
        raise _Fail(f"select computation '{sel.name}' is {sel.text()}, expected ({s.dtype}[], {s.dtype}[]) -> "
                    f"pred[]", ("attr", "select"))
    _reducer(v.signature(ins.parsed["scatter"]), [ops[2]], [src.dtype], "scatter")
    window = ins.parsed.get("window")
    if window is None:
        raise _Fail("needs attribute window={...}")
    expect = _window_output(s, window, src.dtype)
    if not compatible(src, expect):
        raise _Fail(f"operand 1 (the source) has shape {_txt(src)}, expected {_txt(expect)} (the windowed "
                    f"operand)", ("operand", 1))
    return s


def _dot_dims(ins: HloInstruction, lhs: Shape, rhs: Shape) -> tuple:
    lc = _int_list(ins, "lhs_contracting_dims", ())
    rc = _int_list(ins, "rhs_contracting_dims", ())
    lb = _int_list(ins, "lhs_batch_dims", ())
    rb = _int_list(ins, "rhs_batch_dims", ())
    _dims_in_range(lc, lhs.rank, "lhs_contracting_dims", what=f"lhs {_txt(lhs)}")
    _dims_in_range(rc, rhs.rank, "rhs_contracting_dims", what=f"rhs {_txt(rhs)}")
    _dims_in_range(lb, lhs.rank, "lhs_batch_dims", what=f"lhs {_txt(lhs)}")
    _dims_in_range(rb, rhs.rank, "rhs_batch_dims", what=f"rhs {_txt(rhs)}")
    if set(lc) & set(lb):
        raise _Fail("a dimension is both contracting and batch in the lhs", ("attr", "lhs_batch_dims"))
    if set(rc) & set(rb):
        raise _Fail("a dimension is both contracting and batch in the rhs", ("attr", "rhs_batch_dims"))
    if len(lc) != len(rc):
        raise _Fail(f"{len(lc)} lhs and {len(rc)} rhs contracting dimensions", ("attr", "rhs_contracting_dims"))
    if len(lb) != len(rb):
        raise _Fail(f"{len(lb)} lhs and {len(rb)} rhs batch dimensions", ("attr", "rhs_batch_dims"))
    ly, ry = _dyn(lhs), _dyn(rhs)
    for a, b in zip(lc, rc):
        if lhs.dims[a] != rhs.dims[b] and not (ly[a] or ry[b]):
            raise _Fail(f"contracting dimension sizes differ: lhs {_txt(lhs)} dimension {a} is {lhs.dims[a]}, "
                        f"rhs {_txt(rhs)} dimension {b} is {rhs.dims[b]}", ("attr", "rhs_contracting_dims"))
    for a, b in zip(lb, rb):
        if lhs.dims[a] != rhs.dims[b] and not (ly[a] or ry[b]):
            raise _Fail(f"batch dimension sizes differ: lhs {_txt(lhs)} dimension {a} is {lhs.dims[a]}, "
                        f"rhs {_txt(rhs)} dimension {b} is {rhs.dims[b]}", ("attr", "rhs_batch_dims"))
    return lc, rc, lb, rb


def _dot_result(ins: HloInstruction, lhs: Shape, rhs: Shape, rhs_skip: Sequence[int] = ()) -> tuple:
    lc, rc, lb, rb = _dot_dims(ins, lhs, rhs)
    ly, ry = _dyn(lhs), _dyn(rhs)
    dims = [lhs.dims[d] for d in lb]
    dyn = [ly[d] for d in lb]
    for i in range(lhs.rank):
        if i not in lc and i not in lb:
            dims.append(lhs.dims[i])
            dyn.append(ly[i])
    for i in range(rhs.rank):
        if i not in rc and i not in rb and i not in rhs_skip:
            dims.append(rhs.dims[i])
            dyn.append(ry[i])
    return dims, dyn


def _dot_types(ins: HloInstruction, lhs: Shape, rhs: Shape) -> None:
    if lhs.dtype != rhs.dtype and not (lhs.dtype in _FLOAT and rhs.dtype in _FLOAT):
        raise _Fail(f"operand 1 has element type {rhs.dtype}, operand 0 {lhs.dtype}", ("operand", 1))
    out = ins.shape.dtype
    if out not in _ARRAY_TYPES:
        raise _Fail(f"result must be an array, got {_txt(ins.shape)}")


@_rule("dot")
def _dot(v, ins, ops):
    if "sparsity" in ins.attrs:  # sparse dot: metadata operands, shapes as the dense dot
        _count(ops, 2, 4)
    else:
        _count(ops, 2)
    lhs = _need_array(ops, 0)
    rhs = _need_array(ops, 1)
    _dot_types(ins, lhs, rhs)
    if "sparsity" in ins.attrs:
        return None
    dims, dyn = _dot_result(ins, lhs, rhs)
    return _array(ins.shape.dtype, dims, dyn)


@_rule("scaled-dot")
def _scaled_dot(v, ins, ops):
    _count(ops, 4, 6)  # lhs, rhs, lhs_scale, rhs_scale[, global scales]
    lhs = _need_array(ops, 0)
    rhs = _need_array(ops, 1)
    _need_array(ops, 2)
    _need_array(ops, 3)
    dims, dyn = _dot_result(ins, lhs, rhs)
    return _array(ins.shape.dtype, dims, dyn)


@_rule("ragged-dot")
def _ragged_dot(v, ins, ops):
    _count(ops, 3)
    lhs = _need_array(ops, 0)
    rhs = _need_array(ops, 1)
    groups = _need_array(ops, 2)
    _need_type(ops, 2, _INTEGRAL)
    _dot_types(ins, lhs, rhs)
    ragged = _int_list(ins, "lhs_ragged_dims")
    group_dims = _int_list(ins, "rhs_group_dims", ())
    _dims_in_range(ragged, lhs.rank, "lhs_ragged_dims")
    _dims_in_range(group_dims, rhs.rank, "rhs_group_dims")
    if len(ragged) != 1:
        raise _Fail("lhs_ragged_dims must name one dimension", ("attr", "lhs_ragged_dims"))
    lc = _int_list(ins, "lhs_contracting_dims", ())
    lb = _int_list(ins, "lhs_batch_dims", ())
    if not groups.dims:
        raise _Fail(f"operand 2 (group sizes) has shape {_txt(groups)}, expected a rank >= 1 array", ("operand", 2))
    if ragged[0] in lc:  # ragged contracting: one result per group
        dims, dyn = _dot_result(ins, lhs, rhs)
        return _array(ins.shape.dtype, [groups.dims[-1]] + dims, [False] + dyn)
    if ragged[0] not in lb and len(group_dims) != 1:
        raise _Fail("rhs_group_dims must name one dimension", ("attr", "rhs_group_dims"))
    dims, dyn = _dot_result(ins, lhs, rhs, group_dims if ragged[0] not in lb else ())
    return _array(ins.shape.dtype, dims, dyn)


@functools.lru_cache(maxsize=256)
def _dim_labels_problem(raw: str, n: int, lhs_rank: int, rhs_rank: int, out_rank: int) -> str:
    """What is wrong with convolution dim_labels for these ranks ('' if nothing; -1: not an array)."""
    for part, rank, what in zip(re.split(r"_|->", raw), (lhs_rank, rhs_rank, out_rank), ("input", "kernel", "output")):
        if rank >= 0 and len(part) != rank:
            return f"dim_labels {raw}: {what} labels '{part}' for a rank-{rank} {what}"
        if len(set(part)) != len(part) or sorted(c for c in part if c.isdigit()) != [str(i) for i in range(n)]:
            return f"dim_labels {raw}: {what} labels '{part}' must name each dimension once"
    return ""


@_rule("convolution")
def _convolution(v, ins, ops):
    _count(ops, 2)
    lhs = _need_array(ops, 0)
    rhs = _need_array(ops, 1)
    _dot_types(ins, lhs, rhs)
    labels = ins.parsed.get("dim_labels")
    window = ins.parsed.get("window") or ()
    if labels is None:
        sp = tuple(range(2, lhs.rank))
        labels = ConvDimLabels(0, 1, sp, 1, 0, sp, 0, 1, sp)
        raw = ""
    else:
        raw = ins.attrs["dim_labels"]
    n = len(labels.lhs_spatial)
    where = ("attr", "dim_labels")
    if raw:
        problem = _dim_labels_problem(raw, n, lhs.rank, rhs.rank, -1 if ins.shape.tuple_shapes else ins.shape.rank)
        if problem:
            raise _Fail(problem, where)
    if not (len(labels.kernel_spatial) == len(labels.out_spatial) == n) or lhs.rank != n + 2 or rhs.rank != n + 2:
        raise _Fail(f"dim_labels for {n} spatial dimensions, operands {_txt(lhs)} and {_txt(rhs)}", where)
    if len(window) != n:
        raise _Fail(f"window has {len(window)} dimensions, the convolution has {n} spatial dimensions",
                    ("attr", "window"))
    fgc = _int_attr(ins, "feature_group_count", 1)
    bgc = _int_attr(ins, "batch_group_count", 1)
    if fgc <= 0:
        raise _Fail(f"feature_group_count must be positive, got {fgc}", ("attr", "feature_group_count"))
    if bgc <= 0:
        raise _Fail(f"batch_group_count must be positive, got {bgc}", ("attr", "batch_group_count"))
    if fgc > 1 and bgc > 1:
        raise _Fail("feature_group_count and batch_group_count cannot both exceed 1", ("attr", "batch_group_count"))
    in_f, batch = lhs.dims[labels.lhs_feature], lhs.dims[labels.lhs_batch]
    k_in, k_out = rhs.dims[labels.kernel_input_feature], rhs.dims[labels.kernel_output_feature]
    if in_f >= 0 and k_in >= 0 and (in_f % fgc or in_f // fgc != k_in):
        raise _Fail(f"input features {in_f} / feature_group_count {fgc} must equal the kernel's input features "
                    f"{k_in} ({_txt(lhs)}, {_txt(rhs)})", ("operand", 1))
    if k_out >= 0 and (k_out % fgc or k_out % bgc):
        raise _Fail(f"kernel output features {k_out} must be a multiple of the group counts ({_txt(rhs)})",
                    ("operand", 1))
    if batch >= 0 and batch % bgc:
        raise _Fail(f"input batch {batch} must be a multiple of batch_group_count {bgc}", ("operand", 0))
    for i in range(n):
        ks = rhs.dims[labels.kernel_spatial[i]]
        if ks != window[i].size and ks >= 0:
            raise _Fail(f"window size {window[i].size} in spatial dimension {i} does not match the kernel "
                        f"{_txt(rhs)} (size {ks})", ("attr", "window"))
    base = _array(lhs.dtype, [lhs.dims[d] for d in labels.lhs_spatial], [_dyn(lhs)[d] for d in labels.lhs_spatial])
    spatial = _window_output(base, window, lhs.dtype)
    for i in range(n):  # what the cost analysis can count (analysis._valid_positions)
        if min(window[i].size, spatial.dims[i]) > CONV_POSITIONS_LIMIT:
            raise _Fail(f"spatial dimension {i} has {window[i].size} window and {spatial.dims[i]} output positions; "
                        f"at most {CONV_POSITIONS_LIMIT} on one side can be analyzed", ("attr", "window"))
    out = [0] * (n + 2)
    dyn = [False] * (n + 2)
    out[labels.out_batch] = batch // bgc if batch >= 0 else -1
    dyn[labels.out_batch] = batch < 0 or _dyn(lhs)[labels.lhs_batch]
    out[labels.out_feature] = k_out
    for i in range(n):
        out[labels.out_spatial[i]] = spatial.dims[i]
        dyn[labels.out_spatial[i]] = spatial.dynamic[i] or _dyn(rhs)[labels.kernel_spatial[i]]
    return _array(ins.shape.dtype, out, dyn)


@_rule("fft")
def _fft(v, ins, ops):
    _count(ops, 1)
    s = _need_array(ops, 0)
    kind = _enum_attr(ins, "fft_type", ("FFT", "IFFT", "RFFT", "IRFFT"))
    length = _int_list(ins, "fft_length")
    r = len(length)
    if not 1 <= r <= 3:
        raise _Fail(f"fft_length has {r} entries, expected 1 to 3", ("attr", "fft_length"))
    if s.rank < r:
        raise _Fail(f"an FFT of rank {r} needs an operand of rank >= {r}, got {_txt(s)}", ("operand", 0))
    inner = s.dims[s.rank - r:]
    if kind in ("FFT", "IFFT"):
        _need_type(ops, 0, _COMPLEX)
        return s
    if kind == "RFFT":
        if s.dtype not in ("f32", "f64"):
            raise _Fail(f"operand 0 has element type {s.dtype}, RFFT needs f32 or f64", ("operand", 0))
        if tuple(inner) != tuple(length):
            raise _Fail(f"RFFT: the operand's last dimensions {list(inner)} must equal fft_length "
                        f"{list(length)}", ("attr", "fft_length"))
        dims = list(s.dims)
        if length[-1]:
            dims[-1] = length[-1] // 2 + 1
        return _array("c64" if s.dtype == "f32" else "c128", dims, _dyn(s))
    _need_type(ops, 0, _COMPLEX)
    if tuple(inner[:-1]) != tuple(length[:-1]) or ((inner[-1] or length[-1]) and inner[-1] != length[-1] // 2 + 1):
        raise _Fail(f"IRFFT: the operand's last dimensions {list(inner)} do not fit fft_length {list(length)}",
                    ("attr", "fft_length"))
    dims = list(s.dims)
    dims[-1] = length[-1]
    return _array(_COMPLEX_PART[s.dtype], dims, _dyn(s))


@_rule("cholesky")
def _cholesky(v, ins, ops):
    _count(ops, 1)
    a = _need_array(ops, 0)
    _need_type(ops, 0, _FLOAT | _COMPLEX)
    if a.rank < 2 or a.dims[-1] != a.dims[-2]:
        raise _Fail(f"operand 0 has shape {_txt(a)}, expected square matrices in the last two dimensions",
                    ("operand", 0))
    return a


@_rule("triangular-solve")
def _triangular_solve(v, ins, ops):
    _count(ops, 2)
    a = _need_array(ops, 0)
    b = _need_array(ops, 1)
    _need_type(ops, 0, _FLOAT | _COMPLEX)
    if a.dtype != b.dtype:
        raise _Fail(f"operand 1 has element type {b.dtype}, operand 0 {a.dtype}", ("operand", 1))
    if a.rank < 2 or a.dims[-1] != a.dims[-2]:
        raise _Fail(f"operand 0 has shape {_txt(a)}, expected square matrices in the last two dimensions",
                    ("operand", 0))
    if b.rank != a.rank or b.dims[:-2] != a.dims[:-2]:
        raise _Fail(f"operand 1 has shape {_txt(b)}, expected rank {a.rank} with batch dimensions "
                    f"{list(a.dims[:-2])}", ("operand", 1))
    left = ins.attrs.get("left_side", "false") == "true"
    if a.dims[-1] != b.dims[-2 if left else -1]:
        raise _Fail(f"operand 1 has shape {_txt(b)}, its {'rows' if left else 'columns'} must match "
                    f"{_txt(a)}", ("operand", 1))
    if "transpose_a" in ins.attrs:
        _enum_attr(ins, "transpose_a", ("NO_TRANSPOSE", "TRANSPOSE", "ADJOINT"))
    return b


def _index_vector(ins: HloInstruction, idx: Shape, operand: int) -> tuple[int, list[int]]:
    """Gather/scatter indices: integral, `index_vector_dim` in range; (that dim, the indices' dims with
    an implicit trailing 1 when the index vector dimension is the rank)."""
    if idx.dtype not in _INTEGRAL:
        raise _Fail(f"operand {operand} (the indices) has element type {idx.dtype}, expected an integral type",
                    ("operand", operand))
    ivd = _int_attr(ins, "index_vector_dim")
    if not 0 <= ivd <= idx.rank:
        raise _Fail(f"index_vector_dim {ivd} is out of range for indices of rank {idx.rank}",
                    ("attr", "index_vector_dim"))
    return ivd, list(idx.dims) + ([1] if ivd == idx.rank else [])


def _gather_check(ins: HloInstruction, operand: Shape, idx: Shape) -> Shape:
    """XLA's InferGatherShape (with operand/start-indices batching dims)."""
    ivd, expanded = _index_vector(ins, idx, 1)
    offset = _int_list(ins, "offset_dims", ())
    collapsed = _int_list(ins, "collapsed_slice_dims", ())
    start_map = _int_list(ins, "start_index_map", ())
    obatch = _int_list(ins, "operand_batching_dims", ())
    ibatch = _int_list(ins, "start_indices_batching_dims", ())
    sizes = _int_list(ins, "slice_sizes")
    out_rank = len(offset) + len(expanded) - 1
    _sorted_unique(offset, "offset_dims")
    _dims_in_range(offset, out_rank, "offset_dims", what=f"the result rank {out_rank}")
    _sorted_unique(collapsed, "collapsed_slice_dims")
    _dims_in_range(collapsed, operand.rank, "collapsed_slice_dims")
    _sorted_unique(obatch, "operand_batching_dims")
    _dims_in_range(obatch, operand.rank, "operand_batching_dims")
    _dims_in_range(ibatch, len(expanded), "start_indices_batching_dims")
    if ivd in ibatch:
        raise _Fail("start_indices_batching_dims contains index_vector_dim", ("attr", "start_indices_batching_dims"))
    if len(obatch) != len(ibatch):
        raise _Fail("operand_batching_dims and start_indices_batching_dims differ in length",
                    ("attr", "operand_batching_dims"))
    if set(collapsed) & set(obatch):
        raise _Fail("a dimension is both collapsed and batching", ("attr", "operand_batching_dims"))
    if expanded[ivd] != len(start_map):
        raise _Fail(f"start_index_map has {len(start_map)} entries, the indices' index_vector_dim {ivd} has "
                    f"size {expanded[ivd]}", ("attr", "start_index_map"))
    _dims_in_range(start_map, operand.rank, "start_index_map")
    if set(start_map) & set(obatch):
        raise _Fail("start_index_map names a batching dimension", ("attr", "start_index_map"))
    if len(sizes) != operand.rank:
        raise _Fail(f"slice_sizes has {len(sizes)} entries, the operand has rank {operand.rank}",
                    ("attr", "slice_sizes"))
    if len(sizes) != len(offset) + len(collapsed) + len(obatch):
        raise _Fail(f"offset_dims ({len(offset)}) + collapsed_slice_dims ({len(collapsed)}) + "
                    f"operand_batching_dims ({len(obatch)}) must equal the operand rank {operand.rank}",
                    ("attr", "offset_dims"))
    for i, n in enumerate(sizes):
        if n < 0 or (operand.dims[i] >= 0 and n > operand.dims[i]):
            raise _Fail(f"slice_sizes[{i}] = {n} is out of bounds for size {operand.dims[i]}", ("attr", "slice_sizes"))
    for d in list(collapsed) + list(obatch):
        if sizes[d] > 1:
            raise _Fail(f"slice_sizes[{d}] = {sizes[d]}: a collapsed or batching dimension needs size 0 or 1",
                        ("attr", "slice_sizes"))
    window = [sizes[i] for i in range(operand.rank) if i not in collapsed and i not in obatch]
    batch = [expanded[i] for i in range(len(expanded)) if i != ivd]
    out: list = []
    wi = bi = 0
    for i in range(out_rank):
        if i in offset:
            out.append(window[wi])
            wi += 1
        else:
            out.append(batch[bi])
            bi += 1
    return _array(operand.dtype, out)


@_rule("gather")
def _gather(v, ins, ops):
    _count(ops, 2)
    operand = _need_array(ops, 0)
    idx = _need_array(ops, 1)
    return _gather_check(ins, operand, idx)


@_rule("scatter")
def _scatter(v, ins, ops):
    if len(ops) < 3 or len(ops) % 2 == 0:
        raise _Fail(f"expects 2N+1 operands (N operands, the indices, N updates), got {len(ops)}")
    n = len(ops) // 2
    idx = _need_array(ops, n)
    ivd, expanded = _index_vector(ins, idx, n)
    uwd = _int_list(ins, "update_window_dims", ())
    iwd = _int_list(ins, "inserted_window_dims", ())
    s2o = _int_list(ins, "scatter_dims_to_operand_dims", ())
    obatch = _int_list(ins, "input_batching_dims", ())
    ibatch = _int_list(ins, "scatter_indices_batching_dims", ())
    _sorted_unique(uwd, "update_window_dims")
    _sorted_unique(iwd, "inserted_window_dims")
    _sorted_unique(obatch, "input_batching_dims")
    if set(iwd) & set(obatch):
        raise _Fail("a dimension is both inserted and batching", ("attr", "input_batching_dims"))
    first = _need_array(ops, 0)
    for i in range(n):
        operand = _need_array(ops, i)
        upd = _need_array(ops, n + 1 + i)
        if not _dims_match(operand, first):
            raise _Fail(f"operand {i} has shape {_txt(operand)}, expected the dims of {_txt(first)}", ("operand", i))
        if upd.dtype != operand.dtype:
            raise _Fail(f"operand {n + 1 + i} (updates) has element type {upd.dtype}, operand {i} {operand.dtype}",
                        ("operand", n + 1 + i))
        want_rank = len(expanded) - 1 + len(uwd)
        if upd.rank != want_rank:
            raise _Fail(f"operand {n + 1 + i} (updates) has shape {_txt(upd)}, expected rank {want_rank}",
                        ("operand", n + 1 + i))
        _dims_in_range(uwd, upd.rank, "update_window_dims")
        _dims_in_range(iwd, operand.rank, "inserted_window_dims")
        _dims_in_range(obatch, operand.rank, "input_batching_dims")
        if len(uwd) + len(iwd) + len(obatch) != operand.rank:
            raise _Fail(f"update_window_dims ({len(uwd)}) + inserted_window_dims ({len(iwd)}) + "
                        f"input_batching_dims ({len(obatch)}) must equal the operand rank {operand.rank}",
                        ("attr", "update_window_dims"))
        if len(s2o) != expanded[ivd]:
            raise _Fail(f"scatter_dims_to_operand_dims has {len(s2o)} entries, the indices' index_vector_dim "
                        f"{ivd} has size {expanded[ivd]}", ("attr", "scatter_dims_to_operand_dims"))
        _dims_in_range(s2o, operand.rank, "scatter_dims_to_operand_dims")
        _dims_in_range(ibatch, len(expanded), "scatter_indices_batching_dims")
        if len(obatch) != len(ibatch):
            raise _Fail("input_batching_dims and scatter_indices_batching_dims differ in length",
                        ("attr", "input_batching_dims"))
        window_bounds = [operand.dims[d] for d in range(operand.rank) if d not in iwd and d not in obatch]
        for k, d in enumerate(uwd):
            if upd.dims[d] > window_bounds[k] >= 0:
                raise _Fail(f"operand {n + 1 + i} (updates) {_txt(upd)}: window dimension {d} is larger than the "
                            f"operand's ({window_bounds[k]})", ("operand", n + 1 + i))
        scatter_bounds = [expanded[k] for k in range(len(expanded)) if k != ivd]
        k = 0
        for d in range(upd.rank):
            if d in uwd:
                continue
            if upd.dims[d] != scatter_bounds[k] and not _dyn(upd)[d]:
                raise _Fail(f"operand {n + 1 + i} (updates) {_txt(upd)}: scatter dimension {d} is {upd.dims[d]}, "
                            f"the indices give {scatter_bounds[k]}", ("operand", n + 1 + i))
            k += 1
    _reducer(v.signature(ins.parsed["to_apply"]), [_scalar(o.dtype) for o in ops[:n]],
             [u.dtype for u in ops[n + 1:]], "to_apply")
    return ops[0] if n == 1 else _tuple(ops[:n])


@_rule("sort")
def _sort(v, ins, ops):
    _count(ops, 1, None)
    first = _same_dims_arrays(ops, len(ops))
    dims = _int_list(ins, "dimensions")
    if len(dims) != 1:
        raise _Fail("dimensions must name one dimension", ("attr", "dimensions"))
    _dims_in_range(dims, first.rank, "dimensions")
    cmp = v.signature(ins.parsed["to_apply"])
    want = [_scalar(o.dtype) for o in ops for _ in (0, 1)]
    if len(cmp.params) != len(want) or not all(compatible(p, w) for p, w in zip(cmp.params, want)) \
            or not compatible(cmp.result, _scalar("pred")):
        raise _Fail(f"comparator '{cmp.name}' is {cmp.text()}, expected "
                    f"({', '.join(_txt(w) for w in want)}) -> pred[]", ("attr", "to_apply"))
    return ops[0] if len(ops) == 1 else _tuple(ops)


@_rule("map")
def _map(v, ins, ops):
    _count(ops, 1, None)
    first = _same_dims_arrays(ops, len(ops))
    if "dimensions" in ins.attrs and tuple(_int_list(ins, "dimensions")) != tuple(range(first.rank)):
        raise _Fail(f"dimensions must be {{{','.join(map(str, range(first.rank)))}}}", ("attr", "dimensions"))
    fn = v.signature(ins.parsed["to_apply"])
    want = [_scalar(o.dtype) for o in ops]
    if len(fn.params) != len(want) or not all(compatible(p, w) for p, w in zip(fn.params, want)) \
            or fn.result.tuple_shapes is not None or fn.result.rank != 0:
        raise _Fail(f"computation '{fn.name}' is {fn.text()}, expected ({', '.join(_txt(w) for w in want)}) -> "
                    f"a scalar", ("attr", "to_apply"))
    return _array(fn.result.dtype, first.dims, _dyn(first))


@_rule("call")
def _call(v, ins, ops):
    sig = v.signature(ins.parsed["to_apply"])
    _check_callee(sig, ops, "to_apply")
    return sig.result


_FUSION_KINDS = ("kLoop", "kInput", "kOutput", "kCustom")


@_rule("fusion")
def _fusion(v, ins, ops):
    calls = ins.parsed["calls"]
    if len(calls) != 1:
        raise _Fail("calls= must name one fused computation", ("attr", "calls"))
    _enum_attr(ins, "kind", _FUSION_KINDS)
    sig = v.signature(calls[0])
    _check_callee(sig, ops, "calls")
    return sig.result


@_rule("while")
def _while(v, ins, ops):
    _count(ops, 1)
    init = ops[0]
    cond = v.signature(ins.parsed["condition"])
    body = v.signature(ins.parsed["body"])
    for sig, key in ((cond, "condition"), (body, "body")):
        if len(sig.params) != 1 or not compatible(sig.params[0], init):
            raise _Fail(f"{key} '{sig.name}' is {sig.text()}, expected one parameter of shape {_txt(init)}",
                        ("attr", key))
    if not compatible(cond.result, _scalar("pred")):
        raise _Fail(f"condition '{cond.name}' returns {_txt(cond.result)}, expected pred[]", ("attr", "condition"))
    if not compatible(body.result, init):
        raise _Fail(f"body '{body.name}' returns {_txt(body.result)}, expected {_txt(init)} (the loop state)",
                    ("attr", "body"))
    return init


@_rule("conditional")
def _conditional(v, ins, ops):
    _count(ops, 1, None)
    idx = ops[0]
    if "branch_computations" in ins.parsed:
        names, key = ins.parsed["branch_computations"], "branch_computations"
        if not compatible(idx, _scalar("s32")) and not (compatible(idx, _scalar("pred")) and len(names) == 2):
            raise _Fail(f"operand 0 (the branch index) has shape {_txt(idx)}, expected s32[] (or pred[] with "
                        f"two branches)", ("operand", 0))
    else:
        if "true_computation" not in ins.parsed or "false_computation" not in ins.parsed:
            raise _Fail("needs branch_computations= or true_computation= and false_computation=")
        names, key = (ins.parsed["true_computation"], ins.parsed["false_computation"]), "true_computation"
        if not compatible(idx, _scalar("pred")):
            raise _Fail(f"operand 0 (the predicate) has shape {_txt(idx)}, expected pred[]", ("operand", 0))
    if not names:
        raise _Fail("needs at least one branch", ("attr", key))
    if len(ops) != 1 + len(names):
        raise _Fail(f"expects {1 + len(names)} operands (the branch index and one per branch), got {len(ops)}")
    result = None
    for j, name in enumerate(names):
        sig = v.signature(name)
        if len(sig.params) != 1 or not compatible(sig.params[0], ops[j + 1]):
            raise _Fail(f"branch {j} '{sig.name}' is {sig.text()}, expected one parameter of shape "
                        f"{_txt(ops[j + 1])} (operand {j + 1})", ("operand", j + 1))
        if result is None:
            result = sig.result
        elif not compatible(sig.result, result):
            raise _Fail(f"branch {j} '{sig.name}' returns {_txt(sig.result)}, branch 0 {_txt(result)}", ("attr", key))
    return result


@_rule("tuple")
def _tuple_rule(v, ins, ops):
    return _tuple(ops)


@_rule("get-tuple-element")
def _get_tuple_element(v, ins, ops):
    _count(ops, 1)
    t = ops[0]
    if t.tuple_shapes is None:
        raise _Fail(f"operand 0 has shape {_txt(t)}, expected a tuple", ("operand", 0))
    k = ins.parsed["index"]
    if not 0 <= k < len(t.tuple_shapes):
        raise _Fail(f"index {k} is out of range for {_txt(t)} ({len(t.tuple_shapes)} elements)", ("attr", "index"))
    return t.tuple_shapes[k]


@_rule("parameter")
def _parameter(v, ins, ops):
    return None


@_rule("constant")
def _constant(v, ins, ops):
    _check_literal(ins.literal or "", ins.shape)
    return None


@_rule("scan", "shuffle")
def _declared_shape(v, ins, ops):
    """Opcodes newer than the shape inference written here (scan, shuffle): the declared shape is
    taken as written; their called computations are still checked through the call graph."""
    return None


@_rule("custom-call")
def _custom_call(v, ins, ops):
    if "custom_call_target" not in ins.attrs:
        raise _Fail('needs attribute custom_call_target="..."')
    return None


@_rule("rng")
def _rng(v, ins, ops):
    _count(ops, 2)
    res = ins.shape
    dist = _enum_attr(ins, "distribution", ("rng_uniform", "rng_normal"))
    if res.tuple_shapes is not None or res.dtype not in (_FLOAT if dist == "rng_normal" else _NUMERIC | {"pred"}):
        raise _Fail(f"result shape {_txt(res)} cannot hold {dist} values")
    for i in (0, 1):
        _expect_operand(ops, i, _scalar(res.dtype))
    return None


@_rule("rng-bit-generator")
def _rng_bit_generator(v, ins, ops):
    _count(ops, 1)
    state = _need_array(ops, 0)
    res = ins.shape
    if res.tuple_shapes is None or len(res.tuple_shapes) != 2:
        raise _Fail(f"result shape is {_txt(res)}, expected ({_txt(state)}, an array)")
    if not compatible(res.tuple_shapes[0], state):
        raise _Fail(f"result shape is {_txt(res)}, its first element must be the state {_txt(state)}")
    if not _is_array(res.tuple_shapes[1]) or res.tuple_shapes[1].dtype not in _INTEGRAL:
        raise _Fail(f"result shape is {_txt(res)}, its second element must be an integral array")
    return None


@_rule("rng-get-and-update-state")
def _rng_state(v, ins, ops):
    _count(ops, 0)
    return _array("u64", (2,))


@_rule("after-all")
def _after_all(v, ins, ops):
    for i, s in enumerate(ops):
        if s.dtype != "token" or s.tuple_shapes is not None:
            raise _Fail(f"operand {i} has shape {_txt(s)}, expected token[]", ("operand", i))
    return _scalar("token")


@_rule("add-dependency")
def _add_dependency(v, ins, ops):
    _count(ops, 2)
    if ops[1].dtype != "token" or ops[1].tuple_shapes is not None:
        raise _Fail(f"operand 1 has shape {_txt(ops[1])}, expected token[]", ("operand", 1))
    return ops[0]


def _token_operand(ops: list, i: int) -> None:
    if ops[i].dtype != "token" or ops[i].tuple_shapes is not None:
        raise _Fail(f"operand {i} has shape {_txt(ops[i])}, expected token[]", ("operand", i))


@_rule("infeed")
def _infeed(v, ins, ops):
    _count(ops, 1)
    _token_operand(ops, 0)
    res = ins.shape
    if res.tuple_shapes is None or len(res.tuple_shapes) != 2 or res.tuple_shapes[1].dtype != "token":
        raise _Fail(f"result shape is {_txt(res)}, expected (data, token[])")
    return None


@_rule("outfeed")
def _outfeed(v, ins, ops):
    _count(ops, 2)
    _token_operand(ops, 1)
    return _scalar("token")


@_rule("send", "recv")
def _send_recv(v, ins, ops):
    if ins.opcode == "send":
        _count(ops, 2)
        _token_operand(ops, 1)
    else:
        _count(ops, 1)
        _token_operand(ops, 0)
    res = ins.shape
    if res.tuple_shapes is None or len(res.tuple_shapes) < 2 or res.tuple_shapes[-1].dtype != "token":
        raise _Fail(f"result shape is {_txt(res)}, expected (data, u32[], token[])")
    if ins.opcode == "send" and not compatible(res.tuple_shapes[0], ops[0]):
        raise _Fail(f"result shape is {_txt(res)}, its first element must be the data {_txt(ops[0])}")
    return None


@_rule("send-done", "recv-done")
def _send_recv_done(v, ins, ops):
    _count(ops, 1)
    t = ops[0]
    if t.tuple_shapes is None or not t.tuple_shapes:
        raise _Fail(f"operand 0 has shape {_txt(t)}, expected the tuple of a {ins.opcode[:-5]}", ("operand", 0))
    if ins.opcode == "send-done":
        return _scalar("token")
    return _tuple((t.tuple_shapes[0], _scalar("token")))


@_rule("partition-id", "replica-id")
def _ids(v, ins, ops):
    _count(ops, 0)
    return _scalar("u32")


@_rule("get-dimension-size")
def _get_dimension_size(v, ins, ops):
    _count(ops, 1)
    s = _need_array(ops, 0)
    dims = _int_list(ins, "dimensions")
    if len(dims) != 1:
        raise _Fail("dimensions must name one dimension", ("attr", "dimensions"))
    _dims_in_range(dims, s.rank, "dimensions")
    return _scalar("s32")


@_rule("set-dimension-size")
def _set_dimension_size(v, ins, ops):
    _count(ops, 2)
    s = _need_array(ops, 0)
    _expect_operand(ops, 1, _scalar("s32"))
    dims = _int_list(ins, "dimensions")
    if len(dims) != 1:
        raise _Fail("dimensions must name one dimension", ("attr", "dimensions"))
    _dims_in_range(dims, s.rank, "dimensions")
    dyn = list(_dyn(s))
    dyn[dims[0]] = True
    return _array(s.dtype, s.dims, dyn)


@_rule("topk")
def _topk(v, ins, ops):
    _count(ops, 1)
    s = _need_array(ops, 0)
    k = _int_attr(ins, "k")
    if s.rank < 1:
        raise _Fail(f"operand 0 has shape {_txt(s)}, expected rank >= 1", ("operand", 0))
    if not 0 <= k <= s.dims[-1] and s.dims[-1] >= 0:
        raise _Fail(f"k={k} is out of range for the last dimension of {_txt(s)}", ("attr", "k"))
    dims = s.dims[:-1] + (k,)
    return _tuple((_array(s.dtype, dims), _array("s32", dims)))


def _batch_norm(ins: HloInstruction, ops: list, n_vectors: int) -> tuple:
    x = _need_array(ops, 0)
    _need_type(ops, 0, _FLOAT)
    f = _int_attr(ins, "feature_index")
    if not 0 <= f < x.rank:
        raise _Fail(f"feature_index {f} is out of range for {_txt(x)}", ("attr", "feature_index"))
    vec = _array(x.dtype, (x.dims[f],))
    for i in range(1, 1 + n_vectors):
        _expect_operand(ops, i, vec)
    return x, vec


@_rule("batch-norm-training")
def _batch_norm_training(v, ins, ops):
    _count(ops, 3)
    x, vec = _batch_norm(ins, ops, 2)
    return _tuple((x, vec, vec))


@_rule("batch-norm-inference")
def _batch_norm_inference(v, ins, ops):
    _count(ops, 5)
    x, _ = _batch_norm(ins, ops, 4)
    return x


@_rule("batch-norm-grad")
def _batch_norm_grad(v, ins, ops):
    _count(ops, 5)
    x, vec = _batch_norm(ins, ops, 3)
    _expect_operand(ops, 4, x)
    return _tuple((x, vec, vec))


def _group_size(ins: HloInstruction) -> Optional[int]:
    """Participants per group from replica_groups ({{0,1},{2,3}} or iota [G,S]<=[N]); None if unknown."""
    raw = ins.attrs.get("replica_groups", "").strip()
    m = re.fullmatch(r"\[(\d+),(\d+)\]<=\[[\d,]+\](?:T\([\d,]+\))?", raw)
    if m:
        return int(m.group(2)) or None
    m = re.match(r"\{\s*\{([^{}]*)\}", raw)
    if m:
        n = len([x for x in m.group(1).split(",") if x.strip()])
        return n or None
    return None


def _collective_outputs(ins: HloInstruction, ops: list, scale: Callable[[Shape, int, Optional[int]], Shape]) -> Shape:
    dims = _int_list(ins, "dimensions")
    if len(dims) != 1:
        raise _Fail("dimensions must name one dimension", ("attr", "dimensions"))
    outs = []
    for i, s in enumerate(ops):
        _need_array(ops, i)
        _dims_in_range(dims, s.rank, "dimensions")
        outs.append(scale(s, dims[0], _group_size(ins)))
    return outs[0] if len(outs) == 1 else _tuple(outs)


def _gathered(s: Shape, d: int, k: Optional[int]) -> Shape:
    dims = list(s.dims)
    dims[d] = dims[d] * k if k else -1
    return _array(s.dtype, dims, [y or (i == d and not k) for i, y in enumerate(_dyn(s))])


def _scattered(s: Shape, d: int, k: Optional[int]) -> Shape:
    dims = list(s.dims)
    if k and dims[d] % k:
        raise _Fail(f"dimension {d} of {_txt(s)} is not divisible by the group size {k}", ("attr", "dimensions"))
    dims[d] = dims[d] // k if k else -1
    return _array(s.dtype, dims, [y or (i == d and not k) for i, y in enumerate(_dyn(s))])


@_rule("all-gather")
def _all_gather(v, ins, ops):
    _count(ops, 1, None)
    return _collective_outputs(ins, ops, _gathered)


@_rule("all-gather-start")
def _all_gather_start(v, ins, ops):
    _count(ops, 1, None)
    out = _collective_outputs(ins, ops, _gathered)
    inp = ops[0] if len(ops) == 1 else _tuple(ops)
    return _tuple((inp, out))


@_rule("reduce-scatter")
def _reduce_scatter(v, ins, ops):
    _count(ops, 1, None)
    _reducer(v.signature(ins.parsed["to_apply"]), [_scalar(o.dtype) for o in ops], [o.dtype for o in ops],
             "to_apply")
    return _collective_outputs(ins, ops, _scattered)


@_rule("all-reduce", "all-reduce-start", "collective-reduce")
def _all_reduce(v, ins, ops):
    _count(ops, 1, None)
    for i in range(len(ops)):
        _need_array(ops, i)
    _reducer(v.signature(ins.parsed["to_apply"]), [_scalar(o.dtype) for o in ops], [o.dtype for o in ops],
             "to_apply")
    return ops[0] if len(ops) == 1 else _tuple(ops)


@_rule("all-reduce-done", "copy-done")
def _done_forward(v, ins, ops):
    _count(ops, 1)
    if ins.opcode == "copy-done":
        t = ops[0]
        if t.tuple_shapes is None or not t.tuple_shapes:
            raise _Fail(f"operand 0 has shape {_txt(t)}, expected the tuple of a copy-start", ("operand", 0))
        return t.tuple_shapes[0]
    return ops[0]


@_rule("all-gather-done", "collective-permute-done", "async-done")
def _done_element1(v, ins, ops):
    _count(ops, 1)
    t = ops[0]
    if t.tuple_shapes is None or len(t.tuple_shapes) < 2:
        raise _Fail(f"operand 0 has shape {_txt(t)}, expected the tuple of a {ins.opcode[:-5]}-start",
                    ("operand", 0))
    return t.tuple_shapes[1]


@_rule("copy-start")
def _copy_start(v, ins, ops):
    _count(ops, 1)
    res = ins.shape
    if res.tuple_shapes is None or len(res.tuple_shapes) < 2 or not compatible(res.tuple_shapes[0], ops[0]) \
            or not compatible(res.tuple_shapes[1], ops[0]):
        raise _Fail(f"result shape is {_txt(res)}, expected ({_txt(ops[0])}, {_txt(ops[0])}, u32[])")
    return None


@_rule("all-to-all")
def _all_to_all(v, ins, ops):
    _count(ops, 1, None)
    if len(ops) > 1:
        for i in range(1, len(ops)):
            if not compatible(ops[i], ops[0]):
                raise _Fail(f"operand {i} has shape {_txt(ops[i])}, expected {_txt(ops[0])} like operand 0",
                            ("operand", i))
        return _tuple(ops)
    s = _need_array(ops, 0)
    if "dimensions" in ins.attrs:
        dims = _int_list(ins, "dimensions")
        if len(dims) != 1:
            raise _Fail("dimensions must name one dimension", ("attr", "dimensions"))
        _dims_in_range(dims, s.rank, "dimensions")
        k = _group_size(ins)
        if k and s.dims[dims[0]] % k:
            raise _Fail(f"dimension {dims[0]} of {_txt(s)} is not divisible by the group size {k}",
                        ("attr", "dimensions"))
    return s


@_rule("ragged-all-to-all")
def _ragged_all_to_all(v, ins, ops):
    _count(ops, 6)
    _need_array(ops, 0)
    out = _need_array(ops, 1)
    if ops[0].dtype != out.dtype or ops[0].rank != out.rank:
        raise _Fail(f"operand 1 (the output buffer) has shape {_txt(out)}, expected rank {ops[0].rank} of "
                    f"{ops[0].dtype}", ("operand", 1))
    for i in range(2, 6):
        _need_array(ops, i)
        _need_type(ops, i, _INTEGRAL)
    return out


@_rule("collective-permute", "collective-broadcast")
def _collective_permute(v, ins, ops):
    if ins.opcode == "collective-permute" and len(ops) == 4:  # in-place form: output buffer is operand 1
        return ops[1]
    _count(ops, 1, None)
    return ops[0] if len(ops) == 1 else _tuple(ops)


@_rule("collective-permute-start")
def _collective_permute_start(v, ins, ops):
    if len(ops) not in (1, 4):
        _count(ops, 1)
    res = ins.shape
    if res.tuple_shapes is None or len(res.tuple_shapes) < 2 or not compatible(res.tuple_shapes[0], ops[0]):
        out = ops[1] if len(ops) == 4 else ops[0]
        raise _Fail(f"result shape is {_txt(res)}, expected ({_txt(ops[0])}, {_txt(out)}, ...)")
    return None


@_rule("async-start")
def _async_start(v, ins, ops):
    calls = ins.parsed.get("calls")
    if not calls or len(calls) != 1:
        raise _Fail("needs calls= naming the wrapped computation", ("attr", "calls"))
    sig = v.signature(calls[0])
    _check_callee(sig, ops, "calls")
    res = ins.shape
    if res.tuple_shapes is None or len(res.tuple_shapes) < 2 or not compatible(res.tuple_shapes[1], sig.result):
        raise _Fail(f"result shape is {_txt(res)}, expected ((operands...), {_txt(sig.result)}, ...)")
    if not compatible(res.tuple_shapes[0], _tuple(ops)):
        raise _Fail(f"result shape is {_txt(res)}, its first element must be the operands {_txt(_tuple(ops))}")
    return None


@_rule("async-update")
def _async_update(v, ins, ops):
    _count(ops, 1)
    return ops[0]


# Every opcode the parser accepts has a rule.
assert OPCODES <= _RULES.keys(), f"opcodes without a verifier rule: {sorted(OPCODES - _RULES.keys())}"


# --------------------------------------------------------------------------------------------------
# Constant literals


_LIT_COMMENT = re.compile(r"/\*.*?\*/", re.S)
_LIT_TOKEN = re.compile(r"[{}(),]|[^\s{}(),]+(?:\(0x[0-9a-fA-F]+\))?")


def _check_literal(lit: str, shape: Shape) -> None:
    """An array literal's nesting must match the shape: `{...}` per dimension, dims[i] entries at depth
    i, values at the innermost depth (complex values as `(re, im)`); `{...}` alone elides the values.
    Comments are skipped (XLA prints `/*i0=0*/` before each sub-array of a large literal)."""
    lit = _LIT_COMMENT.sub(" ", lit).strip()
    if lit == "{...}" or shape.tuple_shapes is not None or shape.dtype in ("token", "opaque") or any(_dyn(shape)):
        return
    dims = shape.dims
    rank = len(dims)
    complex_ = shape.dtype in _COMPLEX

    def fail(what: str) -> None:
        raise _Fail(f"constant literal does not match {_txt(shape)}: {what}")

    counts: list = []  # entries seen at each open depth
    values = 0
    closed = False
    in_pair = False
    for m in _LIT_TOKEN.finditer(lit):
        tok = m.group(0)
        if tok == ",":
            continue
        if in_pair:  # inside a complex (re, im): one value, counted at '('
            if tok == ")":
                in_pair = False
            elif tok in "{}(":
                fail("bad complex value")
            continue
        if closed:
            fail(f"unexpected '{tok}' after the literal")
        if tok == "{":
            if len(counts) == rank:
                fail("too many '{' levels" if rank else "a scalar has no '{'")
            if counts:
                counts[-1] += 1
            counts.append(0)
        elif tok == "}":
            if not counts:
                fail("unbalanced '}'")
            d = len(counts) - 1
            if counts[-1] != dims[d]:
                fail(f"dimension {d} has {counts[-1]} entries, expected {dims[d]}")
            counts.pop()
            closed = not counts
        elif tok == ")":
            fail("unbalanced ')'")
        else:
            if tok == "(":
                if not complex_:
                    fail("unexpected '('")
                in_pair = True
            if len(counts) != rank:
                fail(f"value at nesting depth {len(counts)}, expected {rank}")
            if counts:
                counts[-1] += 1
            values += 1
            closed = rank == 0
    if counts or in_pair or (rank and not closed):
        fail("unbalanced '{' or '('")
    if rank == 0 and values != 1:
        fail(f"expected one value, got {values}")


# --------------------------------------------------------------------------------------------------
# The verifier


# Fast path: elementwise opcodes whose operands all have the result's exact shape (the parser interns
# shapes by text, so `is` compares them) need no more than an element-type check: opcode -> (operand
# count, allowed element types).
_FAST: dict = {op: (1, types) for op, types in _UNARY_TYPES.items()}
_FAST.update({op: (2, types) for op, types in _BINARY_TYPES.items()})
_FAST.update({"copy": (1, _ARRAY_TYPES | {"token"}), "abs": (1, _SIGNED_INT | _FLOAT),
              "real": (1, _FLOAT), "imag": (1, _FLOAT), "reduce-precision": (1, frozenset())})

# Opcodes that may call computations (the call graph's edges) -> the attributes naming them (hlo.py
# allows called-computation attributes on these only).
_CALLERS = {op: allowed for op, (allowed, _) in CALLED_BY_OPCODE.items()}

# The attributes the rules of the most frequent opcodes read (their memo key holds only these); other
# opcodes key on all attributes but the irrelevant ones below.
_KEY_ATTRS = {
    "broadcast": ("dimensions",), "reshape": (), "bitcast": (), "transpose": ("dimensions",), "convert": (),
    "reduce": ("dimensions",), "compare": ("direction", "type"), "select": (), "tuple": (),
    "get-tuple-element": ("index",), "call": (), "concatenate": ("dimensions",), "slice": ("slice",),
    "reverse": ("dimensions",), "pad": ("padding",), "dynamic-slice": ("dynamic_slice_sizes",),
    "dynamic-update-slice": (), "iota": ("iota_dimension",), "fusion": ("kind",),
    "convolution": ("window", "dim_labels", "feature_group_count", "batch_group_count"),
    "dot": ("lhs_contracting_dims", "rhs_contracting_dims", "lhs_batch_dims", "rhs_batch_dims", "sparsity"),
    "constant": (),  # keyed on its literal too (below)
}

# Attributes that do not change what an instruction's shape may be (left out of the memo key);
# called computations enter the key by their signature instead of their name.
_IRRELEVANT_ATTRS = frozenset(("metadata", "sharding", "frontend_attributes", "backend_config",
                               "statistics_viz", "control-predecessors", "origin", "schedule",
                               "operand_precision", "precision_config", "channel_id", "use_global_device_ids",
                               "is_stable", "indices_are_sorted", "unique_indices", "algorithm",
                               "source_target_pairs", "result_accuracy") + CALLED_COMPUTATION_ATTRS)


class _Verifier:
    def __init__(self, module: HloModule, parser: Any = None):
        self.module = module
        self.parser = parser
        self.comps = module.computations_by_name
        self._signatures: dict = {}
        self._sig_keys: dict = {}
        self._memo: set = set()
        self._calls: dict = {}  # computation name -> [(callee, calling instruction)]
        # XLA:TPU verifies with allow_mixed_precision; its modules carry tiled layouts.
        shapes = parser.shape_cache if parser is not None else {
            i.shape.to_text(): None for c in module.computations for i in c.instructions}
        self.mixed_precision = any(":T(" in text for text in shapes)

    def signature(self, name: str) -> _Signature:
        sig = self._signatures.get(name)
        if sig is None:
            comp = self.comps[name]
            sig = self._signatures[name] = _Signature(name, [p.shape for p in comp.parameters], comp.root.shape)
        return sig

    def _sig_key(self, name: str) -> tuple:
        """Identity of a called computation's signature (shapes are interned by the parser)."""
        key = self._sig_keys.get(name)
        if key is None:
            sig = self.signature(name)
            key = self._sig_keys[name] = (id(sig.result), *map(id, sig.params))
        return key

    # -- errors
    def error(self, message: str, node: Any, where: Optional[tuple] = None) -> HloParseError:
        """An HloParseError at `node` (instruction or computation), at the operand/attribute `where`."""
        p = self.parser
        if p is not None and getattr(node, "offset", -1) >= 0:
            pos = node.offset
            if where is not None and isinstance(node, HloInstruction):
                pos = p.locate(node, where)
            return p.error(message, pos)
        return HloParseError(message, self.module.filename, getattr(node, "lineno", 0), getattr(node, "col", 0))

    # -- module
    def run(self) -> None:
        p = self.parser
        signatures = p.signatures if p is not None else {}
        inline: dict = {}  # id(instruction) -> [(operand index, shape written inline, offset)]
        for ins, k, written, pos in (p.operand_shapes if p is not None else ()):
            inline.setdefault(id(ins), []).append((k, written, pos))
        for comp in self.module.computations:
            if comp.name in signatures:
                self._check_signature(comp, signatures[comp.name])
            self._check_computation(comp, inline)
        self._check_call_graph()

    def _check_call_graph(self) -> None:
        """No cycles through called computations (any length), nesting at most MAX_CALL_DEPTH."""
        calls = self._calls
        # Usual case: every callee is defined before its callers (as XLA and JAX print modules), so the
        # text order is a topological order and one pass gives the depths.
        depth: dict = {}
        for comp in self.module.computations:
            d = 0
            for callee, ins in calls[comp.name]:
                dc = depth.get(callee)
                if dc is None:
                    break
                if dc > d:
                    d = dc
            else:
                depth[comp.name] = d + 1
                if d + 1 > MAX_CALL_DEPTH:
                    callee, ins = max(calls[comp.name], key=lambda e: depth[e[0]])
                    raise self.error(f"{ins.opcode} '{ins.name}': calls nested more than {MAX_CALL_DEPTH} "
                                     f"deep (through computation '{callee}')", ins)
                continue
            break
        else:
            return
        depth = {}
        state: dict = {}
        for root in self.module.computations:
            if root.name in state:
                continue
            stack = [(root.name, iter(calls[root.name]))]
            path = [root.name]
            state[root.name] = 1
            while stack:
                name, it = stack[-1]
                nxt = next(it, None)
                if nxt is None:
                    stack.pop()
                    path.pop()
                    state[name] = 2
                    depth[name] = 1 + max((depth[c] for c, _ in calls[name]), default=0)
                    if depth[name] > MAX_CALL_DEPTH:
                        callee, ins = max(calls[name], key=lambda e: depth[e[0]])
                        raise self.error(f"{ins.opcode} '{ins.name}': calls nested more than {MAX_CALL_DEPTH} "
                                         f"deep (through computation '{callee}')", ins)
                    continue
                callee, ins = nxt
                s = state.get(callee)
                if s == 1:
                    cycle = path[path.index(callee):] + [callee]
                    how = "itself" if callee == name else (
                        f"'{callee}', which calls back into it ({' -> '.join(cycle)})")
                    raise self.error(f"{ins.opcode} '{ins.name}': computation '{name}' calls {how}; recursion is "
                                     f"not allowed", ins, ("attr", _callee_attr(ins, callee)))
                if s is None:
                    state[callee] = 1
                    path.append(callee)
                    stack.append((callee, iter(calls[callee])))

    def _check_signature(self, comp: HloComputation, sig: tuple) -> None:
        result, result_pos, params = sig
        p = self.parser
        if not compatible(result, comp.root.shape):
            raise p.error(f"computation '{comp.name}': signature returns {_txt(result)}, its root "
                          f"'{comp.root.name}' is {_txt(comp.root.shape)}", result_pos)
        body = comp.parameters
        if len(params) != len(body):
            raise p.error(f"computation '{comp.name}': signature has {len(params)} parameters, the body "
                          f"{len(body)}", comp.offset)
        for (name, shape, pos), ins in zip(params, body):
            if not compatible(shape, ins.shape):
                raise p.error(f"computation '{comp.name}': signature parameter '{name}' is {_txt(shape)}, "
                              f"parameter({ins.parameter_number}) '{ins.name}' is {_txt(ins.shape)}", pos)

    def _check_computation(self, comp: HloComputation, inline: dict) -> None:
        """Every instruction's rule (memoized); collects the computation's calls for the call graph."""
        instructions = comp.instructions
        p = self.parser
        shape_of = p.shapes_by_name.get(comp.name) if p is not None else None
        if shape_of is None:
            shape_of = {ins.name: ins.shape for ins in instructions}
        same = p.same_shapes if p is not None and not inline else None
        params = []
        memo = self._memo
        rules = _RULES
        fast = _FAST
        irrelevant = _IRRELEVANT_ATTRS
        callers = _CALLERS
        sig_keys = self._sig_keys
        calls = self._calls[comp.name] = []
        key_attrs = _KEY_ATTRS
        for ins in instructions:
            opcode = ins.opcode
            if opcode == "parameter":
                params.append(ins)
                continue
            names = ins.operands
            shape = ins.shape
            if same is not None:
                if ins in same:
                    f = fast.get(opcode)
                    if f is not None and len(names) == f[0] and shape.dtype in f[1]:
                        continue
            elif not inline:
                f = fast.get(opcode)
                if f is not None and len(names) == f[0] and shape.dtype in f[1]:
                    for o in names:
                        if shape_of[o] is not shape:
                            break
                    else:
                        continue
            n = len(names)  # (unrolled for the usual one or two operands: this loop is the hot path)
            if n == 1:
                o0 = shape_of[names[0]]
                ops = [o0]
                okey: Any = id(o0)
            elif n == 2:
                o0, o1 = shape_of[names[0]], shape_of[names[1]]
                ops = [o0, o1]
                okey = (id(o0), id(o1))
            else:
                ops = [shape_of[o] for o in names]
                okey = tuple(map(id, ops))
            if inline and id(ins) in inline:
                for k, written, pos in inline[id(ins)]:
                    if not compatible(written, ops[k]):
                        raise self.parser.error(
                            f"{opcode} '{ins.name}': operand {k} is written as {_txt(written)}, but "
                            f"'{names[k]}' is {_txt(ops[k])}", pos)
            # Memo key: the verdict depends only on these (shapes are interned by the parser; called
            # computations enter by their signature).
            attrs = ins.attrs
            ka = key_attrs.get(opcode)
            if ka is None:
                akey: Any = tuple(kv for kv in attrs.items() if kv[0] not in irrelevant)
            elif not ka:
                akey = None
            elif len(ka) == 1:
                akey = attrs.get(ka[0])
            else:
                akey = tuple(map(attrs.get, ka))
            key = (opcode, id(shape), okey, akey)
            callee_attrs = callers.get(opcode)
            if callee_attrs is not None:
                parsed = ins.parsed
                for a in callee_attrs:
                    callee = parsed.get(a)
                    if callee is None:
                        continue
                    for c in (callee,) if type(callee) is str else callee:
                        calls.append((c, ins))
                        k = sig_keys.get(c)
                        key += (k if k is not None else self._sig_key(c),)
            if opcode == "constant":
                key += (ins.literal,)
            if key in memo:
                continue
            try:
                rule = rules.get(opcode)
                inferred = (rule or _declared_shape)(self, ins, ops)  # None: XLA's async X-start/X-done
                if inferred is not None and not compatible(shape, inferred, self.mixed_precision):
                    raise _Fail(f"result shape is {_txt(shape)}, expected {_txt(inferred)}")
            except _Fail as e:
                raise self.error(f"{opcode} '{ins.name}': {e.message}", ins, e.where) from None
            memo.add(key)
        if comp.name not in self._signatures:
            for n, param in enumerate(params):
                if param.parameter_number != n:
                    params.sort(key=lambda i: i.parameter_number)
                    break
            self._signatures[comp.name] = _Signature(comp.name, [i.shape for i in params], comp.root.shape)
        # A parsed module defines every operand above its user (the parser refuses anything else, as
        # XLA's does); a module built in code may not, but no value may depend on itself.
        if p is not None:
            return
        position = {ins.name: n for n, ins in enumerate(instructions)}
        for n, ins in enumerate(instructions):
            for o in ins.operands:
                if position[o] >= n:
                    self._check_cycles(comp)
                    return

    def _check_cycles(self, comp: HloComputation) -> None:
        from autotune.compiler.program import ProgramError, _topological
        try:
            _topological(comp, self.module.filename)
        except ProgramError as e:
            ins = e.instruction
            raise self.error(f"{ins.opcode} '{ins.name}': depends on itself (an instruction cycle in computation "
                             f"'{comp.name}')", ins) from None


def _callee_attr(ins: HloInstruction, callee: str) -> str:
    for k in CALLED_COMPUTATION_ATTRS:
        v = ins.parsed.get(k)
        if v == callee or (isinstance(v, tuple) and callee in v):
            return k
    return "calls"


def verify_module(module: HloModule, parser: Any = None) -> None:
    """Check a parsed module as XLA's HloVerifier does; raises HloParseError at the first error.

    `parser` (the `hlo.parser._Parser` that read the text) gives exact columns for operands and attributes
    and lets computation signatures and inline operand shapes be checked; without it errors point at
    the instruction's recorded line and column.
    """
    _Verifier(module, parser).run()
