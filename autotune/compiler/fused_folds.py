"""Folds XLA applies inside a fused computation, applied by us before a fused computation is written.

A hand-made fusion reaches XLA:CPU through jaxlib's StableHLO round trip, whose simplifier folds
instructions with a known result: `select` with a splat-constant predicate (jax.random.gamma's
rejection loop), `select(p, a, a)`, `and(x, false)`, `or(x, true)`, an integer `multiply(x, 0)`,
`xor(x, x)`, instructions of zero elements, `x + 0`, `x * 1`, instructions that return an operand
unchanged whatever the layouts (`logical_identity`: identity broadcasts and transposes, no-op pads,
full slices), ... Two ways that breaks a fusion:
a fold drops the last use of a fusion parameter, and XLA's verifier rejects the program ("Non-root
instruction ... parameter(k) ... must have users"); or the fused root becomes a parameter (an
identity fusion, `add(broadcast(0), p)` of jax's threefry), and XLA:CPU aborts
(`raw_hash_map<>::at`). `fold_fused_body` applies these identities first and drops the parameters
nobody reads; a caller emits a body whose root is a parameter as a plain `copy`. The folds are
exact, except `x + 0.0` for x = -0.0, which XLA folds too; folding more than XLA would only
simplifies what we write.
"""
from __future__ import annotations

import re
from typing import Optional

import numpy as np

from autotune.compiler.hlo import HloInstruction, Shape, live_instructions

# HLO element types whose values numpy represents exactly (bf16 and the fp8 types are left alone).
_NUMPY_DTYPES = {"pred": np.bool_, "s8": np.int8, "s16": np.int16, "s32": np.int32, "s64": np.int64,
                 "u8": np.uint8, "u16": np.uint16, "u32": np.uint32, "u64": np.uint64,
                 "f16": np.float16, "f32": np.float32, "f64": np.float64}
_INTEGRAL = frozenset({"pred", "s8", "s16", "s32", "s64", "u8", "u16", "u32", "u64"})
# Instructions whose result is a splat when their (first) operand is one.
_SPLAT_MOVES = frozenset({"broadcast", "reshape", "copy", "transpose", "slice", "reverse", "dynamic-slice"})
_COMPARE = {"EQ": np.equal, "NE": np.not_equal, "LT": np.less, "LE": np.less_equal,
            "GT": np.greater, "GE": np.greater_equal}


def _literal_splat(ins: HloInstruction) -> Optional[np.generic]:
    """The value of a constant whose elements are all equal, or None."""
    np_type = _NUMPY_DTYPES.get(ins.shape.dtype)
    if np_type is None or ins.shape.is_tuple or ins.literal is None:
        return None
    values = set(re.findall(r"[^{},\s]+", ins.literal))
    if len(values) != 1:
        return None
    text = values.pop()
    try:
        if ins.shape.dtype == "pred":
            return np.bool_(text in ("true", "1"))
        if ins.shape.dtype in _INTEGRAL:
            return np_type(int(text, 0))
        return np_type(float(text))
    except (ValueError, OverflowError):
        return None


literal_splat = _literal_splat  # public name (emission's constant-input key)


def _splat_value(ins: HloInstruction, ops: list[HloInstruction],
                 splat: dict[str, np.generic]) -> Optional[np.generic]:
    """The splat value `ins` computes from splat operands, or None when unknown."""
    op = ins.opcode
    if op == "constant":
        return _literal_splat(ins)
    if not ops or ops[0].name not in splat:
        return None
    first = splat[ops[0].name]
    if op in _SPLAT_MOVES or (op == "bitcast" and ops[0].shape.dtype == ins.shape.dtype):
        return first
    vals = [splat.get(o.name) for o in ops]
    if any(v is None for v in vals):
        return None
    np_type = _NUMPY_DTYPES.get(ins.shape.dtype)
    if np_type is None:
        return None
    with np.errstate(all="ignore"):
        if op == "convert":
            if ins.shape.dtype in _INTEGRAL and ins.shape.dtype != "pred" and not (
                    np.isfinite(first) and np.iinfo(np_type).min <= first <= np.iinfo(np_type).max):
                return None  # XLA saturates or is implementation-defined here
            return np_type(first != 0) if ins.shape.dtype == "pred" else np_type(first)
        if op == "compare":
            fn = _COMPARE.get(str(ins.attr("direction", "")))
            if fn is None or ("TOTALORDER" in str(ins.attrs.get("type", "")) and any(np.isnan(v) for v in vals
                                                                                       if np.issubdtype(type(v), np.floating))):
                return None
            return np.bool_(fn(vals[0], vals[1]))
        if ins.shape.dtype not in _INTEGRAL:
            return None  # float arithmetic is left to XLA: its rounding is not ours to guess
        if op == "not":
            return np.bool_(not first) if ins.shape.dtype == "pred" else np_type(~first)
        if op in ("and", "or", "xor"):
            fn = {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}[op]
            return np_type(fn(vals[0], vals[1]))
        if op == "select" and len(vals) == 3:
            return vals[1] if vals[0] else vals[2]
    return None


def _all_ones(value: np.generic, dtype: str) -> bool:
    if dtype == "pred":
        return bool(value)
    return int(value) == (-1 if dtype.startswith("s") else (1 << (8 * np.dtype(_NUMPY_DTYPES[dtype]).itemsize)) - 1)


def logical_identity(ins: HloInstruction, ops: list[HloInstruction]) -> Optional[str]:
    """The operand an instruction returns unchanged element for element, whatever the layouts, or None.

    Inside a fused computation layouts are not kept (the StableHLO round trip drops them) and XLA's
    simplifier removes these instructions, so one left in a fusion by a frontend (torch_xla's
    identity broadcasts and layout-changing transposes, TensorFlow's no-op pads) either leaves a
    fusion parameter without users or lets XLA's passes re-shape the fusion. Exact by definition."""
    op = ins.opcode
    if not ops or ins.shape.is_tuple or ops[0].shape.is_tuple:
        return None
    if op == "dynamic-update-slice" and len(ops) >= 2 and not ops[1].shape.is_tuple \
            and ops[1].shape.dims == ins.shape.dims and ops[1].shape.dtype == ins.shape.dtype:
        return ops[1].name  # a full-size update: the start indices clamp to 0
    src = ops[0]
    if src.shape.dims != ins.shape.dims or src.shape.dtype != ins.shape.dtype:
        return None
    rank = len(ins.shape.dims)
    parsed = ins.parsed
    if op in ("reshape", "copy", "convert", "dynamic-slice"):
        return src.name  # (a full-size dynamic-slice: its start indices clamp to 0)
    if op == "bitcast":  # reinterprets the bytes: the identity only on the same layout
        return src.name if ins.shape.minor_to_major() == src.shape.minor_to_major() else None
    if op in ("broadcast", "transpose"):
        return src.name if tuple(parsed.get("dimensions", ())) == tuple(range(rank)) else None
    if op == "reverse":
        return src.name if all(ins.shape.dims[d] == 1 for d in parsed.get("dimensions", ())) else None
    if op == "slice":
        return src.name if all(d.start == 0 and d.stride == 1 and d.limit == n
                               for d, n in zip(parsed.get("slice", ()), ins.shape.dims)) else None
    if op == "pad":
        return src.name if all(d.lo == 0 and d.hi == 0 and d.interior == 0
                               for d in parsed.get("padding", ())) else None
    if op == "concatenate" and len(ops) == 1:
        return src.name
    return None


def _fold(ins: HloInstruction, ops: list[HloInstruction], splat: dict[str, np.generic]) -> Optional[str]:
    """The name of an existing value `ins` equals (XLA drops `ins` for it), or None."""
    op, dtype = ins.opcode, ins.shape.dtype
    if ins.shape.is_tuple or any(o.shape.is_tuple for o in ops):
        return None
    same = logical_identity(ins, ops)
    if same is not None:
        return same

    def value(k: int) -> Optional[np.generic]:
        return splat.get(ops[k].name)

    if op == "select" and len(ops) == 3:
        if ops[1].name == ops[2].name:
            return ops[1].name
        p = value(0)
        if p is not None and ops[0].shape.rank in (0, ins.shape.rank):
            return ops[1].name if p else ops[2].name
        return None
    if op in ("and", "or") and dtype in _INTEGRAL and len(ops) == 2:
        if ops[0].name == ops[1].name:
            return ops[0].name
        for k in (0, 1):
            v = value(k)
            if v is None or ops[k].shape.dims != ins.shape.dims:
                continue
            absorbing = (int(v) == 0) if op == "and" else _all_ones(v, dtype)
            neutral = _all_ones(v, dtype) if op == "and" else (int(v) == 0)
            if absorbing:
                return ops[k].name
            if neutral and ops[1 - k].shape.dims == ins.shape.dims:
                return ops[1 - k].name
        return None
    if len(ops) != 2:
        return None
    if op in ("maximum", "minimum") and ops[0].name == ops[1].name:
        return ops[0].name
    for k in (0, 1):  # a neutral operand: the other one is the result (exact, -0.0 + 0.0 aside, as XLA)
        v, other = value(k), ops[1 - k]
        if v is None or other.shape.dims != ins.shape.dims or other.shape.dtype != dtype:
            continue
        if k == 1 or op in ("add", "multiply", "or", "xor"):  # commutative, or the right operand
            if (op in ("add", "subtract", "or", "xor", "shift-left", "shift-right-logical",
                       "shift-right-arithmetic") and v == 0) or (op in ("multiply", "divide") and v == 1):
                if op in ("or", "xor", "shift-left", "shift-right-logical", "shift-right-arithmetic") \
                        and dtype not in _INTEGRAL:
                    continue
                return other.name
    if op == "multiply" and dtype in _INTEGRAL:
        for k in (0, 1):
            v = value(k)
            if v is not None and int(v) == 0 and ops[k].shape.dims == ins.shape.dims:
                return ops[k].name
    return None


def _zero_splat(ins: HloInstruction, fresh: "_Names") -> list[HloInstruction]:
    """`ins` rewritten as a broadcast of a scalar zero (false): its value for xor(x, x), x - x, and
    any instruction of zero elements."""
    scalar = Shape(ins.shape.dtype, (), None, ())
    c = HloInstruction(fresh(ins.name + ".zero"), "constant", scalar, [],
                       literal="false" if ins.shape.dtype == "pred" else "0")
    b = ins.copy(opcode="broadcast", operands=[c.name], attrs={"dimensions": "{}"}, parsed={"dimensions": ()},
                 literal=None)
    return [c, b]


class _Names:
    def __init__(self, body: list[HloInstruction]):
        self.used = {i.name for i in body}

    def __call__(self, base: str) -> str:
        k = 0
        while f"{base}.{k}" in self.used:
            k += 1
        self.used.add(f"{base}.{k}")
        return f"{base}.{k}"


def fold_fused_body(body: list[HloInstruction]) -> tuple[list[HloInstruction], list[int]]:
    """`body` (a fused computation's instructions in order, its root flagged) with XLA's exact folds
    applied, dead instructions removed and the parameters nobody reads dropped.

    Returns the new body (parameters renumbered in their old order) and the old parameter numbers
    kept, so that the caller drops the same operands from the fusion instruction. A body where
    nothing folds comes back unchanged (the same instruction objects).
    """
    by_name = {i.name: i for i in body}
    alias: dict[str, str] = {}
    splat: dict[str, np.generic] = {}
    fresh = _Names(body)
    out: list[HloInstruction] = []
    changed = False
    for ins in body:
        if any(o in alias for o in ins.operands):
            ins = ins.copy(operands=[alias.get(o, o) for o in ins.operands])
            changed = True
        by_name[ins.name] = ins
        ops = [by_name[o] for o in ins.operands]
        if ins.opcode != "parameter":
            integral_self = (ins.opcode in ("xor", "subtract") and ins.shape.dtype in _INTEGRAL
                             and len(ops) == 2 and ops[0].name == ops[1].name)
            empty = not ins.shape.is_tuple and ins.shape.elements == 0 and ins.opcode != "constant"
            if integral_self or empty:
                new = _zero_splat(ins, fresh)
                by_name.update((i.name, i) for i in new)
                out.extend(new)
                if ins.shape.dtype in _NUMPY_DTYPES:
                    splat[ins.name] = _NUMPY_DTYPES[ins.shape.dtype](0)
                changed = True
                continue
            target = _fold(ins, ops, splat)
            if target is not None:
                alias[ins.name] = target
                if target in splat:
                    splat[ins.name] = splat[target]
                changed = True
                if ins.is_root:
                    root = by_name[target]  # (same dims and type; a kept layout is the fusion's)
                    by_name[target] = root.copy(is_root=True, **({} if root.opcode == "parameter"
                                                                 else {"shape": ins.shape}))
                    out = [by_name[target] if i.name == target else i for i in out]
                continue
            v = _splat_value(ins, ops, splat)
            if v is not None:
                splat[ins.name] = v
        out.append(ins)
    if not changed:
        return body, [i.parameter_number for i in body if i.opcode == "parameter"]
    live = live_instructions({i.name: i for i in out}, [i.name for i in out if i.is_root])  # parameters too
    kept_params = sorted((i for i in out if i.opcode == "parameter" and i.name in live),
                         key=lambda i: i.parameter_number)
    renumber = {i.name: k for k, i in enumerate(kept_params)}
    new_body = []
    for i in out:
        if i.name not in live:
            continue
        if i.opcode == "parameter" and i.parameter_number != renumber[i.name]:
            i = i.copy(parameter_number=renumber[i.name])
        new_body.append(i)
    return new_body, [i.parameter_number for i in kept_params]


# Fused instructions that keep a layout through XLA's layout assignment (`SetFusionLayouts`: parameters
# take their operand's, the root the fusion's, get-tuple-element its tuple's, constants their literal's);
# every other fused instruction of a fusion that exists before layout assignment (all of ours) loses it.
_KEEPS_LAYOUT_IN_FUSION = frozenset({"parameter", "constant", "get-tuple-element"})


def layout_safe_selects(body: list[HloInstruction], fresh=None) -> list[HloInstruction]:
    """`body` with a `copy` of the predicate before every `select` whose non-scalar predicate keeps its
    layout in the fusion while its on-true operand loses it (`_KEEPS_LAYOUT_IN_FUSION`).

    XLA's shape inference of such a select takes the result's layout from the predicate and then
    reads the on-true operand's layout: XLA:CPU aborts in the verifier right after layout assignment
    ("Check failed: has_layout() f32[32,32]", jax-md's FIRE minimizer under random configurations).
    A copy of the predicate inside the fusion has no layout either, and costs nothing in a loop
    fusion. `fresh(base)` gives a new instruction name (default: unused in `body`). A body without
    such a select comes back unchanged (the same list)."""
    fresh = fresh or _Names(body)
    by_name = {i.name: i for i in body}
    out: list[HloInstruction] = []
    changed = False
    for ins in body:
        if ins.opcode == "select" and len(ins.operands) == 3:
            pred, on_true = by_name[ins.operands[0]], by_name[ins.operands[1]]
            if (pred.opcode in _KEEPS_LAYOUT_IN_FUSION and pred.shape.rank > 0
                    and on_true.opcode not in _KEEPS_LAYOUT_IN_FUSION):
                c = HloInstruction(fresh(pred.name + ".pred"), "copy", pred.shape, [pred.name])
                out.append(c)
                ins = ins.copy(operands=[c.name, *ins.operands[1:]])
                changed = True
        out.append(ins)
    return out if changed else body
