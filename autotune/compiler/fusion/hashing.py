"""Kernel identity within a fusion space: canonical hashes, external inputs and per-instruction
static sums (a FusionSpace base class; the search's hot path, memoized per space)."""
from __future__ import annotations

import hashlib
from array import array
from typing import TYPE_CHECKING, Optional, Sequence

from autotune.compiler.analysis import instruction_costs
from autotune.compiler.signature import instruction_signature, shape_signature

if TYPE_CHECKING:  # pragma: no cover
    from autotune.compiler.program import Program
    from autotune.compiler.targets import FusionRules

__all__ = ["KernelHashing"]

# Marks a cloned scalar constant in a kernel's serialization (followed by its signature).
_CONST_MARK = -(1 << 40)


class KernelHashing:
    """Canonical kernel hashing and static per-instruction sums of a FusionSpace."""

    program: "Program"
    rules: "FusionRules"
    _sigs: Optional[list[list[int]]]
    _shape_sigs: list[list[int]]
    _is_const: list[list[bool]]
    _node_bytes: Optional[list]
    _kind_nodes: Optional[list]
    _node_sums: Optional[list]
    _node_costs: Optional[list]
    _hash_cache: dict

    @property
    def signatures(self) -> list[list[int]]:
        """Per-instruction signatures of every computation (the pieces of the canonical hash)."""
        if self._sigs is None:
            comps = self.program.computations
            module = self.program.module
            cache: dict = {}
            self._sigs = [[instruction_signature(i, module, cache) for i in c.instructions] for c in comps]
            self._shape_sigs = [[shape_signature(i.shape) for i in c.instructions] for c in comps]
        return self._sigs

    def fusion_kind(self, ci: int, root: int, members: Sequence[int]) -> str:
        """rules.fusion_kind, by set intersection with per-computation node sets (search hot path)."""
        if self._kind_nodes is None:
            self._kind_nodes = [[(frozenset(n for n, i in enumerate(c.instructions) if i.opcode in ops), kind)
                                 for ops, kind in self.rules.kind_opcodes] for c in self.program.computations]
        for nodes, kind in self._kind_nodes[ci]:
            if nodes and not nodes.isdisjoint(members):
                return kind
        return "kLoop"

    def node_sums(self, ci: int) -> tuple:
        """(flops, transcendentals, output bytes, scalar-constant set) per instruction of a computation."""
        if self._node_sums is None:
            self._node_sums = [None] * len(self.program.computations)
        t = self._node_sums[ci]
        if t is None:
            costs = self.node_costs[ci]
            t = self._node_sums[ci] = ([c.flops for c in costs], [c.transcendentals for c in costs],
                                       self.node_bytes[ci],
                                       frozenset(n for n, k in enumerate(self._is_const[ci]) if k))
        return t

    @property
    def node_bytes(self) -> list:
        """Per-instruction output size in bytes, of every computation."""
        if self._node_bytes is None:
            self._node_bytes = [[float(i.shape.bytes) for i in c.instructions] for c in self.program.computations]
        return self._node_bytes

    @property
    def node_costs(self) -> list:
        """Per-instruction static Cost (flops, transcendentals, bytes) of every computation."""
        if self._node_costs is None:
            module = self.program.module
            self._node_costs = instruction_costs([c.hlo for c in self.program.computations], module)
        return self._node_costs

    def kernel_hash(self, ci: int, root: int, members: Sequence[int]) -> str:
        """Canonical hash: same structure, shapes and attributes -> same hash, whatever the names/order.

        Serializes the kernel in post-order from the root (operands in order), inputs numbered by
        first use and known by their shape only, cloned scalar constants by their value.
        """
        key = (ci, members if isinstance(members, tuple) else tuple(members))
        hit = self._hash_cache.get(key)
        if hit is not None:
            return hit
        sigs = self.signatures[ci]
        shape_sigs = self._shape_sigs[ci]
        isc = self._is_const[ci]
        ops = self.program.computations[ci].operands
        mset = set(members)
        ids: dict[int, int] = {}
        pending: set[int] = set()
        inputs: dict[int, int] = {}
        out = array("q")
        push = out.append
        stack = [root]
        while stack:
            n = stack.pop()
            if n < 0:
                n = ~n
                ids[n] = len(ids)
                olist = ops[n]
                push(sigs[n])
                push(len(olist))
                for o in olist:
                    if o in mset:
                        push(ids[o])
                    elif isc[o]:
                        push(_CONST_MARK)
                        push(sigs[o])
                    else:
                        k = inputs.get(o)
                        if k is None:
                            k = inputs[o] = len(inputs)
                        push(-1 - k)
                        push(shape_sigs[o])
                continue
            if n in ids or n in pending:
                continue
            pending.add(n)
            stack.append(~n)
            for o in reversed(ops[n]):
                if o in mset and o not in ids and o not in pending:
                    stack.append(o)
        h = hashlib.blake2b(out.tobytes(), digest_size=8).hexdigest()
        if len(self._hash_cache) > 500_000:
            self._hash_cache.clear()
        self._hash_cache[key] = h
        return h

    def kernel_inputs(self, ci: int, root: int, members: Sequence[int]) -> list[int]:
        """External operands (non-members, scalar constants excluded) in canonical first-use order
        (a depth-first walk from the root over each member's operands in order)."""
        comp = self.program.computations[ci]
        operands, is_const = comp.operands, self._is_const[ci]
        mset = set(members)
        inputs: dict[int, None] = {}
        seen: set[int] = set()
        stack = [iter(operands[root])]
        while stack:
            for o in stack[-1]:
                if o in mset:
                    if o not in seen:
                        seen.add(o)
                        stack.append(iter(operands[o]))
                        break
                elif o not in inputs and not is_const[o]:
                    inputs[o] = None
            else:
                stack.pop()
        return list(inputs)
