"""`TilingInfo` (`autotune.compiler.tiles`): a kernel's static tiling description on a target (the tiled
shape and its layout, the dot/convolution hero, device work, inputs, the `TileRows` row), worked out by
`_TilingBuilder` and cached by `tiling_info`, with the pieces many kernels share cached apart."""
from __future__ import annotations

import math
import weakref
from dataclasses import dataclass, field, fields, replace
from operator import attrgetter
from typing import Any, Optional, Sequence

import numpy as np

from autotune.compiler.hlo import Shape, dtype_bytes
from autotune.compiler.tiles.config import (I_MAX, P_MAX, R_MAX, ROLE_LHS, ROLE_OTHER, ROLE_RHS, ROLE_SAME, TileConfig,
                                            fusion_kind_index)
from autotune.compiler.tiles.rows import InputRow, TileRows
from autotune.compiler.tiles.specs import _spec, canonical_target_name
from autotune.compiler.tiles.work import MATMUL_OPCODES, device_work


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


class _TilingBuilder:
    """Works out a kernel's `TilingInfo` (the mutable scratch of `TilingInfo.of`)."""

    def __init__(self, kernel: Any, target: Any):
        self.target = _spec(target)
        self.hash = kernel.hash
        out_shape = kernel.output_shape
        comp = getattr(kernel, "computation", None)
        members = list(getattr(kernel, "members", ()))
        insts = comp.instructions if comp is not None else list(getattr(kernel, "instructions", []))
        self._tiled_shape_fields(kernel, comp, members, out_shape)
        self._work_fields(kernel)
        inputs = list(getattr(kernel, "inputs", []))
        lhs_inputs, rhs_inputs = self._hero_fields(kernel, comp, members, insts, inputs)
        self.vec_flops = max(self.flops - self.hero_flops - self.lhs_vec - self.rhs_vec, 0.0)
        self.trans_rest = max(self.transcendentals - self.lhs_trans - self.rhs_trans, 0.0)
        self.trivial = bool(getattr(kernel, "is_trivial", False))
        self._input_fields(kernel, inputs, lhs_inputs, rhs_inputs)
        self._output_fields(out_shape)
        self._make_row()
        self.m_mask.flags.writeable = False
        self.n_mask.flags.writeable = False

    # ---- the steps of __init__
    def _tiled_shape_fields(self, kernel, comp, members, out_shape: Shape) -> None:
        """`_SHAPE_FIELDS` (`_shape_fields`), shared by the kernels of one root: the tiled shape and its
        layout depend on the root only."""
        sub, lanes = self.target.vector_shape
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

    def _work_fields(self, kernel) -> None:
        """The kernel's device work, off-chip transfer time, XLA's static bytes and its fusion kind."""
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

    def _hero_fields(self, kernel, comp, members, insts, inputs: list) -> tuple:
        """The hero (dot / convolution / ragged-dot / scaled-dot) fields, and the flops of its operands'
        fused producers; returns the kernel inputs behind the hero's (lhs, rhs) operands."""
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
        return lhs_inputs, rhs_inputs

    def _input_fields(self, kernel, inputs: list, lhs_inputs: set, rhs_inputs: set) -> None:
        """`inputs`: the `InputRow` of every input leaf, largest first, the smallest merged past I_MAX."""
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

    def _output_fields(self, out_shape: Shape) -> None:
        """The output's elements and bytes (all leaves) and its per-tile write exponent."""
        out_leaves = out_shape.leaves() if out_shape.is_tuple else [out_shape]
        self.out_elements = float(sum(max(l.elements, 1) for l in out_leaves))
        self.out_bytes = float(sum(max(l.elements, 1) * dtype_bytes(l.dtype) for l in out_leaves))
        self.out_alpha = self._alpha(self.out_elements)

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
# computation -> {(root, vector shape): (output shape, _SHAPE_FIELDS values)} (weak: goes with the computation)
_TILED_SHAPES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_SHAPE_FIELDS = ("shape", "dims", "rank", "mtm", "dtype_bytes", "unit", "elements")
# (id(hero instruction), tiled dims, minor-to-major, vector shape) -> (instruction, hero state)
_HEROES: dict = {}
_HERO_STATE = ("hero", "hero_flops", "K", "K_pad", "m_mask", "n_mask", "n_const", "m_scale", "win", "stride", "din",
               "rhs_shape", "rhs_fraction", "rhs_kclass")


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
