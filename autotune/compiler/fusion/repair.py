"""Legality of configurations: the compiler's default configuration, validity checks and repair
(unfusing the edges that make a kernel illegal under the target's rules). A FusionSpace base class."""
from __future__ import annotations

from collections import deque
from typing import Optional

from autotune.compiler.fusion.config import FusionConfig
from autotune.compiler.gc_pause import gc_paused
from autotune.compiler.program import Computation

__all__ = ["LegalityRepair"]


class LegalityRepair:
    """Default configuration, validity and repair of a FusionSpace (reads the structure it builds:
    rules, edges, hero and checked-opcode sets)."""

    _default: Optional[FusionConfig]

    @gc_paused()
    def default(self) -> FusionConfig:
        """The target compiler's heuristic (greedy, as XLA's InstructionFusion), made valid."""
        if self._default is None:
            bits = bytearray(self.rules.default_edge(self, e) for e in range(self.n_edges))
            self._default = self.repair(FusionConfig(bits))
        return self._default

    def _kernel_ok_fast(self, comp: Computation, ci: int, root: int, members: tuple) -> bool:
        """The target's kernel rule; kernels without a hero or an in-place update are legal by
        construction on targets that say so (rules.checked), a set intersection decides that."""
        if not self.rules.hero_count_only:
            return self.rules.kernel_ok(comp, root, members)
        checked = self._checked_sets[ci]
        if not checked or checked.isdisjoint(members):
            return True
        heroes = self._hero_sets[ci]
        if len(heroes.intersection(members)) > self.rules.max_heroes:
            return False
        return self.rules.kernel_ok(comp, root, members)

    def is_valid(self, cfg: FusionConfig) -> bool:
        if len(cfg.bits) != self.n_edges:
            return False
        bits = cfg.bits
        for ci, comp in enumerate(self.program.computations):
            for n in range(len(comp)):
                if self.is_root(bits, ci, n) and not self.rules.kernel_ok(comp, n, self.members(bits, ci, n)):
                    return False
        return True

    def repair(self, cfg: FusionConfig) -> FusionConfig:
        """Unfuse edges until every kernel is legal: walking each kernel from its root, an edge that
        would bring a second hero (or otherwise break the target's rule) is cut."""
        if len(cfg.bits) != self.n_edges:
            raise ValueError(f"configuration has {len(cfg.bits)} bits, the space has {self.n_edges} edges")
        bits = bytearray(cfg.bits)
        rules = self.rules
        for ci, comp in enumerate(self.program.computations):
            # A cut for a kernel below may shrink a kernel already repaired that shares the cut
            # edge's subtree (a producer duplicated into several kernels), and not every rule is
            # monotone (`selects_ok`: a predicate cut out of a kernel whose select keeps its
            # on-true member): the pass is repeated until it cuts nothing.
            while self._repair_pass(bits, ci, comp, rules):
                pass
        return FusionConfig(bits)

    def _repair_pass(self, bits: bytearray, ci: int, comp: Computation, rules) -> bool:
        """One repair walk over computation `ci`; whether it cut an edge."""
        cut = False
        # Reverse topological order: consumers first, as XLA's fusion pass visits them.
        for n in range(len(comp) - 1, -1, -1):
            if not self.is_root(bits, ci, n):
                continue
            if self._kernel_ok_fast(comp, ci, n, self.members(bits, ci, n)):
                continue
            cut = True
            # Cutting the first offending edge and walking again from the root replays the same
            # walk up to that edge; under a monotone rule the walk may go on past the cut instead
            # (a legal kernel's sub-walks are legal), one walk for all cuts.
            self._cut(bits, ci, n, every=rules.monotone(comp, n))
            while not rules.kernel_ok(comp, n, self.members(bits, ci, n)):
                self._cut(bits, ci, n, every=False)
        return cut

    def _cut(self, bits: bytearray, ci: int, root: int, every: bool) -> None:
        """Cut the fused edge that first makes the kernel at root illegal (breadth-first from root),
        or with `every`, each edge that would make the kernel grown so far illegal."""
        comp = self.program.computations[ci]
        rules = self.rules
        hero_set, checked_set = self._hero_sets[ci], self._checked_sets[ci]
        in_edges = self.in_edges[ci]
        members = [root]
        heroes = [root] if root in hero_set else []
        has_checked = root in checked_set
        seen = {root}
        queue = deque([root])
        last_edge = None
        cut = False
        while queue:
            n = queue.popleft()
            for e, p in in_edges[n]:
                if not bits[e] or p in seen:
                    continue
                trial_heroes = heroes + [p] if p in hero_set else heroes
                if not rules.grown_ok(comp, root, trial_heroes, has_checked or p in checked_set,
                                      lambda: sorted(members + [p])):
                    bits[e] = 0
                    if not every:
                        return
                    cut = True
                    continue
                seen.add(p)
                members.append(p)
                heroes = trial_heroes
                has_checked = has_checked or p in checked_set
                queue.append(p)
                last_edge = e
        if cut:
            return
        if last_edge is not None:  # the kernel is illegal as a whole: shrink it
            bits[last_edge] = 0
        else:
            raise RuntimeError("kernel illegal with no fused edges")  # pragma: no cover
