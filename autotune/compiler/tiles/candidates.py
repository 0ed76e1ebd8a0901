"""Candidate tiles (`autotune.compiler.tiles`): the ladder of extents each dim of a tiled shape allows
(powers of two, divisors, the full extent, in valid-tile units), and their combinations, cached per
tiled shape: what the tile space and the default-tile search choose from."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Sequence

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from autotune.compiler.tiles.info import TilingInfo

_CANDIDATES: dict = {}    # (tiled dims, unit, max tiles) -> candidate extents and their tile arrays


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
