"""Node and kernel featurization (Kaufman et al., MLSys 2021, section 3.1).

A kernel becomes a small directed graph (`KernelGraph`):

* nodes: one "parameter" node per external input of the kernel (in `kernel.inputs` order), one node
  per scalar constant a member reads that is neither a member nor an input, then the members in
  topological order (so node order is a topological order of the graph);
* edges: producer -> consumer (`edge_index[0]` = producer, `edge_index[1]` = consumer), duplicates
  removed;
* `opcode`: an id from the frozen vocabulary `OPCODE_VOCAB` (0 = the "other" bucket for opcodes
  outside it), embedded by the GNN;
* `node_feat`: the raw (unscaled) feature rows described by `NODE_FEATURE_NAMES` (below);
* `tiled_dims`: the dims of the kernel's tiled shape (`autotune.compiler.tiles`), so that tile features can be
  computed later for any tile without the kernel at hand (datasets store graphs, not kernels);
* `kernel_feat`: a small kernel-level vector (`KERNEL_FEATURE_NAMES`), used by the XGBoost model.
* `geom_feat`: the kernel's tile geometry and analytical time terms at its default tile
  (`GEOMETRY_FEATURE_NAMES`, `geometry_features`), used by both learned models.

Node feature layout (`NODE_FEATURE_NAMES` gives every column's name; sizes in brackets):
  meta [5]      is_parameter, is_constant, is_root, n_operands, n_users (inside the kernel)
  dtype [17]    one-hot element type (`DTYPES`; "other" and "tuple" included)
  shape [11]    rank, log2(1+dim_i) for i < 6 (zero padded), log2(1+sum dims), log2(1+elements),
                log2(1+bytes), tuple size
  layout [7]    minor_to_major_i + 1 for i < 6 (0 = absent), is_default_layout
  dims [8]      the `dimensions` attribute (reduce, broadcast, transpose, concatenate, reverse ...):
                value_i + 1 for i < 6, count, sum
  window [45]   convolution / reduce-window / select-and-scatter window: size and stride
                (6 + sum + log2 product each), padding low/high, lhs (base) and rhs (window)
                dilation (6 + sum each), number of reversed dims
  conv [8]      log2 feature_group_count, log2 batch_group_count, dim_labels positions + 1 of
                lhs batch/feature, kernel in/out feature, output batch/feature
  dot [14]      lhs/rhs contracting dims multi-hot (6 each), number of lhs/rhs batch dims
  slice [18]    slice start (log2), slice stride (6 each); dynamic_slice_sizes (log2, 6)
  pad [18]      pad low, high, interior per dim (signed log2, 6 each)
  misc [3]      iota_dimension + 1, get-tuple-element index + 1, topk k (log2)
  static [4]    log2(1+x) of flops, transcendentals, bytes read (operands), bytes written (output)
Tile features (`TILE_FEATURE_NAMES`, appended to every node: the paper's "early join"; all zero when
there is no tile, e.g. for the fusion task): has_tile, log2 tile extent per dim (last 6 dims of the
tiled shape, leading dims folded into the first), log2 tile elements, log2 number of tiles, tile
fraction of the shape, tile/shape ratio per dim (6), has_kernel_tile, log2 kernel-tile elements.

Geometry features (`GEOMETRY_FEATURE_NAMES`, groups in `GEOMETRY_GROUPS`; TPU-kind targets; on cpu-kind
targets the same block holds `costmodels.cpu_geometry`'s rows instead, in columns 1.. with geo_has_geometry 0,
versioned apart as `CPU_FEATURE_VERSION`; all zero elsewhere; `geometry_layout`, `geometry_names`): what `autotune.compiler.tiles` and the analytical model compute for the kernel at its default tile
(`tiles.default_tile`, the tile the simulator and XLA run; for the fusion task the tile features above
stay zero, these carry the tile instead). Sizes in bytes and counts are log2(1 + x), times are
log2(1 + nanoseconds):
  shape [14]     tiled rank, dims (6, leading dims folded), elements, elements after padding the two
                 minor dims to the (8, 128) vector tile, that padding factor, minor and second-minor
                 extents, element bytes, has_geometry
  tile [12]      default-tile extents (6), number of tiles, tile fraction, padding factor of the tile,
                 double-buffered footprint, streaming steps of a reduction/contraction, filter steps
  inputs [68]    per input (the 8 largest, by bytes; the rest merged as in `TilingInfo`): bytes,
                 role (same-shaped, dot lhs, dot rhs, other), per-tile bytes, contiguous run of one
                 transfer (bytes), alpha (per-tile read exponent); then the number of inputs, total
                 bytes, shortest and bytes-weighted mean run
  output [4]     bytes, alpha, per-tile bytes, contiguous run
  dot [14]       has hero, is convolution, is generic, K, K padded to 128, K padding factor, M, N,
                 m_scale, n_const, M and N of a tile (padded to (8, 128)), hero flops, padded MXU flops
  work [6]       vector flops outside the hero, transcendentals, flops of the dot's lhs / rhs producers
                 (recomputed per tile), off-chip link seconds (ns), trivial
  analytical [8] the tiled analytical model's terms: MXU, vector and transcendental time per tile,
                 compute and transfer time per tile, DMAs per tile, its prediction, log2 compute /
                 transfer ratio
`FEATURE_VERSION` is a hash of every layout above (`CPU_FEATURE_VERSION` adds the cpu geometry rows;
`feature_version(target)` picks one): saved models and datasets record it, and a file with another layout
is refused.

How it is computed (the same arrays as featurizing node by node, faster): each instruction's
`node_features` row, as a member and as a kernel input, is computed once per program and shared by
every kernel that contains it (`_ComputationTable`, per fusion space and computation), and once per
signature: instructions with the same opcode, shape, attributes, operand count and static cost (the
repeated layers of a deep model) share their row; `kernel_graphs` gathers the graphs of all
uncached kernels of a computation together from those rows with index arrays (`_gather_graphs`:
nodes, edges, user counts and roots of a chunk of kernels in one pass of numpy) and computes their
geometry in one batch, default tiles included (`autotune.compiler.tiles.default_tiles`); graphs are
cached by canonical kernel hash.

Before training the raw rows are min-max scaled by a `FeatureScaler` fitted on the training set and
saved with the model.

`tpugraphs_node_features(kernel)` gives the 140-column node features of the TpuGraphs dataset (see
its docstring for the layout as far as it could be reconstructed here).
"""
from __future__ import annotations

import hashlib
import math
import weakref
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

import numpy as np

from autotune.compiler.hlo import OPCODES
from autotune.compiler.tiles import canonical_target_name
from costmodels.cpu_geometry import CPU_GEOMETRY_GROUPS, CPU_GEOMETRY_NAMES, cpu_geometry_matrix

__all__ = ["tpugraphs_module_features", "prune_layout_graph", "OPCODE_VOCAB", "OPCODE_INDEX", "NUM_OPCODES", "OTHER_OPCODE_ID", "OTHER_BUCKET_OPCODES",
           "opcode_id", "DTYPES", "NODE_FEATURE_NAMES", "NODE_DIM", "STATIC_COLUMNS", "TILE_FEATURE_NAMES",
           "TILE_DIM", "KERNEL_FEATURE_NAMES", "GEOMETRY_FEATURE_NAMES", "GEOMETRY_GROUPS", "GEOMETRY_DIM",
           "geometry_features", "geometry_matrix", "geometry_analytical_seconds", "kernel_graphs", "start_kernel_graphs",
           "finish_kernel_graphs", "FEATURE_VERSION", "CPU_FEATURE_VERSION", "feature_version", "geometry_layout",
           "geometry_names", "CPU_GEOMETRY_GROUPS", "CPU_GEOMETRY_NAMES", "CPU_GEOMETRY_COLUMNS",
           "KernelGraph", "kernel_graph", "node_features", "tile_features", "tile_feature_matrix",
           "FeatureScaler", "TPUGRAPHS_NODE_DIM", "tpugraphs_node_features", "clear_cache"]

# --------------------------------------------------------------------------------------------------
# Opcode vocabulary: frozen (ids must never change, saved models depend on them, and its length is
# the size of the shipped GNN's opcode embedding). Id 0, "<unk>", is the explicit "other" bucket:
# opcodes outside the vocabulary (those XLA added after it was frozen, `OTHER_BUCKET_OPCODES`, and
# any opcode a later XLA adds) share it, so featurizing them never fails and the shipped models keep
# loading. Growing the vocabulary means retraining the shipped models.
OPCODE_VOCAB: tuple = ("<unk>",) + tuple("""
abs add add-dependency after-all all-gather all-gather-done all-gather-start all-reduce all-reduce-done
all-reduce-start all-to-all and async-done async-start async-update atan2 batch-norm-grad
batch-norm-inference batch-norm-training bit-reverse bitcast bitcast-convert broadcast call cbrt ceil
cholesky clamp collective-broadcast collective-permute collective-permute-done collective-permute-start
compare complex concatenate conditional constant convert convolution copy copy-done copy-start cosine
count-leading-zeros custom-call divide domain dot dynamic-reshape dynamic-slice dynamic-update-slice erf
exponential exponential-minus-one fft floor fusion gather get-dimension-size get-tuple-element imag
infeed iota is-finite log log-plus-one logistic map maximum minimum multiply negate not opt-barrier or
outfeed pad parameter partition-id popcnt power ragged-all-to-all ragged-dot real recv recv-done reduce
reduce-precision reduce-scatter reduce-window remainder replica-id reshape reverse rng
rng-bit-generator rng-get-and-update-state round-nearest-afz round-nearest-even rsqrt scaled-dot
scatter select select-and-scatter send send-done set-dimension-size shift-left shift-right-arithmetic
shift-right-logical sign sine slice sort sqrt stochastic-convert subtract tan tanh topk transpose
triangular-solve tuple while xor
""".split())
OPCODE_INDEX: dict = {op: i for i, op in enumerate(OPCODE_VOCAB)}
NUM_OPCODES = len(OPCODE_VOCAB)
OTHER_OPCODE_ID = 0
# Opcodes of the HLO text format that are not in the frozen vocabulary: featurized as "other".
OTHER_BUCKET_OPCODES: frozenset = OPCODES - frozenset(OPCODE_VOCAB)


def opcode_id(opcode: str) -> int:
    """Vocabulary id of an opcode; OTHER_OPCODE_ID for opcodes outside the vocabulary."""
    return OPCODE_INDEX.get(opcode, OTHER_OPCODE_ID)


DTYPES = ("pred", "s8", "s16", "s32", "s64", "u8", "u16", "u32", "u64", "f16", "bf16", "f32", "f64",
          "c64", "c128", "other", "tuple")
_DTYPE_INDEX = {d: i for i, d in enumerate(DTYPES)}
R = 6  # padded rank of every per-dimension sub-vector


def _names(prefix: str, n: int = R) -> list:
    return [f"{prefix}_{i}" for i in range(n)]


NODE_FEATURE_NAMES: tuple = tuple(
    ["is_parameter", "is_constant", "is_root", "n_operands", "n_users"]
    + [f"dtype_{d}" for d in DTYPES]
    + ["rank"] + _names("dim") + ["dims_sum", "elements", "bytes", "tuple_size"]
    + _names("minor_to_major") + ["default_layout"]
    + _names("dimensions") + ["dimensions_count", "dimensions_sum"]
    + _names("window_size") + ["window_size_sum", "window_size_product"]
    + _names("window_stride") + ["window_stride_sum", "window_stride_product"]
    + _names("window_pad_lo") + ["window_pad_lo_sum"]
    + _names("window_pad_hi") + ["window_pad_hi_sum"]
    + _names("window_lhs_dilate") + ["window_lhs_dilate_sum"]
    + _names("window_rhs_dilate") + ["window_rhs_dilate_sum"]
    + ["window_reversals"]
    + ["feature_group_count", "batch_group_count", "conv_lhs_batch", "conv_lhs_feature",
       "conv_kernel_in", "conv_kernel_out", "conv_out_batch", "conv_out_feature"]
    + _names("dot_lhs_contracting") + _names("dot_rhs_contracting") + ["dot_lhs_batch", "dot_rhs_batch"]
    + _names("slice_start") + _names("slice_stride") + _names("dynamic_slice_size")
    + _names("pad_lo") + _names("pad_hi") + _names("pad_interior")
    + ["iota_dimension", "tuple_index", "topk_k"]
    + ["static_flops", "static_transcendentals", "static_bytes_read", "static_bytes_written"])
NODE_DIM = len(NODE_FEATURE_NAMES)
_COL = {n: i for i, n in enumerate(NODE_FEATURE_NAMES)}
STATIC_COLUMNS = tuple(range(_COL["static_flops"], NODE_DIM))

TILE_FEATURE_NAMES: tuple = tuple(["has_tile"] + _names("tile_log2") + ["tile_elements", "n_tiles",
                                   "tile_fraction"] + _names("tile_ratio") + ["has_kernel_tile",
                                                                              "kernel_tile_elements"])
TILE_DIM = len(TILE_FEATURE_NAMES)

KERNEL_FEATURE_NAMES: tuple = ("flops", "transcendentals", "bytes_read", "bytes_written", "intensity",
                               "n_members", "n_inputs", "n_edges", "kind_kLoop", "kind_kInput",
                               "kind_kOutput", "out_rank", "out_elements", "tiled_elements")

_I_SLOTS = 8  # inputs kept apart in the geometry features (= autotune.compiler.tiles.I_MAX)
_INPUT_FIELDS = ("bytes", "same", "lhs", "rhs", "other", "tile_bytes", "run", "alpha")
GEOMETRY_GROUPS: dict = {
    "shape": ("geo_has_geometry", "geo_rank", *_names("geo_dim"), "geo_elements", "geo_padded_elements",
              "geo_shape_pad_factor", "geo_minor_extent", "geo_second_minor_extent", "geo_dtype_bytes"),
    "tile": (*_names("geo_tile"), "geo_n_tiles", "geo_tile_fraction", "geo_tile_pad_factor", "geo_footprint",
             "geo_stream_steps", "geo_filter_steps"),
    "inputs": tuple(f"geo_in{i}_{f}" for i in range(_I_SLOTS) for f in _INPUT_FIELDS)
              + ("geo_n_inputs", "geo_in_bytes", "geo_in_min_run", "geo_in_mean_run"),
    "output": ("geo_out_bytes", "geo_out_alpha", "geo_out_tile_bytes", "geo_out_run"),
    "dot": ("geo_has_hero", "geo_hero_conv", "geo_hero_generic", "geo_K", "geo_K_pad", "geo_K_pad_factor", "geo_M",
            "geo_N", "geo_m_scale", "geo_n_const", "geo_tile_M", "geo_tile_N", "geo_hero_flops", "geo_mxu_flops"),
    "work": ("geo_vector_flops", "geo_transcendentals", "geo_lhs_producer_flops", "geo_rhs_producer_flops",
             "geo_link_ns", "geo_trivial"),
    "analytical": ("geo_t_mxu", "geo_t_vector", "geo_t_trans", "geo_c_tile", "geo_x_tile", "geo_n_dma", "geo_t",
                   "geo_compute_transfer_ratio"),
}
GEOMETRY_FEATURE_NAMES: tuple = tuple(n for names in GEOMETRY_GROUPS.values() for n in names)
GEOMETRY_DIM = len(GEOMETRY_FEATURE_NAMES)
_GCOL = {n: i for i, n in enumerate(GEOMETRY_FEATURE_NAMES)}
# Every layout a saved model or dataset depends on; bump the suffix when a feature's meaning changes.
FEATURE_VERSION: str = hashlib.sha1(("|".join(NODE_FEATURE_NAMES) + "#" + "|".join(KERNEL_FEATURE_NAMES) + "#"
                                     + "|".join(GEOMETRY_FEATURE_NAMES) + f"#{TILE_DIM}#{NUM_OPCODES}#g1"
                                     ).encode()).hexdigest()[:12]
# On cpu-kind targets the geometry block carries XLA:CPU's view instead (`costmodels.cpu_geometry`), in
# these columns (the first, geo_has_geometry, stays 0: no tile geometry, no tiled analytical time).
_CPU_COLS = np.arange(1, 1 + len(CPU_GEOMETRY_NAMES))
CPU_GEOMETRY_COLUMNS: dict = {n: int(c) for n, c in zip(CPU_GEOMETRY_NAMES, _CPU_COLS)}  # name -> column of the block
assert len(CPU_GEOMETRY_NAMES) < GEOMETRY_DIM
CPU_FEATURE_VERSION: str = hashlib.sha1((FEATURE_VERSION + "#" + "|".join(CPU_GEOMETRY_NAMES) + "#c1").encode()
                                        ).hexdigest()[:12]


def geometry_layout(target: Any) -> str:
    """What a target's geometry block holds: "tpu" (tile geometry), "cpu" (`CPU_GEOMETRY_NAMES`) or
    "none" (all zero)."""
    from autotune.compiler.targets import get_spec
    kind = get_spec(target).kind
    return kind if kind in ("tpu", "cpu") else "none"


def feature_version(target: Any) -> str:
    """The feature layout of a target's kernel graphs, recorded by saved models, datasets and stored
    history: `FEATURE_VERSION`, or `CPU_FEATURE_VERSION` where the geometry block holds the cpu rows. A target
    this autotune does not know (named by a file made elsewhere) gets the base layout: its own checks refuse it."""
    try:
        layout = geometry_layout(target)
    except ValueError:  # UnknownTargetError
        return FEATURE_VERSION
    return CPU_FEATURE_VERSION if layout == "cpu" else FEATURE_VERSION


def geometry_names(target: Any) -> tuple:
    """The name of each column of a target's geometry block ("" for a column its layout leaves 0)."""
    layout = geometry_layout(target)
    if layout == "tpu":
        return GEOMETRY_FEATURE_NAMES
    names = [""] * GEOMETRY_DIM
    if layout == "cpu":
        for n, c in CPU_GEOMETRY_COLUMNS.items():
            names[c] = n
    return tuple(names)


def _l2(x: float) -> float:
    return math.log2(1.0 + max(float(x), 0.0))


def _sl2(x: float) -> float:
    x = float(x)
    return math.copysign(math.log2(1.0 + abs(x)), x)


def _main_shape(shape: Any) -> Any:
    """The array shape that stands for a (possibly tuple) shape: its largest leaf."""
    if getattr(shape, "tuple_shapes", None) is None:
        return shape
    leaves = shape.leaves()
    if not leaves:
        return None
    return max(leaves, key=lambda s: s.elements)


def _fill(row: np.ndarray, start: str, values: Sequence[float]) -> None:
    j = _COL[start]
    for k, v in enumerate(list(values)[:R]):
        row[j + k] = v


# --------------------------------------------------------------------------------------------------
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


# --------------------------------------------------------------------------------------------------
def _fold(dims: Sequence[int]) -> list:
    dims = [max(int(d), 1) for d in dims]
    if len(dims) > R:
        dims = [math.prod(dims[:len(dims) - R + 1])] + dims[len(dims) - R + 1:]
    return dims


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


def _ns(seconds: Any) -> Any:
    return _l2v(np.asarray(seconds, np.float64) * 1e9)


def _l2v(x: Any) -> np.ndarray:
    return np.log2(1.0 + np.maximum(np.asarray(x, np.float64), 0.0))


def geometry_analytical_seconds(geom: np.ndarray) -> np.ndarray:
    """The tiled analytical model's time (seconds, `geo_t`) of geometry rows ([..., GEOMETRY_DIM]); 0 where
    a row has no geometry (targets that do not tile)."""
    g = np.asarray(geom, np.float64)
    t = (np.exp2(g[..., _GCOL["geo_t"]]) - 1.0) * 1e-9
    return np.where(g[..., _GCOL["geo_has_geometry"]] > 0, np.maximum(t, 0.0), 0.0)


def geometry_features(kernel: Any, target: Any = "tpu") -> np.ndarray:
    """The `GEOMETRY_FEATURE_NAMES` vector of one kernel at its default tile (`geometry_matrix`)."""
    return geometry_matrix([kernel], target)[0]


# The per-kernel (Python) columns of geometry_matrix, in the order `_shape_part` + `_tile_part` + hero + rest
_STATIC_COLS = np.array([_GCOL[c] for c in (
    ["geo_rank"] + [f"geo_dim_{j}" for j in range(R)] + ["geo_minor_extent", "geo_second_minor_extent",
                                                           "geo_dtype_bytes"]
    + [f"geo_tile_{j}" for j in range(R)]
    + ["geo_has_hero", "geo_hero_conv", "geo_hero_generic", "geo_K", "geo_K_pad", "geo_K_pad_factor", "geo_m_scale",
       "geo_n_const", "geo_hero_flops"]
    + ["geo_n_inputs", "geo_vector_flops", "geo_transcendentals", "geo_lhs_producer_flops",
       "geo_rhs_producer_flops", "geo_trivial"])], np.int64)
_NO_HERO = (0.0,) * 9


def _shape_part(info: Any) -> tuple:
    """geo_rank, geo_dim_*, the minor extents and geo_dtype_bytes of a tiled shape (0: not set)."""
    dims = [_l2(d) for d in _fold(info.dims)]
    return ((float(info.rank),) + tuple(dims) + (0.0,) * (R - len(dims))
            + (_l2(info.dims[info.mtm[0]]) if info.rank >= 1 else 0.0,
               _l2(info.dims[info.mtm[1]]) if info.rank >= 2 else 0.0, float(info.dtype_bytes)))


def _tile_part(extents: tuple) -> tuple:
    """geo_tile_* of a tile's extents (the first rank entries of its capped tile row)."""
    t = [_l2(x) for x in _fold([int(x) for x in extents])]
    return tuple(t) + (0.0,) * (R - len(t))


def geometry_matrix(kernels: Sequence[Any], target: Any = "tpu") -> np.ndarray:
    """[len(kernels), GEOMETRY_DIM] geometry features at the kernels' default tiles, from
    `autotune.compiler.tiles` and the analytical model's tiled terms, vectorized over the kernels; on
    cpu-kind targets `costmodels.cpu_geometry`'s rows in `_CPU_COLS`; all zero on other targets."""
    from autotune.compiler.targets import get_spec
    kernels = list(kernels)
    n = len(kernels)
    V = np.zeros((n, GEOMETRY_DIM), np.float64)
    spec = get_spec(target)
    if spec.kind == "cpu" and n:
        V[:, _CPU_COLS] = cpu_geometry_matrix(kernels)
    if spec.kind != "tpu" or n == 0:
        return V.astype(np.float32)
    from autotune.compiler.tiles import (ROLE_LHS, ROLE_OTHER, ROLE_RHS, ROLE_SAME, batch_inputs, default_tiles,
                                         io_geometry, scratchpad_fit, tiled_time_terms)

    def put(name: str, x: Any) -> None:
        V[:, _GCOL[name]] = x

    b, T, ks, kp, infos = batch_inputs(kernels, default_tiles(kernels, spec), spec)
    sub, lanes = spec.vector_shape
    g = io_geometry(b, T, sub, lanes)
    terms = tiled_time_terms(b, T, ks, kp, spec, g)
    fit = scratchpad_fit(g, b.kind, spec.scratchpad_bytes, ks)
    # ---- per kernel: the static description (TilingInfo), as one row of _STATIC_COLS per kernel;
    # the pieces shared by many kernels (the tiled shape's, the tile's) computed once per batch
    shape_parts: dict = {}
    tile_parts: dict = {}
    static = []
    Tall = g["T"]
    for i, info in enumerate(infos):
        sk = (info.dims, info.mtm, info.dtype_bytes)
        sp = shape_parts.get(sk)
        if sp is None:
            sp = shape_parts[sk] = _shape_part(info)
        tk = tuple(Tall[i, :min(info.rank, Tall.shape[1])].tolist())
        tp = tile_parts.get(tk)
        if tp is None:
            tp = tile_parts[tk] = _tile_part(tk)
        if info.hero is not None:
            hp = (1.0, float(info.hero == "conv"), float(info.hero == "generic"), _l2(info.K), _l2(info.K_pad),
                  float(info.K_pad) / max(float(info.K), 1.0), math.log2(max(float(info.m_scale), 1e-30)),
                  _l2(info.n_const), _l2(info.hero_flops))
        else:
            hp = _NO_HERO
        static.append(sp + tp + hp + (float(len(getattr(kernels[i], "inputs", ()))), _l2(info.vec_flops),
                                      _l2(info.trans_rest), _l2(info.lhs_vec), _l2(info.rhs_vec),
                                      float(info.trivial)))
    V[:, _STATIC_COLS] = np.array(static, np.float64)
    # ---- vectorized: shape padding, the default tile, transfers, the matrix unit, the time terms
    put("geo_has_geometry", 1.0)
    D, U = b.D, b.U
    padded = np.prod(np.ceil(D / U) * U, axis=1)
    put("geo_elements", _l2v(np.prod(D, axis=1)))
    put("geo_padded_elements", _l2v(padded))
    put("geo_shape_pad_factor", padded / np.maximum(np.prod(D, axis=1), 1.0))
    put("geo_n_tiles", _l2v(g["n"]))
    put("geo_tile_fraction", g["frac"])
    put("geo_tile_pad_factor", g["padfac"])
    put("geo_footprint", _l2v(fit.footprint))
    put("geo_stream_steps", fit.steps)
    put("geo_filter_steps", ks)
    in_bytes, role, alpha, in_tile, in_run = b.in_bytes, b.in_role, b.in_alpha, g["in_tile"], g["in_run"]
    roles = ((ROLE_SAME, "same"), (ROLE_LHS, "lhs"), (ROLE_RHS, "rhs"), (ROLE_OTHER, "other"))
    for j in range(min(_I_SLOTS, in_bytes.shape[1])):
        used = role[:, j] > 0  # an empty slot has no role
        put(f"geo_in{j}_bytes", np.where(used, _l2v(in_bytes[:, j]), 0.0))
        for r, name in roles:
            put(f"geo_in{j}_{name}", (role[:, j] == r).astype(np.float64))
        put(f"geo_in{j}_tile_bytes", np.where(used, _l2v(in_tile[:, j]), 0.0))
        put(f"geo_in{j}_run", np.where(used, _l2v(in_run[:, j]), 0.0))
        put(f"geo_in{j}_alpha", np.where(used, alpha[:, j], 0.0))
    present = in_tile > 0
    put("geo_in_bytes", _l2v(in_bytes.sum(axis=1)))
    any_in = present.any(axis=1)
    put("geo_in_min_run", np.where(any_in, _l2v(np.where(present, in_run, np.inf).min(axis=1, initial=np.inf)
                                                 .clip(max=1e300)), 0.0))
    wsum = np.where(present, in_tile, 0.0).sum(axis=1)
    put("geo_in_mean_run", np.where(any_in, _l2v(np.where(present, in_run * in_tile, 0.0).sum(axis=1)
                                                  / np.maximum(wsum, 1e-300)), 0.0))
    put("geo_out_bytes", _l2v(b.out_bytes))
    put("geo_out_alpha", b.out_alpha)
    put("geo_out_tile_bytes", _l2v(g["out_tile"]))
    put("geo_out_run", _l2v(g["out_run"]))
    hero = V[:, _GCOL["geo_has_hero"]] > 0
    m_scale = np.array([inf.m_scale for inf in infos])
    n_const = np.array([inf.n_const for inf in infos])
    put("geo_M", np.where(hero, _l2v(np.prod(np.where(b.mmask, D, 1.0), axis=1) * m_scale), 0.0))
    put("geo_N", np.where(hero, _l2v(np.prod(np.where(b.nmask, D, 1.0), axis=1) * n_const), 0.0))
    put("geo_tile_M", np.where(hero, _l2v(np.ceil(g["Tm"] / sub) * sub), 0.0))
    put("geo_tile_N", np.where(hero, _l2v(np.ceil(g["Tn"] / lanes) * lanes), 0.0))
    put("geo_mxu_flops", np.where(hero, _l2v(g["mxu_tile"] * g["n"]), 0.0))
    put("geo_link_ns", _ns(b.link_s))
    for name in ("t_mxu", "t_vector", "t_trans", "c_tile", "x_tile", "t"):
        put(f"geo_{name}", _ns(terms[name]))
    put("geo_n_dma", terms["n_dma"])
    put("geo_compute_transfer_ratio", np.log2(np.maximum(terms["c_tile"], 1e-15) / np.maximum(terms["x_tile"], 1e-15)))
    return V.astype(np.float32)


# --------------------------------------------------------------------------------------------------
@dataclass
class KernelGraph:
    """A kernel as a graph of raw features (see the module docstring)."""

    node_feat: np.ndarray            # [N, NODE_DIM] float32, raw (unscaled)
    opcode: np.ndarray               # [N] int64
    edge_index: np.ndarray           # [2, E] int64, producer -> consumer
    tiled_dims: tuple                # dims of the tiled shape
    kernel_feat: np.ndarray          # [len(KERNEL_FEATURE_NAMES)] float32
    hash: str = ""
    meta: dict = field(default_factory=dict)
    geom_feat: np.ndarray = field(default_factory=lambda: np.zeros(GEOMETRY_DIM, np.float32))  # [GEOMETRY_DIM]

    @property
    def num_nodes(self) -> int:
        return int(self.node_feat.shape[0])

    @property
    def num_edges(self) -> int:
        return int(self.edge_index.shape[1])


_GRAPH_CACHE: dict = {}
_GRAPH_CACHE_MAX = 200_000


_GENERATION = [0]  # bumped by clear_cache (a featurization worker process empties its caches too)


def cache_generation() -> int:
    """How many times `clear_cache` ran (costmodels/feature_worker.py)."""
    return _GENERATION[0]


def clear_cache() -> None:
    """Forget every cached kernel graph and per-program instruction feature table."""
    _GRAPH_CACHE.clear()
    _PROGRAM_TABLES.clear()
    _GENERATION[0] += 1


class _ComputationTable:
    """Per-computation feature rows shared by every kernel of a program: each instruction's
    `node_features` row as a member and as a kernel input, computed once on first use, its opcode
    id, and the operand lists as index arrays (CSR). Instructions with the same signature (opcode,
    shape, attributes: `autotune.compiler.signature`) and static cost have the same member row, and
    the same shape the same input row: `shared` (one dict per fusion space) holds those rows, so
    the repeated layers of a deep model are featurized once."""

    __slots__ = ("insts", "costs", "member_rows", "param_rows", "member_done", "param_done", "opcode",
                 "op_ptr", "op_idx", "n_ops", "sigs", "shape_sigs", "shared")

    def __init__(self, comp: Any, costs: Optional[Sequence[Any]], sigs: Optional[Sequence[int]] = None,
                 shape_sigs: Optional[Sequence[int]] = None, shared: Optional[dict] = None):
        self.insts = comp.instructions
        self.costs = costs
        self.sigs, self.shape_sigs = sigs, shape_sigs
        self.shared = shared if shared is not None and sigs is not None and shape_sigs is not None else None
        n = len(self.insts)
        self.member_rows = np.zeros((n, NODE_DIM), np.float32)
        self.param_rows = np.zeros((n, NODE_DIM), np.float32)
        self.member_done = np.zeros(n, bool)
        self.param_done = np.zeros(n, bool)
        self.opcode = np.array([opcode_id(i.opcode) for i in self.insts], np.int64)
        ops = comp.operands
        self.n_ops = np.array([len(o) for o in ops], np.int64)
        self.op_ptr = np.zeros(n + 1, np.int64)
        np.cumsum(self.n_ops, out=self.op_ptr[1:])
        self.op_idx = np.fromiter((o for olist in ops for o in olist), np.int64, int(self.op_ptr[-1]))

    def _key(self, i: int, as_parameter: bool) -> tuple:
        """What the row of instruction `i` depends on: its shape as an input; its signature, operand
        count and static cost as a member."""
        if as_parameter:
            return (True, self.shape_sigs[i])
        c = self.costs[i] if self.costs is not None else None
        cost = None if c is None else (c.flops, c.transcendentals, c.bytes_read, c.bytes_written)
        return (False, self.sigs[i], int(self.n_ops[i]), cost)

    def rows(self, idx: np.ndarray, as_parameter: bool) -> np.ndarray:
        """Feature rows of instructions `idx` as members (`as_parameter` False) or as inputs."""
        table, done = (self.param_rows, self.param_done) if as_parameter else (self.member_rows, self.member_done)
        missing = idx[~done[idx]]
        shared = self.shared
        for i in missing.tolist():
            if not done[i]:
                key = self._key(i, as_parameter) if shared is not None else None
                row = shared.get(key) if shared is not None else None
                if row is None:
                    c = self.costs[i] if self.costs is not None else None
                    row = node_features(self.insts[i], is_parameter=as_parameter, cost=c)
                    if shared is not None:
                        shared[key] = row
                table[i] = row
                done[i] = True
        return table[idx]


_PROGRAM_TABLES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_SHARED_ROWS = "__shared_rows"  # the per-space dict of rows shared by instructions of the same signature


def _computation_table(kernel: Any) -> _ComputationTable:
    """The `_ComputationTable` of the kernel's computation, shared by all kernels of its fusion space."""
    space = getattr(kernel, "space", None)
    try:
        per_space = _PROGRAM_TABLES.get(space) if space is not None else None
    except TypeError:  # a space that cannot be weakly referenced: no sharing
        space = None
        per_space = None
    if per_space is None:
        per_space = {_SHARED_ROWS: {}}
        if space is not None:
            _PROGRAM_TABLES[space] = per_space
    comp = kernel.computation
    key = getattr(kernel, "comp", id(comp))
    t = per_space.get(key)
    if t is None:
        try:
            costs = space.node_costs[key]
        except Exception:  # noqa: BLE001 - a space without static costs: those columns stay zero
            costs = None
        try:
            sigs, shape_sigs = space.signatures[key], space._shape_sigs[key]
        except Exception:  # noqa: BLE001 - a space without instruction signatures: nothing shared
            sigs = shape_sigs = None
        t = per_space[key] = _ComputationTable(comp, costs, sigs, shape_sigs, per_space[_SHARED_ROWS])
    return t


def _first_occurrences(a: np.ndarray) -> np.ndarray:
    """Indices of the first occurrence of each distinct value of `a`, in the order of `a`."""
    if len(a) < 2:
        return np.arange(len(a))
    _, first = np.unique(a, return_index=True)
    first.sort()
    return first


def _graph_arrays(kernel: Any) -> tuple:
    """(node rows, opcodes, edge_index, n_inputs) of a kernel, gathered from its computation's table:
    nodes are the inputs, then the scalar constants members read (first-use order), then the members;
    edges producer -> consumer in member and operand order, duplicates removed."""
    t = _computation_table(kernel)
    members = np.asarray(kernel.members, np.int64)
    inputs = np.asarray(kernel.inputs, np.int64)
    n_in, n_m = len(inputs), len(members)
    cnt = t.n_ops[members]
    total = int(cnt.sum())
    ends = np.cumsum(cnt)
    consumer = np.repeat(np.arange(n_m), cnt)
    opnd = t.op_idx[np.arange(total) - np.repeat(ends - cnt - t.op_ptr[members], cnt)]
    local = np.full(len(t.n_ops), -1, np.int64)  # instruction -> node of this kernel
    local[inputs] = np.arange(n_in)
    local[members] = -2
    cand = opnd[local[opnd] == -1]
    consts = cand[_first_occurrences(cand)]
    n_c = len(consts)
    local[consts] = n_in + np.arange(n_c)
    local[members] = n_in + n_c + np.arange(n_m)
    src = local[opnd]
    dst = consumer + (n_in + n_c)
    n = n_in + n_c + n_m
    keep = _first_occurrences(src * n + dst)
    src, dst = src[keep], dst[keep]
    rows = np.empty((n, NODE_DIM), np.float32)
    rows[:n_in] = t.rows(inputs, True)
    body = np.concatenate([consts, members])
    rows[n_in:] = t.rows(body, False)
    rows[:, _COL["n_users"]] = np.bincount(src, minlength=n)
    root = np.flatnonzero(members == kernel.root)
    rows[n_in + n_c + root, _COL["is_root"]] = 1.0
    ops = np.empty(n, np.int64)
    ops[:n_in] = OPCODE_INDEX["parameter"]
    ops[n_in:] = t.opcode[body]
    return rows, ops, np.stack([src, dst]), n_in


def _graph_arrays_many(kernels: Sequence[Any]) -> list:
    """`_graph_arrays` of many kernels, the kernels of one computation gathered together with index
    arrays (the same arrays, in one pass of numpy per computation instead of one per kernel)."""
    out: list = [None] * len(kernels)
    groups: dict = {}
    for i, k in enumerate(kernels):
        t = _computation_table(k)
        groups.setdefault(id(t), (t, []))[1].append(i)
    for t, idx_all in groups.values():
        for s0 in range(0, len(idx_all), _GATHER_CHUNK):  # chunks: the index arrays stay in cache
            idx = idx_all[s0:s0 + _GATHER_CHUNK]
            ks = [kernels[i] for i in idx]
            res = _gather_graphs(t, ks) if len(ks) > 1 else None
            if res is None:  # one kernel, or inputs that are not distinct: kernel by kernel
                res = [_graph_arrays(k) for k in ks]
            for i, r in zip(idx, res):
                out[i] = r
    return out


_GATHER_CHUNK = 512  # kernels gathered together by _graph_arrays_many


def _segments(counts: np.ndarray) -> tuple:
    """(owner of each item, position of each item inside its segment) for segments of `counts` items."""
    owner = np.repeat(np.arange(len(counts)), counts)
    return owner, np.arange(len(owner)) - np.repeat(np.cumsum(counts) - counts, counts)


def _lookup(sorted_keys: np.ndarray, keys: np.ndarray) -> tuple:
    """(found, index into sorted_keys) of each key."""
    j = np.minimum(np.searchsorted(sorted_keys, keys), max(len(sorted_keys) - 1, 0))
    found = sorted_keys[j] == keys if len(sorted_keys) else np.zeros(len(keys), bool)
    return found, j


def _gather_graphs(t: _ComputationTable, kernels: Sequence[Any]) -> Optional[list]:
    """`_graph_arrays` of kernels of one computation table at once; None when some kernel's inputs
    repeat an instruction or include a member (the kernel-by-kernel path decides those)."""
    K, N = len(kernels), len(t.n_ops)
    mem_l = [np.asarray(k.members, np.int64) for k in kernels]
    inp_l = [np.asarray(k.inputs, np.int64) for k in kernels]
    n_m = np.array([len(m) for m in mem_l], np.int64)
    n_in = np.array([len(x) for x in inp_l], np.int64)
    mem = np.concatenate(mem_l)
    inp = np.concatenate(inp_l) if n_in.sum() else np.zeros(0, np.int64)
    mk, mpos = _segments(n_m)
    ik, ipos = _segments(n_in)
    mkey = mk * N + mem
    ikey = ik * N + inp
    m_order = np.argsort(mkey, kind="stable")
    i_order = np.argsort(ikey, kind="stable")
    smkey, sikey = mkey[m_order], ikey[i_order]
    if (len(sikey) > 1 and (sikey[1:] == sikey[:-1]).any()) or _lookup(smkey, ikey)[0].any():
        return None
    # operand slots of all members: (kernel, consumer member, producer instruction), member and operand order
    cnt = t.n_ops[mem]
    total = int(cnt.sum())
    ends = np.cumsum(cnt)
    opnd = t.op_idx[np.arange(total) - np.repeat(ends - cnt - t.op_ptr[mem], cnt)]
    ok = np.repeat(mk, cnt)
    consumer = np.repeat(mpos, cnt)
    okey = ok * N + opnd
    is_mem, jm = _lookup(smkey, okey)
    is_inp, ji = _lookup(sikey, okey)
    is_inp &= ~is_mem
    # scalar constants (neither member nor input): numbered per kernel in order of first use
    cslot = np.flatnonzero(~is_mem & ~is_inp)
    ckey = okey[cslot]
    uniq, first, inv = np.unique(ckey, return_index=True, return_inverse=True)
    by_use = np.argsort(first, kind="stable")
    cfirst = cslot[first[by_use]]              # the first slot of each constant, in slot order
    ck = ok[cfirst]
    n_c = np.bincount(ck, minlength=K).astype(np.int64)
    crank_sorted = np.empty(len(uniq), np.int64)
    crank_sorted[by_use] = np.arange(len(uniq)) - np.repeat(np.cumsum(n_c) - n_c, n_c)
    src = np.empty(total, np.int64)
    src[is_mem] = n_in[ok[is_mem]] + n_c[ok[is_mem]] + mpos[m_order[jm[is_mem]]]
    src[is_inp] = ipos[i_order[ji[is_inp]]]
    src[cslot] = n_in[ok[cslot]] + crank_sorted[inv.reshape(-1)]
    dst = n_in[ok] + n_c[ok] + consumer
    n_nodes = n_in + n_c + n_m
    nmax = int(n_nodes.max()) if K else 1
    ekey = (ok * nmax + src) * nmax + dst
    keep = np.sort(np.unique(ekey, return_index=True)[1])
    src, dst, ek = src[keep], dst[keep], ok[keep]
    n_e = np.bincount(ek, minlength=K)
    # node rows: per kernel its inputs (as parameters), constants, members
    start = np.cumsum(n_nodes) - n_nodes
    n_all = int(n_nodes.sum())
    rows = np.empty((n_all, NODE_DIM), np.float32)
    ops = np.empty(n_all, np.int64)
    in_at = start[ik] + ipos
    rows[in_at] = t.rows(inp, True)
    ops[in_at] = OPCODE_INDEX["parameter"]
    consts = opnd[cfirst]
    c_at = start[ck] + n_in[ck] + (np.arange(len(cfirst)) - np.repeat(np.cumsum(n_c) - n_c, n_c))
    m_at = start[mk] + n_in[mk] + n_c[mk] + mpos
    body_at = np.concatenate([c_at, m_at])
    body = np.concatenate([consts, mem])
    rows[body_at] = t.rows(body, False)
    ops[body_at] = t.opcode[body]
    rows[:, _COL["n_users"]] = np.bincount(start[ek] + src, minlength=n_all)
    roots = np.array([k.root for k in kernels], np.int64)
    rows[m_at[mem == roots[mk]], _COL["is_root"]] = 1.0
    out = []
    e0 = 0
    for i in range(K):
        s0, e = int(start[i]), int(n_e[i])
        n = int(n_nodes[i])
        out.append((rows[s0:s0 + n], ops[s0:s0 + n], np.stack([src[e0:e0 + e], dst[e0:e0 + e]]), int(n_in[i])))
        e0 += e
    return out


def _tiled_dims(kernel: Any, target: Any) -> tuple:
    try:
        from autotune.compiler.tiles import tiling_info
        return tuple(int(d) for d in tiling_info(kernel, target).dims)
    except Exception:  # noqa: BLE001 - a target without tiles: the output shape
        main = _main_shape(kernel.output_shape)
        return tuple(max(int(d), 1) for d in main.dims) if main is not None else ()


def kernel_graphs(kernels: Sequence[Any], target: str = "tpu") -> list:
    """`kernel_graph` of many kernels; those not cached yet are gathered together (`_graph_arrays_many`)
    and their geometry computed in one batch."""
    return finish_kernel_graphs(start_kernel_graphs(kernels, target))


def start_kernel_graphs(kernels: Sequence[Any], target: str = "tpu") -> tuple:
    """The first half of `kernel_graphs`: the geometry rows of the kernels not cached yet (tiling
    descriptions and default tiles, mostly Python). `finish_kernel_graphs` does the rest (gathering
    the graphs, mostly numpy), possibly on another thread (a pipelined GNN predict)."""
    name = canonical_target_name(target)
    new = list({k.hash: k for k in kernels if (k.hash, name) not in _GRAPH_CACHE}.values())
    return list(kernels), target, new, (geometry_matrix(new, target) if new else None)


def finish_kernel_graphs(started: tuple) -> list:
    """The graphs of `start_kernel_graphs`' kernels (the new ones gathered together)."""
    kernels, target, new, geom = started
    name = canonical_target_name(target)
    if new:
        for k, row, arrays in zip(new, geom, _graph_arrays_many(new)):
            kernel_graph(k, target, geom=row, arrays=arrays)
    return [_GRAPH_CACHE.get((k.hash, name)) or kernel_graph(k, target) for k in kernels]


def cache_graphs(graphs: Sequence[KernelGraph], target: Any = "tpu") -> None:
    """Put graphs built elsewhere (a featurization worker process) in the graph cache, as
    `kernel_graph` would have."""
    name = canonical_target_name(target)
    for g in graphs:
        if len(_GRAPH_CACHE) >= _GRAPH_CACHE_MAX:
            _GRAPH_CACHE.clear()
        _GRAPH_CACHE.setdefault((g.hash, name), g)


def drop_graphs(kernels: Sequence[Any], target: Any = "tpu") -> None:
    """Forget the cached graphs of these kernels (a featurization worker, once it sent them)."""
    name = canonical_target_name(target)
    for k in kernels:
        _GRAPH_CACHE.pop((k.hash, name), None)


def uncached_count(kernels: Sequence[Any], target: Any = "tpu") -> int:
    """How many distinct kernels have no cached graph yet (the work of a `kernel_graphs` call)."""
    name = canonical_target_name(target)
    return len({k.hash for k in kernels if (k.hash, name) not in _GRAPH_CACHE})


def kernel_graph(kernel: Any, target: str = "tpu", geom: Optional[np.ndarray] = None,
                 arrays: Optional[tuple] = None) -> KernelGraph:
    """The `KernelGraph` of a Kernel (cached by kernel hash and target); `geom`, `arrays`: its geometry
    row and `_graph_arrays` when already computed (`kernel_graphs`)."""
    key = (kernel.hash, canonical_target_name(target))
    g = _GRAPH_CACHE.get(key)
    if g is not None:
        return g
    rows, ops, edges, n_in = _graph_arrays(kernel) if arrays is None else arrays
    tiled = _tiled_dims(kernel, target)
    cost = kernel.cost
    kind = getattr(kernel, "fusion_kind", "kLoop")
    main = _main_shape(kernel.output_shape)
    kf = np.array([_l2(cost.flops), _l2(cost.transcendentals), _l2(cost.bytes_read), _l2(cost.bytes_written),
                   _l2(cost.flops / max(cost.bytes_read + cost.bytes_written, 1.0)), len(kernel.members), n_in,
                   edges.shape[1], kind == "kLoop", kind == "kInput", kind == "kOutput",
                   main.rank if main is not None else 0, _l2(main.elements) if main is not None else 0,
                   _l2(math.prod(tiled) if tiled else 1)], np.float32)
    g = KernelGraph(rows, ops, edges, tiled, kf, kernel.hash,
                    geom_feat=geometry_features(kernel, target) if geom is None else geom)
    if len(_GRAPH_CACHE) >= _GRAPH_CACHE_MAX:
        _GRAPH_CACHE.clear()
    _GRAPH_CACHE[key] = g
    return g


# --------------------------------------------------------------------------------------------------
class FeatureScaler:
    """Min-max scaling of feature columns, fitted on the training set and saved with a model."""

    def __init__(self, lo: Optional[np.ndarray] = None, hi: Optional[np.ndarray] = None):
        self.lo = None if lo is None else np.asarray(lo, np.float32)
        self.hi = None if hi is None else np.asarray(hi, np.float32)

    @property
    def fitted(self) -> bool:
        return self.lo is not None

    def fit(self, arrays: "np.ndarray | Sequence[np.ndarray]") -> "FeatureScaler":
        if isinstance(arrays, np.ndarray):
            arrays = [arrays]
        arrays = [a for a in arrays if len(a)]
        if not arrays:
            raise ValueError("FeatureScaler.fit: no rows")
        lo = np.min([a.min(axis=0) for a in arrays], axis=0)
        hi = np.max([a.max(axis=0) for a in arrays], axis=0)
        self.lo, self.hi = lo.astype(np.float32), hi.astype(np.float32)
        return self

    def partial_fit(self, a: np.ndarray) -> "FeatureScaler":
        if not len(a):
            return self
        lo, hi = a.min(axis=0).astype(np.float32), a.max(axis=0).astype(np.float32)
        if self.lo is None:
            self.lo, self.hi = lo, hi
        else:
            self.lo, self.hi = np.minimum(self.lo, lo), np.maximum(self.hi, hi)
        return self

    def transform(self, a: np.ndarray, mask: Optional[np.ndarray] = None) -> np.ndarray:
        """Scaled float32 columns; `mask` (float32, per column): times the mask. A float32 input is
        scaled in one new array (the same values as the expression below, without its temporaries)."""
        if self.lo is None:
            raise ValueError("FeatureScaler is not fitted")
        rng = self.hi - self.lo
        rng = np.where(rng > 0, rng, 1.0).astype(np.float32)
        if isinstance(a, np.ndarray) and a.dtype == np.float32 and self.lo.dtype == np.float32:
            out = np.subtract(a, self.lo)
            out /= rng
        else:
            out = ((a - self.lo) / rng).astype(np.float32)
        if mask is not None:
            out *= mask
        return out

    def state_dict(self) -> dict:
        return {"lo": None if self.lo is None else self.lo.tolist(),
                "hi": None if self.hi is None else self.hi.tolist()}

    @classmethod
    def from_state(cls, state: dict) -> "FeatureScaler":
        lo, hi = state.get("lo"), state.get("hi")
        return cls(None if lo is None else np.array(lo, np.float32), None if hi is None else np.array(hi, np.float32))


# --------------------------------------------------------------------------------------------------
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
