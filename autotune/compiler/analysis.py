"""Static per-instruction metrics, following XLA's `HloCostAnalysis` (xla/service/hlo_cost_analysis.cc).

What: for every HLO instruction, the floating-point operations (`flops`), transcendental operations
(`transcendentals`), and bytes read from / written to memory (`bytes_read`, `bytes_written`), the
same numbers XLA's own cost analysis assigns with the CPU backend's shape-size function.

Why: the analytical cost model, the features of the learned models and the reports all need
static work and traffic per kernel. Matching XLA exactly (not "roughly like XLA") makes the numbers
checkable against an oracle (`_xla_cost_analysis_oracle`, jaxlib's private
`_jax.hlo_module_cost_analysis`) and comparable with what XLA-based tools print.

XLA semantics reproduced here (all checked against jaxlib 0.10.2, see tests/autotune/compiler/test_analysis.py):

* Default bytes: every operand is read whole, the output is written whole. Byte sizes are those of
  XLA:CPU's `ShapeSizeBytes`: an array is elements * element width (sub-byte types such as s1/s4
  count one byte per element; a dynamic shape adds an s32 size per dim), a tuple *operand* counts
  only its index table (8 bytes per element); the default *output* counts the array leaves of a
  tuple-shaped result. Opcodes without a rule below (copy, reshape, collectives but all-reduce,
  infeed/outfeed, topk, shuffle, ...) cost these default bytes and nothing else.
* Elementwise ops (unary, binary, ternary, compare, select, clamp, convert, bitcast-convert, ...) cost
  one flop per output element; exponential, exponential-minus-one, log, log-plus-one, logistic,
  power, sqrt, rsqrt, cbrt, sine, cosine, tan, tanh, atan2, erf, acos, acosh, asin, asinh, atanh,
  cosh and sinh cost one *transcendental* instead (atan too: XLA at jaxlib 0.10.2 has no atan;
  we count it like its siblings). `rng` costs one transcendental per element;
  `rng-bit-generator` one per element of every output leaf.
* Free (all zero): parameter, constant, get-tuple-element, bitcast, a transpose that is a bitcast
  under the layouts, after-all, add-dependency, domain. `tuple` writes only its index table (8
  bytes per element).
* Slice reads what it writes; dynamic-slice reads what it writes plus operand 1 (the first index);
  dynamic-update-slice reads and writes the update plus operand 2; gather is 2 * output + indices;
  scatter is 3 * updates + indices and runs its combiner once per update element.
* dot and scaled-dot: 2 * output elements * contracted size. convolution: 2 * (input features /
  feature groups) * output features * (batch / batch groups) * product over spatial dims of the
  number of valid (output, kernel) position pairs given stride, padding and dilations.
* reduce: the reducer's flops/transcendentals times (input elements - output elements);
  reduce-window: times (window size - 1) * output elements; select-and-scatter: select cost times
  source elements * (window size - 1) plus scatter cost times source elements; map: times output
  elements; sort: n * ceil(log2 n) flops for the n elements of operand 0 (all rows together);
  all-reduce (and -start, collective-reduce): one flop per output element; fft: 8 *
  prod(log2 fft_length) * elements; cholesky: n * elements / 3 flops, reads and writes half of its
  operand; triangular-solve: 2 * n * elements(b) flops, reads half of `a`; scan: the step
  computation times the elements of operand 1 (with a single operand, XLA fails; we use the scan
  length).
* fusion: the flops/transcendentals of the fused computation; bytes only at the boundary. A fused
  parameter is read whole once if any "ordinary" user reads it, plus each slice's output, each
  dynamic-slice's output, and the whole parameter again for every broadcast or reshape user;
  a parameter used only as operand 0 of a dynamic-update-slice is not read. Output bytes are the
  output leaves, except that a dynamic-update-slice root writes only its update.
* while: ONE iteration: body cost + condition cost (XLA does not scale by the trip count, even when
  `known_trip_count` is present), and nothing for the while's own operand/result.
* conditional: per metric, the maximum over branches (nothing for the conditional itself).
* call: the callee's full cost (its bytes included), nothing for the call itself.
* async-start: the wrapped computation's full cost (async-done is a plain op), and so XLA's
  shorthand `X-start` costs what X costs (`X-update`, `X-done` are plain ops); all-reduce-start as
  all-reduce; ragged-dot: 2 * (rhs elements / groups) flops (XLA's figure, independent of the rows).
* custom-call: unknown; XLA marks flops and bytes with -1 (and so do we, to keep totals equal).
* Every instruction of a computation counts, dead ones included; computations that the entry
  does not reach do not count.

Totals are summed in Python floats; XLA sums in float32, so large totals differ in the 6th-7th
significant digit (at most a few parts per million on the corpus).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from autotune.compiler.hlo import (DTYPE_BYTES, ConvDimLabels, HloComputation, HloInstruction, HloModule, HloParseError, Shape, async_sugar)

__all__ = ["Cost", "instruction_cost", "computation_cost", "computation_costs", "module_cost",
           "shape_size", "convolution_flops", "TRANSCENDENTAL_OPCODES", "ELEMENTWISE_OPCODES"]


@dataclass
class Cost:
    """Static cost of an instruction (or a sum of them), in XLA HloCostAnalysis units."""

    flops: float = 0.0
    transcendentals: float = 0.0
    bytes_read: float = 0.0
    bytes_written: float = 0.0

    @property
    def bytes_accessed(self) -> float:
        """Total memory traffic (XLA's "bytes accessed")."""
        return self.bytes_read + self.bytes_written

    def __add__(self, other: "Cost") -> "Cost":
        return Cost(self.flops + other.flops, self.transcendentals + other.transcendentals,
                    self.bytes_read + other.bytes_read, self.bytes_written + other.bytes_written)

    def __iadd__(self, other: "Cost") -> "Cost":
        self.flops += other.flops
        self.transcendentals += other.transcendentals
        self.bytes_read += other.bytes_read
        self.bytes_written += other.bytes_written
        return self

    def scaled(self, k: float) -> "Cost":
        """Flops and transcendentals times k (bytes unchanged), as XLA scales a reducer's cost."""
        return Cost(self.flops * k, self.transcendentals * k, 0.0, 0.0)

    def as_dict(self) -> dict:
        return {"flops": self.flops, "transcendentals": self.transcendentals,
                "bytes_read": self.bytes_read, "bytes_written": self.bytes_written,
                "bytes_accessed": self.bytes_accessed}


TRANSCENDENTAL_OPCODES: frozenset = frozenset((
    "exponential", "exponential-minus-one", "log", "log-plus-one", "logistic", "power", "sqrt",
    "rsqrt", "cbrt", "sine", "cosine", "tan", "tanh", "atan2", "erf", "acos", "acosh", "asin",
    "asinh", "atan", "atanh", "cosh", "sinh"))

ELEMENTWISE_OPCODES: frozenset = TRANSCENDENTAL_OPCODES | frozenset((
    "abs", "add", "and", "bitcast-convert", "ceil", "clamp", "compare", "complex", "convert",
    "count-leading-zeros", "divide", "floor", "imag", "is-finite", "maximum", "minimum", "mulhi", "multiply",
    "negate", "not", "or", "popcnt", "real", "reduce-precision", "remainder", "round-nearest-afz",
    "round-nearest-even", "select", "shift-left", "shift-right-arithmetic", "shift-right-logical",
    "sign", "stochastic-convert", "subtract", "xor"))

_POINTER = 8
# Element widths as XLA:CPU sizes them: `hlo.DTYPE_BYTES`, sub-byte types occupying a byte each, an
# opaque value a pointer.
_ELEMENT_BYTES: dict = {**{t: (math.ceil(b) if b > 0 else 0) for t, b in DTYPE_BYTES.items()}, "opaque": _POINTER}
_DYNAMIC_SIZE_BYTES = 4  # the s32 size of each dim that a dynamic array carries with its data


def shape_size(shape: Shape) -> float:
    """XLA:CPU `ShapeSizeBytes`: array bytes (a dynamic shape adds its s32 size per dim); a tuple
    is its index table (8 bytes per element)."""
    if shape.tuple_shapes is not None:
        return _POINTER * len(shape.tuple_shapes)
    if shape.dtype == "opaque":
        return _POINTER
    n = _ELEMENT_BYTES.get(shape.dtype, 4)
    for d in shape.dims:
        n *= d if d > 0 else 0
    if any(shape.dynamic):
        n += _DYNAMIC_SIZE_BYTES * len(shape.dims)
    return n


def _leaf_bytes(shape: Shape) -> float:
    """Sum of the array leaves (what XLA's default output-bytes count for a tuple result)."""
    if shape.tuple_shapes is None:
        return shape_size(shape)
    return sum(_leaf_bytes(s) for s in shape.tuple_shapes)


def _elements(shape: Shape) -> int:
    n = 1
    for d in shape.dims:
        n *= d if d > 0 else 0
    return n


def _leaf_elements(shape: Shape) -> int:
    if shape.tuple_shapes is None:
        return _elements(shape)
    return sum(_leaf_elements(s) for s in shape.tuple_shapes)


def _first_array(shape: Shape) -> Shape:
    return shape.tuple_shapes[0] if shape.tuple_shapes else shape


class _Analyzer:
    """One pass of cost analysis over a module; memoizes called-computation totals and users."""

    def __init__(self, module: HloModule):
        self.module = module
        self.comps = module.computations_by_name
        self._totals: dict = {}
        self._in_progress: set = set()
        self._users: dict = {}

    # -- helpers
    def operand(self, ins: HloInstruction, comp: HloComputation, i: int) -> HloInstruction:
        return comp.by_name[ins.operands[i]]

    def default(self, ins: HloInstruction, comp: HloComputation) -> Cost:
        by_name = comp.by_name
        read = 0.0
        for o in ins.operands:
            read += shape_size(by_name[o].shape)
        return Cost(0.0, 0.0, read, _leaf_bytes(ins.shape))

    def total(self, name: str) -> Cost:
        """Cost of a whole computation (XLA's ProcessSubcomputation), memoized."""
        c = self._totals.get(name)
        if c is None:
            comp = self.comps[name]
            if name in self._in_progress:  # the verifier refuses recursion; never loop on it anyway
                raise HloParseError(f"computation '{name}' calls itself", self.module.filename, comp.lineno,
                                    comp.col)
            self._in_progress.add(name)
            c = Cost()
            for ins in comp.instructions:
                c += self.cost(ins, comp)
            self._totals[name] = c
            self._in_progress.discard(name)
        return c

    def users(self, comp: HloComputation) -> dict:
        """name -> list of distinct user instructions (in program order) within comp."""
        u = self._users.get(comp.name)
        if u is None:
            u = {i.name: [] for i in comp.instructions}
            for ins in comp.instructions:
                seen = set()
                for o in ins.operands:
                    if o not in seen:
                        seen.add(o)
                        u[o].append(ins)
            self._users[comp.name] = u
        return u

    def cost(self, ins: HloInstruction, comp: HloComputation) -> Cost:
        handler = _HANDLERS.get(ins.opcode)
        if handler is None:
            sugar = async_sugar(ins.opcode)
            if sugar is not None and sugar[1] == "start":
                # `X-start` is an async-start wrapping one X: it costs what X costs (on the same
                # operands, with the wrapped result: element 1 of the start's tuple).
                shape = ins.shape.tuple_shapes[1] if ins.shape.is_tuple and len(ins.shape.tuple_shapes) > 1 \
                    else ins.shape
                return self.cost(ins.copy(opcode=sugar[0], shape=shape), comp)
            return self.default(ins, comp)
        return handler(self, ins, comp)

    # -- fusion boundary bytes (XLA's FusionParameterReadBytes)
    def param_read_bytes(self, hlo: HloInstruction, comp: HloComputation) -> float:
        size = 0.0
        seen_trivial = False
        full = shape_size(hlo.shape)
        for user in self.users(comp)[hlo.name]:
            op = user.opcode
            if op == "slice":
                size += shape_size(user.shape)
            elif op == "dynamic-slice":
                if user.operands[0] == hlo.name:
                    size += shape_size(user.shape)
                elif not seen_trivial:
                    seen_trivial = True
                    size += full
            elif op == "dynamic-update-slice":
                if user.operands[0] != hlo.name and not seen_trivial:
                    seen_trivial = True
                    size += full
            elif op in ("broadcast", "reshape"):
                size += full
            elif op == "fusion":
                size += self._nested_fusion_read(hlo, user, comp)
            elif not seen_trivial:
                seen_trivial = True
                size += full
        return size

    def _nested_fusion_read(self, hlo: HloInstruction, user: HloInstruction, comp: HloComputation) -> float:
        inner = self.comps[user.parsed["calls"][0]]
        params = inner.parameters
        root = inner.root
        size = 0.0
        fusion_users = self.users(comp)[user.name]
        for idx, o in enumerate(user.operands):
            if o != hlo.name:
                continue
            p = params[idx]
            simple = bool(root.operands) and root.operands[0] == p.name
            nested_seen = False
            for fu in fusion_users:
                if simple and fu.opcode == "slice":
                    size += shape_size(fu.shape)
                elif simple and fu.opcode == "dynamic-slice":
                    if fu.operands[0] == user.name:
                        size += shape_size(fu.shape)
                    elif not nested_seen:
                        nested_seen = True
                        size += shape_size(user.shape)
                elif simple and fu.opcode == "dynamic-update-slice":
                    if fu.operands[0] != user.name and not nested_seen:
                        nested_seen = True
                        size += shape_size(user.shape)
                elif not nested_seen:
                    nested_seen = True
                    size += self.param_read_bytes(p, inner)
        return size

    def fusion_bytes(self, ins: HloInstruction, fused: HloComputation) -> tuple:
        """(bytes read, bytes written) at a fusion's boundary."""
        root = fused.root
        written = 0.0
        shape = ins.shape
        if shape.tuple_shapes is None:
            if root.opcode == "dynamic-update-slice":
                written = shape_size(fused.by_name[root.operands[1]].shape)
            else:
                written = shape_size(shape)
        else:
            for k, sub in enumerate(shape.tuple_shapes):
                if sub.tuple_shapes is not None:
                    written += _leaf_bytes(sub)
                    continue
                if root.opcode == "tuple" and k < len(root.operands):
                    r = fused.by_name[root.operands[k]]
                    if r.opcode == "dynamic-update-slice":
                        written += shape_size(fused.by_name[r.operands[1]].shape)
                        continue
                written += shape_size(sub)
        read = 0.0
        users = self.users(fused)
        for p in fused.parameters:
            if p.shape.tuple_shapes is None:
                read += self.param_read_bytes(p, fused)
            else:
                read += self._tuple_param_read(p, fused, users, p.shape, ())
        return read, written

    def _tuple_param_read(self, p: HloInstruction, fused: HloComputation, users: dict, shape: Shape,
                          index: tuple) -> float:
        if shape.tuple_shapes is not None:
            if not shape.tuple_shapes:
                return 0.0
            return sum(self._tuple_param_read(p, fused, users, s, index + (k,))
                       for k, s in enumerate(shape.tuple_shapes))
        # Follow get-tuple-elements along the leaf's index, as far as they exist.
        gte = p
        for k in index:
            for u in users[gte.name]:
                if u.opcode == "get-tuple-element" and u.parsed.get("index") == k:
                    gte = u
                    break
        return self.param_read_bytes(gte, fused)


# --------------------------------------------------------------------------------------------------
# Handlers: (analyzer, instruction, computation) -> Cost


def _free(a: _Analyzer, ins: HloInstruction, comp: HloComputation) -> Cost:
    return Cost()


def _per_output_element(counter: str, elements: Callable[[Shape], int] = _elements) -> Callable:
    """A handler: the default bytes, plus one flop (``counter="flops"``) or one transcendental per
    element of the output (`elements` counts them; tuple outputs: every leaf, as XLA's handlers of
    all-reduce and rng do)."""
    def handler(a: _Analyzer, ins: HloInstruction, comp: HloComputation) -> Cost:
        c = a.default(ins, comp)
        setattr(c, counter, float(elements(ins.shape)))
        return c
    return handler


_elementwise = _per_output_element("flops")
_transcendental = _per_output_element("transcendentals")
_all_reduce = _per_output_element("flops", _leaf_elements)
_rng = _per_output_element("transcendentals", _leaf_elements)


def _tuple(a: _Analyzer, ins: HloInstruction, comp: HloComputation) -> Cost:
    return Cost(0.0, 0.0, 0.0, shape_size(ins.shape))


def _transpose_is_bitcast(ins: HloInstruction, operand: HloInstruction) -> bool:
    dims = ins.parsed.get("dimensions")
    if dims is None or operand.shape.tuple_shapes is not None:
        return False
    out_m2m = ins.shape.minor_to_major()
    in_m2m = operand.shape.minor_to_major()
    if len(out_m2m) != len(dims) or len(in_m2m) != len(dims):
        return False
    return all(dims[o] == i for o, i in zip(out_m2m, in_m2m))


def _transpose(a: _Analyzer, ins: HloInstruction, comp: HloComputation) -> Cost:
    if _transpose_is_bitcast(ins, a.operand(ins, comp, 0)):
        return Cost()
    return a.default(ins, comp)


def _slice(a: _Analyzer, ins: HloInstruction, comp: HloComputation) -> Cost:
    out = shape_size(ins.shape)
    return Cost(0.0, 0.0, out, out)


def _dynamic_slice(a: _Analyzer, ins: HloInstruction, comp: HloComputation) -> Cost:
    out = shape_size(ins.shape)
    idx = shape_size(a.operand(ins, comp, 1).shape) if len(ins.operands) > 1 else 0.0
    return Cost(0.0, 0.0, out + idx, out)


def _dynamic_update_slice(a: _Analyzer, ins: HloInstruction, comp: HloComputation) -> Cost:
    upd = shape_size(a.operand(ins, comp, 1).shape)
    idx = shape_size(a.operand(ins, comp, 2).shape) if len(ins.operands) > 2 else 0.0
    return Cost(0.0, 0.0, upd + idx, upd)


def _gather(a: _Analyzer, ins: HloInstruction, comp: HloComputation) -> Cost:
    out = shape_size(ins.shape)
    return Cost(0.0, 0.0, out + shape_size(a.operand(ins, comp, 1).shape), out)


def _scatter(a: _Analyzer, ins: HloInstruction, comp: HloComputation) -> Cost:
    n = len(ins.operands) // 2  # operands..., indices, updates...
    by_name = comp.by_name
    upd = sum(shape_size(by_name[o].shape) for o in ins.operands[n + 1:])
    idx = shape_size(by_name[ins.operands[n]].shape)
    c = a.total(ins.parsed["to_apply"]).scaled(_elements(by_name[ins.operands[n + 1]].shape))
    c.bytes_read = 2 * upd + idx
    c.bytes_written = upd
    return c


def _dot(a: _Analyzer, ins: HloInstruction, comp: HloComputation) -> Cost:
    c = a.default(ins, comp)
    lhs = a.operand(ins, comp, 0).shape
    k = 1
    for d in ins.parsed.get("lhs_contracting_dims", ()):
        k *= lhs.dims[d]
    c.flops = 2.0 * _elements(ins.shape) * k
    return c


# Most (output, kernel) index pairs `_valid_positions` counts one at a time per spatial dimension (the
# smaller side is iterated); beyond it a convolution is refused as too large to analyze.
CONV_POSITIONS_LIMIT = 1 << 20


class ConvolutionTooLarge(ValueError):
    """A convolution window whose valid positions are too costly to count (see CONV_POSITIONS_LIMIT)."""


def _count_hits(base: int, step: int, n: int, hi_u: int, base_dil: int) -> int:
    """How many j in [0, n) put base + j*step in [0, hi_u] on a multiple of base_dil (O(1))."""
    lo = 0 if base >= 0 else -(base // step) if base % step == 0 else -base // step + 1
    if hi_u < base:
        return 0
    hi = min((hi_u - base) // step, n - 1)
    if hi < lo:
        return 0
    if base_dil == 1:
        return hi - lo + 1
    g = math.gcd(step, base_dil)
    if base % g:
        return 0
    period = base_dil // g
    first_mod = (-base // g) * pow(step // g, -1, period) % period if period > 1 else 0
    first = lo + (first_mod - lo) % period
    return 0 if first > hi else (hi - first) // period + 1


def _valid_positions(in_size: int, kernel: int, out: int, stride: int, pad_lo: int, base_dil: int,
                     win_dil: int) -> int:
    """Number of (output, kernel) index pairs that hit a real (non-padding, non-hole) input element.

    Same count as the double loop in XLA's GetConvolutionFlops: for each index on the smaller side,
    the matching indices on the other side are counted in closed form. Raises ConvolutionTooLarge
    when both sides exceed CONV_POSITIONS_LIMIT.
    """
    if out <= 0 or kernel <= 0 or in_size <= 0:
        return 0
    if min(kernel, out) > CONV_POSITIONS_LIMIT:
        raise ConvolutionTooLarge(f"{kernel} window and {out} output positions in one dimension; at most "
                                  f"{CONV_POSITIONS_LIMIT} on one side can be analyzed")
    hi_u = (in_size - 1) * base_dil  # largest valid undilated index; undilated index = o*stride + k*win_dil - pad_lo
    if kernel <= out:
        return sum(_count_hits(k * win_dil - pad_lo, stride, out, hi_u, base_dil) for k in range(kernel))
    return sum(_count_hits(o * stride - pad_lo, win_dil, kernel, hi_u, base_dil) for o in range(out))


def convolution_flops(ins: HloInstruction, lhs: Shape, rhs: Shape) -> float:
    """XLA's GetConvolutionFlops (2 flops per multiply-add over valid window positions)."""
    labels = ins.parsed.get("dim_labels")
    out = ins.shape
    if labels is None:  # XLA's default dimension numbers: bf01.../oi01...->bf01...
        sp = tuple(range(2, lhs.rank))
        labels = ConvDimLabels(0, 1, sp, 1, 0, sp, 0, 1, sp)
    window = ins.parsed.get("window") or ()
    input_feature = lhs.dims[labels.lhs_feature]
    output_feature = out.dims[labels.out_feature]
    batch = lhs.dims[labels.lhs_batch]
    positions = 1
    for s, w in enumerate(window):
        positions *= _valid_positions(lhs.dims[labels.lhs_spatial[s]], rhs.dims[labels.kernel_spatial[s]],
                                      out.dims[labels.out_spatial[s]], w.stride, w.pad_lo, w.lhs_dilate,
                                      w.rhs_dilate)
    fgc = ins.parsed.get("feature_group_count", 1)
    bgc = ins.parsed.get("batch_group_count", 1)
    fma = (input_feature // fgc) * output_feature * (batch // bgc) * positions
    return 2.0 * fma


def _convolution(a: _Analyzer, ins: HloInstruction, comp: HloComputation) -> Cost:
    c = a.default(ins, comp)
    try:
        c.flops = convolution_flops(ins, a.operand(ins, comp, 0).shape, a.operand(ins, comp, 1).shape)
    except ConvolutionTooLarge as e:
        raise HloParseError(f"convolution '{ins.name}': {e}", a.module.filename, ins.lineno, ins.col) from None
    return c


def _reduce(a: _Analyzer, ins: HloInstruction, comp: HloComputation) -> Cost:
    sub = a.total(ins.parsed["to_apply"])
    count = _elements(a.operand(ins, comp, 0).shape) - _elements(_first_array(ins.shape))
    c = sub.scaled(count)
    d = a.default(ins, comp)
    c.bytes_read, c.bytes_written = d.bytes_read, d.bytes_written
    return c


def _reduce_window(a: _Analyzer, ins: HloInstruction, comp: HloComputation) -> Cost:
    sub = a.total(ins.parsed["to_apply"])
    size = 1
    for w in ins.parsed.get("window", ()):
        size *= w.size
    c = sub.scaled((size - 1) * _elements(_first_array(ins.shape)))
    d = a.default(ins, comp)
    c.bytes_read, c.bytes_written = d.bytes_read, d.bytes_written
    return c


def _select_and_scatter(a: _Analyzer, ins: HloInstruction, comp: HloComputation) -> Cost:
    sel = a.total(ins.parsed["select"])
    sca = a.total(ins.parsed["scatter"])
    n = _elements(a.operand(ins, comp, 1).shape)
    size = 1
    for w in ins.parsed.get("window", ()):
        size *= w.size
    c = sel.scaled(n * (size - 1)) + sca.scaled(n)
    d = a.default(ins, comp)
    c.bytes_read, c.bytes_written = d.bytes_read, d.bytes_written
    return c


def _map(a: _Analyzer, ins: HloInstruction, comp: HloComputation) -> Cost:
    c = a.total(ins.parsed["to_apply"]).scaled(_elements(ins.shape))
    d = a.default(ins, comp)
    c.bytes_read, c.bytes_written = d.bytes_read, d.bytes_written
    return c


def _sort(a: _Analyzer, ins: HloInstruction, comp: HloComputation) -> Cost:
    c = a.default(ins, comp)
    n = _elements(a.operand(ins, comp, 0).shape)
    c.flops = float(n * ((n - 1).bit_length() if n > 1 else 0))  # n * Log2Ceiling(n)
    return c


def _fft(a: _Analyzer, ins: HloInstruction, comp: HloComputation) -> Cost:
    c = a.default(ins, comp)
    log_factors = 1
    for n in ins.parsed.get("fft_length", ()):
        log_factors *= max(n, 1).bit_length() - 1  # Log2Floor
    c.flops = 2.0 * 4 * log_factors * _elements(a.operand(ins, comp, 0).shape)
    return c


def _triangular_solve(a: _Analyzer, ins: HloInstruction, comp: HloComputation) -> Cost:
    # Half of the triangular matrix is read.
    amat = a.operand(ins, comp, 0).shape
    b = a.operand(ins, comp, 1).shape
    flops = 2.0 * (amat.dims[-1] if amat.dims else 1) * _elements(b)
    return Cost(flops, 0.0, shape_size(amat) / 2.0 + shape_size(b), shape_size(ins.shape))


def _cholesky(a: _Analyzer, ins: HloInstruction, comp: HloComputation) -> Cost:
    # Half of the operand is read and half of the output written (one triangle).
    amat = a.operand(ins, comp, 0).shape
    flops = float(((amat.dims[-1] if amat.dims else 1) * _elements(amat)) // 3)
    half = shape_size(amat) / 2.0
    return Cost(flops, 0.0, half, half)


def _scan(a: _Analyzer, ins: HloInstruction, comp: HloComputation) -> Cost:
    # XLA (jaxlib 0.10.2) scales the step computation by the elements of operand 1 (the first
    # carry, or the second input); with a single operand, we take the scan length instead.
    if len(ins.operands) > 1:
        count = _elements(a.operand(ins, comp, 1).shape)
    else:
        dims = ins.parsed.get("dimensions") or (0,)
        shape = a.operand(ins, comp, 0).shape
        count = shape.dims[dims[0]] if dims[0] < shape.rank else 1
    c = a.total(ins.parsed["to_apply"]).scaled(count)
    d = a.default(ins, comp)
    c.bytes_read, c.bytes_written = d.bytes_read, d.bytes_written
    return c


def _fusion(a: _Analyzer, ins: HloInstruction, comp: HloComputation) -> Cost:
    fused = a.comps[ins.parsed["calls"][0]]
    if ins.attrs.get("kind") == "kCustom":
        for inner in fused.instructions:  # XLA prices a custom fusion as its gather/scatter
            if inner.opcode == "gather":
                return _gather(a, inner, fused)
            if inner.opcode == "scatter":
                return _scatter(a, inner, fused)
    sub = a.total(fused.name)
    read, written = a.fusion_bytes(ins, fused)
    return Cost(sub.flops, sub.transcendentals, read, written)


def _while(a: _Analyzer, ins: HloInstruction, comp: HloComputation) -> Cost:
    # One iteration (XLA does not know or use the trip count here).
    return a.total(ins.parsed["body"]) + a.total(ins.parsed["condition"])


def _conditional(a: _Analyzer, ins: HloInstruction, comp: HloComputation) -> Cost:
    branches = ins.parsed.get("branch_computations")
    if branches is None:
        branches = (ins.parsed["true_computation"], ins.parsed["false_computation"])
    costs = [a.total(b) for b in branches]
    # Per-metric maximum; bytes_accessed is maximized as a whole (XLA's key), then split.
    flops = max(c.flops for c in costs)
    trans = max(c.transcendentals for c in costs)
    accessed = max(c.bytes_accessed for c in costs)
    written = max(c.bytes_written for c in costs)
    return Cost(flops, trans, accessed - written, written)


def _call(a: _Analyzer, ins: HloInstruction, comp: HloComputation) -> Cost:
    c = a.total(ins.parsed["to_apply"])
    return Cost(c.flops, c.transcendentals, c.bytes_read, c.bytes_written)


def _async_start(a: _Analyzer, ins: HloInstruction, comp: HloComputation) -> Cost:
    # Priced as the wrapped computation (like a call); the matching async-done is a plain op.
    calls = ins.parsed.get("calls")
    if not calls:
        return a.default(ins, comp)
    return a.total(calls[0]) + Cost()  # a copy: totals are memoized


def _ragged_dot(a: _Analyzer, ins: HloInstruction, comp: HloComputation) -> Cost:
    # XLA prices one group's matmul row: 2 * (rhs elements / groups), whatever the lhs rows.
    c = a.default(ins, comp)
    rhs = a.operand(ins, comp, 1).shape
    groups = 1
    for d in ins.parsed.get("rhs_group_dims", ()):
        groups *= rhs.dims[d]
    c.flops = 2.0 * (_elements(rhs) // max(groups, 1))
    return c


def _custom_call(a: _Analyzer, ins: HloInstruction, comp: HloComputation) -> Cost:
    # XLA: "unknown" -> flops = bytes accessed = output bytes = -1.
    return Cost(-1.0, 0.0, 0.0, -1.0)


_HANDLERS: dict = {}
for _op in ELEMENTWISE_OPCODES:
    _HANDLERS[_op] = _transcendental if _op in TRANSCENDENTAL_OPCODES else _elementwise
for _op in ("parameter", "constant", "get-tuple-element", "bitcast", "after-all", "add-dependency", "domain"):
    _HANDLERS[_op] = _free
_HANDLERS.update({
    "tuple": _tuple, "transpose": _transpose, "slice": _slice, "dynamic-slice": _dynamic_slice,
    "dynamic-update-slice": _dynamic_update_slice, "gather": _gather, "scatter": _scatter,
    "dot": _dot, "convolution": _convolution, "reduce": _reduce, "reduce-window": _reduce_window,
    "select-and-scatter": _select_and_scatter, "map": _map, "sort": _sort, "all-reduce": _all_reduce,
    "rng": _rng, "rng-bit-generator": _rng, "fft": _fft, "triangular-solve": _triangular_solve,
    "cholesky": _cholesky, "fusion": _fusion, "while": _while, "conditional": _conditional,
    "call": _call, "custom-call": _custom_call, "all-reduce-start": _all_reduce,
    "collective-reduce": _all_reduce, "async-start": _async_start, "ragged-dot": _ragged_dot,
    "scaled-dot": _dot, "scan": _scan,
})


# --------------------------------------------------------------------------------------------------
# Public API


def instruction_cost(ins: HloInstruction, comp: HloComputation, module: HloModule,
                     _analyzer: Optional[_Analyzer] = None) -> Cost:
    """Cost of one instruction of `comp` as XLA's HloCostAnalysis assigns it.

    Called computations (fusion bodies, reducers, while bodies, branches) are priced recursively,
    so a fusion's cost holds its fused flops and its boundary bytes, a while's one iteration.
    """
    return (_analyzer or _Analyzer(module)).cost(ins, comp)


def computation_cost(comp: HloComputation, module: HloModule) -> Cost:
    """Sum over every instruction of `comp` (what XLA's visitor totals for that computation)."""
    a = _Analyzer(module)
    c = Cost()
    for ins in comp.instructions:
        c += a.cost(ins, comp)
    return c


def instruction_costs(comps: Sequence[HloComputation], module: HloModule) -> list:
    """`instruction_cost` of every instruction of `comps` (computations of `module`), one analysis
    pass for all: [[Cost per instruction] per computation]."""
    a = _Analyzer(module)
    return [[a.cost(ins, comp) for ins in comp.instructions] for comp in comps]


def computation_costs(module: HloModule) -> dict:
    """Per-instruction costs for every computation: {computation name: [Cost per instruction]}.

    Instructions inside fused computations are priced as if standalone (their bytes do not enter
    the fusion's cost, which only counts its boundary).
    """
    return {comp.name: costs for comp, costs in zip(module.computations,
                                                   instruction_costs(module.computations, module))}


def module_cost(module: HloModule) -> Cost:
    """Program total as XLA totals it: the entry computation's instructions (callees recursively)."""
    return _Analyzer(module).total(module.entry.name) + Cost()  # a copy: totals are memoized


# --------------------------------------------------------------------------------------------------
# Oracle (needs jax; private API)


def _xla_cost_analysis_oracle(text: str) -> dict:
    """XLA's own HloCostAnalysis of HLO text, through jaxlib's private binding (CPU client).

    Returns the raw property dict ("flops", "transcendentals", "bytes accessed",
    "bytes accessedout{}", ...); absent keys mean 0. Raises on text XLA's parser rejects.
    """
    from jax._src import xla_bridge  # lazy: the core package does not need jax
    from jax._src.lib import _jax, xla_client

    hlo_mod = getattr(xla_client, "hlo", None)
    from_text = getattr(hlo_mod, "hlo_module_from_text", None) or getattr(xla_client._xla, "hlo_module_from_text")
    module = from_text(text)
    return dict(_jax.hlo_module_cost_analysis(xla_bridge.get_backend("cpu"), module))


def _oracle_totals(text: str) -> Cost:
    """The oracle's program totals as a Cost (bytes_written = the output bytes XLA reports)."""
    d = _xla_cost_analysis_oracle(text)
    accessed = float(d.get("bytes accessed", 0.0))
    written = float(d.get("bytes accessedout{}", 0.0))
    return Cost(float(d.get("flops", 0.0)), float(d.get("transcendentals", 0.0)), accessed - written, written)
