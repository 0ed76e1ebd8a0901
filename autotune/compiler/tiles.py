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
"""
from __future__ import annotations

import math
import re
import weakref
from dataclasses import dataclass, field, fields, replace
from operator import attrgetter
from typing import Any, Optional, Sequence

import numpy as np

from autotune.compiler.hlo import Shape, dtype_bytes

__all__ = ["TileConfig", "TileSpace", "TilingInfo", "TileRows", "InputRow", "tiling_info", "default_tile",
           "default_tiles", "canonical_target_name", "io_geometry", "ScratchpadFit", "scratchpad_fit",
           "batch_inputs", "tiled_time_terms", "roofline_seconds", "R_MAX", "I_MAX", "tiles_to_array"]

R_MAX = 8  # max tiled rank handled by the vectorized geometry (higher ranks fold leading dims)
I_MAX = 8  # inputs per kernel kept separately; the rest are merged into one "other" input
P_MAX = 2  # distinct layouts among the inputs shaped like the tiled shape

ROLE_NONE, ROLE_SAME, ROLE_LHS, ROLE_RHS, ROLE_OTHER = 0, 1, 2, 3, 4
KIND_INDEX = {"kLoop": 0, "kInput": 1, "kOutput": 2}


def fusion_kind_index(kernel: Any) -> int:
    """KIND_INDEX of the kernel's fusion kind (0, kLoop, for a duck-typed kernel without fusion rules)."""
    try:
        return KIND_INDEX.get(kernel.fusion_kind, 0)
    except Exception:  # noqa: BLE001 - duck-typed kernels without fusion rules
        return 0


# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TileConfig:
    """Tile extent per logical dim of the kernel's tiled shape (elements); optional filter tile."""

    dims: tuple
    kernel: Optional[tuple] = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "dims", tuple(int(d) for d in self.dims))
        if self.kernel is not None:
            object.__setattr__(self, "kernel", tuple(int(d) for d in self.kernel))
        if any(d < 1 for d in self.dims) or (self.kernel is not None and any(d < 1 for d in self.kernel)):
            raise ValueError(f"tile extents must be >= 1: {self.dims} {self.kernel}")

    def key(self) -> str:
        """Stable string: "8x128" ("scalar" for rank 0); a filter tile adds "/k3x1x192x384"."""
        k = "x".join(str(d) for d in self.dims) or "scalar"
        if self.kernel is not None:
            k += "/k" + "x".join(str(d) for d in self.kernel)
        return k

    @classmethod
    def from_key(cls, key: str) -> "TileConfig":
        main, _, kern = key.partition("/k")
        dims = () if main in ("", "scalar") else tuple(int(x) for x in main.split("x"))
        return cls(dims, tuple(int(x) for x in kern.split("x")) if kern else None)

    @property
    def elements(self) -> int:
        return int(np.prod(self.dims)) if self.dims else 1

    def __str__(self) -> str:
        return self.key()


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


# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class InputRow:
    """One kernel input as the tile geometry sees it (a leaf of an input; the I_MAX - 1 largest are
    kept, the rest merged into one broadcast-like row)."""

    bytes: float       # bytes read over the whole kernel (a ragged-dot rhs: one group's share)
    elements: float    # elements of the input
    role: int          # ROLE_SAME (shaped like the tiled shape), ROLE_LHS / ROLE_RHS (hero operand), ROLE_OTHER
    alpha: float       # per-tile read exponent of an "other" input: log(elements) / log(E)
    perm: tuple        # logical dims in the input's minor-to-major order (a "same" input; else identity)
    punit: tuple       # padding unit per position of `perm`: (lanes, sublanes, 1, ...) for a "same" input
    dbytes: float      # bytes per element
    maxrun: float      # longest contiguous run (bytes): 8 sublanes x the minor extent in the tiled layout


_DIM = {"axis": "dim"}      # an array over the R_MAX dims of the tiled shape (trailing axis)
_ARRAY = {"axis": "array"}  # an array over inputs or layout slots


@dataclass(frozen=True, slots=True)
class TileRows:
    """The fixed-size numeric description of one kernel that the vectorized tile geometry
    (`io_geometry`), the analytical roofline and the simulator read; `stack` turns the rows of many
    (kernel, tile) items into one `TileRows` whose fields have a leading item axis."""

    D: np.ndarray = field(metadata=_DIM)          # tiled-shape extents (padding dims: 1; rank > R_MAX folds the major dims)
    U: np.ndarray = field(metadata=_DIM)          # padding unit per dim in the TPU tiled layout (lanes, sublanes, 1)
    order: np.ndarray = field(metadata=_DIM)      # logical dims in minor-to-major order
    mmask: np.ndarray = field(metadata=_DIM)      # dims of the hero's rows (M); all when the hero is not aligned
    nmask: np.ndarray = field(metadata=_DIM)      # dims of the hero's columns (N)
    win: np.ndarray = field(metadata=_DIM)        # convolution window per output spatial dim (1 elsewhere)
    stride: np.ndarray = field(metadata=_DIM)     # convolution stride per output spatial dim
    din: np.ndarray = field(metadata=_DIM)        # lhs extent behind each output dim (convolution input size)
    in_bytes: np.ndarray = field(metadata=_ARRAY)   # (I_MAX,) bytes per input (`InputRow.bytes`)
    in_alpha: np.ndarray = field(metadata=_ARRAY)   # (I_MAX,) `InputRow.alpha`
    in_role: np.ndarray = field(metadata=_ARRAY)    # (I_MAX,) int `InputRow.role` (ROLE_NONE: empty slot)
    in_slot: np.ndarray = field(metadata=_ARRAY)    # (I_MAX,) int layout slot of a "same" input
    in_maxrun: np.ndarray = field(metadata=_ARRAY)  # (I_MAX,) `InputRow.maxrun`
    sl_perm: np.ndarray = field(metadata=_ARRAY)    # (P_MAX, R_MAX) int minor-to-major dims per layout slot
    sl_punit: np.ndarray = field(metadata=_ARRAY)   # (P_MAX, R_MAX) padding unit per position of sl_perm
    sl_dbytes: np.ndarray = field(metadata=_ARRAY)  # (P_MAX,) bytes per element per layout slot
    dtype_bytes: float   # bytes per element of the tiled shape
    out_bytes: float     # bytes of the output (all leaves)
    out_alpha: float     # per-tile write exponent of the output (< 1: a reduction split over reduced dims)
    vec_flops: float     # vector flops besides the hero and its operands' producers
    hero_flops: float    # matrix-unit flops of the dot/convolution hero (0 without one)
    trans: float         # transcendentals besides the operands' producers
    lhs_vec: float       # flops of the fused producers of the hero's lhs (recomputed per column tile)
    rhs_vec: float       # flops of the fused producers of the hero's rhs (recomputed per row tile)
    lhs_trans: float     # transcendentals of the lhs producers
    rhs_trans: float     # transcendentals of the rhs producers
    trivial: float       # 1.0 for a bitcast-only kernel (no time)
    K_pad: float         # contraction size padded to the matrix unit (128)
    n_const: float       # hero columns per tile when the tiled shape is not the hero's output (else 1)
    m_scale: float       # hero rows per tiled-shape element when not aligned (else 1)
    is_mxu: float        # 1.0 when the kernel has a matrix-unit hero
    kind: float          # KIND_INDEX of the fusion kind (kLoop 0, kInput 1, kOutput 2)
    link_s: float        # seconds of off-chip transfer (collectives, infeed/outfeed), once per kernel
    lhs_mult: float = 1.0  # lhs re-reads per tile (a filter tile split over window positions)

    @classmethod
    def stack(cls, rows: Sequence["TileRows"]) -> "TileRows":
        """The rows of many items as one `TileRows` (leading axis = item). An array object shared by
        many rows (`_make_row` shares equal ones) is stacked once and gathered."""
        out: dict = {}
        scalars = np.array([_get_row_scalars(r) for r in rows], float).reshape(len(rows), len(_ROW_SCALARS))
        for j, name in enumerate(_ROW_SCALARS):
            out[name] = scalars[:, j]
        for name, column in zip(_ROW_ARRAYS, zip(*[_get_row_arrays(r) for r in rows])):
            at: dict = {}
            idx = [at.setdefault(id(a), len(at)) for a in column]
            if len(at) == len(column):
                out[name] = np.stack(column)
            else:
                first = {i: a for a, i in zip(column, idx)}
                out[name] = np.stack([first[i] for i in range(len(at))])[idx]
        return cls(**out)

    def take(self, idx: np.ndarray) -> "TileRows":
        """The stacked rows of items `idx`."""
        return TileRows(**{f.name: np.take(getattr(self, f.name), idx, axis=0) for f in fields(self)})

    def first_dims(self, rank: int) -> "TileRows":
        """Stacked rows with the per-dim arrays cut to their first `rank` dims (the trailing padding
        dims, of extent 1 and fully covered, change nothing)."""
        return replace(self, **{f.name: getattr(self, f.name)[..., :rank] for f in fields(self)
                                if f.metadata.get("axis") == "dim" or f.name in ("sl_perm", "sl_punit")})


@dataclass(frozen=True, slots=True, eq=False)
class TilingInfo:
    """A kernel's static tiling description on a target (`tiling_info` caches it by kernel hash and
    target name): the tiled shape and its layout, the hero (dot/convolution) geometry, the kernel's
    device work and inputs, and the fixed-size `row` the vectorized geometry reads."""

    target: Any                # the TargetSpec
    hash: str                  # the kernel's canonical hash
    shape: Shape               # the tiled shape (the output, or a reduce's input; see the module docstring)
    dims: tuple                # its extents (each >= 1)
    rank: int
    mtm: tuple                 # its minor-to-major dims
    dtype_bytes: float         # bytes per element of the tiled shape
    unit: tuple                # valid-tile unit per dim: lanes on the minor, sublanes on the second-minor dim
    elements: float            # elements of the tiled shape (E)
    flops: float               # device flops of the kernel (`device_work`)
    transcendentals: float     # device transcendentals of the kernel
    link_s: float              # off-chip transfer seconds (collectives, infeed/outfeed), once per execution
    bytes_read: float          # XLA's static bytes read (kernel.cost)
    bytes_written: float       # XLA's static bytes written
    kind: int                  # KIND_INDEX of the kernel's fusion kind
    hero: Optional[str]        # "dot", "conv", "generic" (dims not readable) or None
    hero_flops: float          # matrix-unit flops of the hero (2 x output elements x K)
    K: float                   # contraction size of the hero
    K_pad: float               # K padded to the matrix unit
    m_mask: np.ndarray         # per dim: one of the hero's rows (M) (read-only)
    n_mask: np.ndarray         # per dim: one of the hero's columns (N) (read-only)
    n_const: float             # hero columns per tile when the tiled shape is not the hero's output
    m_scale: float             # hero rows per tiled-shape element when not aligned
    rhs_shape: Optional[Shape]  # the hero's rhs (filter) shape, for filter tiles (kernel_bounds)
    rhs_fraction: float        # share of the rhs one output row needs (1 / groups of a ragged-dot)
    rhs_kclass: tuple          # per rhs dim: 1 spatial (K), 2 input feature (K), 3 output (N), 0 other
    lhs_vec: float             # flops of the fused producers of the hero's lhs
    rhs_vec: float             # flops of the fused producers of the hero's rhs
    lhs_trans: float           # transcendentals of the lhs producers
    rhs_trans: float           # transcendentals of the rhs producers
    vec_flops: float           # vector flops besides the hero and the operands' producers
    trans_rest: float          # transcendentals besides the operands' producers
    trivial: bool              # a bitcast-only kernel
    inputs: tuple              # `InputRow`s, largest first (at most I_MAX)
    out_elements: float        # elements of the output (all leaves)
    out_bytes: float           # bytes of the output
    out_alpha: float           # per-tile write exponent of the output
    # (per-dim arrays, per-input arrays, scalars) of `row`, the array dicts shared between kernels:
    # `stack_rows` stacks the rows of many kernels by these (one dictionary look-up per kernel and part)
    _row_parts: tuple = field(repr=False)
    _tile_arrays: dict = field(default_factory=dict, repr=False)  # tile -> tile_array (cache)
    _row: Optional[TileRows] = field(default=None, repr=False)  # `row`, made on first use

    @classmethod
    def of(cls, kernel: Any, target: Any = "tpu") -> "TilingInfo":
        """Work out the tiling description of a kernel (uncached; `tiling_info` caches)."""
        b = _TilingBuilder(kernel, target)
        return cls(*_get_info_fields(b), b._row_parts)

    @property
    def row(self) -> TileRows:
        """The numeric row for the vectorized geometry (`TileRows`; its arrays read-only, shared)."""
        r = self._row
        if r is None:
            dims, ins, scalars = self._row_parts
            r = TileRows(*dims.values(), *ins.values(), *scalars)
            object.__setattr__(self, "_row", r)
        return r

    # ---- conversions
    def tile_array(self, tile: Optional[TileConfig]) -> np.ndarray:
        """Tile extents as an R_MAX float row (padding dims 1); None = the whole shape (cached)."""
        c = self._tile_arrays.get(tile)
        if c is None:
            c = self._tile_array(tile)
            if len(self._tile_arrays) < 100_000:
                self._tile_arrays[tile] = c
        return c

    def _tile_array(self, tile: Optional[TileConfig]) -> np.ndarray:
        t = np.ones(R_MAX)
        r = min(self.rank, R_MAX)
        if tile is None or len(tile.dims) != self.rank:
            t[:r] = self.row.D[:r]
            return t
        return self.tile_arrays([tile.dims])[0]

    def tile_arrays(self, extents: Sequence[tuple]) -> np.ndarray:
        """`tile_array` rows of many tiles given by their extents (tuples of this kernel's rank)."""
        n, r = len(extents), self.rank
        t = np.ones((n, R_MAX))
        if r > R_MAX:
            e = np.array(extents, np.int64).reshape(n, r)
            fold = r - R_MAX + 1
            t[:, 0] = np.prod(e[:, :fold], axis=1).astype(float)
            t[:, 1:] = e[:, fold:]
        elif r:
            t[:, :r] = np.array(extents, float).reshape(n, r)
        return np.minimum(t, self.row.D)

    def kernel_steps(self, tile: Optional[TileConfig]) -> tuple:
        """(contraction steps, padded K per step, lhs re-reads) for a filter tile (TpuGraphs
        kernel_bounds). A convolution split over window positions re-reads its (shifted) input tile
        once per spatial step: lhs traffic x spatial steps."""
        if tile is None or tile.kernel is None or self.rhs_shape is None or len(tile.kernel) != self.rhs_shape.rank:
            return 1.0, self.K_pad, 1.0
        steps = 1.0
        kpad = 1.0
        spatial = 1.0
        for d, (ext, cls) in enumerate(zip(tile.kernel, self.rhs_kclass)):
            full = self.rhs_shape.dims[d]
            ext = min(ext, full)
            if cls in (1, 2):
                steps *= math.ceil(full / ext)
                kpad *= ext if cls == 1 else _ceil_to(ext, 128)
                if cls == 1:
                    spatial *= math.ceil(full / ext)
        return steps, kpad, spatial

    def bounds_to_tile(self, output_bounds: Sequence[int], kernel_bounds: Sequence[int] = ()) -> Optional[TileConfig]:
        """TpuGraphs bounds (physical major-to-minor order, two minor dims in units of the (8, 128)
        tile, a rank-1 dim in 1024-element units) -> TileConfig in logical elements."""
        def conv(bounds, shape_dims, mtm, unit_of):
            if not bounds or len(bounds) != len(shape_dims):
                return None
            ext = [0] * len(shape_dims)
            for pos, d in enumerate(reversed(mtm)):
                ext[d] = int(min(shape_dims[d], bounds[pos] * unit_of[d]))
            return tuple(max(e, 1) for e in ext)
        if not output_bounds and not kernel_bounds:
            return None  # no tile recorded: the compiler's default tile
        out = conv(list(output_bounds), self.dims, self.mtm, self.unit) if output_bounds else None
        if out is None:
            out = self.dims
        kern = None
        if kernel_bounds and self.rhs_shape is not None:
            rs = self.rhs_shape
            rmtm = list(rs.minor_to_major())
            sub, lanes = self.target.vector_shape
            ru = [1] * rs.rank
            if rs.rank == 1:
                ru[0] = sub * lanes
            elif rs.rank >= 2:
                ru[rmtm[0]], ru[rmtm[1]] = lanes, sub
            kern = conv(list(kernel_bounds), tuple(rs.dims), rmtm, ru)
        return TileConfig(out, kern)


_INFO_FIELDS = tuple(f.name for f in fields(TilingInfo) if not f.name.startswith("_"))
_get_info_fields = attrgetter(*_INFO_FIELDS)  # the builder's values, in the order of TilingInfo's fields
_SLOT_PERMS = np.tile(np.arange(R_MAX), (P_MAX, 1))  # identity layouts of the P_MAX layout slots


def _walk(ops, mset: set, start: int, inputs: set, costs: Optional[list], skip: Any) -> tuple:
    """Backwards from `start` through kernel members (depth first, `skip`ped nodes not entered):
    (kernel inputs reached, flops and transcendentals of the members reached, in the order reached,
    every node reached). The hero's operand walks of `_TilingBuilder`: the inputs behind each
    operand and the flops of its fused producers (each tile recomputes its operand slice, so the lhs
    producers run once per column tile and the rhs producers once per row tile)."""
    out, stack, seen = set(), [start], set()
    f = t = 0.0
    while stack:
        n = stack.pop()
        if n in seen or n in skip:
            continue
        seen.add(n)
        if n in inputs:
            out.add(n)
        if n in mset:
            if costs is not None:
                c = costs[n]
                f += max(c.flops, 0.0)
                t += max(c.transcendentals, 0.0)
            stack.extend(ops[n])
    return out, f, t, seen


# --------------------------------------------------------------------------------------------------
class _TilingBuilder:
    """Works out a kernel's `TilingInfo` (the mutable scratch of `TilingInfo.of`)."""

    def __init__(self, kernel: Any, target: Any):
        self.target = _spec(target)
        sub, lanes = self.target.vector_shape
        self.hash = kernel.hash
        out_shape = kernel.output_shape
        comp = getattr(kernel, "computation", None)
        members = list(getattr(kernel, "members", ()))
        insts = comp.instructions if comp is not None else list(getattr(kernel, "instructions", []))
        # the tiled shape and its layout depend on the root only: shared by the kernels of one root
        root = getattr(kernel, "root", None)
        per_comp = None
        if comp is not None and root is not None:
            try:
                per_comp = _TILED_SHAPES.get(comp)
                if per_comp is None:
                    per_comp = _TILED_SHAPES[comp] = {}
            except TypeError:  # a duck-typed computation without weak references: not cached
                per_comp = None
        key = (root, self.target.vector_shape)
        hit = per_comp.get(key) if per_comp is not None else None
        if hit is None or hit[0] is not out_shape:
            self._shape_fields(kernel, comp, members, out_shape, sub, lanes)
            if per_comp is not None:
                per_comp[key] = (out_shape, tuple(getattr(self, f) for f in _SHAPE_FIELDS))
        else:
            (self.shape, self.dims, self.rank, self.mtm, self.dtype_bytes, self.unit, self.elements) = hit[1]
        cost = kernel.cost
        work = device_work(kernel)
        self.flops = float(work.flops)
        self.transcendentals = float(work.transcendentals)
        # off-chip transfers (collectives, infeed/outfeed): once per kernel execution
        self.link_s = (work.interconnect_bytes / self.target.interconnect_bytes_per_s
                       + work.host_bytes / self.target.host_link_bytes_per_s)
        self.bytes_read = float(max(cost.bytes_read, 0.0))
        self.bytes_written = float(max(cost.bytes_written, 0.0))
        self.kind = fusion_kind_index(kernel)
        # ---- hero (dot / convolution / ragged-dot / scaled-dot)
        self.hero = None
        self.hero_flops = 0.0
        self.K = 1.0
        self.K_pad = 1.0
        # per-dim hero arrays: shared read-only ones until a hero needs its own (`_own_hero_arrays`)
        self.m_mask = self.n_mask = _shared_array(self.rank, bool, 0)
        self.n_const = 1.0
        self.m_scale = 1.0  # dot rows per tiled-shape element when the hero is not aligned with it
        self.win = self.stride = _shared_array(self.rank, float, 1)
        self.din = None  # the tiled extents, unless a convolution hero sets its input's
        self.rhs_shape: Optional[Shape] = None
        self.rhs_fraction = 1.0  # share of the rhs one output row needs (1 / groups of a ragged-dot)
        self.rhs_kclass: tuple = ()  # per filter dim: 1 spatial (K), 2 input feature (K), 3 output (N), 0 other
        lhs_inputs: set = set()
        rhs_inputs: set = set()
        self.lhs_vec = self.rhs_vec = self.lhs_trans = self.rhs_trans = 0.0
        inputs = list(getattr(kernel, "inputs", []))
        if comp is not None:
            for m in members:
                ins = insts[m]
                if ins.opcode in MATMUL_OPCODES:
                    try:
                        self._shared_hero(ins, m, comp, insts)
                        mset, iset = set(members), set(inputs)
                        costs = self._node_costs(kernel)
                        ops = comp.operands
                        lhs_inputs, lf, lt, lseen = _walk(ops, mset, ops[m][0], iset, costs, ())
                        rhs_inputs, rf, rt, _ = _walk(ops, mset, ops[m][1], iset, costs, ())
                        if costs is not None:
                            # each producer counted once: the rhs side skips what the lhs side reached
                            if not lseen.isdisjoint(mset):
                                rf, rt = _walk(ops, mset, ops[m][1], iset, costs, lseen)[1:3]
                            self.lhs_vec, self.lhs_trans, self.rhs_vec, self.rhs_trans = lf, lt, rf, rt
                    except Exception:  # noqa: BLE001 - odd dims: fall back to the generic model
                        self.hero = self.hero or "generic"
                    break
        elif any(op in MATMUL_OPCODES for op in getattr(kernel, "opcodes", [])):
            self.hero = "generic"
        if self.hero is not None and self._hero_state is None and not self.m_mask.any() and not self.n_mask.any():
            self._own_hero_arrays()
            self.m_mask[:] = True
        self.vec_flops = max(self.flops - self.hero_flops - self.lhs_vec - self.rhs_vec, 0.0)
        self.trans_rest = max(self.transcendentals - self.lhs_trans - self.rhs_trans, 0.0)
        self.trivial = bool(getattr(kernel, "is_trivial", False))
        # ---- inputs
        shapes = list(kernel.input_shapes)
        rows = []
        for k, s in enumerate(shapes):
            for leaf in s.leaves():
                idx = inputs[k] if k < len(inputs) else None
                is_rhs = idx in rhs_inputs and idx not in lhs_inputs
                row = self._input_row(leaf, idx in lhs_inputs and idx not in rhs_inputs, is_rhs)
                if is_rhs and self.rhs_fraction < 1.0:  # a ragged-dot row reads one group's matrix
                    share = row.bytes * self.rhs_fraction
                    row = replace(row, bytes=share, maxrun=min(row.maxrun, max(share, 1.0)))
                rows.append(row)
        rows.sort(key=lambda r: -r.bytes)
        if len(rows) > I_MAX:  # merge the smallest into one broadcast-like input
            rest = rows[I_MAX - 1:]
            b = sum(r.bytes for r in rest)
            e = sum(r.elements for r in rest)
            rows = rows[:I_MAX - 1] + [self._input_row(None, False, False, b, e)]
        self.inputs = tuple(rows)
        out_leaves = out_shape.leaves() if out_shape.is_tuple else [out_shape]
        self.out_elements = float(sum(max(l.elements, 1) for l in out_leaves))
        self.out_bytes = float(sum(max(l.elements, 1) * dtype_bytes(l.dtype) for l in out_leaves))
        self.out_alpha = self._alpha(self.out_elements)
        self._make_row()
        self.m_mask.flags.writeable = False
        self.n_mask.flags.writeable = False

    # ---- construction helpers
    def _shape_fields(self, kernel, comp, members, out_shape: Shape, sub: int, lanes: int) -> None:
        """The tiled shape and its extents, rank, minor-to-major order, bytes per element, valid-tile
        unit and elements (`_SHAPE_FIELDS`)."""
        self.shape = self._tiled_shape(kernel, comp, members, out_shape)
        self.dims = tuple(max(int(d), 1) for d in self.shape.dims)
        self.rank = len(self.dims)
        self.mtm = tuple(self.shape.minor_to_major()) if self.rank else ()
        if len(self.mtm) != self.rank or sorted(self.mtm) != list(range(self.rank)):
            self.mtm = tuple(range(self.rank - 1, -1, -1))
        self.dtype_bytes = dtype_bytes(self.shape.dtype)
        # Granularity per logical dim: valid-tile unit and padding unit (TPU tiled layout).
        unit = [1] * self.rank
        if self.rank == 1:
            unit[0] = sub * lanes
        elif self.rank >= 2:
            unit[self.mtm[0]] = lanes
            unit[self.mtm[1]] = sub
        self.unit = tuple(unit)
        self.elements = float(math.prod(self.dims)) if self.rank else 1.0

    _hero_state: Optional[dict] = None  # the `_HEROES` entry of this kernel's hero (None: not shared)

    def _shared_hero(self, ins, m: int, comp, insts) -> None:
        """`_hero` of the instruction `ins` (member `m`), shared by every kernel with the same hero
        instruction and tiled shape (`_HEROES`; the hero's geometry depends on nothing else): the
        hero's fields and read-only per-dim arrays, its all-rows fallback included."""
        key = (id(ins), tuple(self.shape.dims), self.mtm, self.target.vector_shape)
        hit = _HEROES.get(key)
        if hit is None or hit[0] is not ins:  # (the entry holds `ins`: its id is not reused while cached)
            self._own_hero_arrays()
            self._hero(ins, [insts[o].shape for o in comp.operands[m]])
            if not self.m_mask.any() and not self.n_mask.any():
                self.m_mask[:] = True
            for a in (self.m_mask, self.n_mask, self.win, self.stride, self.din):
                a.flags.writeable = False
            if len(_HEROES) > 100_000:
                _HEROES.clear()
            hit = _HEROES[key] = (ins, {f: getattr(self, f) for f in _HERO_STATE})
        else:
            self.__dict__.update(hit[1])
        self._hero_state = hit[1]

    def _own_hero_arrays(self) -> None:
        """Writable per-dim hero arrays of this kernel (in place of the shared read-only ones)."""
        if not self.m_mask.flags.writeable:
            self.m_mask = np.zeros(self.rank, bool)
            self.n_mask = np.zeros(self.rank, bool)
            self.win = np.ones(self.rank)
            self.stride = np.ones(self.rank)
            self.din = np.array(self.dims, float)

    @staticmethod
    def _tiled_shape(kernel, comp, members, out_shape: Shape) -> Shape:
        cands = [l for l in (out_shape.leaves() if out_shape.is_tuple else [out_shape])]
        if comp is not None:
            root = getattr(kernel, "root", None)
            heads = [root]
            if root is not None and comp.instructions[root].opcode == "tuple":
                heads = list(comp.operands[root])
            for h in heads:
                if h is not None and comp.instructions[h].opcode in ("reduce", "topk"):
                    cands.extend(comp.instructions[o].shape for o in comp.operands[h][:1])
        cands = [c for c in cands if not c.is_tuple]
        if not cands:
            return Shape("f32", ())
        return max(cands, key=lambda s: (s.rank, s.elements))

    @staticmethod
    def _node_costs(kernel) -> Optional[list]:
        """The kernel's computation's per-node costs (None for a duck-typed kernel without them)."""
        try:
            ci = getattr(kernel, "comp", None)
            if ci is None:
                ci = getattr(kernel, "comp_index")
            return kernel.space.node_costs[ci]
        except Exception:  # noqa: BLE001 - duck-typed kernel without per-node costs
            return None

    def _hero(self, ins, opshapes) -> None:
        out = ins.shape
        lhs, rhs = opshapes[0], opshapes[1]
        self.rhs_shape = rhs
        hero_out_elems = float(max(out.elements, 1))
        aligned = tuple(out.dims) == tuple(self.shape.dims)
        if ins.opcode == "convolution":
            dl = ins.parsed["dim_labels"]
            win = ins.parsed.get("window") or ()
            cin = rhs.dims[dl.kernel_input_feature]
            wsz = float(np.prod([rhs.dims[d] for d in dl.kernel_spatial])) if dl.kernel_spatial else 1.0
            self.K = cin * wsz
            self.K_pad = wsz * _ceil_to(cin, 128)
            n_dims = [dl.out_feature]
            kcls = [0] * rhs.rank
            for d in dl.kernel_spatial:
                kcls[d] = 1
            kcls[dl.kernel_input_feature] = 2
            kcls[dl.kernel_output_feature] = 3
            self.rhs_kclass = tuple(kcls)
            if aligned:
                for k, d in enumerate(dl.out_spatial):
                    if k < len(win):
                        self.win[d] = win[k].size
                        self.stride[d] = win[k].stride
                    self.din[d] = lhs.dims[dl.lhs_spatial[k]]
            self.hero = "conv"
        else:
            lc = tuple(ins.parsed.get("lhs_contracting_dims", ()) or ())
            rc = tuple(ins.parsed.get("rhs_contracting_dims", ()) or ())
            # a ragged-dot's rhs group dim is, like a batch dim, no output (N) dim
            groups = tuple(ins.parsed.get("rhs_group_dims", ()) or ())
            rb = tuple(ins.parsed.get("rhs_batch_dims", ()) or ()) + groups
            self.rhs_fraction = 1.0 / max(math.prod(rhs.dims[d] for d in groups), 1)
            self.K = float(np.prod([lhs.dims[d] for d in lc])) if lc else 1.0
            self.K_pad = float(_ceil_to(int(self.K), 128))
            n_free = rhs.rank - len(rc) - len(rb)
            n_dims = list(range(out.rank - n_free, out.rank))
            kcls = [0] * rhs.rank
            for d in rc:
                kcls[d] = 2
            for d in range(rhs.rank):
                if d not in rc and d not in rb:
                    kcls[d] = 3
            self.rhs_kclass = tuple(kcls)
            self.hero = "dot"
        self.hero_flops = 2.0 * hero_out_elems * self.K
        if aligned:
            for d in range(self.rank):
                (self.n_mask if d in n_dims else self.m_mask)[d] = True
        else:
            # The tiled shape is not the hero's output (e.g. a dot whose result is sliced into a
            # dynamic-update-slice root): a tile needs its share of the hero's M rows, each N wide.
            # (Counting every tiled element as a row of N over-counted such kernels by E / M: 4096x
            # for the LSTM cell of lstm_medium_train.)
            self.m_mask[:] = True
            self.n_const = float(np.prod([out.dims[d] for d in n_dims])) if n_dims else 1.0
            self.m_scale = hero_out_elems / self.n_const / max(self.elements, 1.0)

    def _alpha(self, elements: float) -> float:
        if self.elements <= 1.0:
            return 0.0
        return float(min(1.0, max(0.0, math.log(max(elements, 1.0)) / math.log(self.elements))))

    def _input_row(self, leaf: Optional[Shape], is_lhs: bool, is_rhs: bool, b: float = 0.0,
                   e: float = 1.0) -> "InputRow":
        """The `InputRow` of one input leaf; leaf None: `b` bytes of `e` elements merged from the
        smallest inputs (read like a broadcast)."""
        if leaf is None:
            identity, ones = tuple(range(self.rank)), (1,) * self.rank
            return InputRow(b, e, ROLE_OTHER, self._alpha(e), identity, ones, 4, max(b, 1.0))
        vs = self.target.vector_shape
        # by the leaf object first (the shapes of a program's instructions recur: no Shape hashing),
        # then by its value (equal rows are one object: `_make_row` keys its arrays by the rows' ids)
        fast = (id(leaf), is_lhs, is_rhs, self.dims, vs)
        hit = _INPUT_ROWS_BY_ID.get(fast)
        if hit is not None and hit[0] is leaf:  # (the entry holds `leaf`: its id is not reused while cached)
            return hit[1]
        key = (leaf, is_lhs, is_rhs, self.dims, vs[0], vs[1])
        row = _INPUT_ROWS.get(key)
        if row is None:
            if len(_INPUT_ROWS) > 100_000:
                _INPUT_ROWS.clear()
            row = _INPUT_ROWS[key] = self._leaf_row(leaf, is_lhs, is_rhs)
        if len(_INPUT_ROWS_BY_ID) > 100_000:
            _INPUT_ROWS_BY_ID.clear()
        _INPUT_ROWS_BY_ID[fast] = (leaf, row)
        return row

    def _leaf_row(self, leaf: Shape, is_lhs: bool, is_rhs: bool) -> "InputRow":
        """`_input_row` of an input leaf, computed (`_INPUT_ROWS` caches it)."""
        sub, lanes = self.target.vector_shape
        identity, ones = tuple(range(self.rank)), (1,) * self.rank
        e = float(max(leaf.elements, 1))
        db = dtype_bytes(leaf.dtype)
        mtm = tuple(leaf.minor_to_major()) if leaf.rank else ()
        if len(mtm) != leaf.rank:
            mtm = tuple(range(leaf.rank - 1, -1, -1))
        # Longest contiguous run of this input: 8 sublanes x its minor extent (tiled layout).
        minor = leaf.dims[mtm[0]] if leaf.rank else 1
        maxrun = float(min(e * db, _ceil_to(max(minor, 1), lanes) * sub * db))
        role, perm, punit = ROLE_OTHER, identity, ones
        if is_lhs:
            role = ROLE_LHS
        elif is_rhs:
            role = ROLE_RHS
        elif leaf.rank == self.rank and tuple(leaf.dims) == self.dims and self.rank > 0:
            role = ROLE_SAME
            perm = mtm  # logical dims in the input's minor-to-major order
            punit = (lanes,) + (1,) * (self.rank - 1) if self.rank == 1 else (lanes, sub) + (1,) * (self.rank - 2)
        return InputRow(e * db, e, role, self._alpha(e), perm, punit, db, maxrun)

    def _make_row(self) -> None:
        """`_row_parts` of `TilingInfo.row`: fixed-size arrays (R_MAX dims, I_MAX inputs) for the
        vectorized geometry; the per-dim arrays and the per-input arrays are shared (read-only) by the
        kernels with the same tiled shape or hero, or the same input rows (`_DIM_ROWS`, `_HEROES`,
        `_INPUT_ARRAYS`)."""
        R = R_MAX
        fold = len(self.dims) - R + 1 if len(self.dims) > R else 0  # fold the leading (most major) dims into one
        if self.hero is None and fold == 0:
            key = (self.dims, self.mtm, self.target.vector_shape)
            dim_arrays = _DIM_ROWS.get(key)
            if dim_arrays is None:
                if len(_DIM_ROWS) > 10_000:
                    _DIM_ROWS.clear()
                dim_arrays = _DIM_ROWS[key] = self._dim_arrays(fold)
        elif fold == 0 and self._hero_state is not None:  # shared with the kernels of the same hero
            dim_arrays = self._hero_state.get("_dim_arrays")
            if dim_arrays is None:
                dim_arrays = self._hero_state["_dim_arrays"] = self._dim_arrays(fold)
        else:
            dim_arrays = self._dim_arrays(fold)
        # by the rows' ids first (rows from `_INPUT_ROWS` are shared objects: no InputRow hashing), then
        # by their values
        fast = (tuple(map(id, self.inputs)), fold == 0)
        hit = _INPUT_ARRAYS_BY_ID.get(fast)
        if hit is not None:  # (the entry holds its rows: their ids are not reused while cached)
            in_arrays = hit[1]
        else:
            key = (self.inputs, fold == 0)
            in_arrays = _INPUT_ARRAYS.get(key)
            if in_arrays is None:
                if len(_INPUT_ARRAYS) > 100_000:
                    _INPUT_ARRAYS.clear()
                in_arrays = _INPUT_ARRAYS[key] = self._input_arrays(fold)
            if len(_INPUT_ARRAYS_BY_ID) > 100_000:
                _INPUT_ARRAYS_BY_ID.clear()
            _INPUT_ARRAYS_BY_ID[fast] = (self.inputs, in_arrays)
        # in the order of TileRows' scalar fields (_ROW_SCALARS), lhs_mult last
        scalars = (float(self.dtype_bytes), self.out_bytes, self.out_alpha, self.vec_flops, self.hero_flops,
                   self.trans_rest, self.lhs_vec, self.rhs_vec, self.lhs_trans, self.rhs_trans, float(self.trivial),
                   self.K_pad, self.n_const, self.m_scale, float(self.hero is not None), float(self.kind),
                   self.link_s, 1.0)
        self._row_parts = (dim_arrays, in_arrays, scalars)

    def _dim_arrays(self, fold: int) -> dict:
        """The per-dim arrays of the row (D, U, order, the hero's masks and window), read-only."""
        R = R_MAX
        D = np.ones(R)
        U = np.ones(R)
        order = np.arange(R)
        mm = np.zeros(R, bool)
        nm = np.zeros(R, bool)
        win = np.ones(R)
        stride = np.ones(R)
        din = np.ones(R)
        r = min(self.rank, R)
        if fold == 0:
            D[:r] = self.dims
            mm[:r] = self.m_mask
            nm[:r] = self.n_mask
            win[:r] = self.win
            stride[:r] = self.stride
            din[:r] = self.dims if self.din is None else self.din
            pad_u = [1] * r
            if r == 1:
                pad_u[0] = self.target.vector_shape[1]
            elif r >= 2:
                pad_u[self.mtm[0]] = self.target.vector_shape[1]
                pad_u[self.mtm[1]] = self.target.vector_shape[0]
            U[:r] = pad_u
            order[:r] = self.mtm
        else:  # rare: rank > R_MAX; approximate by the trailing R-1 dims plus one folded dim
            D[:] = [float(np.prod(self.dims[:fold]))] + list(self.dims[fold:])
            din[:] = D
            mm[:] = True
        out = {"D": D, "U": U, "order": order, "mmask": mm, "nmask": nm, "win": win, "stride": stride, "din": din}
        for a in out.values():
            a.flags.writeable = False
        return out

    def _input_arrays(self, fold: int) -> dict:
        """The per-input and per-layout-slot arrays of the row, read-only."""
        R, I = R_MAX, I_MAX
        rows = self.inputs[:I]
        pad = I - len(rows)
        roles = [row.role if (fold == 0 or row.role != ROLE_SAME) else ROLE_OTHER for row in rows]
        ins_bytes = np.array([row.bytes for row in rows] + [0.0] * pad, float)
        ins_alpha = np.array([row.alpha for row in rows] + [0.0] * pad, float)
        ins_role = np.array(roles + [0] * pad, np.int64)
        ins_maxrun = np.array([row.maxrun for row in rows] + [1.0] * pad, float)
        # distinct layouts of the "same" inputs (P_MAX slots): runs and padding are computed per slot
        sl_perm = _SLOT_PERMS.copy()
        sl_punit = np.ones((P_MAX, R))
        sl_dbytes = np.ones(P_MAX)
        ins_slot = np.zeros(I, np.int64)
        slots: list = []
        for k, row in enumerate(rows):
            if roles[k] == ROLE_SAME:
                key = (row.perm, row.dbytes)
                if key not in slots and len(slots) < P_MAX:
                    slots.append(key)
                    j = len(slots) - 1
                    sl_perm[j, :len(row.perm)] = row.perm
                    sl_punit[j, :len(row.perm)] = row.punit
                    sl_dbytes[j] = row.dbytes
                ins_slot[k] = slots.index(key) if key in slots else P_MAX - 1
        out = {"in_bytes": ins_bytes, "in_alpha": ins_alpha, "in_role": ins_role, "in_slot": ins_slot,
               "in_maxrun": ins_maxrun, "sl_perm": sl_perm, "sl_punit": sl_punit, "sl_dbytes": sl_dbytes}
        for a in out.values():
            a.flags.writeable = False
        return out


_SHARED_ARRAYS: dict = {}  # (rank, dtype, fill) -> a read-only array (the hero arrays of kernels without one)


def _shared_array(rank: int, dtype: type, fill: int) -> np.ndarray:
    key = (rank, dtype, fill)
    a = _SHARED_ARRAYS.get(key)
    if a is None:
        a = _SHARED_ARRAYS[key] = np.full(rank, fill, dtype)
        a.flags.writeable = False
    return a


def _ceil_to(x: float, m: int) -> int:
    return int(math.ceil(x / m) * m) if m > 1 else int(math.ceil(x))


_INFO_CACHE: dict = {}
# Pieces of TilingInfo shared by many kernels of a program (the same leaf shapes and tiled shapes recur):
_INPUT_ROWS: dict = {}    # (leaf, is_lhs, is_rhs, tiled dims, sublanes, lanes) -> InputRow
_INPUT_ARRAYS: dict = {}  # (input rows, unfolded) -> the row's per-input arrays
_INPUT_ROWS_BY_ID: dict = {}    # (id(leaf), is_lhs, is_rhs, tiled dims, vector shape) -> (leaf, InputRow)
_INPUT_ARRAYS_BY_ID: dict = {}  # (ids of the input rows, unfolded) -> (input rows, per-input arrays)
_DIM_ROWS: dict = {}      # (tiled dims, minor-to-major, vector shape) -> per-dim arrays of a kernel without hero
_CANDIDATES: dict = {}    # (tiled dims, unit, max tiles) -> candidate extents and their tile arrays
# computation -> {(root, vector shape): (output shape, _SHAPE_FIELDS values)} (weak: goes with the computation)
_TILED_SHAPES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_SHAPE_FIELDS = ("shape", "dims", "rank", "mtm", "dtype_bytes", "unit", "elements")
# (id(hero instruction), tiled dims, minor-to-major, vector shape) -> (instruction, hero state)
_HEROES: dict = {}
_HERO_STATE = ("hero", "hero_flops", "K", "K_pad", "m_mask", "n_mask", "n_const", "m_scale", "win", "stride", "din",
               "rhs_shape", "rhs_fraction", "rhs_kclass")


def clear_caches() -> None:
    """Forget every cached tiling description, default tile and shared piece (a cold start)."""
    for cache in (_INFO_CACHE, _INPUT_ROWS, _INPUT_ARRAYS, _INPUT_ROWS_BY_ID, _INPUT_ARRAYS_BY_ID, _DIM_ROWS,
                  _CANDIDATES, _HEROES, _WORK_NODES, _TILED_SHAPES,
                  _DEFAULT_TILES):
        cache.clear()


def tiling_info(kernel: Any, target: Any = "tpu") -> TilingInfo:
    """Cached TilingInfo for a kernel (by hash and target name)."""
    key = (kernel.hash, canonical_target_name(target))
    info = _INFO_CACHE.get(key)
    if info is None:
        info = TilingInfo.of(kernel, target)
        if len(_INFO_CACHE) > 200_000:
            _INFO_CACHE.clear()
        _INFO_CACHE[key] = info
    return info


_DEFAULT_TILES: dict = {}


def canonical_target_name(target: Any) -> str:
    """The canonical spec name of a target (a name, alias, TargetSpec or Target): the key of the
    tiling caches, so that "tpu", "tpu-v3" and the Target share their entries."""
    global _SPEC_GEN
    if type(target) is str:  # by name: cached until a spec is registered
        hit = _TARGET_NAMES.get(target)
        if hit is not None and hit[0] == _SPEC_GEN[0]:
            return hit[1]
    from autotune.compiler.targets import get_spec
    from autotune.compiler.targets.base import SPEC_GENERATION
    _SPEC_GEN = SPEC_GENERATION
    name = get_spec(target).name
    if type(target) is str:
        if len(_TARGET_NAMES) > 1_000:
            _TARGET_NAMES.clear()
        _TARGET_NAMES[target] = (SPEC_GENERATION[0], name)
    return name


def _spec(target: Any) -> Any:
    """`get_spec(target)`, by name cached until a spec is registered."""
    global _SPEC_GEN
    if type(target) is str:
        hit = _TARGET_SPECS.get(target)
        if hit is not None and hit[0] == _SPEC_GEN[0]:
            return hit[1]
    from autotune.compiler.targets import get_spec
    from autotune.compiler.targets.base import SPEC_GENERATION
    _SPEC_GEN = SPEC_GENERATION
    spec = get_spec(target)
    if type(target) is str:
        if len(_TARGET_SPECS) > 1_000:
            _TARGET_SPECS.clear()
        _TARGET_SPECS[target] = (_SPEC_GEN[0], spec)
    return spec


_TARGET_SPECS: dict = {}  # target name or alias -> (SPEC_GENERATION when looked up, its TargetSpec)
_TARGET_NAMES: dict = {}  # target name or alias -> (SPEC_GENERATION when looked up, its canonical spec name)
_SPEC_GEN: list = [-1]    # autotune.compiler.targets.base.SPEC_GENERATION, bound on the first look-up


def default_tile(kernel: Any, target: Any = "tpu") -> "TileConfig":
    """The kernel's default tile on a target: `TileSpace.default`, the analytical roofline's argmin
    over the valid tiles (as XLA picks it), cached by kernel hash and target name. The one default
    tile of the cost models, the simulator and the featurizer."""
    return default_tiles([kernel], target)[0]


def default_tiles(kernels: Sequence[Any], target: Any = "tpu") -> list:
    """`default_tile` of many kernels, the one home of the default-tile choice: the candidate tiles of
    the kernels not cached yet are sized (`scratchpad_fit`) and priced (`tiled_time_terms`, the
    analytical roofline of `roofline_seconds`) as arrays, a chunk of kernels at a time; per kernel the fitting tile of
    least time wins, ties to the larger tile (fewer iterations), then the first listed."""
    name = canonical_target_name(target)
    todo: dict = {}
    for k in kernels:
        if (k.hash, name) not in _DEFAULT_TILES:
            todo.setdefault(k.hash, k)
    if todo:
        all_infos = [tiling_info(k, target) for k in todo.values()]
        # kernels whose rows are the same (shared row arrays, equal scalars) have the same default tile
        rep: dict = {}
        which = [rep.setdefault(_row_key(inf), len(rep)) for inf in all_infos]
        infos = [None] * len(rep)
        for inf, j in zip(all_infos, which):
            if infos[j] is None:
                infos[j] = inf
        chosen: list = []
        for c0 in range(0, len(infos), _DEFAULT_TILE_CHUNK):  # chunks: the candidate arrays stay in cache
            chosen += _search_default_tiles(infos[c0:c0 + _DEFAULT_TILE_CHUNK])
        if len(_DEFAULT_TILES) > 500_000:
            _DEFAULT_TILES.clear()
        for h, j in zip(todo, which):
            _DEFAULT_TILES[(h, name)] = chosen[j]
    return [_DEFAULT_TILES[(k.hash, name)] for k in kernels]


_DEFAULT_TILE_CHUNK = 1024  # kernels whose candidate tiles default_tiles prices together


def _search_default_tiles(infos: Sequence[TilingInfo]) -> list:
    """The default tile of each of `infos` (`default_tiles`' search, as arrays over their candidates)."""
    spec = infos[0].target
    cands = [_candidate_tiles(inf) for inf in infos]
    counts = np.array([len(c[0]) for c in cands])
    owner = np.repeat(np.arange(len(infos)), counts)
    # Trailing padding dims (extent 1, fully covered) change nothing: keep only the batch's max rank.
    r_eff = max([min(inf.rank, R_MAX) for inf in infos] + [1])
    b = stack_rows(infos).first_dims(r_eff).take(owner)
    T = np.concatenate([c[1] for c in cands])[:, :r_eff]
    sub, lanes = spec.vector_shape
    g = io_geometry(b, T, sub, lanes)
    fp = scratchpad_fit(g, b.kind, spec.scratchpad_bytes).footprint
    starts = np.cumsum(counts) - counts
    keep = _fitting_indices(fp, spec.scratchpad_bytes, owner, starts)
    kpad = np.array([inf.K_pad for inf in infos], float)[owner]
    # the roofline of every candidate (elementwise, so the fitting tiles' times are what pricing
    # only them gives), then the argmin over the fitting ones
    t = tiled_time_terms(b, g["T"], np.ones(len(owner)), kpad, spec, g)["t"]
    pred = np.where(b.trivial > 0, 0.0, t)[keep]  # roofline_seconds of the fitting tiles
    best = keep[_argmin_tiles(pred, np.prod(T[keep], axis=1), owner[keep])]
    made: dict = {}  # one TileConfig per distinct tile (the ladders' extents are valid ints: no checks)
    out = []
    for c, i, s0 in zip(cands, best.tolist(), starts.tolist()):
        d = c[0][i - s0]
        t = made.get(d)
        if t is None:
            t = made[d] = object.__new__(TileConfig)
            object.__setattr__(t, "dims", d)
            object.__setattr__(t, "kernel", None)
        out.append(t)
    return out


_ROW_SCALARS = tuple(f.name for f in fields(TileRows) if not f.metadata)
_ROW_ARRAYS = tuple(f.name for f in fields(TileRows) if f.metadata)
_get_row_scalars = attrgetter(*_ROW_SCALARS)
_get_row_arrays = attrgetter(*_ROW_ARRAYS)


def stack_rows(infos: Sequence[TilingInfo]) -> TileRows:
    """`TileRows.stack` of the infos' rows, from their shared parts: the per-dim and per-input arrays
    are stacked once per distinct part (`_make_row` shares equal ones) and gathered, the scalars
    stacked as one array. The same arrays as `TileRows.stack([info.row for info in infos])`."""
    if not len(infos):
        raise ValueError("stack_rows: no tiling descriptions to stack")
    parts = [inf._row_parts for inf in infos]
    out: dict = {}
    for k in (0, 1):  # per-dim arrays, then per-input arrays
        at: dict = {}
        idx = np.array([at.setdefault(id(p[k]), len(at)) for p in parts], np.int64)
        first: dict = {}
        for p, i in zip(parts, idx.tolist()):
            if i not in first:
                first[i] = p[k]
                if len(first) == len(at):
                    break
        uniq = [first[i] for i in range(len(at))]
        for name in uniq[0]:
            a = np.array([u[name] for u in uniq])
            out[name] = a if len(uniq) == len(parts) else np.take(a, idx, axis=0)
    scalars = np.array([p[2] for p in parts], float).reshape(len(parts), len(_ROW_SCALARS))
    for j, name in enumerate(_ROW_SCALARS):
        out[name] = scalars[:, j]
    return TileRows(**out)


def _row_key(info: TilingInfo) -> tuple:
    """A key equal for kernels whose default-tile search is the same: the tiled shape, the row's
    array objects (shared between kernels by `_make_row` when equal) and its scalars."""
    d, i, sc = info._row_parts
    return (info.dims, info.unit, id(d), id(i), sc)


def _fitting_indices(footprints: np.ndarray, scratchpad_bytes: float, owner: np.ndarray,
                     starts: np.ndarray) -> np.ndarray:
    """`_fitting_index` of every kernel of a batch (candidates of kernel i at starts[i]..., `owner`
    ascending), as indices into the batch, ascending."""
    fits = footprints <= scratchpad_bytes
    none = np.bincount(owner, weights=fits, minlength=len(starts)) == 0
    if none.any():  # the first smallest footprint of each kernel with no fitting tile
        seg_min = np.minimum.reduceat(footprints, starts)
        at_min = (footprints == seg_min[owner]) & none[owner]
        first = np.flatnonzero(at_min)
        first = first[np.r_[True, owner[first][1:] != owner[first][:-1]]]
        fits[first] = True
    return np.flatnonzero(fits)


def _fitting_index(footprints: np.ndarray, scratchpad_bytes: float) -> np.ndarray:
    """Indices of the tiles whose double-buffered footprint fits (`ScratchpadFit.double_buffered`);
    the smallest one when none does (a space is never empty)."""
    idx = np.flatnonzero(footprints <= scratchpad_bytes)
    return idx if len(idx) else np.array([int(np.argmin(footprints))])


def _argmin_tiles(pred: np.ndarray, elements: np.ndarray, owner: np.ndarray) -> np.ndarray:
    """Per kernel (`owner`, ascending), the index of its tile of least predicted time; ties: the
    larger tile (fewer iterations), then the first listed."""
    order = np.lexsort((-np.asarray(elements, float), np.asarray(pred, float), owner))
    o = owner[order]
    return order[np.r_[True, o[1:] != o[:-1]]] if len(o) else order


def tiles_to_array(infos: Sequence[TilingInfo], tiles: Sequence[Optional[TileConfig]]) -> np.ndarray:
    return np.stack([i.tile_array(t) for i, t in zip(infos, tiles)]) if len(infos) else np.ones((0, R_MAX))


def _run_bytes(t: np.ndarray, D: np.ndarray, U: np.ndarray, order: np.ndarray, block: np.ndarray) -> np.ndarray:
    """Contiguous run (bytes) of a tile in a tiled layout: the (8, 128) block is contiguous, then
    the block grid in minor-to-major order, extending to the next dim only over fully covered dims.
    t, D, U: (..., R) in logical order; order: (..., R) minor-to-major logical dims."""
    to = np.take_along_axis(t, order, axis=-1)
    Do = np.take_along_axis(D, order, axis=-1)
    Uo = np.take_along_axis(U, order, axis=-1)
    c = np.ceil(to / Uo)
    g = np.ceil(Do / Uo)
    run = np.ones(t.shape[:-1])
    full = np.ones(t.shape[:-1], bool)
    for j in range(t.shape[-1]):
        run = np.where(full, run * c[..., j], run)
        full &= c[..., j] >= g[..., j]
    return run * block


def io_geometry(b: TileRows, T: np.ndarray, sublanes: int = 8, lanes: int = 128) -> dict:
    """Vectorized per-tile quantities for N (kernel, tile) items.

    b: stacked rows (`TileRows.stack`), T: (N, R_MAX) tile extents. Returns arrays of shape (N,) unless
    noted: n_tiles, the per-tile logical input bytes per input (N, I) and their contiguous runs,
    padded output bytes per tile and its run, per-tile MXU flops (padded), vector and transcendental
    work, and the double-buffered footprint.
    """
    D = b.D
    T = np.minimum(np.maximum(T, 1.0), D)
    n_j = np.ceil(D / T)
    n = np.prod(n_j, axis=1)
    a = D / n_j  # average extent (edge tiles are smaller)
    # padding of the tile in the TPU tiled layout (two minor dims) for data and vector registers
    U = b.U
    padded = np.ceil(T / U) * U
    padfac = np.prod(padded / T, axis=1)
    frac = 1.0 / n  # average tile fraction T/E
    # ---- output
    out_tile = b.out_bytes * frac ** b.out_alpha * padfac
    block = U.prod(axis=1) * b.dtype_bytes
    out_run = np.minimum(_run_bytes(T, D, U, b.order, block), out_tile)
    # ---- inputs
    role = b.in_role
    fr_same = frac[:, None]
    lhs_j = np.where(b.mmask, np.where((b.win > 1) | (b.stride > 1),
                                          np.minimum(1.0, ((a - 1) * b.stride + b.win) / b.din),
                                          a / D), 1.0)
    f_lhs = np.prod(lhs_j, axis=1)
    f_rhs = np.prod(np.where(b.nmask, a / D, 1.0), axis=1)
    f_oth = frac[:, None] ** b.in_alpha
    f = np.where(role == ROLE_SAME, fr_same,
                 np.where(role == ROLE_LHS, f_lhs[:, None], np.where(role == ROLE_RHS, f_rhs[:, None], f_oth)))
    f = np.where(role == ROLE_NONE, 0.0, f)
    in_tile = b.in_bytes * f
    # padding and contiguity of "same" inputs in their own layouts
    perm = b.sl_perm
    Tp = np.broadcast_to(T[:, None, :], perm.shape)
    Dp = np.broadcast_to(D[:, None, :], perm.shape)
    To = np.take_along_axis(Tp, perm, axis=-1)
    Do = np.take_along_axis(Dp, perm, axis=-1)
    pu = b.sl_punit
    sl_pad = np.prod(np.ceil(To / pu) * pu / To, axis=-1)
    ident = np.broadcast_to(np.arange(T.shape[1]), perm.shape)
    sl_run = _run_bytes(To, Do, pu, ident, pu.prod(axis=-1) * b.sl_dbytes)
    slot = b.in_slot
    in_pad = np.take_along_axis(sl_pad, slot, axis=1)
    run_same = np.take_along_axis(sl_run, slot, axis=1)
    same = role == ROLE_SAME
    in_tile = np.where(same, in_tile * in_pad, in_tile)
    in_run = np.where(same, run_same, b.in_maxrun)
    in_run = np.maximum(np.minimum(in_run, in_tile), 1.0)
    # ---- compute
    Tm = np.prod(np.where(b.mmask, T, 1.0), axis=1) * b.m_scale
    Tn = np.prod(np.where(b.nmask, T, 1.0), axis=1) * b.n_const
    mxu_tile = np.where(b.is_mxu > 0,
                        2.0 * np.ceil(Tm / sublanes) * sublanes * b.K_pad * np.ceil(Tn / lanes) * lanes, 0.0)
    # generic hero (dims not aligned): proportional share, padded like the tile
    generic = (b.is_mxu > 0) & ~b.mmask.any(axis=1) & ~b.nmask.any(axis=1)
    mxu_tile = np.where(generic, b.hero_flops * frac * padfac, mxu_tile)
    vec_tile = (b.vec_flops * frac + b.lhs_vec * f_lhs + b.rhs_vec * f_rhs) * padfac
    trans_tile = (b.trans * frac + b.lhs_trans * f_lhs + b.rhs_trans * f_rhs) * padfac
    footprint = 2.0 * (in_tile.sum(axis=1) + out_tile)
    return {"n": n, "n_j": n_j, "T": T, "frac": frac, "padfac": padfac, "out_tile": out_tile, "out_run": out_run,
            "in_tile": in_tile, "in_run": in_run, "mxu_tile": mxu_tile, "vec_tile": vec_tile,
            "trans_tile": trans_tile, "footprint": footprint, "Tm": Tm, "Tn": Tn}


# --------------------------------------------------------------------------------------------------
def _ladder(n_units: int, max_divisors: bool = True) -> list:
    """Tile counts (in units) for a dim with n_units units: powers of two, divisors, and all."""
    vals = {n_units}
    p = 1
    while p < n_units:
        vals.add(p)
        p *= 2
    if max_divisors and n_units <= 4096:
        for d in range(1, int(math.isqrt(n_units)) + 1):
            if n_units % d == 0:
                vals.add(d)
                vals.add(n_units // d)
    return sorted(vals)


def _choices(dims: Sequence[int], unit: Sequence[int], divisors: bool = True) -> list:
    """Per logical dim, the allowed tile extents (elements), ascending (`TileSpace.choices`)."""
    out = []
    for d, u in zip(dims, unit):
        units = max(1, math.ceil(d / u))
        out.append(sorted({min(c * u, d) for c in _ladder(units, divisors)}))
    return out


def _candidate_tiles(info: "TilingInfo", max_tiles: int = 4096) -> tuple:
    """(extents, tile arrays) of every tile of the ladders before the scratchpad check (at most
    `max_tiles`; the ladder drops divisors when the product is larger), cached per tiled shape."""
    key = (info.dims, info.unit, max_tiles)
    hit = _CANDIDATES.get(key)
    if hit is not None:
        return hit
    ch = _choices(info.dims, info.unit, True)
    if math.prod(len(c) for c in ch) > max_tiles:
        ch = _choices(info.dims, info.unit, False)
    combos = [()]
    for c in ch:
        combos = [t + (v,) for t in combos for v in c]
    if len(combos) > max_tiles:  # keep the largest tiles on the major dims
        rng = np.random.default_rng(0)
        keep = rng.choice(len(combos), max_tiles - 1, replace=False)
        combos = [combos[i] for i in sorted(keep)] + [tuple(info.dims)]
    arrays = info.tile_arrays(combos)
    arrays.flags.writeable = False
    if len(_CANDIDATES) > 10_000:
        _CANDIDATES.clear()
    hit = _CANDIDATES[key] = (tuple(combos), arrays)
    return hit


class TileSpace:
    """Valid tiles of one kernel on a target (the `Space` interface strategies see)."""

    def __init__(self, kernel: Any, target: Any = "tpu", max_tiles: int = 4096):
        self.kernel = kernel
        self.info = tiling_info(kernel, target)
        self.target = self.info.target
        self.max_tiles = max_tiles
        self._tiles: Optional[list] = None
        self._default: Optional[TileConfig] = None

    @property
    def shape(self) -> tuple:
        return self.info.dims

    def choices(self, divisors: bool = True) -> list:
        """Per logical dim, the allowed extents (elements), ascending."""
        return _choices(self.info.dims, self.info.unit, divisors)

    def _fit(self, arr: np.ndarray) -> "ScratchpadFit":
        b = TileRows.stack([self.info.row] * len(arr))
        sub, lanes = self.target.vector_shape
        return scratchpad_fit(io_geometry(b, arr, sub, lanes), b.kind, self.target.scratchpad_bytes)

    def footprint(self, tile: TileConfig) -> float:
        """Double-buffered scratchpad bytes of a tile (inputs + output, x2)."""
        return float(self._fit(self.info.tile_array(tile)[None, :]).footprint[0])

    def candidates(self) -> list:
        """Every tile of the ladders before the scratchpad check (at most max_tiles; the ladder drops
        divisors when the product is larger)."""
        return [TileConfig(c) for c in self.candidate_extents()]

    def candidate_extents(self) -> list:
        """`candidates` as tuples of extents."""
        return list(_candidate_tiles(self.info, self.max_tiles)[0])

    def tiles(self) -> list:
        """All valid tiles: the candidates whose double-buffered footprint fits the scratchpad."""
        if self._tiles is None:
            tiles = self.candidates()
            arr = np.stack([self.info.tile_array(t) for t in tiles])
            self._tiles = [tiles[i] for i in _fitting_index(self._fit(arr).footprint, self.target.scratchpad_bytes)]
        return list(self._tiles)

    def __len__(self) -> int:
        return len(self.tiles())

    def is_valid(self, tile: TileConfig) -> bool:
        if len(tile.dims) != self.info.rank:
            return False
        for v, c in zip(tile.dims, self.choices(True)):
            if v not in c:
                return False
        return bool(self._fit(self.info.tile_array(tile)[None, :]).double_buffered[0])

    def default(self) -> TileConfig:
        """The default tile: the analytical roofline's argmin over the valid tiles (as XLA picks its
        default tile; ties: the larger tile, fewer iterations), cached by kernel hash and target."""
        if self._default is None:
            self._default = default_tiles([self.kernel], self.target)[0]
        return self._default

    def random(self, rng: np.random.Generator) -> TileConfig:
        tiles = self.tiles()
        return tiles[int(rng.integers(len(tiles)))]

    def neighbor(self, tile: TileConfig, rng: np.random.Generator, tries: int = 16) -> TileConfig:
        """Move one dim one step up or down its ladder, keeping the tile valid."""
        if self.info.rank == 0:
            return tile
        ch = self.choices(True)
        valid = set(self.tiles())
        for _ in range(tries):
            d = int(rng.integers(self.info.rank))
            c = ch[d]
            cur = tile.dims[d]
            i = int(np.searchsorted(c, cur))
            j = i + (1 if rng.random() < 0.5 else -1)
            if 0 <= j < len(c):
                dims = list(tile.dims)
                dims[d] = c[j]
                cand = TileConfig(tuple(dims))
                if cand in valid:
                    return cand
        return self.random(rng)

    def crossover(self, a: TileConfig, b: TileConfig, rng: np.random.Generator) -> TileConfig:
        dims = tuple(x if rng.random() < 0.5 else y for x, y in zip(a.dims, b.dims))
        return self.repair(TileConfig(dims))

    def repair(self, tile: TileConfig) -> TileConfig:
        """The valid tile nearest (in log extents) to `tile`."""
        tiles = self.tiles()
        if tile in set(tiles):
            return tile
        if len(tile.dims) != self.info.rank:
            return self.default()
        arr = np.log(np.array([t.dims for t in tiles], float).reshape(len(tiles), -1) + 0.0)
        x = np.log(np.array(tile.dims, float))
        return tiles[int(np.argmin(((arr - x) ** 2).sum(axis=1)))] if arr.size else tiles[0]

    def encode(self, tile: TileConfig) -> str:
        return tile.key()

    def decode(self, key: str) -> TileConfig:
        return TileConfig.from_key(key)

    def to_array(self, tiles: Sequence[TileConfig]) -> np.ndarray:
        return np.stack([self.info.tile_array(t) for t in tiles])


@dataclass(frozen=True, slots=True)
class ScratchpadFit:
    """How each (kernel, tile) item uses the scratchpad (`scratchpad_fit`)."""

    steps: np.ndarray            # streaming steps: > 1 where a reduction/contraction streams its inputs
    footprint: np.ndarray        # bytes per step, double buffered: 2 * (inputs / (ksteps * steps) + output)
    double_buffered: np.ndarray  # footprint <= scratchpad: transfers overlap compute (a valid tile)
    fits: np.ndarray             # footprint / 2 <= scratchpad: runs at least single buffered


def scratchpad_fit(g: dict, kind: np.ndarray, scratchpad_bytes: float, ksteps: Any = 1.0) -> ScratchpadFit:
    """The one memory-fit check of a tile, shared by the tile space (a tile is valid when it fits
    double buffered, as XLA:TPU's tiling requires: docs/design.md, "Tile semantics") and the simulator
    (a tile that fits only single buffered runs without overlap; one that does not fit fails).

    A reduction (kInput) or contraction (kOutput) tile whose inputs do not fit the scratchpad even
    single buffered streams them over its reduced or contracted dimensions in several steps, its
    output tile resident (as XLA:TPU's emitters loop over those dims); other tiles take one step with
    the whole footprint. `g`: `io_geometry`; `ksteps`: contraction steps the tile already has (a
    filter tile)."""
    in_b = 2.0 * g["in_tile"].sum(axis=1) / ksteps
    out_b = 2.0 * g["out_tile"]
    room = scratchpad_bytes - out_b
    stream = (kind > 0) & ((in_b + out_b) / 2.0 > scratchpad_bytes) & (room > 0)  # not even unbuffered
    steps = np.where(stream, np.ceil(in_b / np.maximum(room, 1.0)), 1.0)
    footprint = in_b / steps + out_b
    return ScratchpadFit(steps, footprint, footprint <= scratchpad_bytes, footprint / 2.0 <= scratchpad_bytes)


def batch_inputs(kernels: Sequence[Any], tiles: Optional[Sequence[Optional[TileConfig]]], target: Any) -> tuple:
    """Stacked rows and tile arrays for a batch of (kernel, tile) items.

    Rows are built once per distinct kernel (cached TilingInfo) and gathered by index, so a batch of
    many tiles of few kernels costs little. A tile that is None is the kernel's `default_tile`.
    Returns (b, T, ksteps, kpad, infos): b the `TileRows` of the items (`lhs_mult` set)."""
    n = len(kernels)
    uniq: dict = {}
    infos: list = []
    idx_l: list = []
    for k in kernels:
        h = k.hash
        j = uniq.get(h)
        if j is None:
            j = uniq[h] = len(infos)
            infos.append(tiling_info(k, target))
        idx_l.append(j)
    idx = np.array(idx_l, np.int64)
    # Trailing padding dims (extent 1, fully covered) change nothing: keep only the batch's max rank.
    r_eff = max([min(inf.rank, R_MAX) for inf in infos] + [1])
    rows = stack_rows(infos).first_dims(r_eff) if infos else None
    ks = np.ones(n)
    lm = np.ones(n)
    kp = np.array([infos[j].K_pad for j in idx_l], float) if n else np.ones(0)
    tl = list(tiles) if tiles is not None else [None] * n
    dflt: dict = {}
    rows_T = []
    fast = []  # items whose tile row is their extents padded with 1s, then capped by D (below, as one array)
    for i in range(n):
        j = idx_l[i]
        inf = infos[j]
        t = tl[i]
        if t is None:
            t = dflt.get(j)
            if t is None:
                t = dflt[j] = default_tile(kernels[i], target)
        elif isinstance(t, (tuple, list)):
            t = TileConfig(tuple(t))
        d = t.dims
        if len(d) == inf.rank <= R_MAX:  # `TilingInfo.tile_array`, vectorized over the batch
            rows_T.append(d + _PAD_ONES[len(d)])
            fast.append(i)
        else:
            rows_T.append(inf.tile_array(t))
        if t.kernel is not None:
            ks[i], kp[i], lm[i] = inf.kernel_steps(t)
    if not n:
        return rows, np.ones((0, R_MAX)), ks, kp, []
    T = np.array(rows_T, float)[:, :r_eff]
    if fast:
        f = np.array(fast, np.int64)
        T[f] = np.minimum(T[f], np.take(rows.D, idx[f], axis=0))
    b = replace(rows.take(idx), lhs_mult=lm)
    return b, T, ks, kp, [infos[j] for j in idx_l]


_PAD_ONES = tuple((1,) * (R_MAX - r) for r in range(R_MAX + 1))  # padding of a rank-r tile's extents to R_MAX


def tiled_time_terms(b: TileRows, T: np.ndarray, ks: np.ndarray, kp: np.ndarray, spec: Any,
                     g: Optional[dict] = None) -> dict:
    """The analytical roofline of a tiled kernel per item (seconds): t_mxu, t_vector, t_trans (per
    tile), c_tile, x_tile, n_dma, t = n_tiles * max(c_tile, x_tile) + launch + link (costmodels.analytical
    gives the equations); b, T, ks, kp from `batch_inputs`, g its `io_geometry` when already computed."""
    sub, lanes = spec.vector_shape
    if g is None:
        g = io_geometry(b, T, sub, lanes)
    mxu = g["mxu_tile"] * np.where(b.K_pad > 0, kp / np.maximum(b.K_pad, 1e-30), 1.0)
    t_mxu = mxu / spec.peak_flops
    t_vector = g["vec_tile"] / spec.vector_flops / ks
    t_trans = g["trans_tile"] / spec.transcendental_per_s / ks
    c_tile = t_mxu + t_vector + t_trans
    n_dma = (g["in_tile"] > 0).sum(axis=1) + 1
    x_tile = (g["in_tile"].sum(axis=1) + g["out_tile"]) / spec.hbm_bytes_per_s + n_dma * spec.dma_setup_s
    t = g["n"] * ks * np.maximum(c_tile, x_tile / ks) + spec.kernel_launch_s + b.link_s
    return {"t_mxu": t_mxu, "t_vector": t_vector, "t_trans": t_trans, "c_tile": c_tile, "x_tile": x_tile,
            "n_dma": n_dma, "t": t}


def roofline_seconds(kernels: Sequence[Any], tiles: Optional[Sequence[Optional[TileConfig]]], target: Any,
                     kind_scales: Optional[np.ndarray] = None) -> np.ndarray:
    """The analytical roofline's runtime of each (kernel, tile) item (`tiled_time_terms`' t; 0 for a
    bitcast-only kernel), times `kind_scales[KIND_INDEX]` when given: the cost the tile space ranks
    its default tile by, and the tiled analytical cost model."""
    from autotune.compiler.targets import get_spec
    if not len(kernels):
        return np.zeros(0)
    spec = get_spec(target)
    b, T, ks, kp, _ = batch_inputs(kernels, tiles, spec)
    t = tiled_time_terms(b, T, ks, kp, spec)["t"]
    if kind_scales is not None:
        t = t * kind_scales[b.kind.astype(int)]
    return np.where(b.trivial > 0, 0.0, t)
