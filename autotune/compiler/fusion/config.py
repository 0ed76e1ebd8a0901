"""A fusion configuration: one bit per fusible edge of a FusionSpace."""
from __future__ import annotations

from typing import Optional

import numpy as np

__all__ = ["FusionConfig"]


class FusionConfig:
    """One bit per fusible edge (bytes 0/1), plus how it was derived (for incremental updates)."""

    __slots__ = ("bits", "parent", "flips", "_key", "delta", "digest")

    def __init__(self, bits, parent: Optional["FusionConfig"] = None, flips: tuple = (),
                 delta: Optional[dict] = None):
        self.bits = bits if isinstance(bits, bytearray) else bytearray(np.asarray(bits, dtype=np.uint8).tobytes())
        self.parent = parent
        self.flips = flips
        self._key: Optional[bytes] = None
        self.delta = delta  # {(comp, root): members or None}: kernels changed relative to parent
        self.digest: Optional[int] = None  # FusionSpace.config_digest, once computed

    def key(self) -> bytes:
        if self._key is None:
            self._key = bytes(self.bits)
        return self._key

    def to_array(self) -> np.ndarray:
        return np.frombuffer(bytes(self.bits), dtype=np.uint8).astype(bool)

    def __len__(self) -> int:
        return len(self.bits)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FusionConfig) and self.key() == other.key()

    def __hash__(self) -> int:
        return hash(self.key())

    def count(self) -> int:
        return sum(self.bits)

    def detach(self) -> "FusionConfig":
        """Drop the parent link (keeps memory bounded in long searches)."""
        self.parent = None
        self.flips = ()
        self.delta = None
        return self
