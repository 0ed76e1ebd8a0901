"""Structured attribute values (windows, convolution dimension labels, slices, padding, ...) and
the parsers that validate them."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from autotune.compiler.hlo.types import (_NAME_FULL, MAX_ELEMENTS, OPCODES, _NOT_ASYNC_WRAPPABLE)

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


