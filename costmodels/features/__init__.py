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
every kernel that contains it (`tables._ComputationTable`, per fusion space and computation), and once per
signature: instructions with the same opcode, shape, attributes, operand count and static cost (the
repeated layers of a deep model) share their row; `kernel_graphs` gathers the graphs of all
uncached kernels of a computation together from those rows with index arrays (`tables._gather_graphs`:
nodes, edges, user counts and roots of a chunk of kernels in one pass of numpy) and computes their
geometry in one batch, default tiles included (`autotune.compiler.tiles.default_tiles`); graphs are
cached by canonical kernel hash.

Before training the raw rows are min-max scaled by a `FeatureScaler` fitted on the training set and
saved with the model.

`tpugraphs_node_features(kernel)` gives the 140-column node features of the TpuGraphs dataset (see
its docstring for the layout as far as it could be reconstructed here).

The package, one concept a module (this package re-exports their public names):
  schema     the layouts above: opcode vocabulary, column names, `FEATURE_VERSION`, the shared transforms
  nodes      `node_features` and `tile_features` (the per-node rows)
  geometry   `geometry_matrix` / `geometry_features` (the kernel's default-tile geometry block)
  tables     the per-program instruction tables and the gathering of kernels' node arrays from them
  graphs     `KernelGraph`, `kernel_graph(s)` and the graph cache (`clear_cache`)
  scaler     `FeatureScaler`
  tpugraphs  the TpuGraphs-compatible node features and layout-graph pruning
"""
from __future__ import annotations

# the names importers use, re-exported (`__all__` keeps its old list)
from autotune.compiler.tiles import canonical_target_name  # noqa: F401 - (costmodels/feature_worker.py)
from costmodels.cpu_geometry import CPU_GEOMETRY_GROUPS, CPU_GEOMETRY_NAMES
from costmodels.features.geometry import geometry_analytical_seconds, geometry_features, geometry_matrix
from costmodels.features.graphs import (  # noqa: F401
    KernelGraph, cache_generation, cache_graphs, clear_cache, drop_graphs, finish_kernel_graphs, kernel_graph,
    kernel_graphs, start_kernel_graphs, uncached_count)
from costmodels.features.nodes import node_features, tile_feature_matrix, tile_features
from costmodels.features.scaler import FeatureScaler
from costmodels.features.schema import (  # noqa: F401
    CPU_FEATURE_VERSION, CPU_GEOMETRY_COLUMNS, DTYPES, FEATURE_VERSION, GEOMETRY_DIM, GEOMETRY_FEATURE_NAMES,
    GEOMETRY_GROUPS, KERNEL_FEATURE_NAMES, NODE_DIM, NODE_FEATURE_NAMES, NUM_OPCODES, OPCODE_INDEX, OPCODE_VOCAB,
    OTHER_BUCKET_OPCODES, OTHER_OPCODE_ID, STATIC_COLUMNS, TILE_DIM, TILE_FEATURE_NAMES, R, feature_version,
    geometry_layout, geometry_names, opcode_id)
from costmodels.features.tpugraphs import (TPUGRAPHS_NODE_DIM, prune_layout_graph, tpugraphs_module_features,
                                           tpugraphs_node_features)

__all__ = ["tpugraphs_module_features", "prune_layout_graph", "OPCODE_VOCAB", "OPCODE_INDEX", "NUM_OPCODES", "OTHER_OPCODE_ID", "OTHER_BUCKET_OPCODES",
           "opcode_id", "DTYPES", "NODE_FEATURE_NAMES", "NODE_DIM", "STATIC_COLUMNS", "TILE_FEATURE_NAMES",
           "TILE_DIM", "KERNEL_FEATURE_NAMES", "GEOMETRY_FEATURE_NAMES", "GEOMETRY_GROUPS", "GEOMETRY_DIM",
           "geometry_features", "geometry_matrix", "geometry_analytical_seconds", "kernel_graphs", "start_kernel_graphs",
           "finish_kernel_graphs", "FEATURE_VERSION", "CPU_FEATURE_VERSION", "feature_version", "geometry_layout",
           "geometry_names", "CPU_GEOMETRY_GROUPS", "CPU_GEOMETRY_NAMES", "CPU_GEOMETRY_COLUMNS",
           "KernelGraph", "kernel_graph", "node_features", "tile_features", "tile_feature_matrix",
           "FeatureScaler", "TPUGRAPHS_NODE_DIM", "tpugraphs_node_features", "clear_cache"]
