"""`clear_caches` (`autotune.compiler.tiles`): every cache of the tiles package emptied in one call (a cold
start); the caches themselves live in the modules that fill them."""
from __future__ import annotations

from autotune.compiler.tiles.candidates import _CANDIDATES
from autotune.compiler.tiles.info import (_DIM_ROWS, _HEROES, _INFO_CACHE, _INPUT_ARRAYS, _INPUT_ARRAYS_BY_ID,
                                          _INPUT_ROWS, _INPUT_ROWS_BY_ID, _TILED_SHAPES)
from autotune.compiler.tiles.roofline import _DEFAULT_TILES
from autotune.compiler.tiles.work import _WORK_NODES


def clear_caches() -> None:
    """Forget every cached tiling description, default tile and shared piece (a cold start)."""
    for cache in (_INFO_CACHE, _INPUT_ROWS, _INPUT_ARRAYS, _INPUT_ROWS_BY_ID, _INPUT_ARRAYS_BY_ID, _DIM_ROWS,
                  _CANDIDATES, _HEROES, _WORK_NODES, _TILED_SHAPES,
                  _DEFAULT_TILES):
        cache.clear()
