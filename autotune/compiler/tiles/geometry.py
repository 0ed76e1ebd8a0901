"""The per-tile data movement model (`autotune.compiler.tiles`): `io_geometry`, what each (kernel, tile)
item reads and writes (bytes, contiguous runs, padding) and computes, shared by the tile space, the
analytical model and the simulator; and `scratchpad_fit`, the one memory-fit check of a tile."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np

from autotune.compiler.tiles.config import R_MAX, ROLE_LHS, ROLE_NONE, ROLE_RHS, ROLE_SAME, TileConfig
from autotune.compiler.tiles.info import TilingInfo
from autotune.compiler.tiles.rows import TileRows


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
