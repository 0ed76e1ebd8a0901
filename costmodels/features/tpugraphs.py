"""TpuGraphs interop (`costmodels.features`): the dataset's 140-column node features of a kernel or a
whole module, and the pruning of a layout graph to its configurable nodes' neighbourhoods."""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from costmodels.features.schema import opcode_id


# TpuGraphs-compatible node features (140 columns)
TPUGRAPHS_NODE_DIM = 140
_TG_TYPES = ("invalid", "pred", "s8", "s16", "s32", "s64", "u8", "u16", "u32", "u64", "f16", "f32", "f64",
             "bf16", "c64", "c128", "tuple", "opaque", "token")
_TG_BITS = {"pred": 8, "s8": 8, "u8": 8, "s16": 16, "u16": 16, "f16": 16, "bf16": 16, "s32": 32, "u32": 32,
            "f32": 32, "s64": 64, "u64": 64, "f64": 64, "c64": 64, "c128": 128}


def _tg_block(vals: Sequence[float], n: int, sum_prod: bool = True) -> list:
    vals = [float(v) for v in vals]
    out = (vals[:n] + [0.0] * n)[:n]
    if sum_prod:
        out += [float(sum(vals)), float(math.prod(vals)) if vals else 0.0]
    return out


def _tg_row(ins: Any, is_root: bool) -> list:
    shape = ins.shape
    is_tuple = getattr(shape, "tuple_shapes", None) is not None
    dtype = "tuple" if is_tuple else shape.dtype
    r: list = [float(is_root), 0.0]                                   # 0 is_root, 1 element_size_in_bits (0)
    r += [float(dtype == t) for t in _TG_TYPES]                        # 2-20 element type one-hot
    dims = [] if is_tuple else [int(d) for d in shape.dims]
    r += _tg_block(dims, 6)                                            # 21-26 dims, 27 sum, 28 product
    r += [float(len(shape.tuple_shapes)) if is_tuple else 0.0]         # 29 tuple_shapes_size
    r += [float(ins.parameter_number) if ins.opcode == "parameter" and ins.parameter_number is not None else 0.0]  # 30
    p = ins.parsed
    d = p.get("dimensions")
    r += _tg_block(d if isinstance(d, tuple) else [], 6)               # 31-36, 37 sum, 38 product
    win = p.get("window") or ()
    for f in ("size", "stride", "pad_lo", "pad_hi", "rhs_dilate", "lhs_dilate"):
        r += _tg_block([getattr(w, f) for w in win], 6)                # 39-86: 6 blocks of 8
    r += _tg_block([float(bool(w.reversal)) for w in win], 6, False)   # 87-92 window_reversal
    dl = p.get("dim_labels")
    if dl is not None and not isinstance(dl, str):                     # 93-104 convolution dim numbers
        r += [dl.lhs_batch, dl.lhs_feature] + _tg_block(dl.lhs_spatial, 2, False)
        r += [dl.kernel_input_feature, dl.kernel_output_feature] + _tg_block(dl.kernel_spatial, 2, False)
        r += [dl.out_batch, dl.out_feature] + _tg_block(dl.out_spatial, 2, False)
    else:
        r += [0.0] * 12
    dflt = 1.0 if ins.opcode == "convolution" else 0.0
    r += [float(p.get("feature_group_count") or dflt), float(p.get("batch_group_count") or dflt)]  # 105, 106
    sl = p.get("slice") or ()
    r += _tg_block([s.start for s in sl], 2)                           # 107-110 slice start (2, sum, prod)
    r += _tg_block([s.stride for s in sl], 2)                          # 111-114 slice stride
    r += _tg_block([s.limit for s in sl], 2)                           # 115-118 slice limit
    ds = p.get("dynamic_slice_sizes")
    r += _tg_block(ds if isinstance(ds, tuple) else [], 2)             # 119-122 dynamic slice sizes
    pad = p.get("padding") if ins.opcode == "pad" else None
    pad = pad if pad and not isinstance(pad, str) else ()
    r += _tg_block([x.lo for x in pad], 2)                             # 123-126 edge padding low
    r += _tg_block([x.hi for x in pad], 2)                             # 127-130 edge padding high
    lc = p.get("lhs_contracting_dims")
    rc = p.get("rhs_contracting_dims")
    r += [float(lc[0]) if isinstance(lc, tuple) and lc else 0.0,       # 131 dot lhs contracting dim
          float(rc[0]) if isinstance(rc, tuple) and rc else 0.0]       # 132 dot rhs contracting dim
    r += [float(bool(p.get("is_stable", False)))]                      # 133 is_stable
    mtm = [] if is_tuple else list(shape.minor_to_major())
    r += _tg_block(mtm, 6, False)                                      # 134-139 layout minor_to_major
    return r


def tpugraphs_module_features(module: Any) -> tuple:
    """TpuGraphs-style arrays of a whole module, as the layout collection's graphs: (node_feat [N,140]
    float32, node_opcode [N] int64, edge_index [E,2] int64 rows [consumer, producer], node names
    [(computation, instruction)]). Nodes are every instruction of every computation in module order
    (tpu_graphs' HloEncoder numbers nodes in the (computation, instruction) order of the proto, which
    is the order HLO text prints); edges join an operand to its user within a computation. Columns as
    `tpugraphs_node_features`."""
    rows: list = []
    ops: list = []
    names: list = []
    edges: list = []
    for comp in module.computations:
        root = comp.root
        base = len(rows)
        local = {ins.name: base + k for k, ins in enumerate(comp.instructions)}
        for ins in comp.instructions:
            rows.append(_tg_row(ins, ins is root))
            ops.append(opcode_id(ins.opcode))
            names.append((comp.name, ins.name))
            me = local[ins.name]
            edges.extend((me, local[o]) for o in dict.fromkeys(ins.operands) if o in local)
    feat = np.array(rows, np.float32).reshape(-1, TPUGRAPHS_NODE_DIM)
    return feat, np.array(ops, np.int64), np.array(edges, np.int64).reshape(-1, 2), names


def tpugraphs_node_features(kernel: Any) -> tuple:
    """TpuGraphs-style arrays of a kernel: (node_feat [N,140] float32, node_opcode [N] int64,
    edge_index [E,2] int64).

    Layout (reconstructed from the TpuGraphs README's feature list; columns 0-106 follow it, the
    tail is best-effort and documented here):
      0 is_root | 1 element_size_in_bits (always 0, deprecated there) | 2-20 element type one-hot
      (invalid, pred, s8, s16, s32, s64, u8, u16, u32, u64, f16, f32, f64, bf16, c64, c128, tuple,
      opaque, token) | 21-26 shape dims, 27 sum, 28 product | 29 tuple size | 30 parameter number |
      31-36 `dimensions`, 37 sum, 38 product | 39-86 window size, stride, padding low, padding high,
      window dilation, base dilation (6 + sum + product each) | 87-92 window reversal |
      93-104 convolution dim numbers (input batch, feature, spatial 0-1; kernel in, out, spatial 0-1;
      output batch, feature, spatial 0-1) | 105 feature_group_count | 106 batch_group_count |
      107-110 slice start (2 + sum + product) | 111-114 slice stride | 115-118 slice limit |
      119-122 dynamic slice sizes | 123-126 pad low | 127-130 pad high | 131-132 dot contracting dims |
      133 is_stable | 134-139 layout minor_to_major (6).
    Values are raw (TpuGraphs does not normalize them). Nodes are the kernel's parameters (one per
    input) followed by the members in topological order; TpuGraphs' opcode ids are XLA's HloOpcode
    enum values, which we do not reproduce: `node_opcode` holds our `OPCODE_VOCAB` ids.
    `edge_index` rows are [consumer, producer], as TpuGraphs' npz files store them.
    """
    comp = kernel.computation
    insts = comp.instructions
    members = list(kernel.members)
    inputs = list(kernel.inputs)
    local = {i: k for k, i in enumerate(inputs)}
    rows: list = []
    ops: list = []
    for k, i in enumerate(inputs):
        src = insts[i]
        fake = src.copy(opcode="parameter", parameter_number=k, parsed={}, attrs={})
        rows.append(_tg_row(fake, False))
        ops.append(opcode_id("parameter"))
    mset = set(members)
    for m in members:
        for o in comp.operands[m]:
            if o not in local and o not in mset:  # a scalar constant read by the kernel
                local[o] = len(rows)
                rows.append(_tg_row(insts[o], False))
                ops.append(opcode_id(insts[o].opcode))
    for m in members:
        local[m] = len(rows)
        rows.append(_tg_row(insts[m], m == kernel.root))
        ops.append(opcode_id(insts[m].opcode))
    edges = sorted({(local[m], local[o]) for m in members for o in comp.operands[m]})
    feat = np.array(rows, np.float32)
    assert feat.shape[1] == TPUGRAPHS_NODE_DIM, feat.shape
    return feat, np.array(ops, np.int64), np.array(edges, np.int64).reshape(-1, 2)


def prune_layout_graph(arrays: dict, hops: int = 1) -> dict:
    """A layout graph cut down to its configurable nodes and their `hops`-hop neighbourhoods (edges
    taken both ways), as the TpuGraphs leaderboard's winners prune: node_feat, node_opcode and
    edge_index restricted to the kept nodes (renumbered in their original order), node_config_ids
    renumbered; the configuration arrays are unchanged (the configurable nodes keep their order).
    `arrays` holds the layout npz keys (a `TpuGraphsRecord.arrays` or np.load result)."""
    if hops < 0:
        raise ValueError(f"hops must be >= 0, not {hops}")
    n = int(np.asarray(arrays["node_feat"]).shape[0])
    ei = np.asarray(arrays["edge_index"], np.int64).reshape(-1, 2)
    keep = np.zeros(n, bool)
    keep[np.asarray(arrays["node_config_ids"], np.int64)] = True
    frontier = keep.copy()
    for _ in range(hops):
        reached = np.zeros(n, bool)
        reached[ei[frontier[ei[:, 0]], 1]] = True
        reached[ei[frontier[ei[:, 1]], 0]] = True
        frontier = reached & ~keep
        keep |= reached
        if not frontier.any():
            break
    new_id = np.full(n, -1, np.int64)
    new_id[keep] = np.arange(int(keep.sum()))
    both = keep[ei[:, 0]] & keep[ei[:, 1]]
    out = dict(arrays)
    out["node_feat"] = np.asarray(arrays["node_feat"])[keep]
    out["node_opcode"] = np.asarray(arrays["node_opcode"])[keep]
    out["edge_index"] = new_id[ei[both]]
    out["node_config_ids"] = new_id[np.asarray(arrays["node_config_ids"], np.int64)]
    return out
