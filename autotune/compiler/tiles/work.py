"""Device work (`autotune.compiler.tiles`): what a kernel costs the hardware models, from XLA's static
numbers re-priced where XLA's figure is not a device's work (sorts, FFTs, scans, batch norms), with the
bytes collectives send over the interconnect and infeed/outfeed over the host link; `hero_flops`."""
from __future__ import annotations

import math
import re
import weakref
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from autotune.compiler.hlo import Shape, dtype_bytes


def hero_flops(ins: Any, opshapes: Sequence[Shape]) -> float:
    """Matrix-unit flops of a dot/convolution (2 x output elements x contracted size), as
    `TilingInfo` counts them; 0.0 when its dimension numbers cannot be read."""
    try:
        out, lhs, rhs = ins.shape, opshapes[0], opshapes[1]
        if ins.opcode == "convolution":
            dl = ins.parsed["dim_labels"]
            cin = rhs.dims[dl.kernel_input_feature]
            wsz = float(np.prod([rhs.dims[d] for d in dl.kernel_spatial])) if dl.kernel_spatial else 1.0
            K = cin * wsz
        else:
            lc = tuple(ins.parsed.get("lhs_contracting_dims", ()) or ())
            K = float(np.prod([lhs.dims[d] for d in lc])) if lc else 1.0
        return 2.0 * float(max(out.elements, 1)) * K
    except Exception:  # noqa: BLE001 - odd dims: no matrix-unit work (as TilingInfo's fallback)
        return 0.0


# --------------------------------------------------------------------------------------------------
# Device work: what a kernel costs the hardware models, from XLA's static numbers (`kernel.cost`)
# except for the opcodes whose XLA figure is not the work a device does (docs/simulator.md, 1b).

MATMUL_OPCODES = frozenset({"dot", "convolution", "ragged-dot", "scaled-dot"})
COLLECTIVE_OPCODES = frozenset({"all-gather", "all-reduce", "all-to-all", "collective-broadcast",
                                "collective-permute", "collective-reduce", "ragged-all-to-all",
                                "reduce-scatter"})
HOST_TRANSFER_OPCODES = frozenset({"infeed", "outfeed"})
# Vector ops per element of the (largest) operand of a batch-norm op (assumption, docs/simulator.md):
# training = mean, variance (2 reductions) + normalize-scale-shift; grad = 3 reductions + 5 ops.
BATCH_NORM_OPS_PER_ELEMENT = {"batch-norm-training": 7.0, "batch-norm-inference": 4.0,
                              "batch-norm-grad": 11.0}
_WORK_OPCODES = (frozenset({"sort", "topk", "fft", "scan", "custom-call"}) | COLLECTIVE_OPCODES
                 | HOST_TRANSFER_OPCODES | frozenset(BATCH_NORM_OPS_PER_ELEMENT))


@dataclass(frozen=True)
class DeviceWork:
    """Static work of a kernel as the hardware models see it: vector flops and transcendentals
    (all of the kernel's, matrix-unit flops included), and bytes that leave the chip: over the
    inter-chip interconnect (collectives) and over the host link (infeed/outfeed)."""

    flops: float
    transcendentals: float
    interconnect_bytes: float = 0.0
    host_bytes: float = 0.0


def _log2_ceil(n: float) -> int:
    return int(math.ceil(math.log2(n))) if n > 1 else 0


def _leaf_bytes(shape: Shape) -> float:
    return float(sum(l.elements * dtype_bytes(l.dtype) for l in shape.leaves() if l.dtype != "token"))


def collective_group_size(ins: Any, module_attrs: dict) -> int:
    """Devices in one group of a collective: the first of `replica_groups={{0,1},...}` or of the
    iota form `[groups,size]<=[...]`; all replicas (the module's replica_count x num_partitions,
    default 1) for an empty list."""
    text = str(ins.attrs.get("replica_groups", "")).strip()
    m = re.match(r"\[\s*\d+\s*,\s*(\d+)\s*\]", text)
    if m:
        return max(int(m.group(1)), 1)
    m = re.search(r"\{\s*\{([^{}]*)\}", text)
    if m:
        return max(len([x for x in m.group(1).split(",") if x.strip()]), 1)

    def count(key: str) -> int:
        try:
            return max(int(str(module_attrs.get(key, "1")).strip()), 1)
        except ValueError:
            return 1
    return count("replica_count") * count("num_partitions")


def _interconnect_bytes(ins: Any, operand_shapes: Sequence[Shape], module_attrs: dict) -> float:
    """Bytes one device sends over the interconnect for a collective (ring algorithms)."""
    op = ins.opcode
    data_in = _leaf_bytes(operand_shapes[0]) if operand_shapes else 0.0
    out = _leaf_bytes(ins.shape)
    if op == "collective-permute":
        pairs = re.findall(r"\{\s*(\d+)\s*,\s*(\d+)\s*\}", str(ins.attrs.get("source_target_pairs", "")))
        return data_in if any(a != b for a, b in pairs) else 0.0
    g = collective_group_size(ins, module_attrs)
    if g <= 1:
        return 0.0
    share = (g - 1) / g
    if op in ("all-reduce", "collective-reduce"):
        return 2.0 * share * sum(_leaf_bytes(s) for s in operand_shapes)  # reduce-scatter + all-gather
    if op == "all-gather":
        return share * out
    if op == "collective-broadcast":
        return out
    return share * data_in  # reduce-scatter, all-to-all, ragged-all-to-all


def _member_work(ins: Any, operand_shapes: Sequence[Shape], xla: Any, module: Any) -> tuple:
    """(flops, transcendentals, interconnect bytes, host bytes) of one instruction for the device."""
    op = ins.opcode
    flops, trans = max(xla.flops, 0.0), max(xla.transcendentals, 0.0)
    if op in ("sort", "topk"):
        # Bitonic sort of each row of m along `dimensions`: ceil(log2 m)(ceil(log2 m)+1)/2 stages,
        # each one compare (the comparator's flops) and one select per sorted operand per element
        # (topk as a sort of its rows: an upper bound of XLA:TPU's partial sort).
        shape = operand_shapes[0] if operand_shapes else ins.shape
        dims = ins.parsed.get("dimensions") or (shape.rank - 1,)
        m = shape.dims[dims[0]] if shape.rank and 0 <= dims[0] < shape.rank else 1
        L = _log2_ceil(m)
        compare = 1.0
        callee = ins.parsed.get("to_apply")
        if callee and module is not None:
            from autotune.compiler.analysis import computation_cost
            compare = max(computation_cost(module.computations_by_name[callee], module).flops, 1.0)
        selects = len(operand_shapes) if op == "sort" else 2.0
        flops = float(shape.elements) * L * (L + 1) / 2.0 * (compare + selects)
    elif op == "fft":
        # 4 complex multiply-adds (8 flops) per element and radix-2 stage, over all transformed dims.
        n = math.prod(ins.parsed.get("fft_length") or (1,))
        elements = operand_shapes[0].elements if operand_shapes else ins.shape.elements
        flops = 8.0 * float(elements) * math.log2(max(n, 1))
    elif op == "scan":
        # The step computation runs once per element of the scanned dimension.
        shape = operand_shapes[0] if operand_shapes else ins.shape
        dims = ins.parsed.get("dimensions") or (0,)
        length = shape.dims[dims[0]] if shape.rank and 0 <= dims[0] < shape.rank else 1
        if module is not None and ins.parsed.get("to_apply"):
            from autotune.compiler.analysis import computation_cost
            step = computation_cost(module.computations_by_name[ins.parsed["to_apply"]], module)
            flops, trans = length * max(step.flops, 0.0), length * max(step.transcendentals, 0.0)
    elif op in BATCH_NORM_OPS_PER_ELEMENT:
        flops = BATCH_NORM_OPS_PER_ELEMENT[op] * float(operand_shapes[0].elements if operand_shapes else 0)
    net = _interconnect_bytes(ins, operand_shapes, getattr(module, "attrs", {}) or {}) \
        if op in COLLECTIVE_OPCODES else 0.0
    host = 0.0
    if op == "infeed":
        host = _leaf_bytes(ins.shape)
    elif op == "outfeed":
        host = _leaf_bytes(operand_shapes[0]) if operand_shapes else 0.0
    return flops, trans, net, host


# computation -> its instructions whose opcode is in _WORK_OPCODES (weak: a computation's entry goes with it)
_WORK_NODES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def device_work(kernel: Any) -> DeviceWork:
    """The kernel's `DeviceWork`: `kernel.cost` (negative "unknown" figures as 0), with the members
    whose opcode XLA prices differently from the work a device does re-priced (docs/simulator.md)."""
    cost = kernel.cost
    comp = getattr(kernel, "computation", None)
    space = getattr(kernel, "space", None)
    insts = comp.instructions if comp is not None and space is not None else ()
    members = []
    if insts:
        try:
            work = _WORK_NODES.get(comp)
        except TypeError:  # a duck-typed computation without weak references: not cached
            work = None
        if work is None:
            work = frozenset(i for i, ins in enumerate(insts) if ins.opcode in _WORK_OPCODES)
            try:
                _WORK_NODES[comp] = work
            except TypeError:
                pass
        if work:
            members = [m for m in getattr(kernel, "members", ()) if m in work]
    if not members:
        return DeviceWork(max(cost.flops, 0.0), max(cost.transcendentals, 0.0))
    flops, trans = cost.flops, cost.transcendentals
    node_costs = space.node_costs[kernel.comp]
    module = space.program.module
    net = host = 0.0
    for m in members:
        xla = node_costs[m]
        f, t, n, h = _member_work(insts[m], [insts[o].shape for o in comp.operands[m]], xla, module)
        flops += f - xla.flops  # (a custom-call's -1 "unknown" becomes 0 work)
        trans += t - xla.transcendentals
        net += n
        host += h
    return DeviceWork(max(flops, 0.0), max(trans, 0.0), net, host)
