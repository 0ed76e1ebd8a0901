"""`TileConfig` (a tile: extents per dim of the tiled shape, optional filter tile) and the fixed sizes and
codes of the tile geometry (`R_MAX`, `I_MAX`, input roles, fusion kinds) that every part of the tiles
package shares."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import numpy as np


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
