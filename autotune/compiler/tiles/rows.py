"""The fixed-size numeric rows of the tile geometry (`autotune.compiler.tiles`): `InputRow` (one kernel
input), `TileRows` (one kernel, or many stacked: what `io_geometry`, the roofline and the simulator
read) and `stack_rows`, which stacks the rows of many `TilingInfo`s from their shared parts."""
from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from operator import attrgetter
from typing import TYPE_CHECKING, Sequence

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from autotune.compiler.tiles.info import TilingInfo


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
