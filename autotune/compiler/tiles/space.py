"""`TileSpace` (`autotune.compiler.tiles`): the valid tiles of one kernel on a target (the candidates that
fit the scratchpad double buffered), its default tile and the moves strategies make in it."""
from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np

from autotune.compiler.space import Space
from autotune.compiler.tiles.candidates import _candidate_tiles, _choices
from autotune.compiler.tiles.config import TileConfig
from autotune.compiler.tiles.geometry import ScratchpadFit, io_geometry, scratchpad_fit
from autotune.compiler.tiles.info import tiling_info
from autotune.compiler.tiles.roofline import _fitting_index, default_tiles
from autotune.compiler.tiles.rows import TileRows


class TileSpace(Space):
    """Valid tiles of one kernel on a target (the `Space` interface, autotune/compiler/space.py)."""

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
