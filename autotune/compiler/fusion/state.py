"""Kernel sets of configurations: `FusionState` ({(comp, root): KernelRef} of one configuration),
derived from a parent's state after edge flips with work proportional to the kernels they touch,
over a `KernelMap` that shares its parent's entries."""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from autotune.compiler.fusion.config import FusionConfig
from autotune.compiler.fusion.kernels import KernelRef
from autotune.compiler.gc_pause import gc_paused

if TYPE_CHECKING:  # pragma: no cover
    from autotune.compiler.fusion.space import FusionSpace

__all__ = ["FusionState", "KernelMap"]

_DELETED = None


class KernelMap:
    """{(comp, root): KernelRef} as a shared base dict plus a small dict of changes.

    A neighbor's kernel set differs from its parent's in a few entries: sharing the base makes
    deriving (and dropping) a state cost O(changes), not O(kernels). Read-only, dict-like.
    """

    __slots__ = ("base", "changes", "_len")
    FLATTEN_AT = 256

    def __init__(self, base: dict, changes: Optional[dict] = None, length: Optional[int] = None):
        self.base = base
        self.changes = changes or {}
        self._len = length if length is not None else len(base)

    def derive(self, updates: dict) -> "KernelMap":
        """A new map with `updates` applied ({key: KernelRef or None to delete})."""
        base, changes = self.base, self.changes
        n = self._len
        new = dict(changes)
        for k, v in updates.items():
            had = (changes[k] is not _DELETED) if k in changes else (k in base)
            if v is _DELETED:
                if had:
                    n -= 1
                    if k in base:
                        new[k] = _DELETED
                    else:
                        new.pop(k, None)
            else:
                if not had:
                    n += 1
                new[k] = v
        if len(new) > self.FLATTEN_AT:
            flat = dict(base)
            for k, v in new.items():
                if v is _DELETED:
                    del flat[k]
                else:
                    flat[k] = v
            return KernelMap(flat, {}, len(flat))
        return KernelMap(base, new, n)

    def get(self, key, default=None):
        ch = self.changes
        if key in ch:
            v = ch[key]
            return default if v is _DELETED else v
        return self.base.get(key, default)

    def __getitem__(self, key):
        v = self.get(key, _DELETED)
        if v is _DELETED:
            raise KeyError(key)
        return v

    def __contains__(self, key) -> bool:
        return self.get(key, _DELETED) is not _DELETED

    def __len__(self) -> int:
        return self._len

    def items(self):
        ch = self.changes
        for k, v in self.base.items():
            if k not in ch:
                yield k, v
        for k, v in ch.items():
            if v is not _DELETED:
                yield k, v

    def values(self):
        for _, v in self.items():
            yield v

    def keys(self):
        for k, _ in self.items():
            yield k

    __iter__ = keys


class FusionState:
    """The kernel set of one configuration: {(comp, root): KernelRef} (a KernelMap)."""

    __slots__ = ("space", "bits", "kernels")

    def __init__(self, space: FusionSpace, bits: bytearray, kernels: "KernelMap | dict"):
        self.space = space
        self.bits = bits
        self.kernels = kernels if isinstance(kernels, KernelMap) else KernelMap(kernels)

    @classmethod
    @gc_paused()
    def build(cls, space: FusionSpace, bits: bytearray) -> "FusionState":
        bits = bytearray(bits)
        kernels: dict[tuple[int, int], KernelRef] = {}
        for ci, comp in enumerate(space.program.computations):
            for n in range(len(comp)):
                if space.is_root(bits, ci, n):
                    kernels[(ci, n)] = space.make_ref(bits, ci, n)
        return cls(space, bits, kernels)

    def derive(self, cfg: FusionConfig) -> "FusionState":
        """State of `cfg`, whose parent is this state's configuration, changed by `cfg.flips` (by its
        kernel delta when it has one: a one-edge or a group move)."""
        sp = self.space
        if cfg.delta is not None and cfg.flips:
            updates = {k: (None if mem is None else KernelRef(k[0], k[1], mem, None, True, sp))
                       for k, mem in cfg.delta.items()}
            return FusionState(sp, cfg.bits, self.kernels.derive(updates))
        bits = bytearray(self.bits)
        kernels = self.kernels
        for e in cfg.flips:
            ci, p, c = sp.edge_comp[e], sp.edge_prod[e], sp.edge_cons[e]
            bits[e] ^= 1
            touched = sp.roots_containing(bits, ci, c)
            touched.add(p)
            kernels = kernels.derive({(ci, r): (sp.make_ref(bits, ci, r) if sp.is_root(bits, ci, r) else None)
                                      for r in touched})
        if bits != cfg.bits:  # flips did not describe cfg: rebuild from scratch
            return FusionState.build(sp, cfg.bits)
        return FusionState(sp, bits, kernels)

    def refs(self) -> list:
        return list(self.kernels.values())

    def valid(self) -> bool:
        return all(k.valid for k in self.kernels.values())

    def cost(self, kernel_cost: dict) -> float:
        """Program cost from per-hash kernel costs (multiplicity-weighted)."""
        mult = self.space.multiplicity
        return sum(kernel_cost[k.hash] * mult[k.comp] for k in self.kernels.values())
