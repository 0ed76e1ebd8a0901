"""Fusion space: one bit per fusible producer->consumer edge, legality per target, kernels.

Semantics (docs/design.md, after XLA's InstructionFusion): a kernel is rooted at every
non-free instruction that is not fused into *all* of its users; it holds the root and every producer
reached through fused edges. A producer fused into only some users is cloned into those kernels and
stays a kernel of its own. Free instructions (parameter, constant, get-tuple-element, tuple, ...)
are never kernels; scalar constants are cloned into the kernels that read them.

`FusionState` holds the kernel set of one configuration and updates it after an edge flip with work
proportional to the kernels the flip touches, which is what makes search over configurations cheap.
"""
from __future__ import annotations

import hashlib
from array import array
from collections import OrderedDict, deque
from bisect import bisect_left
from typing import Callable, Iterable, Optional, Sequence

import numpy as np

from autotune.compiler.gc_pause import gc_paused
from autotune.compiler.hlo import DTYPE_BYTES, HloInstruction
from autotune.compiler.program import Computation, Program

# --------------------------------------------------------------------------------------------------
# Opcode classes

ELEMENTWISE = frozenset("""
abs add and atan2 bitcast-convert cbrt ceil clamp compare complex convert copy cosine
count-leading-zeros divide erf exponential exponential-minus-one floor imag is-finite log
log-plus-one logistic map maximum minimum multiply negate not or popcnt power real
reduce-precision remainder round-nearest-afz round-nearest-even rsqrt select shift-left
shift-right-arithmetic shift-right-logical sign sine sqrt stochastic-convert subtract tan tanh xor
acos acosh asin asinh atan atanh cosh sinh mulhi
""".split())

# Ops XLA treats as expensive (InstructionFusion::IsExpensive): not duplicated into several kernels.
EXPENSIVE = frozenset("""
atan2 cbrt cosine divide erf exponential exponential-minus-one log log-plus-one logistic power
remainder rsqrt sine sqrt tan tanh convolution dot fft reduce-window sort custom-call
acos acosh asin asinh atanh cosh
""".split())

TRANSCENDENTAL = frozenset("""
atan2 cbrt cosine erf exponential exponential-minus-one log log-plus-one logistic power rsqrt sine
sqrt tan tanh acos acosh asin asinh atan atanh cosh sinh
""".split())

FREE = frozenset("""
parameter constant get-tuple-element tuple after-all add-dependency opt-barrier domain partition-id
replica-id
""".split())
CONTROL = frozenset({"while", "conditional", "call", "async-start", "async-update", "async-done"})
LAYOUT = frozenset({"broadcast", "reshape", "bitcast", "transpose", "slice", "pad", "concatenate",
                    "reverse", "iota", "dynamic-slice", "gather"})

NODE_FREE, NODE_CONTROL, NODE_OPAQUE, NODE_FUSIBLE = 0, 1, 2, 3
_CONST_MARK = -(1 << 40)


def changes_bit_width(ins: HloInstruction, operand: HloInstruction) -> bool:
    """A bitcast-convert between element types of different sizes (it changes the rank)."""
    return DTYPE_BYTES.get(ins.shape.dtype, 0) != DTYPE_BYTES.get(operand.shape.dtype, 0)


def is_scalar_constant(ins: HloInstruction) -> bool:
    return ins.opcode == "constant" and not ins.shape.is_tuple and ins.shape.rank == 0


# --------------------------------------------------------------------------------------------------
# Target rules


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

    def wrap_single(self, ins: HloInstruction) -> bool:
        """Whether a one-instruction kernel is emitted as a fusion (so the compiler keeps it alone)."""
        return True

    def duplicable_into(self, comp: Computation, p: int, u: int, fusible_users: set) -> bool:
        """Whether XLA's fusion would fuse producer p into its user u (ShouldFuse), as
        ComputeGloballyUnfusible asks of every user of a producer it would duplicate."""
        return u in fusible_users

    # Default configuration: XLA-like greedy choice.
    def default_edge(self, space: "FusionSpace", e: int) -> bool:
        ci, p, c = space.edge_comp[e], space.edge_prod[e], space.edge_cons[e]
        comp = space.program.computations[ci]
        pins = comp.instructions[p]
        if self.is_expensive(pins) and not space.fusible_into_all_users(ci, p):
            return False
        return True


class TpuRules(FusionRules):
    """XLA-TPU-like: elementwise and data-movement ops fuse; one dot/convolution/reduce hero per kernel."""

    name = "tpu"
    hero_count_only = True
    fusible = ELEMENTWISE | LAYOUT | {"reduce", "dot", "convolution", "reduce-window", "dynamic-update-slice"}
    heroes = frozenset({"dot", "convolution", "reduce", "reduce-window"})
    # Kernels holding none of these are legal whatever else they hold (the search's fast path).
    checked = heroes | {"dynamic-update-slice"}

    def kernel_ok(self, comp: Computation, root: int, members: Sequence[int]) -> bool:
        """At most one hero; a dot/convolution's kernel continues through elementwise ops only (an
        output fusion's epilogue), checked over every path from the hero, not edge by edge; and an
        in-place dynamic-update-slice root keeps its buffer's other readers safe (in_place_ok)."""
        ins = comp.instructions
        heroes = [m for m in members if ins[m].opcode in self.heroes]
        if len(heroes) > self.max_heroes:
            return False
        mset = members if isinstance(members, (set, frozenset)) else set(members)
        if heroes and ins[heroes[0]].opcode in ("dot", "convolution"):
            down = _downstream(comp, heroes[0], mset)
            if any(not is_elementwise(comp, m) and ins[m].opcode != "bitcast" for m in down):
                return False
        if ins[root].opcode == "dynamic-update-slice" and not in_place_ok(comp, root, mset):
            return False
        return True

    def monotone(self, comp: Computation, root: int) -> bool:
        # The hero count and a hero's downstream members only grow with the member set; the
        # in-place rule of a dynamic-update-slice root does not (its buffer joining makes it legal).
        return comp.instructions[root].opcode != "dynamic-update-slice"

    def grown_ok(self, comp: Computation, root: int, heroes: Sequence[int], has_checked: bool,
                 members: "Callable[[], list[int]]") -> bool:
        """kernel_ok without walking the members where it decides by the hero count alone: a second
        hero is illegal; a kernel with no checked opcode is legal (hero_count_only); a lone hero
        that is the root or no dot/convolution has no epilogue to check (the root has no users
        among its members); otherwise the full check."""
        if len(heroes) > self.max_heroes:
            return False
        if not has_checked:
            return True
        ins = comp.instructions
        if len(heroes) <= 1 and ins[root].opcode != "dynamic-update-slice" and (
                not heroes or heroes[0] == root or ins[heroes[0]].opcode not in ("dot", "convolution")):
            return True
        return self.kernel_ok(comp, root, members())

    def edge_ok(self, comp: Computation, p: int, c: int) -> bool:
        pi, ci = comp.instructions[p], comp.instructions[c]
        po, co = pi.opcode, ci.opcode
        if po == "dynamic-update-slice":
            return False  # in-place update: only ever a kernel root
        if po in ("dot", "convolution"):
            return co in ELEMENTWISE
        if co in ("dot", "convolution"):
            return po in ELEMENTWISE or po in ("broadcast", "reshape", "transpose", "bitcast")
        if po in ("reduce", "reduce-window"):
            return co in ELEMENTWISE or co in ("reshape", "bitcast", "broadcast")
        return True

    @staticmethod
    def is_relayout(comp: Computation, n: int) -> bool:
        """A reshape/transpose that changes the two minor (tiled) dimensions: a relayout copy on TPU,
        not a bitcast."""
        ins = comp.instructions[n]
        if ins.opcode not in ("reshape", "transpose") or not comp.operands[n]:
            return False
        src = comp.instructions[comp.operands[n][0]].shape
        a = [d for d in src.dims if d != 1][-2:]
        b = [d for d in ins.shape.dims if d != 1][-2:]
        return a != b or ins.opcode == "transpose" and tuple(ins.parsed.get("dimensions", ()))[-1:] != (ins.shape.rank - 1,)

    def duplicable_into(self, comp: Computation, p: int, u: int, fusible_users: set) -> bool:
        # XLA's fusion never takes a producer with other users into a dot/convolution's inputs.
        return u in fusible_users and comp.instructions[u].opcode not in ("dot", "convolution")

    def default_edge(self, space: "FusionSpace", e: int) -> bool:
        """InstructionFusion's choice (the base rule) where duplication is bounded: a producer with
        other users is not duplicated into a dot/convolution's inputs, nor at all when it ends a
        dot/convolution output fusion (the hero's work) or when ComputeGloballyUnfusible says so
        (its operands are bigger than its output and some user cannot fuse it). Without these, the
        residual and gradient-accumulation chains of a deep model were cloned into every kernel
        downstream (total kernel membership quadratic in depth)."""
        ci, p, c = space.edge_comp[e], space.edge_prod[e], space.edge_cons[e]
        comp = space.program.computations[ci]
        # XLA:TPU fuses only elementwise epilogues into dot/convolution output fusions: a relayout
        # reshape/transpose after a hero's elementwise chain starts a new kernel.
        if space.hero_upstream(ci, p) and self.is_relayout(comp, c):
            return False
        if len(comp.users[p]) > 1:
            info = _default_info(space, ci)
            if comp.instructions[c].opcode in ("dot", "convolution") or info.no_duplicate[p] \
                    or info.output_fused[p]:
                return False
        return super().default_edge(space, e)


class CpuRules(FusionRules):
    """XLA:CPU's CpuInstructionFusion: loop fusion of elementwise/data-movement/reduce ops, output
    fusion of a matrix-vector dot into its single `add` user; dots and convolutions stay library
    calls otherwise (a dot inside a kLoop fusion runs as a naive loop)."""

    name = "cpu"
    # Hand-made fusions reach XLA:CPU through jaxlib's StableHLO round trip, which drops the layouts
    # of fused instructions (docs/design.md, measured facts): transpose, concatenate and
    # dynamic-update-slice (and reshape/bitcast at some positions) inside such a fusion then crash the
    # CPU emitter ("Check failed: has_layout()"), and gather/map need
    # XLA passes (GatherSimplifier, MapInliner) that do not reach fusions. They stay unfused here.
    fusible = (ELEMENTWISE | LAYOUT | {"reduce", "dot"}) - {"gather", "map", "transpose", "concatenate",
                                                          "reshape", "bitcast"}
    heroes = frozenset({"dot"})
    inline_constants = False  # MLIR folds broadcast(constant) in fusions into layout-less constants

    @staticmethod
    def _matvec_dot(ins: HloInstruction) -> bool:
        return (ins.opcode == "dot" and ins.shape.rank <= 1 and not ins.parsed.get("lhs_batch_dims")
                and ins.shape.dtype not in ("c64", "c128"))

    @staticmethod
    def _reduces_minor(comp: Computation, r: int) -> bool:
        ins = comp.instructions[r]
        operand = comp.instructions[comp.operands[r][0]]
        if operand.shape.rank == 0:
            return True
        minor = operand.shape.minor_to_major()[0]
        return minor in ins.parsed.get("dimensions", ())

    @staticmethod
    def _scan_window(comp: Computation, n: int) -> bool:
        """A reduce-window that is a cumulative scan (a window as long as its dimension, padded by
        its length - 1): XLA:CPU's ReduceWindowRewriter rewrites it into reshapes and a tree of
        smaller windows, inside a fusion too, with shapes whose layouts its emitter then lacks
        (measured: `Check failed: input_shape.has_layout()` on a cumsum of f32[64] in a fusion)."""
        ins = comp.instructions[n]
        if ins.opcode != "reduce-window" or "window" not in ins.parsed:
            return False
        dims = comp.instructions[comp.operands[n][0]].shape.dims
        return any(w.size > 1 and w.size == d and w.pad_lo + w.pad_hi == w.size - 1
                   for w, d in zip(ins.parsed["window"], dims))

    @staticmethod
    def _loses_operand_layout(comp: Computation, p: int, c: int) -> bool:
        """Whether XLA:CPU lacks the layout of p's value when c reads it inside one fusion: in a
        computation that runs inside a while loop (body, condition, a branch called from one), the
        instructions of a hand-made fusion keep no layout through the StableHLO round trip, and a
        non-elementwise consumer indexes its operand through that layout (measured, jaxlib 0.10.2:
        broadcast, slice, dynamic-slice, pad, reverse and reduce of a value computed in the fusion,
        e.g. `u32[2] broadcast(u32[] subtract(...))` of jax.random's threefry rotations, abort with
        "Check failed: has_layout()"; the same fusions compile in the entry computation or a
        conditional branch outside loops, and elementwise chains or broadcasts of a parameter or
        scalar constant compile inside loops)."""
        return (comp.in_loop and not is_elementwise(comp, c)
                and not is_scalar_constant(comp.instructions[p]))

    def node_ok(self, comp: Computation, n: int) -> bool:
        # XLA:CPU never fuses reductions over major dimensions (and its simplifier rewrites them
        # inside hand-made fusions into shapes the verifier rejects). A bitcast-convert between
        # element types of different widths adds or drops a minor dimension: not elementwise for
        # XLA, and its loop emitter needs layouts the StableHLO round trip drops (measured: XLA:CPU
        # aborts in SymbolicMap or segfaults on `u64[2] bitcast-convert(u32[2,2])` in a fusion,
        # the rng_bit_generator key of jax.random's "rbg" implementation).
        ins = comp.instructions[n]
        if ins.opcode == "bitcast-convert":
            return not changes_bit_width(ins, comp.instructions[comp.operands[n][0]])
        if self._scan_window(comp, n):
            return False
        return ins.opcode != "reduce" or self._reduces_minor(comp, n)

    def _output_fusable(self, comp: Computation, p: int, c: int) -> bool:
        return (comp.instructions[c].opcode == "add" and self._matvec_dot(comp.instructions[p])
                and len(comp.users[p]) == 1)

    def edge_ok(self, comp: Computation, p: int, c: int) -> bool:
        pi, ci = comp.instructions[p], comp.instructions[c]
        if self._output_fusable(comp, p, c):
            return True
        if pi.opcode == "dot" or ci.opcode == "dot":
            return False
        if pi.opcode == "add" and any(self._output_fusable(comp, o, p) for o in comp.operands[p]):
            return False
        if ci.opcode == "reduce" and not self._reduces_minor(comp, c):
            return False
        if pi.opcode == "reduce" and not self._reduces_minor(comp, p):
            return False
        return not self._loses_operand_layout(comp, p, c)

    def kernel_ok(self, comp: Computation, root: int, members: Sequence[int]) -> bool:
        ins = comp.instructions
        if len(members) == 1:
            return True
        dots = [m for m in members if ins[m].opcode == "dot"]
        if dots:
            return len(members) == 2 and len(dots) == 1 and ins[root].opcode == "add"
        return _single_function_partition(comp, root, members) and _selects_ok(comp, members)

    kind_opcodes = ((frozenset({"dot"}), "kOutput"),)

    # Ops XLA:CPU compiles anywhere inside a hand-made kLoop fusion (measured with jaxlib 0.10.2,
    # see loop_fusion_compiles); a dot only of kernel inputs with one contracting dimension and no
    # batch dimensions, `dynamic-update-slice` only as
    # the root with its update and indices kernel inputs.
    _LOOP_SAFE = (ELEMENTWISE - {"map"}) | {"broadcast", "slice", "pad", "reverse", "iota", "dynamic-slice",
                                            "reduce", "reduce-window", "dot"}

    @classmethod
    def loop_fusion_compiles(cls, comp: Computation, root: int, members: Sequence[int]) -> bool:
        """Whether XLA:CPU compiles `members` as one kLoop fusion: what this machine can check of a
        configuration made for another target (whose kinds and contents XLA:CPU may not take).

        Measured on one-fusion modules (jaxlib 0.10.2, HLO -> StableHLO -> XLA:CPU): kInput is
        rejected, kOutput takes only dot + add; in kLoop, a transpose, concatenate, gather, sort,
        reshape, bitcast or width-changing bitcast-convert aborts the compiler ("has_layout()" and
        indexing checks; a reshape only at some positions, e.g. f32[32] reshape(f32[1,1,1,32])
        feeding a multiply), so do a dot of a value computed in the fusion or with several
        contracting or any batch dimensions; a dot of 16-bit operands or result multiplies or
        accumulates in 16 bits there (relative error 7e-4 to 6e-3 against the dot unfused); a
        dynamic-update-slice unless
        its update and indices are kernel inputs. A convolution in a kLoop fusion is XLA:CPU's
        naive loop at best: with batch_group_count > 1 (a depthwise convolution's weight
        gradient) it computes wrong numbers (max relative error 551 against the instruction
        unfused), and a 3x3 convolution of a 1x1 image segfaults the compiler; convolutions stay
        out. The emitter partition and select rules of `kernel_ok` apply as for `cpu` kernels."""
        ins = comp.instructions
        mset = set(members)
        for m in members:
            op = ins[m].opcode
            if op == "dynamic-update-slice":
                if m != root or any(o in mset for o in comp.operands[m][1:]):
                    return False
            elif op == "dot":
                p = ins[m].parsed
                if any(o in mset for o in comp.operands[m]) or p.get("lhs_batch_dims") \
                        or len(p.get("lhs_contracting_dims", ())) != 1 \
                        or min(DTYPE_BYTES.get(comp.instructions[x].shape.dtype, 4)
                               for x in (m, *comp.operands[m])) < 4:
                    return False
            elif op not in cls._LOOP_SAFE or not is_elementwise(comp, m) and op in ELEMENTWISE:
                return False
            elif op == "reduce" and not cls._reduces_minor(comp, m):
                return False
            elif cls._scan_window(comp, m):
                return False
            if any(o in mset and cls._loses_operand_layout(comp, o, m) for o in comp.operands[m]):
                return False
        return _single_function_partition(comp, root, members) and _selects_ok(comp, members)

    def wrap_single(self, ins: HloInstruction) -> bool:
        return ins.opcode in self.fusible and ins.opcode != "dot"

    def duplicable_into(self, comp: Computation, p: int, u: int, fusible_users: set) -> bool:
        # Reduce users never can: XLA:CPU 0.10.2 turns reductions into YNNPACK library fusions
        # (`__ynn_fusion`) before loop fusion; layout ops and convolutions XLA fuses although our
        # `cpu` rules keep them unfused (_XLA_LOOP_FUSIBLE_EXTRA).
        op = comp.instructions[u].opcode
        return op != "reduce" and (u in fusible_users or op in _XLA_LOOP_FUSIBLE_EXTRA)

    def default_edge(self, space: "FusionSpace", e: int) -> bool:
        """XLA:CPU's CpuInstructionFusion::ShouldFuse plus InstructionFusion's global rules:

        * output fusion of a matrix-vector dot into its single `add` user;
        * an expensive producer is not fused where the consumer's kernel would reuse its elements
          (ReusesOperandElements, through the fused path to the kernel root: a broadcast, pad value,
          dynamic-slice, ... anywhere downstream), nor duplicated into several kernels;
        * ComputeGloballyUnfusible: a producer with several users whose operands are bigger than
          its output (e.g. an add of two full arrays) is duplicated only if *every* user can fuse
          it; otherwise it stays a kernel of its own. Reduce users never can here: XLA:CPU 0.10.2
          turns reductions into YNNPACK library fusions (`__ynn_fusion`) before loop fusion.
        """
        ci, p, c = space.edge_comp[e], space.edge_prod[e], space.edge_cons[e]
        comp = space.program.computations[ci]
        pins, cins = comp.instructions[p], comp.instructions[c]
        if self._output_fusable(comp, p, c):
            return True
        info = _default_info(space, ci)
        if info.no_duplicate[p]:
            return False
        if len(comp.users[p]) > 1 and _duplication_cascades(space, ci, p) and not _duplication_is_faster(comp, p):
            return False
        if self.is_expensive(pins):
            # InstructionFusion: an expensive producer is never duplicated (FusionWouldDuplicate:
            # it has a user other than this consumer), even when every user could fuse it.
            if len(comp.users[p]) > 1 or not space.fusible_into_all_users(ci, p):
                return False
            if _operand_reuse(comp, c, p) or info.reused(c):
                return False
        return True


class _DefaultInfo:
    """Per-computation facts for the rules' default_edge (memoized on the space)."""

    def __init__(self, space: "FusionSpace", ci: int):
        comp = space.program.computations[ci]
        self.space, self.ci, self.comp = space, ci, comp
        ins = comp.instructions
        n = len(ins)
        self.no_duplicate = [False] * n
        for p in range(n):
            users = comp.users[p]
            if len(users) <= 1 or space.node_class[ci][p] != NODE_FUSIBLE or ins[p].shape.rank == 0:
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
            if comp.instructions[m].opcode in _TRANSPARENT:
                through = [u for u in comp.users[m] if not _operand_reuse(comp, u, m)] \
                    if all(not _operand_reuse(comp, u, m) for u in comp.users[m]) else [m]
                if through == [m]:
                    memo[m] = True
                    continue
            elif rules.is_expensive(comp.instructions[m]):
                through = []  # an expensive m is not fused where it would be reused
            else:
                through = [u for u in comp.users[m] if comp.instructions[u].opcode in _TRANSPARENT]
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
                if _operand_reuse(comp, u, m) or memo.get(u, False):
                    r = True
            memo[m] = r
        return memo[n]


def is_elementwise(comp: Computation, n: int) -> bool:
    """XLA's HloInstruction::IsElementwise for instruction n (a bitcast-convert that changes the
    element width changes the shape, so it is not)."""
    ins = comp.instructions[n]
    if ins.opcode == "bitcast-convert":
        return not changes_bit_width(ins, comp.instructions[comp.operands[n][0]])
    return ins.opcode in ELEMENTWISE


def _downstream(comp: Computation, n: int, mset) -> list[int]:
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
    ins = comp.instructions
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
            if any(d != dus and not is_elementwise(comp, d) for d in _downstream(comp, u, mset)):
                return False
    return True


# HloInstruction::IsOpElementwise(opcode): `map` is elementwise only per instance, not per opcode.
_XLA_ELEMENTWISE_OPCODES = ELEMENTWISE - {"map"}


def _single_function_partition(comp: Computation, root: int, members: Sequence[int]) -> bool:
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


def _selects_ok(comp: Computation, members: Sequence[int]) -> bool:
    """A `select` inside a hand-made fusion must not take its on_true value from another member
    when its predicate is a non-scalar kernel input.

    XLA's verifier re-infers the select's shape from the predicate's shape (which, as a fusion
    parameter, has a layout) and then reads `on_true.layout()`; after the StableHLO round trip
    inner instructions have none ("Check failed: has_layout()" in ShapeInference::InferSelectShape).
    The algebraic simplifier also rewrites select(not(p), a, b) into select(p, b, a), so with a
    fused `not` of an input as predicate, neither branch may be a member.
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
            if on_true in mset:
                return False
        elif ins[pred].opcode == "not" and (on_true in mset or on_false in mset):
            return False
    return True


# Users XLA:CPU's loop fusion can take a producer into although our `cpu` rules keep them unfused
# (emission through StableHLO): layout ops, and convolutions, whose operands XLA:CPU first copies
# into its preferred layout with a (fusible) transpose.
_XLA_LOOP_FUSIBLE_EXTRA = frozenset({"reshape", "bitcast", "transpose", "concatenate", "copy", "convolution"})


def _cpu_conv_relayouts(conv: HloInstruction, operand: int) -> bool:
    """Whether XLA:CPU copies a convolution's operand into its preferred layout first (a loop-fusible
    transpose a producer can join): the input unless batch-major and feature-minor (`b01f`), the
    kernel unless its two minor dimensions are input then output features (`01io`). Measured: a convolution in `b01f_01io->b01f` form reads its
    producers in place, and treating it as fusing them cloned residual chains into every kernel
    downstream (kernel membership quadratic in depth; XLA's own kernels stay linear)."""
    labels = conv.attrs.get("dim_labels", "")
    lhs, _, rest = labels.partition("_")
    rhs = rest.partition("->")[0]
    if not lhs or not rhs:
        return True
    if operand == 0:
        return not (lhs[0] == "b" and lhs[-1] == "f")
    return not rhs.endswith("io")
_TRANSPARENT = frozenset({"reshape", "bitcast", "transpose"})


# A copy of a shared value larger than this is not free to recompute (XLA:CPU duplicates values that
# fit its cache freely and asks its performance model about larger ones); a duplicated chain longer
# than _CASCADE_LIMIT instructions is bounded whatever its size.
_CASCADE_BYTES = 64 * 1024
_CASCADE_LIMIT = 32


def _duplication_cascades(space: "FusionSpace", ci: int, p: int) -> bool:
    """Whether duplicating the shared value p would clone other shared values with it: the chain a
    copy of p carries (its fusible, non-broadcast ancestors) reaches another value with several
    users while p is large (a residual or gradient-accumulation stream of full activations), or
    the chain is longer than _CASCADE_LIMIT instructions. Either way, cloning it into every user
    repeats the whole stream in every kernel downstream (kernel membership quadratic in depth)."""
    comp = space.program.computations[ci]
    ins, cls = comp.instructions, space.node_class[ci]
    large = not ins[p].shape.is_tuple and ins[p].shape.bytes >= _CASCADE_BYTES
    stack, seen = list(comp.operands[p]), {p}
    while stack:
        o = stack.pop()
        if o in seen or cls[o] != NODE_FUSIBLE or ins[o].opcode in ("broadcast", "iota", "constant"):
            continue
        if (large and len(comp.users[o]) > 1) or len(seen) > _CASCADE_LIMIT:
            return True
        seen.add(o)
        stack.extend(comp.operands[o])
    return False


def _duplication_is_faster(comp: Computation, p: int) -> bool:
    """XLA:CPU's FusionIntoAllUsersIsFaster, by bytes moved (applied where duplication cascades): fusing a producer into all of its k users
    makes each read its effective operands (broadcasts, iotas and scalar constants are recomputed,
    not read) instead of its output; keeping it a kernel costs one read of the operands, one write
    and k reads of its output. Without this bound, gradient-accumulation chains of a deep model
    (every add read by several relu masks and the next add) were cloned into every kernel
    downstream: kernel membership quadratic in depth, where XLA's own kernels stay linear."""
    ins = comp.instructions
    out_b = ins[p].shape.bytes if not ins[p].shape.is_tuple else 0
    in_b = sum(ins[o].shape.bytes for o in dict.fromkeys(comp.operands[p])
               if not ins[o].shape.is_tuple and ins[o].opcode not in ("broadcast", "iota")
               and not (ins[o].opcode == "constant" and ins[o].shape.rank == 0))
    k = len(comp.users[p])
    return k * in_b <= in_b + out_b + k * out_b


def _default_info(space: "FusionSpace", ci: int) -> _DefaultInfo:
    cache = space.__dict__.setdefault("_default_info", {})
    info = cache.get(ci)
    if info is None:
        info = cache[ci] = _DefaultInfo(space, ci)
    return info


# HloInstruction::OperandElementUse: ops that read an operand's elements at most once each
# (kUse / kUsePermutingElements); every other non-elementwise op reuses them (kReuse).
_PERMUTING = frozenset({"bitcast", "concatenate", "reshape", "reverse", "slice", "transpose", "gather",
                        "copy"})


def _operand_reuse(comp: Computation, c: int, p: int) -> bool:
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


def _reuses_operand_elements(ins: HloInstruction) -> bool:
    """XLA's ReusesOperandElements, approximately: ops that read an operand element more than once."""
    return ins.opcode in ("broadcast", "reduce-window", "convolution", "dot", "gather", "pad",
                          "concatenate") or (ins.opcode == "reduce" and False)


RULES: dict[str, FusionRules] = {"tpu": TpuRules(), "cpu": CpuRules()}


def get_rules(target: str) -> FusionRules:
    key = target.split("-")[0].lower() if target.lower().startswith("tpu") else target.lower()
    if key in ("gpu", "h100"):
        key = "tpu"  # GPU fusion rules are closer to TPU's (kInput reductions, one hero)
    try:
        return RULES[key]
    except KeyError:
        raise ValueError(f"unknown fusion target {target!r} (known: {', '.join(sorted(RULES))})") from None


# --------------------------------------------------------------------------------------------------
# Configurations


class FusionConfig:
    """One bit per fusible edge (bytes 0/1), plus how it was derived (for incremental updates)."""

    __slots__ = ("bits", "parent", "flips", "_key", "delta")

    def __init__(self, bits, parent: Optional["FusionConfig"] = None, flips: tuple = (),
                 delta: Optional[dict] = None):
        self.bits = bits if isinstance(bits, bytearray) else bytearray(np.asarray(bits, dtype=np.uint8).tobytes())
        self.parent = parent
        self.flips = flips
        self._key: Optional[bytes] = None
        self.delta = delta  # {(comp, root): members or None}: kernels changed relative to parent

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


class KernelRef:
    """A kernel inside a FusionState: computation index, root, members (topological) and its
    canonical hash, computed on first use (a search prices only some of the kernels it creates)."""

    __slots__ = ("comp", "root", "members", "_hash", "valid", "space")

    def __init__(self, comp: int, root: int, members: tuple, hash: Optional[str], valid: bool,
                 space: Optional["FusionSpace"] = None):
        self.comp = comp
        self.root = root
        self.members = members
        self._hash = hash
        self.valid = valid
        self.space = space

    @property
    def hash(self) -> str:
        if self._hash is None:
            self._hash = self.space.kernel_hash(self.comp, self.root, self.members)
        return self._hash

    def __repr__(self) -> str:
        return f"KernelRef(comp={self.comp}, root={self.root}, n={len(self.members)}, hash={self.hash})"


class FusionSpace:
    """The fusion search space of a program on a target (`Space` interface for strategies)."""

    @gc_paused()
    def __init__(self, program: Program, target: str = "tpu"):
        self.program = program
        self.target = target
        self.rules = get_rules(target)
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
        if self.node_class[ci][n] < NODE_OPAQUE:
            return False
        if self.pinned[ci][n]:
            return True
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

    # ---- canonical kernel hashing
    @property
    def signatures(self) -> list[list[int]]:
        if self._sigs is None:
            from autotune.compiler.kernel import instruction_signature, shape_signature
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
            from autotune.compiler.analysis import instruction_cost
            module = self.program.module
            self._node_costs = [[instruction_cost(i, c.hlo, module) for i in c.instructions]
                                for c in self.program.computations]
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
        """External operands (non-members, scalar constants excluded) in canonical first-use order."""
        comp = self.program.computations[ci]
        mset = set(members)
        inputs: dict[int, None] = {}
        seen: set[int] = set()
        stack: list[tuple[int, int]] = [(root, 0)]
        while stack:
            n, k = stack[-1]
            olist = comp.operands[n]
            if k < len(olist):
                stack[-1] = (n, k + 1)
                o = olist[k]
                if o in mset:
                    if o not in seen:
                        seen.add(o)
                        stack.append((o, 0))
                elif not is_scalar_constant(comp.instructions[o]):
                    inputs.setdefault(o)
                continue
            stack.pop()
        return list(inputs)

    def make_ref(self, bits: bytearray, ci: int, root: int) -> KernelRef:
        mem = self.members(bits, ci, root)
        comp = self.program.computations[ci]
        return KernelRef(ci, root, mem, None, self.rules.kernel_ok(comp, root, mem), self)

    # ---- Space interface
    @gc_paused()
    def default(self) -> FusionConfig:
        """The target compiler's heuristic (greedy, as XLA's InstructionFusion), made valid."""
        if self._default is None:
            bits = bytearray(self.rules.default_edge(self, e) for e in range(self.n_edges))
            self._default = self.repair(FusionConfig(bits))
        return self._default

    def unfused(self) -> FusionConfig:
        return FusionConfig(bytearray(self.n_edges))

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
            # Reverse topological order: consumers first, as XLA's fusion pass visits them.
            for n in range(len(comp) - 1, -1, -1):
                if not self.is_root(bits, ci, n):
                    continue
                if self._kernel_ok_fast(comp, ci, n, self.members(bits, ci, n)):
                    continue
                # Cutting the first offending edge and walking again from the root replays the same
                # walk up to that edge; under a monotone rule the walk may go on past the cut instead
                # (a legal kernel's sub-walks are legal), one walk for all cuts.
                self._cut(bits, ci, n, every=rules.monotone(comp, n))
                while not rules.kernel_ok(comp, n, self.members(bits, ci, n)):
                    self._cut(bits, ci, n, every=False)
        return FusionConfig(bits)

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
        from autotune.compiler.kernel import Kernel
        st = self.state(cfg)
        return [Kernel.from_ref(self, ref) for ref in st.refs()]


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
        """State of `cfg`, whose parent is this state's configuration, changed by `cfg.flips`."""
        sp = self.space
        if cfg.delta is not None and len(cfg.flips) == 1:
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


__all__ = ["FusionSpace", "FusionConfig", "FusionState", "KernelRef", "FusionRules", "TpuRules",
           "CpuRules", "get_rules", "ELEMENTWISE", "TRANSCENDENTAL", "EXPENSIVE", "FREE"]
