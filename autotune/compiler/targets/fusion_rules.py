"""The fusion-legality interface every target implements (`FusionRules`), and the XLA facts several
targets' rules share: in-place update safety, the CPU emitter's single-function partition, operand
element reuse, and the per-computation facts behind the compiler's default configuration.

A target's own rules subclass `FusionRules` in its module (targets/tpu.py, targets/cpu.py); a fusion
space (autotune/compiler/fusion/) asks them which edges may fuse, which kernels are legal and what
the compiler would choose by default.
"""
from __future__ import annotations

from typing import Callable, Protocol, Sequence

from autotune.compiler.hlo import HloInstruction
from autotune.compiler.opcodes import (CONTROL, ELEMENTWISE, EXPENSIVE, FREE, NODE_CONTROL, NODE_FREE, NODE_FUSIBLE,
                                       NODE_OPAQUE, is_elementwise)
from autotune.compiler.program import Computation, Program

__all__ = ["FusionRules", "SpaceView", "DefaultFusionFacts", "default_facts", "in_place_ok", "downstream",
           "single_function_partition", "selects_ok", "reshape_broadcasts_ok", "cpu_normalized_float", "operand_reuse", "XLA_LOOP_FUSIBLE_EXTRA", "TRANSPARENT"]


class SpaceView(Protocol):
    """What the rules read of a fusion space (autotune.compiler.fusion.FusionSpace implements it)."""

    program: Program
    rules: "FusionRules"
    edge_comp: list[int]
    edge_prod: list[int]
    edge_cons: list[int]
    node_class: list[list[int]]
    out_edges: list[list[list[tuple[int, int]]]]

    def fusible_into_all_users(self, ci: int, p: int) -> bool: ...

    def hero_upstream(self, ci: int, n: int) -> bool: ...


class FusionRules:
    """Which edges may fuse, which kernels are legal, and the compiler's default choice, for a target."""

    name = "base"
    hero_count_only = False  # kernel_ok holds for kernels without a `checked` opcode (enables a fast path)
    inline_constants = True  # scalar constants are cloned into fused computations (else: operands)
    fusible: frozenset = frozenset()
    heroes: frozenset = frozenset()
    max_heroes = 1

    def node_class(self, ins: HloInstruction) -> int:
        op = ins.opcode
        if op in FREE:
            return NODE_FREE
        if op in CONTROL:
            return NODE_CONTROL
        if op in self.fusible and not ins.shape.is_tuple and ins.shape.dtype != "token":
            return NODE_FUSIBLE
        return NODE_OPAQUE

    def node_ok(self, comp: Computation, n: int) -> bool:
        """Whether instruction n may be inside a fusion at all (refines node_class with context)."""
        return True

    def edge_ok(self, comp: Computation, p: int, c: int) -> bool:
        raise NotImplementedError

    def kernel_ok(self, comp: Computation, root: int, members: Sequence[int]) -> bool:
        heroes = 0
        ins = comp.instructions
        for m in members:
            if ins[m].opcode in self.heroes:
                heroes += 1
                if heroes > self.max_heroes:
                    return False
        return True

    def monotone(self, comp: Computation, root: int) -> bool:
        """Whether every subset (containing the root) of a legal kernel at `root` is legal, so that
        repair may cut all offending edges in one walk from the root."""
        return False

    def grown_ok(self, comp: Computation, root: int, heroes: Sequence[int], has_checked: bool,
                 members: "Callable[[], list[int]]") -> bool:
        """kernel_ok of a kernel grown from its root one producer at a time (repair's walk):
        `heroes` and `has_checked` describe the members incrementally, `members()` lists them
        sorted. Rules override this with exact shortcuts; the default is the full check."""
        return self.kernel_ok(comp, root, members())

    def is_expensive(self, ins: HloInstruction) -> bool:
        return ins.opcode in EXPENSIVE and ins.shape.dtype not in ("s8", "s16", "s32", "s64", "u8", "u16",
                                                                   "u32", "u64", "pred")

    # Fusion kind: the first entry whose opcodes the kernel contains, else kLoop.
    kind_opcodes: tuple = ((frozenset({"dot", "convolution"}), "kOutput"),
                           (frozenset({"reduce", "reduce-window"}), "kInput"))

    def fusion_kind(self, comp: Computation, root: int, members: Sequence[int]) -> str:
        ops = {comp.instructions[m].opcode for m in members}
        for opcodes, kind in self.kind_opcodes:
            if not opcodes.isdisjoint(ops):
                return kind
        return "kLoop"

    def wrap_single(self, comp: Computation, n: int) -> bool:
        """Whether the one-instruction kernel of instruction `n` of `comp` is emitted as a fusion
        (so the compiler keeps it alone)."""
        return True

    def duplicable_into(self, comp: Computation, p: int, u: int, fusible_users: set) -> bool:
        """Whether XLA's fusion would fuse producer p into its user u (ShouldFuse), as
        ComputeGloballyUnfusible asks of every user of a producer it would duplicate."""
        return u in fusible_users

    def duplication_bounded(self, space: "SpaceView", ci: int, p: int) -> bool:
        """Whether the target's fusion keeps the shared value p (several users) from being duplicated
        for reasons beyond ComputeGloballyUnfusible (a cost model); none by default."""
        return False

    # Default configuration: XLA-like greedy choice.
    def default_edge(self, space: "SpaceView", e: int) -> bool:
        ci, p = space.edge_comp[e], space.edge_prod[e]
        comp = space.program.computations[ci]
        pins = comp.instructions[p]
        if self.is_expensive(pins) and not space.fusible_into_all_users(ci, p):
            return False
        return True


class DefaultFusionFacts:
    """Per-computation facts for the rules' default_edge (memoized on the space)."""

    def __init__(self, space: "SpaceView", ci: int):
        comp = space.program.computations[ci]
        self.space, self.ci, self.comp = space, ci, comp
        ins = comp.instructions
        n = len(ins)
        self.no_duplicate = [False] * n
        for p in range(n):
            users = comp.users[p]
            if len(users) <= 1 or space.node_class[ci][p] != NODE_FUSIBLE:
                continue
            if space.rules.duplication_bounded(space, ci, p):
                self.no_duplicate[p] = True
                continue
            if ins[p].shape.rank == 0:
                continue  # (scalars, e.g. index arithmetic, are duplicated freely: measured)
            out_b = ins[p].shape.bytes if not ins[p].shape.is_tuple else 0
            in_b = sum(ins[o].shape.bytes for o in dict.fromkeys(comp.operands[p])
                       if not ins[o].shape.is_tuple)
            if in_b <= out_b:
                continue
            fusible_users = {u for _, u in space.out_edges[ci][p]}
            if not all(space.rules.duplicable_into(comp, p, u, fusible_users) for u in users):
                self.no_duplicate[p] = True
        self._reused: dict[int, bool] = {}
        # Ends of dot/convolution output fusions: the hero, or an elementwise op one of whose
        # operands is in one and has no other user. Such a value contains the hero's work, which
        # XLA never duplicates (on TPU/GPU the epilogue joins the dot before instruction fusion).
        of = self.output_fused = [False] * n
        for k in range(n):
            op = ins[k].opcode
            of[k] = op in ("dot", "convolution") or is_elementwise(comp, k) and any(
                of[o] and len(comp.users[o]) == 1 for o in comp.operands[k])

    def reused(self, n: int) -> bool:
        """Whether n's value would be read more than once per element by the kernel it is fused into
        by default (some fused path from n to the root goes through an element-reusing op)."""
        memo = self._reused
        if n in memo:
            return memo[n]
        space, ci, comp = self.space, self.ci, self.comp
        rules = space.rules
        # Iterative post-order over default-fused out-edges (consumers first).
        stack = [(n, False)]
        while stack:
            m, done = stack.pop()
            if m in memo:
                continue
            outs = space.out_edges[ci][m]
            # Users through ops XLA would fuse but our `cpu` rules keep out of fusions (a reshape
            # is a bitcast on XLA:CPU): the reuse analysis looks through them.
            if comp.instructions[m].opcode in TRANSPARENT:
                through = [u for u in comp.users[m] if not operand_reuse(comp, u, m)] \
                    if all(not operand_reuse(comp, u, m) for u in comp.users[m]) else [m]
                if through == [m]:
                    memo[m] = True
                    continue
            elif rules.is_expensive(comp.instructions[m]):
                through = []  # an expensive m is not fused where it would be reused
            else:
                through = [u for u in comp.users[m] if comp.instructions[u].opcode in TRANSPARENT]
            if not done:
                stack.append((m, True))
                stack.extend((u, False) for _, u in outs if u not in memo)
                stack.extend((u, False) for u in through if u not in memo)
                continue
            r = any(memo.get(u, False) for u in through)
            for e, u in outs:
                if r:
                    break
                if not rules.default_edge(space, e):
                    continue
                if operand_reuse(comp, u, m) or memo.get(u, False):
                    r = True
            memo[m] = r
        return memo[n]

def downstream(comp: Computation, n: int, mset) -> list[int]:
    """Members reachable from n through users inside the kernel (n excluded)."""
    out: list[int] = []
    seen = {n}
    stack = [n]
    while stack:
        for u in comp.users[stack.pop()]:
            if u in mset and u not in seen:
                seen.add(u)
                out.append(u)
                stack.append(u)
    return out


def _const_value(ins: HloInstruction):
    if ins.opcode != "constant" or ins.shape.is_tuple or ins.shape.rank != 0:
        return None
    try:
        return int(float(ins.literal))
    except (TypeError, ValueError):
        return None


def _same_index(comp: Computation, a: int, b: int) -> bool:
    """Two index operands that are the same value: one instruction, or equal integer constants."""
    if a == b:
        return True
    va, vb = _const_value(comp.instructions[a]), _const_value(comp.instructions[b])
    return va is not None and va == vb


def _slices_updated_region(comp: Computation, s: int, dus: int) -> bool:
    """A slice/dynamic-slice reading exactly the region `dus` writes (same shape and start indices)."""
    ins = comp.instructions
    update = comp.operands[dus][1]
    if ins[s].shape.dims != ins[update].shape.dims:
        return False
    dus_idx = comp.operands[dus][2:]
    if ins[s].opcode == "dynamic-slice":
        return len(comp.operands[s]) - 1 == len(dus_idx) and all(
            _same_index(comp, a, b) for a, b in zip(comp.operands[s][1:], dus_idx))
    if ins[s].opcode == "slice":
        dims = ins[s].parsed.get("slice", ())
        return len(dims) == len(dus_idx) and all(
            d.stride == 1 and _const_value(ins[i]) == d.start for d, i in zip(dims, dus_idx))
    return False


def in_place_ok(comp: Computation, dus: int, mset) -> bool:
    """Kernel-level form of XLA's InstructionFusion::ShouldFuseInPlaceOp for a dynamic-update-slice
    root that updates a kernel input in place: the kernel must not read that buffer anywhere the
    update may already have written. Members reading it through elementwise ops are fine; any other
    reader must be a slice/dynamic-slice of exactly the updated region whose value reaches the
    update through elementwise ops only (XLA's IsSafeToFuseSliceIntoDusFusion). A buffer computed
    inside the kernel is not updated in place."""
    ops = comp.operands[dus]
    buf = ops[0]
    if buf in mset:
        return True
    if buf in ops[1:]:
        return False
    seen = {buf}
    stack = [buf]
    while stack:
        n = stack.pop()
        for u in comp.users[n]:
            if u not in mset or u in seen or u == dus:
                continue  # (the update itself, or a value computed elementwise from the buffer)
            seen.add(u)
            if is_elementwise(comp, u):
                stack.append(u)
                continue
            if not _slices_updated_region(comp, u, dus):
                return False
            if any(d != dus and not is_elementwise(comp, d) for d in downstream(comp, u, mset)):
                return False
    return True


# HloInstruction::IsOpElementwise(opcode): `map` is elementwise only per instance, not per opcode.
_XLA_ELEMENTWISE_OPCODES = ELEMENTWISE - {"map"}


def single_function_partition(comp: Computation, root: int, members: Sequence[int]) -> bool:
    """Whether XLA's emitter partitioner puts every non-root member of a loop fusion into a
    function rooted at the fusion root (xla/codegen/emitters/computation_partitioner.cc,
    `PartitionedComputation`).

    The partitioner walks the fused computation users-first. An instruction joins its users'
    function when all its users are elementwise (by opcode) and share one (function, indexing) id;
    a single-user instruction joins its user's function under a fresh indexing id; any other
    instruction (several users with different indexings, e.g. two different `slice`s or a `slice`
    and a `broadcast` of one value; or a user that evaluates it at several indexings: a
    `concatenate` listing it twice, a `gather` index operand) becomes the root of a function of its
    own, whose signature is built from its shape's *layout*. Hand-made fusions reach XLA:CPU
    through jaxlib's StableHLO round trip, which drops the layouts of every instruction inside
    fused computations (parameters and the root get theirs back from the fusion's operands and
    shape), so such a kernel aborts the compiler with "Check failed: has_layout()". Kernels that
    need more than one function are therefore not legal on `cpu`; XLA's own fusion pass (which runs
    after layout assignment) would form them.
    """
    mset = set(members)
    ins = comp.instructions
    # Users inside the kernel, from the members' operands: a value with thousands of users in the
    # computation (a broadcast constant) must not cost its whole user list per kernel.
    kernel_users: dict[int, list[int]] = {}
    for u in members:
        for o in dict.fromkeys(comp.operands[u]):
            if o in mset:
                kernel_users.setdefault(o, []).append(u)
    ids: dict[int, tuple[int, int]] = {root: (0, 0)}
    next_indexing = 1
    for m in reversed(members):  # members are in topological order: users come first
        if m == root:
            continue
        users = kernel_users.get(m, [])
        if not users:
            return False  # cannot happen for a connected kernel; a second root would be illegal
        first = ids[users[0]]
        if all(ins[u].opcode in _XLA_ELEMENTWISE_OPCODES and ids[u] == first for u in users):
            ids[m] = first
        elif len(users) > 1 or any(
                (ins[u].opcode == "concatenate" and comp.operands[u].count(m) > 1) or
                (ins[u].opcode == "gather" and comp.operands[u][1] == m and ins[m].shape.rank >= 2
                 and ins[m].shape.dims[1] > 1) for u in users):
            return False
        else:
            ids[m] = (first[0], next_indexing)
            next_indexing += 1
    return True


def cpu_normalized_float(dtype: str) -> bool:
    """Element types XLA:CPU computes in a wider float (FloatNormalization: bf16 and the 8-bit and
    smaller floats) for ops it lacks in that type, by inserting converts (inside fusions too)."""
    return dtype == "bf16" or dtype.startswith(("f8", "f6", "f4"))


def selects_ok(comp: Computation, members: Sequence[int]) -> bool:
    """A `select` inside a hand-made fusion must not take its on_true value from another member
    when its predicate is a non-scalar kernel input.

    XLA's verifier re-infers the select's shape from the predicate's shape (which, as a fusion
    parameter, has a layout) and then reads `on_true.layout()`; after the StableHLO round trip
    inner instructions have none ("Check failed: has_layout()" in ShapeInference::InferSelectShape).
    The algebraic simplifier also rewrites select(not(p), a, b) into select(p, b, a), so with a
    fused `not` of an input as predicate, neither branch may be a member.
    A select of bf16 (or an 8-bit float) with a non-scalar kernel input as predicate is never
    legal, even alone: XLA:CPU's float normalization computes it in f32 by converting both
    branches inside the fusion, which makes its on_true an inner instruction (measured, jaxlib
    0.10.2: `bf16[4] select(pred[4] p, bf16[4] a, bf16[4] b)` as a one-instruction kLoop fusion
    aborts with "Check failed: has_layout() f32[4]"; jax.nn.logsumexp in bf16 has one). With the
    predicate computed in the fusion, or a scalar one, it compiles.
    """
    mset = set(members)
    ins = comp.instructions
    for m in members:
        if ins[m].opcode != "select":
            continue
        pred, on_true, on_false = comp.operands[m][:3]
        if ins[pred].shape.rank == 0:
            continue
        if pred not in mset:
            if on_true in mset or cpu_normalized_float(ins[m].shape.dtype):
                return False
        elif ins[pred].opcode == "not" and (on_true in mset or on_false in mset):
            return False
    return True


def reshape_like_broadcast(comp: Computation, n: int) -> bool:
    """A broadcast that only inserts size-1 dimensions (`f32[1] broadcast(f32[])`, `[4] -> [4,1]`):
    the StableHLO round trip turns it into a reshape, in a fusion too."""
    ins = comp.instructions[n]
    if ins.opcode != "broadcast" or ins.shape.is_tuple or not comp.operands[n]:
        return False
    src = comp.instructions[comp.operands[n][0]].shape
    dims = tuple(ins.parsed.get("dimensions", ()))
    return (not src.is_tuple and list(dims) == sorted(dims) and src.elements == ins.shape.elements
            and tuple(ins.shape.dims[d] for d in dims) == src.dims)


def reshape_broadcasts_ok(comp: Computation, root: int, members: Sequence[int]) -> bool:
    """A hand-made fusion holding a `reduce` must not reach a reshape-like broadcast
    (`reshape_like_broadcast`) from its root through elementwise members only.

    XLA:CPU's emitter looks for the fusion's hero from its root through such "intermediate"
    instructions (FindNonTrivialHero) and asks of every reshape it meets whether it is a bitcast,
    which needs the layouts of the reshape and its operand; inside a hand-made fusion a non-root
    instruction has none after layout assignment, and XLA:CPU aborts (measured, jaxlib 0.10.2:
    "Check failed: output_shape.has_layout() f32[1]" on mujoco-mjx's `select(reduce(...),
    broadcast(f32[] p), ...)`, "input_shape.has_layout() pred[4]" on a broadcast of a reduce to
    [4,1] feeding a select). Without a reduce in the fusion the same broadcasts compile."""
    ins = comp.instructions
    mset = set(members)
    if not any(ins[m].opcode == "reduce" for m in members):
        return True
    seen: set = set()
    stack = [root]
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        if reshape_like_broadcast(comp, n):
            return False
        if is_elementwise(comp, n):
            stack.extend(o for o in comp.operands[n] if o in mset)
    return True


# Users XLA:CPU's loop fusion can take a producer into although our `cpu` rules keep them unfused
# (emission through StableHLO): layout ops, and convolutions, whose operands XLA:CPU first copies
# into its preferred layout with a (fusible) transpose.
XLA_LOOP_FUSIBLE_EXTRA = frozenset({"reshape", "bitcast", "transpose", "concatenate", "copy", "convolution"})
TRANSPARENT = frozenset({"reshape", "bitcast", "transpose"})


def default_facts(space: "SpaceView", ci: int) -> DefaultFusionFacts:
    cache = space.__dict__.setdefault("default_facts", {})
    info = cache.get(ci)
    if info is None:
        info = cache[ci] = DefaultFusionFacts(space, ci)
    return info


# HloInstruction::OperandElementUse: ops that read an operand's elements at most once each
# (kUse / kUsePermutingElements); every other non-elementwise op reuses them (kReuse).
_PERMUTING = frozenset({"bitcast", "concatenate", "reshape", "reverse", "slice", "transpose", "gather",
                        "copy"})


def operand_reuse(comp: Computation, c: int, p: int) -> bool:
    """XLA's ReusesOperandElements(consumer, operand index of p) (any index p occupies)."""
    ins = comp.instructions[c]
    op = ins.opcode
    idx = [k for k, o in enumerate(comp.operands[c]) if o == p]
    if op in _XLA_ELEMENTWISE_OPCODES or op in _PERMUTING:
        return False
    if op == "pad":
        return any(k > 0 for k in idx)
    if op == "reduce":
        n_in = len(comp.operands[c]) // 2
        return any(k >= n_in for k in idx)
    if op == "dynamic-update-slice":
        return any(k >= 2 for k in idx)
    if op == "dot" and ins.shape.rank <= 1:
        ops = comp.operands[c]
        other = comp.instructions[ops[1 - idx[0]]] if len(ops) == 2 and idx and idx[0] < 2 else None
        return not (other is not None and other.shape.rank <= 1)
    return True
