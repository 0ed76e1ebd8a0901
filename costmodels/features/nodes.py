"""Per-node feature rows (`costmodels.features`): `node_features` of one HLO instruction and
`tile_features` of a tile (joined to every node), laid out as `schema` names them."""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from costmodels.features.schema import (_COL, _DTYPE_INDEX, NODE_DIM, TILE_DIM, R, _fold, _l2, _main_shape,
                                        _sl2)


def _fill(row: np.ndarray, start: str, values: Sequence[float]) -> None:
    j = _COL[start]
    for k, v in enumerate(list(values)[:R]):
        row[j + k] = v


def node_features(ins: Any, *, is_parameter: bool = False, is_root: bool = False, n_users: int = 0,
                  cost: Any = None) -> np.ndarray:
    """One raw node feature row (`NODE_FEATURE_NAMES`) for an HloInstruction."""
    row = np.zeros(NODE_DIM, np.float32)
    op = "parameter" if is_parameter else ins.opcode
    row[_COL["is_parameter"]] = float(is_parameter)
    row[_COL["is_constant"]] = float(op == "constant")
    row[_COL["is_root"]] = float(is_root)
    row[_COL["n_operands"]] = 0.0 if is_parameter else float(len(ins.operands))
    row[_COL["n_users"]] = float(n_users)
    shape = ins.shape
    is_tuple = getattr(shape, "tuple_shapes", None) is not None
    main = _main_shape(shape)
    if is_tuple:
        row[_COL["dtype_tuple"]] = 1.0
        row[_COL["tuple_size"]] = float(len(shape.tuple_shapes))
    if main is not None:
        if not is_tuple:
            row[_COL["dtype_" + (main.dtype if main.dtype in _DTYPE_INDEX else "other")]] = 1.0
        dims = [max(int(d), 0) for d in main.dims]
        row[_COL["rank"]] = float(len(dims))
        _fill(row, "dim_0", [_l2(d) for d in dims])
        row[_COL["dims_sum"]] = _l2(sum(dims))
        row[_COL["elements"]] = _l2(main.elements)
        row[_COL["bytes"]] = _l2(shape.bytes)
        mtm = tuple(main.minor_to_major())
        _fill(row, "minor_to_major_0", [m + 1 for m in mtm])
        row[_COL["default_layout"]] = float(mtm == tuple(range(len(dims) - 1, -1, -1)))
    if is_parameter:  # an external input: its bytes are what the kernel reads from it
        row[_COL["static_bytes_written"]] = _l2(shape.bytes)
        return row
    p = ins.parsed
    dims_attr = p.get("dimensions")
    if isinstance(dims_attr, tuple):
        _fill(row, "dimensions_0", [d + 1 for d in dims_attr])
        row[_COL["dimensions_count"]] = float(len(dims_attr))
        row[_COL["dimensions_sum"]] = float(sum(dims_attr))
    win = p.get("window")
    if win:
        size = [w.size for w in win]
        stride = [w.stride for w in win]
        _fill(row, "window_size_0", [_l2(v) for v in size])
        row[_COL["window_size_sum"]] = _l2(sum(size))
        row[_COL["window_size_product"]] = _l2(math.prod(size))
        _fill(row, "window_stride_0", [_l2(v) for v in stride])
        row[_COL["window_stride_sum"]] = _l2(sum(stride))
        row[_COL["window_stride_product"]] = _l2(math.prod(stride))
        for name, vals in (("window_pad_lo", [w.pad_lo for w in win]), ("window_pad_hi", [w.pad_hi for w in win]),
                           ("window_lhs_dilate", [w.lhs_dilate for w in win]),
                           ("window_rhs_dilate", [w.rhs_dilate for w in win])):
            _fill(row, name + "_0", [_sl2(v) for v in vals])
            row[_COL[name + "_sum"]] = _sl2(sum(vals))
        row[_COL["window_reversals"]] = float(sum(bool(w.reversal) for w in win))
    conv = ins.opcode == "convolution"
    fg = p.get("feature_group_count", 1 if conv else None)
    if fg is not None:
        row[_COL["feature_group_count"]] = _l2(fg)
    bg = p.get("batch_group_count", 1 if conv else None)
    if bg is not None:
        row[_COL["batch_group_count"]] = _l2(bg)
    dl = p.get("dim_labels")
    if dl is not None and not isinstance(dl, str):
        for name, v in (("conv_lhs_batch", dl.lhs_batch), ("conv_lhs_feature", dl.lhs_feature),
                        ("conv_kernel_in", dl.kernel_input_feature), ("conv_kernel_out", dl.kernel_output_feature),
                        ("conv_out_batch", dl.out_batch), ("conv_out_feature", dl.out_feature)):
            row[_COL[name]] = float(v) + 1.0
    for attr, name in (("lhs_contracting_dims", "dot_lhs_contracting"), ("rhs_contracting_dims", "dot_rhs_contracting")):
        v = p.get(attr)
        if isinstance(v, tuple):
            for d in v:
                if 0 <= d < R:
                    row[_COL[f"{name}_{d}"]] = 1.0
    for attr, name in (("lhs_batch_dims", "dot_lhs_batch"), ("rhs_batch_dims", "dot_rhs_batch")):
        v = p.get(attr)
        if isinstance(v, tuple):
            row[_COL[name]] = float(len(v))
    sl = p.get("slice")
    if sl:
        _fill(row, "slice_start_0", [_l2(s.start) for s in sl])
        _fill(row, "slice_stride_0", [_l2(s.stride) for s in sl])
    ds = p.get("dynamic_slice_sizes")
    if isinstance(ds, tuple):
        _fill(row, "dynamic_slice_size_0", [_l2(v) for v in ds])
    pad = p.get("padding")
    if pad and not isinstance(pad, str) and ins.opcode == "pad":
        _fill(row, "pad_lo_0", [_sl2(d.lo) for d in pad])
        _fill(row, "pad_hi_0", [_sl2(d.hi) for d in pad])
        _fill(row, "pad_interior_0", [_sl2(d.interior) for d in pad])
    if p.get("iota_dimension") is not None:
        row[_COL["iota_dimension"]] = float(p["iota_dimension"]) + 1.0
    if p.get("index") is not None:
        row[_COL["tuple_index"]] = float(p["index"]) + 1.0
    if p.get("k") is not None:
        row[_COL["topk_k"]] = _l2(p["k"])
    if cost is not None:
        row[_COL["static_flops"]] = _l2(cost.flops)
        row[_COL["static_transcendentals"]] = _l2(cost.transcendentals)
        row[_COL["static_bytes_read"]] = _l2(cost.bytes_read)
        row[_COL["static_bytes_written"]] = _l2(cost.bytes_written)
    return row


def tile_features(tiled_dims: Sequence[int], tile: Any) -> np.ndarray:
    """The `TILE_FEATURE_NAMES` vector of one tile (a TileConfig, a tuple of extents, or None)."""
    v = np.zeros(TILE_DIM, np.float32)
    if tile is None:
        return v
    tdims = tuple(getattr(tile, "dims", tile))
    kern = getattr(tile, "kernel", None)
    D = _fold(tiled_dims)
    if len(tdims) != len(list(tiled_dims)):  # a tile for another shape: align on the minor dims
        n = min(len(tdims), len(D))
        D = D[len(D) - n:] if n else []
        tdims = tdims[len(tdims) - n:] if n else ()
    T = _fold(tdims) if tdims else []
    T = [min(t, d) for t, d in zip(T, D)]
    v[0] = 1.0
    for i, t in enumerate(T):
        v[1 + i] = math.log2(t)
    el = math.prod(T) if T else 1
    tot = math.prod(D) if D else 1
    v[7] = math.log2(el)
    v[8] = math.log2(math.prod(math.ceil(d / t) for d, t in zip(D, T))) if T else 0.0
    v[9] = el / tot
    for i, (t, d) in enumerate(zip(T, D)):
        v[10 + i] = t / d
    if kern:
        v[16] = 1.0
        v[17] = math.log2(max(math.prod(int(k) for k in kern), 1))
    return v


def tile_feature_matrix(tiled_dims: Sequence[int], tiles: Sequence[Any]) -> np.ndarray:
    cache: dict = {}
    out = np.zeros((len(tiles), TILE_DIM), np.float32)
    for i, t in enumerate(tiles):
        key = None if t is None else (tuple(getattr(t, "dims", t)), getattr(t, "kernel", None))
        r = cache.get(key)
        if r is None:
            r = cache[key] = tile_features(tiled_dims, t)
        out[i] = r
    return out
