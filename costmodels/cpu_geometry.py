"""What XLA:CPU's code generator sees of a kernel: the geometry features of cpu-kind targets.

On XLA:CPU a loop fusion is one loop nest over its output (innermost loop over the minor dimension,
vectorized), whose body evaluates every member at each index it is needed; dots and convolutions are
library calls (Eigen) whose time follows M, N, K and the window. The TPU tile geometry
(`costmodels.features.GEOMETRY_GROUPS`) says nothing of this, so on cpu-kind targets the geometry
block of a kernel's features carries the rows below instead (`CPU_GEOMETRY_GROUPS`; counts, sizes and
bytes as log2(1 + x), flags 0/1):

  loop [14]     output elements and bytes, rank, rows (elements / minor extent: the trip count of the
                loops around the vectorized one), minor extent, its bytes and tail modulo 8, minor < 8,
                the next three extents in minor-to-major order, element bytes, number of outputs,
                16-bit float / f64 / integer types among the members
  inputs [7]    number of inputs, total bytes, bytes of inputs read broadcast (fewer elements than the
                output), of inputs read whole, of those read in another minor order (a transposed read),
                the largest input's bytes, number of broadcast inputs
  work [12]     member count; evaluations of cheap arithmetic, divide/sqrt, transcendental, convert and
                data-movement members (elements each is evaluated at, propagated from the root: a
                member under a reduce is evaluated over the reduce's input); elements a reduce reads;
                reduce-window evaluations; their total and total per output element; only data
                movement; has a dynamic-update-slice
  reduce [6]    has a reduce, the root is one, it reduces the minor dimension (a row reduction),
                reduction factor, kept elements, number of reduces
  dot [9]       has a dot, M, N, K, batch, matrix-vector, lhs / rhs contracting dimension is minor, flops
  conv [7]      has a convolution, flops, window elements, input features (per group), output features,
                feature groups, output positions
  memory [3]    bytes touched (inputs + outputs), the same per 256 KiB (XLA:CPU's parallel task
                partitioning grows with it), bytes touched per output element

Measured on the in-program XLA:CPU dataset (docs/lab-notes/2026-11-27-xla-cpu-geometry-features.md): the same kernel runs 1.7x
slower inside one program than inside another, so these features bound what a kernel-level model can
do there; they are what the kernel itself decides.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

__all__ = ["CPU_GEOMETRY_GROUPS", "CPU_GEOMETRY_NAMES", "cpu_geometry_row", "cpu_geometry_matrix"]

CPU_GEOMETRY_GROUPS: dict = {
    "loop": ("cpu_out_elements", "cpu_out_bytes", "cpu_out_rank", "cpu_out_rows", "cpu_out_minor",
             "cpu_out_minor_bytes", "cpu_out_minor_tail8", "cpu_out_minor_lt8", "cpu_out_dim1", "cpu_out_dim2",
             "cpu_out_dim3", "cpu_out_dtype_bytes", "cpu_n_outputs", "cpu_any_16bit_float"),
    "inputs": ("cpu_n_inputs", "cpu_in_bytes", "cpu_in_broadcast_bytes", "cpu_in_whole_bytes",
               "cpu_in_transposed_bytes", "cpu_in_max_bytes", "cpu_n_broadcast_inputs"),
    "work": ("cpu_n_members", "cpu_ev_cheap", "cpu_ev_divide", "cpu_ev_transcendental", "cpu_ev_convert",
             "cpu_ev_move", "cpu_ev_reduce_in", "cpu_ev_reduce_window", "cpu_ev_total", "cpu_ev_per_output",
             "cpu_only_data_movement", "cpu_has_dynamic_update_slice"),
    "reduce": ("cpu_has_reduce", "cpu_root_reduce", "cpu_reduce_minor", "cpu_reduce_factor", "cpu_reduce_kept",
               "cpu_n_reduces"),
    "dot": ("cpu_has_dot", "cpu_dot_M", "cpu_dot_N", "cpu_dot_K", "cpu_dot_batch", "cpu_dot_matvec",
            "cpu_dot_lhs_k_minor", "cpu_dot_rhs_k_minor", "cpu_dot_flops"),
    "conv": ("cpu_has_conv", "cpu_conv_flops", "cpu_conv_window", "cpu_conv_in_features", "cpu_conv_out_features",
             "cpu_conv_groups", "cpu_conv_out_positions"),
    "memory": ("cpu_bytes_touched", "cpu_bytes_per_256k", "cpu_bytes_per_output"),
}
CPU_GEOMETRY_NAMES: tuple = tuple(n for names in CPU_GEOMETRY_GROUPS.values() for n in names)
_C = {n: i for i, n in enumerate(CPU_GEOMETRY_NAMES)}

_CHEAP = frozenset("""add subtract multiply maximum minimum negate abs and or xor not compare select clamp sign floor
ceil round-nearest-afz round-nearest-even is-finite shift-left shift-right-logical shift-right-arithmetic popcnt
count-leading-zeros real imag complex""".split())
_DIVIDE = frozenset("divide remainder sqrt rsqrt cbrt".split())
_TRANSCENDENTAL = frozenset("""exponential exponential-minus-one log log-plus-one logistic tanh erf power atan2 sine
cosine tan""".split())
_CONVERT = frozenset("convert bitcast-convert reduce-precision".split())
_MOVE = frozenset("""broadcast slice dynamic-slice pad reshape bitcast iota reverse concatenate transpose copy gather
dynamic-update-slice scatter""".split())
_LIBRARY = frozenset({"reduce", "reduce-window", "dot", "convolution"})


def _l2(x: float) -> float:
    return math.log2(1.0 + max(float(x), 0.0))


def _leaves(shape: Any) -> list:
    return shape.leaves() if shape.is_tuple else [shape]


def _minor(shape: Any) -> int:
    return shape.dims[shape.minor_to_major()[0]] if shape.rank else 1


def _evaluations(kernel: Any, out_elements: float) -> dict:
    """Member -> elements it is evaluated at: the root at every output element, an operand at its
    user's count (the largest over users), an operand of a reduce, dot or convolution over its own
    shape, of a reduce-window at the window's reads."""
    comp = kernel.computation
    insts = comp.instructions
    members = set(kernel.members)
    count = {kernel.root: float(out_elements)}
    for m in reversed(kernel.members):  # topological order reversed: users before operands
        c = count.get(m, 0.0)
        ins = insts[m]
        for o in comp.operands[m]:
            if o not in members:
                continue
            shape = insts[o].shape
            if ins.opcode == "reduce-window":
                cc = c * max(1.0, shape.elements / max(ins.shape.elements, 1))
            elif ins.opcode in _LIBRARY:
                cc = float(shape.elements)
            else:
                cc = c
            count[o] = max(count.get(o, 0.0), cc)
    return count


def cpu_geometry_row(kernel: Any) -> np.ndarray:
    """The `CPU_GEOMETRY_NAMES` row of one kernel (float64)."""
    comp = kernel.computation
    insts = comp.instructions
    v = np.zeros(len(CPU_GEOMETRY_NAMES), np.float64)

    def put(name: str, x: float) -> None:
        v[_C[name]] = x

    root = insts[kernel.root]
    outs = _leaves(root.shape)
    out = outs[0]
    oe = float(sum(s.elements for s in outs))
    ob = float(sum(s.bytes for s in outs))
    minor = _minor(out)
    esize = out.bytes / max(out.elements, 1)
    mtm = out.minor_to_major() if out.rank else ()
    put("cpu_out_elements", _l2(oe))
    put("cpu_out_bytes", _l2(ob))
    put("cpu_out_rank", out.rank)
    put("cpu_out_rows", _l2(out.elements / max(minor, 1)))
    put("cpu_out_minor", _l2(minor))
    put("cpu_out_minor_bytes", _l2(minor * esize))
    put("cpu_out_minor_tail8", minor % 8)
    put("cpu_out_minor_lt8", float(minor < 8))
    for j in (1, 2, 3):
        put(f"cpu_out_dim{j}", _l2(out.dims[mtm[j]]) if len(mtm) > j else 0.0)
    put("cpu_out_dtype_bytes", esize)
    put("cpu_n_outputs", len(outs))
    # ---- inputs
    total = broadcast = whole = transposed = largest = 0.0
    n_broadcast = 0
    for i in kernel.inputs:
        s = insts[i].shape
        if s.is_tuple:
            continue
        b = float(s.bytes)
        total += b
        largest = max(largest, b)
        if s.elements * 2 <= out.elements:
            broadcast += b
            n_broadcast += 1
        else:
            whole += b
            if s.rank >= 2 and out.rank >= 2 and s.elements == out.elements and _minor(s) != minor:
                transposed += b
    put("cpu_n_inputs", len(kernel.inputs))
    put("cpu_in_bytes", _l2(total))
    put("cpu_in_broadcast_bytes", _l2(broadcast))
    put("cpu_in_whole_bytes", _l2(whole))
    put("cpu_in_transposed_bytes", _l2(transposed))
    put("cpu_in_max_bytes", _l2(largest))
    put("cpu_n_broadcast_inputs", n_broadcast)
    # ---- work, reduce, dot, conv
    count = _evaluations(kernel, out.elements)
    ev = {"cheap": 0.0, "divide": 0.0, "transcendental": 0.0, "convert": 0.0, "move": 0.0, "reduce_in": 0.0,
          "reduce_window": 0.0}
    dtypes: set = set()
    reduces = []
    only_move = True
    has_dus = False
    for m in kernel.members:
        ins = insts[m]
        op = ins.opcode
        c = count.get(m, 0.0)
        dtypes.update(s.dtype for s in _leaves(ins.shape))
        only_move &= op in _MOVE
        has_dus |= op == "dynamic-update-slice"
        if op in _CHEAP:
            ev["cheap"] += c
        elif op in _DIVIDE:
            ev["divide"] += c
        elif op in _TRANSCENDENTAL:
            ev["transcendental"] += c
        elif op in _CONVERT:
            ev["convert"] += c
        elif op in _MOVE:
            ev["move"] += c
        elif op == "reduce":
            reduces.append(m)
            ops = comp.operands[m]
            ev["reduce_in"] += sum(insts[o].shape.elements for o in ops[:max(1, len(ops) // 2)])
        elif op == "reduce-window":
            ev["reduce_window"] += c
        elif op == "dot":
            a, b = insts[comp.operands[m][0]].shape, insts[comp.operands[m][1]].shape
            lc = tuple(ins.parsed.get("lhs_contracting_dims") or ())
            rc = tuple(ins.parsed.get("rhs_contracting_dims") or ())
            lb = tuple(ins.parsed.get("lhs_batch_dims") or ())
            K = math.prod(a.dims[d] for d in lc)
            B = math.prod(a.dims[d] for d in lb)
            M, N = a.elements / max(K * B, 1), b.elements / max(K * B, 1)
            put("cpu_has_dot", 1.0)
            put("cpu_dot_M", _l2(M))
            put("cpu_dot_N", _l2(N))
            put("cpu_dot_K", _l2(K))
            put("cpu_dot_batch", _l2(B))
            put("cpu_dot_matvec", float(M <= 1 or N <= 1))
            put("cpu_dot_lhs_k_minor", float(a.rank > 0 and a.minor_to_major()[0] in lc))
            put("cpu_dot_rhs_k_minor", float(b.rank > 0 and b.minor_to_major()[0] in rc))
            put("cpu_dot_flops", _l2(2.0 * M * N * K * B))
        elif op == "convolution":
            rhs = insts[comp.operands[m][1]].shape
            labels = ins.parsed.get("dim_labels")
            window = ins.parsed.get("window") or ()
            w = math.prod(x.size for x in window) if window else 1
            out_f = ins.shape.dims[labels.out_feature] if labels is not None else (ins.shape.dims[1] if ins.shape.rank > 1 else 1)
            in_f = rhs.dims[labels.kernel_input_feature] if labels is not None else (rhs.dims[1] if rhs.rank > 1 else 1)
            groups = int(ins.parsed.get("feature_group_count", 1) or 1)
            positions = ins.shape.elements / max(out_f, 1)
            put("cpu_has_conv", 1.0)
            put("cpu_conv_flops", _l2(2.0 * positions * out_f * in_f * w))
            put("cpu_conv_window", _l2(w))
            put("cpu_conv_in_features", _l2(in_f))
            put("cpu_conv_out_features", _l2(out_f))
            put("cpu_conv_groups", _l2(groups))
            put("cpu_conv_out_positions", _l2(positions))
    put("cpu_any_16bit_float", float(bool(dtypes & {"bf16", "f16"})))
    put("cpu_n_members", len(kernel.members))
    for k, x in ev.items():
        put("cpu_ev_" + k, _l2(x))
    work = sum(ev.values())
    put("cpu_ev_total", _l2(work))
    put("cpu_ev_per_output", _l2(work / max(oe, 1.0)))
    put("cpu_only_data_movement", float(only_move))
    put("cpu_has_dynamic_update_slice", float(has_dus))
    if reduces:
        r = reduces[-1]  # the last in topological order: the root's, when the root is one
        ins = insts[r]
        operand = insts[comp.operands[r][0]].shape
        kept = _leaves(ins.shape)[0]
        put("cpu_has_reduce", 1.0)
        put("cpu_root_reduce", float(r == kernel.root))
        put("cpu_reduce_minor", float(operand.rank == 0 or operand.minor_to_major()[0] in ins.parsed.get("dimensions", ())))
        put("cpu_reduce_factor", _l2(operand.elements / max(kept.elements, 1)))
        put("cpu_reduce_kept", _l2(kept.elements))
        put("cpu_n_reduces", len(reduces))
    touched = total + ob
    put("cpu_bytes_touched", _l2(touched))
    put("cpu_bytes_per_256k", _l2(touched / 262144.0))
    put("cpu_bytes_per_output", _l2(touched / max(oe, 1.0)))
    return v


def cpu_geometry_matrix(kernels: Sequence[Any]) -> np.ndarray:
    """[len(kernels), len(CPU_GEOMETRY_NAMES)] rows of `cpu_geometry_row`."""
    if not kernels:
        return np.zeros((0, len(CPU_GEOMETRY_NAMES)))
    return np.stack([cpu_geometry_row(k) for k in kernels])
