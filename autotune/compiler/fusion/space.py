"""The fusion space of a program on a target: one bit per fusible producer->consumer edge.

Semantics (docs/design.md, after XLA's InstructionFusion): a kernel is rooted at every
non-free instruction that is not fused into *all* of its users; it holds the root and every producer
reached through fused edges. A producer fused into only some users is cloned into those kernels and
stays a kernel of its own. Free instructions (parameter, constant, get-tuple-element, tuple, ...)
are never kernels; scalar constants are cloned into the kernels that read them.

Which edges exist and which kernels are legal is the target's (`Target.fusion_rules`). `FusionSpace`
holds the structure and the kernel-set cache; its base classes hold the canonical hashing
(hashing.py), the search moves (moves.py) and legality repair with the default configuration
(repair.py); kernel sets are `FusionState`s (state.py).
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Optional

import numpy as np

from autotune.compiler.fusion.config import FusionConfig
from autotune.compiler.fusion.hashing import KernelHashing
from autotune.compiler.fusion.kernels import Kernel, KernelRef
from autotune.compiler.fusion.moves import SearchMoves
from autotune.compiler.fusion.repair import LegalityRepair
from autotune.compiler.fusion.state import FusionState
from autotune.compiler.gc_pause import gc_paused
from autotune.compiler.opcodes import ELEMENTWISE, NODE_FUSIBLE, NODE_OPAQUE, is_scalar_constant
from autotune.compiler.program import Program
from autotune.compiler.space import Space
from autotune.compiler.targets import FusionRules, Target, get_target

__all__ = ["FusionSpace", "get_rules"]

_WIDE_FAN_OUT = 64  # fusible users above which `is_root` checks a producer's edges as an array


def get_rules(target: "str | Target") -> FusionRules:
    """The fusion rules of a target name (UnknownTargetError for a target without rules)."""
    return get_target(target).fusion_rules


class FusionSpace(KernelHashing, SearchMoves, LegalityRepair, Space):
    """The fusion search space of a program on a target (the `Space` interface, autotune/compiler/space.py).

    `target` is the name given (recorded in configurations), `compilation_target` the registered
    Target it names, `rules` that target's fusion rules."""

    @gc_paused()
    def __init__(self, program: Program, target: "str | Target" = "tpu"):
        self.program = program
        self.compilation_target = get_target(target)
        self.target = target if isinstance(target, str) else self.compilation_target.name
        self.rules = self.compilation_target.fusion_rules
        comps = program.computations
        self.node_class: list[list[int]] = []
        self.in_edges: list[list[list[tuple[int, int]]]] = []   # per comp, per node: [(edge, producer)]
        self.out_edges: list[list[list[tuple[int, int]]]] = []  # per comp, per node: [(edge, consumer)]
        self.pinned: list[list[bool]] = []   # node has a user it can never be fused into (or is the root)
        self.is_hero: list[list[bool]] = []
        self.edge_comp: list[int] = []
        self.edge_prod: list[int] = []
        self.edge_cons: list[int] = []
        self.multiplicity = [c.multiplicity for c in comps]
        for ci, comp in enumerate(comps):
            cls = [self.rules.node_class(i) for i in comp.instructions]
            cls = [NODE_OPAQUE if k == NODE_FUSIBLE and not self.rules.node_ok(comp, n) else k
                   for n, k in enumerate(cls)]
            self.node_class.append(cls)
            ins_e: list[list[tuple[int, int]]] = [[] for _ in comp.instructions]
            out_e: list[list[tuple[int, int]]] = [[] for _ in comp.instructions]
            pinned = [False] * len(comp)
            for c, ops in enumerate(comp.operands):
                for p in dict.fromkeys(ops):
                    if cls[p] == NODE_FUSIBLE and cls[c] == NODE_FUSIBLE and self.rules.edge_ok(comp, p, c):
                        e = len(self.edge_comp)
                        self.edge_comp.append(ci)
                        self.edge_prod.append(p)
                        self.edge_cons.append(c)
                        ins_e[c].append((e, p))
                        out_e[p].append((e, c))
                    else:
                        pinned[p] = True
            pinned[comp.root] = True
            self.in_edges.append(ins_e)
            self.out_edges.append(out_e)
            self.pinned.append(pinned)
            self.is_hero.append([i.opcode in self.rules.heroes for i in comp.instructions])
        self._hero_sets = [frozenset(n for n, h in enumerate(hs) if h) for hs in self.is_hero]
        checked_ops = getattr(self.rules, "checked", self.rules.heroes)
        self._checked_sets = [frozenset(n for n, i in enumerate(c.instructions) if i.opcode in checked_ops)
                              for c in comps]
        self.n_edges = len(self.edge_comp)
        # producers with many fusible users: their out-edge ids as an array (`is_root` checks them in numpy)
        self._wide_out_edges: dict[tuple[int, int], np.ndarray] = {
            (ci, n): np.array([e for e, _ in out], np.intp)
            for ci, per_node in enumerate(self.out_edges) for n, out in enumerate(per_node) if len(out) > _WIDE_FAN_OUT}
        self._sigs: Optional[list[list[int]]] = None
        self._shape_sigs: list[list[int]] = []
        self._is_const = [[is_scalar_constant(i) for i in c.instructions] for c in comps]
        self._node_bytes: Optional[list] = None
        self._kind_nodes: Optional[list] = None
        self._node_sums: Optional[list] = None
        self._hash_cache: dict[tuple, str] = {}
        self._node_costs: Optional[list] = None
        self._hero_up: Optional[list] = None
        self._default: Optional[FusionConfig] = None
        self._state_cache: "OrderedDict[bytes, FusionState]" = OrderedDict()
        self.state_cache_size = 1024  # > chains x proposals in flight: a chain head must stay derivable

    # ---- structure queries
    def hero_upstream(self, ci: int, n: int) -> bool:
        """n is a dot/convolution, or an elementwise op fed (through elementwise ops) by one."""
        if self._hero_up is None:
            self._hero_up = []
            for c, comp in enumerate(self.program.computations):
                up = [False] * len(comp)
                for k, ins in enumerate(comp.instructions):
                    if ins.opcode in ("dot", "convolution"):
                        up[k] = True
                    elif ins.opcode in ELEMENTWISE or ins.opcode == "broadcast":
                        up[k] = any(up[o] for o in comp.operands[k])
                self._hero_up.append(up)
        return self._hero_up[ci][n]

    def fusible_into_all_users(self, ci: int, p: int) -> bool:
        return not self.pinned[ci][p]

    def is_root(self, bits: bytearray, ci: int, n: int) -> bool:
        """Node n roots a kernel under `bits`: a non-free node with a user it is not fused into. A
        producer with thousands of fusible users (a broadcast read by every block of a wide convnet)
        has its edges checked as one numpy gather rather than one Python step each (a move touching
        it cost 1.6 ms at 12,288 users, now ~20 us)."""
        if self.node_class[ci][n] < NODE_OPAQUE:
            return False
        if self.pinned[ci][n]:
            return True
        wide = self._wide_out_edges.get((ci, n))
        if wide is not None:
            return not np.frombuffer(bits, np.uint8)[wide].all()
        for e, _ in self.out_edges[ci][n]:
            if not bits[e]:
                return True
        return False

    def members(self, bits: bytearray, ci: int, root: int) -> tuple:
        """Instructions of the kernel rooted at `root` (sorted = topological order)."""
        in_edges = self.in_edges[ci]
        if not in_edges[root]:
            return (root,)
        seen = {root}
        stack = [root]
        while stack:
            n = stack.pop()
            for e, p in in_edges[n]:
                if bits[e] and p not in seen:
                    seen.add(p)
                    stack.append(p)
        return tuple(sorted(seen))

    def roots_containing(self, bits: bytearray, ci: int, n: int) -> set:
        """Kernel roots whose kernel contains node n: n itself if a root, and roots downstream of n
        through fused edges."""
        out: set[int] = set()
        seen = {n}
        stack = [n]
        while stack:
            m = stack.pop()
            if self.is_root(bits, ci, m):
                out.add(m)
            for e, c in self.out_edges[ci][m]:
                if bits[e] and c not in seen:
                    seen.add(c)
                    stack.append(c)
        return out

    def make_ref(self, bits: bytearray, ci: int, root: int) -> KernelRef:
        mem = self.members(bits, ci, root)
        comp = self.program.computations[ci]
        return KernelRef(ci, root, mem, None, self.rules.kernel_ok(comp, root, mem), self)

    def unfused(self) -> FusionConfig:
        return FusionConfig(bytearray(self.n_edges))

    def encode(self, cfg: FusionConfig) -> bytes:
        return cfg.key()

    def decode(self, data: bytes) -> FusionConfig:
        if len(data) != self.n_edges:
            raise ValueError(f"configuration has {len(data)} bits, the space has {self.n_edges} edges")
        return FusionConfig(bytearray(data))

    # ---- kernel sets
    def state(self, cfg: FusionConfig) -> "FusionState":
        """Kernel set of a configuration: derived incrementally from its parent's state when cached."""
        key = cfg.key()
        st = self._state_cache.get(key)
        if st is not None:
            self._state_cache.move_to_end(key)  # LRU: chain heads and the best stay derivable
            return st
        # Derive from the nearest cached ancestor along the parent chain (a random walk of a few
        # moves from a cached configuration), else build from scratch.
        path = []
        node = cfg
        base = None
        while node is not None and node.flips and len(path) < 256:
            path.append(node)
            parent = node.parent
            if parent is None:
                break
            base = self._state_cache.get(parent.key())
            if base is not None:
                break
            node = parent
        if base is None:
            st = FusionState.build(self, cfg.bits)
        else:
            st = base
            for node in reversed(path):
                st = st.derive(node)
                if node is not cfg:
                    self._remember(node.key(), st)
        self._remember(key, st)
        return st

    def _remember(self, key: bytes, st: "FusionState") -> None:
        """LRU cache of recent states (the default's state is kept for good)."""
        cache = self._state_cache
        cache[key] = st
        cache.move_to_end(key)
        if len(cache) > self.state_cache_size:
            old = next(iter(cache))
            if self._default is not None and old == self._default.key():
                cache.move_to_end(old)
                old = next(iter(cache))
            del cache[old]

    def kernels(self, cfg: FusionConfig) -> list:
        """Materialized Kernel objects of a configuration (one per kernel root)."""
        st = self.state(cfg)
        return [Kernel.from_ref(self, ref) for ref in st.refs()]
