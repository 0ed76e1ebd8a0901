"""The analytical roofline of tiled kernels (`autotune.compiler.tiles`): `batch_inputs` (stacked rows and
tiles of a batch), `tiled_time_terms` and `roofline_seconds`; and the default tile, the roofline's
argmin over a kernel's valid tiles (`default_tile(s)`, cached by kernel hash and target)."""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Optional, Sequence

import numpy as np

from autotune.compiler.tiles.candidates import _candidate_tiles
from autotune.compiler.tiles.config import R_MAX, TileConfig
from autotune.compiler.tiles.geometry import io_geometry, scratchpad_fit
from autotune.compiler.tiles.info import TilingInfo, tiling_info
from autotune.compiler.tiles.rows import TileRows, stack_rows
from autotune.compiler.tiles.specs import canonical_target_name

_DEFAULT_TILES: dict = {}  # (kernel hash, canonical target name) -> its default TileConfig


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
