"""Search moves over a fusion space: random configurations, one-edge flips with their incremental
kernel delta, group moves over structurally equivalent edges, crossover and mutation (a FusionSpace
base class; the Space interface strategies use).

Group moves (`edge_groups`, `group_neighbor`): programs users have are deep stacks of repeated layers,
so a 200-layer transformer's 62,755 fusible edges fall into a few hundred classes of ~200 edges that
look the same (the same producer and consumer instructions with the same neighbourhood, one per
layer). A one-edge move changes one layer; a search of a minute makes fewer moves than there are
edges. A group move sets a whole class (or a random part of it) to the opposite of one member's
value in one step, each flip checked for legality as a one-edge move is (an illegal flip is
skipped), so one good decision is applied to every layer at once; the kernels it creates are equal
across layers, so a cost model memoized by kernel hash prices a handful of new kernels."""
from __future__ import annotations

from bisect import bisect_left
from typing import TYPE_CHECKING, Optional

import numpy as np

from autotune.compiler.fusion.config import FusionConfig
from autotune.compiler.fusion.kernels import KernelRef
from autotune.compiler.fusion.state import KernelMap

if TYPE_CHECKING:  # pragma: no cover
    from autotune.compiler.fusion.state import FusionState

__all__ = ["SearchMoves"]


class _OverlayState:
    """What `flip_delta` reads as the parent of each flip of a group move: the parent state's kernel
    map under a KernelMap whose changes ({key: KernelRef or None}) the move fills as it goes."""
    __slots__ = ("kernels",)

    def __init__(self, kernels: KernelMap) -> None:
        self.kernels = kernels


class SearchMoves:
    """Configuration moves of a FusionSpace (uses its structure queries and `repair`)."""

    _zobrist: Optional[tuple] = None
    _edge_groups: Optional[list] = None
    _group_cum: Optional[np.ndarray] = None  # cumulative class sizes of `edge_groups` (drawing a grouped edge)

    # Rounds of neighbourhood refinement in an edge's signature (Weisfeiler-Lehman over operands
    # and users): 2 tells apart edges whose producers or consumers feed or read different things.
    GROUP_ROUNDS = 2

    def _zobrist_table(self) -> tuple:
        """(128-bit random value per edge as Python ints, the same as two uint64 arrays), seeded: the
        digests are the same in every process."""
        if self._zobrist is None or len(self._zobrist[0]) != self.n_edges:
            rng = np.random.default_rng(0x5A0B_F15E)
            lo = rng.integers(0, 2 ** 63, self.n_edges, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
            hi = rng.integers(0, 2 ** 63, self.n_edges, dtype=np.uint64) * np.uint64(2)
            self._zobrist = ([(int(h) << 64) | int(l) for l, h in zip(lo, hi)], lo, hi)
        return self._zobrist

    def config_digest(self, cfg: FusionConfig) -> int:
        """A 128-bit digest of a configuration (Zobrist hashing: the XOR of a random value per fused
        edge), so that a one-edge move's digest is its parent's XOR one value, O(1) rather than a hash
        of all the bits (34 kB on a 200-layer program); cached on the configuration."""
        d = cfg.digest
        if d is None:
            _, lo, hi = self._zobrist_table()
            on = np.frombuffer(bytes(cfg.bits), np.uint8).astype(bool)
            d = (int(np.bitwise_xor.reduce(hi[on], initial=np.uint64(0))) << 64) | \
                int(np.bitwise_xor.reduce(lo[on], initial=np.uint64(0)))
            cfg.digest = d
        return d

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
            out_edges = self.out_edges[ci][p]
            in_all = self.in_edges[ci]
            a_set: Optional[set] = None
            for r in touched:
                ref = old.get((ci, r))
                if ref is None:
                    mem = self.members(bits, ci, r)
                else:
                    ms = ref.members
                    still = False
                    if len(out_edges) <= 2 * len(ms):
                        for e2, u in out_edges:
                            if bits[e2]:
                                i = bisect_left(ms, u)
                                if i < len(ms) and ms[i] == u:
                                    still = True
                                    break
                    else:  # p has many users (a broadcast read everywhere): look from the kernel's side
                        still = any(q == p and bits[e2] for m in ms for e2, q in in_all[m])
                    if still:
                        continue  # p is still reached through another fused user in this kernel
                    # Only p's subtree can leave; a node of it stays when a fused path leads from it
                    # to a node that stays: walk fused in-edges back from those (the kernel's in-degrees,
                    # not the subtree's out-degrees, which are large for broadcasts read everywhere).
                    if sub is None:
                        sub = p_ref.members if p_ref is not None else self.members(bits, ci, p)
                        a_set = set(sub)
                    keep = set(ms)
                    keep -= a_set
                    stack = list(keep)
                    while stack:
                        u = stack.pop()
                        for e2, x in in_all[u]:
                            if bits[e2] and x in a_set and x not in keep:
                                keep.add(x)
                                stack.append(x)
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
                child = FusionConfig(bits, parent=cfg, flips=(e,), delta=delta)
                if cfg.digest is not None:  # one edge flipped: one value XORed
                    child.digest = cfg.digest ^ self._zobrist_table()[0][e]
                return child
            bits[e] ^= 1
        child = FusionConfig(bits, parent=cfg, flips=())
        child.digest = cfg.digest
        return child

    def node_classes(self, rounds: Optional[int] = None) -> list:
        """Per computation, per instruction: a structural class id (an int), equal for instructions
        with the same signature (opcode, shape, attributes) whose operands and users are, for
        `rounds` rounds, of equal classes (Weisfeiler-Lehman refinement; operands in order, users as
        a sorted multiset). The same instruction of two identical layers gets the same class."""
        rounds = self.GROUP_ROUNDS if rounds is None else rounds
        out = []
        for ci, comp in enumerate(self.program.computations):
            h = list(self.signatures[ci])
            ops, users = comp.operands, comp.users
            for _ in range(rounds):
                h = [hash((h[n], tuple(h[o] for o in ops[n]), tuple(sorted(h[u] for u in users[n]))))
                     for n in range(len(h))]
            out.append(h)
        return out

    def edge_groups(self) -> list:
        """Classes of structurally equivalent fusible edges with at least two members, as arrays of
        edge ids (largest first, ties by first edge): an edge's class is its producer's and its
        consumer's `node_classes` and the computation's multiplicity. Computed once per space."""
        if self._edge_groups is None:
            cls = self.node_classes()
            groups: dict = {}
            for e in range(self.n_edges):
                ci = self.edge_comp[e]
                key = (cls[ci][self.edge_prod[e]], cls[ci][self.edge_cons[e]], self.multiplicity[ci])
                groups.setdefault(key, []).append(e)
            found = [np.array(g, np.intp) for g in groups.values() if len(g) > 1]
            found.sort(key=lambda g: (-len(g), int(g[0])))
            self._edge_groups = found
        return self._edge_groups

    def _group_cumsum(self) -> np.ndarray:
        if self._group_cum is None:
            self._group_cum = np.cumsum([len(g) for g in self.edge_groups()])
        return self._group_cum

    def grouped_edges(self) -> int:
        """Edges that belong to an `edge_groups` class."""
        return sum(len(g) for g in self.edge_groups())

    def group_neighbor(self, cfg: FusionConfig, rng: np.random.Generator,
                       group: Optional[int] = None, fraction: Optional[float] = None) -> FusionConfig:
        """A group move: an edge drawn from the grouped edges (so larger classes more often, or class
        `group`), then its class set to the opposite of that edge's value, every member whose value
        differs flipped one at a time and checked like a one-edge move (an illegal flip is skipped).
        With probability 1/2 the whole class moves, else a random `fraction` (uniform) of it. The child
        carries the combined kernel delta from `cfg`, so the tuner prices it incrementally. Without
        groups, or without `cfg`'s kernel set cached, a one-edge `neighbor` move."""
        groups = self.edge_groups()
        parent = self._state_cache.get(cfg.key())
        if not groups or parent is None:
            return self.neighbor(cfg, rng)
        self._state_cache.move_to_end(cfg.key())
        if group is None:
            cum = self._group_cumsum()
            pick = int(rng.integers(int(cum[-1])))
            group = int(np.searchsorted(cum, pick, side="right"))
            edges = groups[group]
            e0 = int(edges[pick - (int(cum[group - 1]) if group else 0)])
        else:
            edges = groups[group]
            e0 = int(edges[rng.integers(len(edges))])
        bits = bytearray(cfg.bits)
        target = bits[e0] ^ 1
        todo = np.array([e for e in edges.tolist() if bits[e] != target], np.intp)
        if fraction is None:
            fraction = 1.0 if rng.random() < 0.5 else float(rng.uniform(0.0, 1.0))
        if fraction < 1.0 and len(todo) > 1:
            k = max(1, int(round(fraction * len(todo))))
            todo = np.sort(rng.choice(todo, size=k, replace=False))
        state = _OverlayState(KernelMap(parent.kernels))
        changes = state.kernels.changes
        applied = []
        for e in todo.tolist():
            bits[e] ^= 1
            delta = self.flip_delta(bits, e, state)
            if delta is None:
                bits[e] ^= 1
                continue
            applied.append(e)
            for k, mem in delta.items():
                changes[k] = None if mem is None else KernelRef(k[0], k[1], mem, None, True, self)
        if not applied:
            child = FusionConfig(bits, parent=cfg, flips=())
            child.digest = cfg.digest
            return child
        child = FusionConfig(bits, parent=cfg, flips=tuple(applied),
                             delta={k: (None if v is None else v.members) for k, v in changes.items()})
        if cfg.digest is not None:
            z = self._zobrist_table()[0]
            d = cfg.digest
            for e in applied:
                d ^= z[e]
            child.digest = d
        return child

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
