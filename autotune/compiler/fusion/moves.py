"""Search moves over a fusion space: random configurations, one-edge flips with their incremental
kernel delta, crossover and mutation (a FusionSpace base class; the Space interface strategies use)."""
from __future__ import annotations

from bisect import bisect_left
from typing import TYPE_CHECKING, Optional

import numpy as np

from autotune.compiler.fusion.config import FusionConfig

if TYPE_CHECKING:  # pragma: no cover
    from autotune.compiler.fusion.state import FusionState

__all__ = ["SearchMoves"]


class SearchMoves:
    """Configuration moves of a FusionSpace (uses its structure queries and `repair`)."""

    def random(self, rng: np.random.Generator, p: Optional[float] = None) -> FusionConfig:
        """A random valid configuration (each edge fused with probability p, default uniform in [0,1])."""
        prob = rng.uniform(0.0, 1.0) if p is None else p
        bits = bytearray((rng.random(self.n_edges) < prob).astype(np.uint8).tobytes())
        return self.repair(FusionConfig(bits))

    def flip_delta(self, bits: bytearray, e: int, parent: Optional["FusionState"] = None) -> Optional[dict]:
        """Kernels changed by flipping edge e (already applied to `bits`): {(comp, root): members or
        None for a kernel that disappears}; None when a changed kernel would be illegal.

        With the parent configuration's state, membership is updated incrementally: fusing p->c adds
        p's subtree to the kernels holding c (one set union each); unfusing only recomputes kernels
        that can no longer reach p through another fused edge.
        """
        ci, p, c = self.edge_comp[e], self.edge_prod[e], self.edge_cons[e]
        comp = self.program.computations[ci]
        ok = self._kernel_ok_fast
        delta: dict = {}
        touched = self.roots_containing(bits, ci, c)
        old = parent.kernels if parent is not None else None
        p_root = self.is_root(bits, ci, p)
        if old is None:
            touched.add(p)
            for r in touched:
                if self.is_root(bits, ci, r):
                    mem = self.members(bits, ci, r)
                    if not ok(comp, ci, r, mem):
                        return None
                    delta[(ci, r)] = mem
                else:
                    delta[(ci, r)] = None
            return delta
        fused = bits[e]
        p_ref = old.get((ci, p))
        sub: Optional[tuple] = None
        if fused:
            sub = p_ref.members if p_ref is not None else self.members(bits, ci, p)
            sub_set = set(sub)
            for r in touched:
                ref = old.get((ci, r))
                if ref is None:
                    mem = self.members(bits, ci, r)
                else:
                    i = bisect_left(ref.members, p)
                    if i < len(ref.members) and ref.members[i] == p:
                        continue  # p (and its subtree) already in this kernel
                    mem = tuple(sorted(sub_set.union(ref.members)))
                if not ok(comp, ci, r, mem):
                    return None
                delta[(ci, r)] = mem
        else:
            out_all = self.out_edges[ci]
            out_edges = out_all[p]
            a_set: Optional[set] = None
            for r in touched:
                ref = old.get((ci, r))
                if ref is None:
                    mem = self.members(bits, ci, r)
                else:
                    ms = ref.members
                    still = False
                    for e2, u in out_edges:
                        if bits[e2]:
                            i = bisect_left(ms, u)
                            if i < len(ms) and ms[i] == u:
                                still = True
                                break
                    if still:
                        continue  # p is still reached through another fused user in this kernel
                    # Only p's subtree can leave; keep a node of it if a fused user stays (users
                    # come later in topological order, so one pass in reverse order decides).
                    if sub is None:
                        sub = p_ref.members if p_ref is not None else self.members(bits, ci, p)
                        a_set = set(sub)
                    keep = set(ms)
                    keep -= a_set
                    for x in reversed(sub):
                        for e2, u in out_all[x]:
                            if bits[e2] and u in keep:
                                keep.add(x)
                                break
                    mem = tuple(sorted(keep))
                if not ok(comp, ci, r, mem):
                    return None
                delta[(ci, r)] = mem
        if p_root and p_ref is None:
            mem = sub if sub is not None else self.members(bits, ci, p)
            if not ok(comp, ci, p, mem):
                return None
            delta[(ci, p)] = mem
        elif not p_root and p_ref is not None:
            delta[(ci, p)] = None
        return delta

    def flip_valid(self, bits: bytearray, e: int) -> bool:
        """Whether flipping edge e (already applied to `bits`) leaves every touched kernel legal."""
        return self.flip_delta(bits, e) is not None

    def neighbor(self, cfg: FusionConfig, rng: np.random.Generator, tries: int = 32) -> FusionConfig:
        """Flip one edge, chosen at random among those whose flip keeps the configuration valid."""
        if self.n_edges == 0:
            return cfg
        bits = bytearray(cfg.bits)
        parent = self._state_cache.get(cfg.key())
        if parent is not None:
            self._state_cache.move_to_end(cfg.key())
        for _ in range(tries):
            e = int(rng.integers(self.n_edges))
            bits[e] ^= 1
            delta = self.flip_delta(bits, e, parent)
            if delta is not None:
                return FusionConfig(bits, parent=cfg, flips=(e,), delta=delta)
            bits[e] ^= 1
        return FusionConfig(bits, parent=cfg, flips=())

    def crossover(self, a: FusionConfig, b: FusionConfig, rng: np.random.Generator) -> FusionConfig:
        """Uniform crossover over edge bits, then repair."""
        mask = rng.random(self.n_edges) < 0.5
        av = np.frombuffer(bytes(a.bits), dtype=np.uint8)
        bv = np.frombuffer(bytes(b.bits), dtype=np.uint8)
        child = np.where(mask, av, bv).astype(np.uint8)
        return self.repair(FusionConfig(bytearray(child.tobytes())))

    def mutate(self, cfg: FusionConfig, rng: np.random.Generator, rate: float) -> FusionConfig:
        bits = np.frombuffer(bytes(cfg.bits), dtype=np.uint8).copy()
        flip = rng.random(self.n_edges) < rate
        bits ^= flip.astype(np.uint8)
        return self.repair(FusionConfig(bytearray(bits.tobytes())))
