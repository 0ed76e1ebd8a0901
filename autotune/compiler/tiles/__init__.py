"""Tile-size selection space of one kernel: TileConfig, TileSpace, and the shared tile geometry.

A `TileConfig` gives the tile extent (in elements) of each logical dimension of the kernel's
*tiled shape*, as TpuGraphs' `output_bounds` do (docs/design.md, "Tile semantics"). The tiled
shape is the kernel's output, except that a kernel whose output comes from a `reduce` is tiled over
the reduce's *input* (its iteration space), as XLA:TPU does: in the TpuGraphs v3 data, the reduce
fusion `fusion.232` (output f32[192]) has 4-d `output_bounds` over its f32[32,26,26,192] operand
(a `topk`, which also reduces its rows, likewise).
For a tuple output the largest-rank leaf (or reduce input) is tiled. A dot/convolution kernel may
also carry `kernel` extents: the tile of the hero's right-hand operand (filter), as TpuGraphs'
`kernel_bounds`; they split the contraction into several steps. `TileSpace` enumerates output tiles
only (kernel=None: the whole contraction per step).

Valid tiles on a TPU (vector shape (8, 128)): on the minor dim (by layout) a multiple of 128 lanes or
the full extent, on the second-minor dim a multiple of 8 sublanes or the full extent (a rank-1 shape
uses 8 x 128 = 1024-element units, like XLA's T(1024) layout), any ladder value (powers of two,
divisors and the full extent) on the other dims; and the tile's input + output footprint, double
buffered, fits the scratchpad: 2 * (inputs + output) <= scratchpad_bytes.

The per-tile data movement model (`io_geometry`) is shared by the tile space (footprints), the
analytical model and the simulator, so that all three agree on what a tile reads and writes:

* an input with the tiled shape's dims ("same") reads its share of the tile, T/E of its bytes;
* the left operand of a dot/conv reads the fraction of its rows (M dims) the tile covers, with the
  convolution halo ((t - 1) * stride + window per spatial dim); the right operand the fraction of
  its columns (N dims): so small tiles re-read the other operand many times;
* any other input (a broadcast bias, a scalar) reads (T/E) ** alpha of its bytes per tile with
  alpha = log(E_in) / log(E): a scalar is read whole by every tile, an input as large as the tile
  space is streamed once (a geometric interpolation for the partial-broadcast cases);
* the output is written once, (T/E) ** alpha_out per tile (alpha_out < 1 for a reduction whose
  tiles split the reduced dims: partial results are written more than once).

The package, one concept a module (this package re-exports their public names):
  config      `TileConfig`, the fixed sizes (`R_MAX`, `I_MAX`) and codes (input roles, fusion kinds)
  work        `device_work` (re-priced XLA figures, collectives' interconnect bytes), `hero_flops`
  rows        `InputRow`, `TileRows` (the fixed-size numeric rows) and `stack_rows`
  specs       `canonical_target_name`, the key of every tiling cache
  info        `TilingInfo`, `tiling_info` and the caches of the pieces kernels share
  geometry    `io_geometry` (the per-tile data movement model above), `scratchpad_fit`
  candidates  the ladders of tile extents per dim
  roofline    `batch_inputs`, `tiled_time_terms`, `roofline_seconds`, `default_tile(s)` (the roofline's argmin)
  space       `TileSpace`
  caches      `clear_caches`
"""
from __future__ import annotations

# the names importers use, re-exported (`__all__` keeps its old list)
from autotune.compiler.tiles.caches import clear_caches  # noqa: F401
from autotune.compiler.tiles.config import (  # noqa: F401
    I_MAX, KIND_INDEX, P_MAX, R_MAX, ROLE_LHS, ROLE_NONE, ROLE_OTHER, ROLE_RHS, ROLE_SAME, TileConfig,
    fusion_kind_index)
from autotune.compiler.tiles.geometry import ScratchpadFit, io_geometry, scratchpad_fit, tiles_to_array
from autotune.compiler.tiles.info import TilingInfo, tiling_info
from autotune.compiler.tiles.roofline import (batch_inputs, default_tile, default_tiles, roofline_seconds,
                                              tiled_time_terms)
from autotune.compiler.tiles.rows import InputRow, TileRows, stack_rows  # noqa: F401
from autotune.compiler.tiles.space import TileSpace
from autotune.compiler.tiles.specs import canonical_target_name
from autotune.compiler.tiles.work import (  # noqa: F401
    BATCH_NORM_OPS_PER_ELEMENT, COLLECTIVE_OPCODES, HOST_TRANSFER_OPCODES, MATMUL_OPCODES, DeviceWork,
    collective_group_size, device_work, hero_flops)

__all__ = ["TileConfig", "TileSpace", "TilingInfo", "TileRows", "InputRow", "tiling_info", "default_tile",
           "default_tiles", "canonical_target_name", "io_geometry", "ScratchpadFit", "scratchpad_fit",
           "batch_inputs", "tiled_time_terms", "roofline_seconds", "R_MAX", "I_MAX", "tiles_to_array"]
