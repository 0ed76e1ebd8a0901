"""The feature layouts (`costmodels.features`): the frozen opcode vocabulary, the names of every node,
tile, kernel and geometry column, and the `FEATURE_VERSION` hashes that saved models and datasets
record; with the small value transforms (log2 scales, rank folding) the featurizers share."""
from __future__ import annotations

import hashlib
import math
from typing import Any, Sequence

import numpy as np

from autotune.compiler.hlo import OPCODES
from costmodels.cpu_geometry import CPU_GEOMETRY_NAMES


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


def _fold(dims: Sequence[int]) -> list:
    dims = [max(int(d), 1) for d in dims]
    if len(dims) > R:
        dims = [math.prod(dims[:len(dims) - R + 1])] + dims[len(dims) - R + 1:]
    return dims
