"""Kernel geometry features (`costmodels.features`): the `GEOMETRY_FEATURE_NAMES` block of each kernel
at its default tile, from `autotune.compiler.tiles` and the analytical model's tiled terms (on
cpu-kind targets `costmodels.cpu_geometry`'s rows), vectorized over a batch of kernels."""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from costmodels.cpu_geometry import cpu_geometry_matrix
from costmodels.features.schema import _CPU_COLS, _GCOL, _I_SLOTS, GEOMETRY_DIM, R, _fold, _l2


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
