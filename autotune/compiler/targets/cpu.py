"""The `cpu` target: XLA:CPU on this machine. Its spec is measured (targets/host.py), its fusion rules
are CpuInstructionFusion's as far as hand-made fusions survive jaxlib's StableHLO round trip, its
kernels and programs are measured by the xla evaluator and emitted for XLA:CPU with fusion off."""
from __future__ import annotations

from typing import Sequence

from autotune.compiler.hlo import DTYPE_BYTES, HloInstruction
from autotune.compiler.opcodes import ELEMENTWISE, LAYOUT, NODE_FUSIBLE, changes_bit_width, is_elementwise, is_scalar_constant
from autotune.compiler.program import Computation
from autotune.compiler.targets.base import CompilerOption, Target, register_spec, register_target
from autotune.compiler.targets.fusion_rules import (XLA_LOOP_FUSIBLE_EXTRA, FusionRules, SpaceView, default_facts,
                                                    operand_reuse, reshape_broadcasts_ok, selects_ok,
                                                    single_function_partition)
from autotune.compiler.targets.host import host_cpu_spec

__all__ = ["CpuRules", "CPU", "CPU_COMPILER_OPTIONS"]


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
        return (single_function_partition(comp, root, members) and selects_ok(comp, members)
                and reshape_broadcasts_ok(comp, root, members))

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
        return (single_function_partition(comp, root, members) and selects_ok(comp, members)
                and reshape_broadcasts_ok(comp, root, members))

    def wrap_single(self, comp: Computation, n: int) -> bool:
        # A lone instruction becomes a fusion only where XLA:CPU compiles it as one (a bf16 select
        # of a non-scalar predicate does not: selects_ok).
        ins = comp.instructions[n]
        return ins.opcode in self.fusible and ins.opcode != "dot" and selects_ok(comp, [n])

    def duplicable_into(self, comp: Computation, p: int, u: int, fusible_users: set) -> bool:
        # Reduce users never can: XLA:CPU 0.10.2 turns reductions into YNNPACK library fusions
        # (`__ynn_fusion`) before loop fusion; layout ops and convolutions XLA fuses although our
        # `cpu` rules keep them unfused (XLA_LOOP_FUSIBLE_EXTRA).
        op = comp.instructions[u].opcode
        return op != "reduce" and (u in fusible_users or op in XLA_LOOP_FUSIBLE_EXTRA)

    def duplication_bounded(self, space: SpaceView, ci: int, p: int) -> bool:
        """FusionIntoAllUsersIsFaster where a copy would carry other shared values (see below)."""
        comp = space.program.computations[ci]
        return _duplication_cascades(space, ci, p) and not _duplication_is_faster(comp, p)

    def default_edge(self, space: "SpaceView", e: int) -> bool:
        """XLA:CPU's CpuInstructionFusion::ShouldFuse plus InstructionFusion's global rules:

        * output fusion of a matrix-vector dot into its single `add` user;
        * an expensive producer is not fused where the consumer's kernel would reuse its elements
          (ReusesOperandElements, through the fused path to the kernel root: a broadcast, pad value,
          dynamic-slice, ... anywhere downstream), nor duplicated into several kernels;
        * ComputeGloballyUnfusible: a producer with several users whose operands are bigger than
          its output (e.g. an add of two full arrays) is duplicated only if *every* user can fuse
          it; otherwise it stays a kernel of its own. Reduce users never can here: XLA:CPU 0.10.2
          turns reductions into YNNPACK library fusions (`__ynn_fusion`) before loop fusion;
        * FusionIntoAllUsersIsFaster, where a copy would carry other shared values
          (`duplication_bounded`, part of the computation's `no_duplicate` facts).
        """
        ci, p, c = space.edge_comp[e], space.edge_prod[e], space.edge_cons[e]
        comp = space.program.computations[ci]
        pins = comp.instructions[p]
        if self._output_fusable(comp, p, c):
            return True
        info = default_facts(space, ci)
        if info.no_duplicate[p]:
            return False
        if self.is_expensive(pins):
            # InstructionFusion: an expensive producer is never duplicated (FusionWouldDuplicate:
            # it has a user other than this consumer), even when every user could fuse it.
            if len(comp.users[p]) > 1 or not space.fusible_into_all_users(ci, p):
                return False
            if operand_reuse(comp, c, p) or info.reused(c):
                return False
        return True


# A copy of a shared value larger than this is not free to recompute (XLA:CPU duplicates values that
# fit its cache freely and asks its performance model about larger ones); a duplicated chain longer
# than _CASCADE_LIMIT instructions is bounded whatever its size.
_CASCADE_BYTES = 64 * 1024
_CASCADE_LIMIT = 32


def _duplication_cascades(space: SpaceView, ci: int, p: int) -> bool:
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
    """XLA:CPU's FusionIntoAllUsersIsFaster, by bytes moved (applied where duplication cascades):
    fusing a producer into all of its k users makes each read its effective operands (broadcasts,
    iotas and scalar constants are recomputed, not read) instead of its output; keeping it a kernel
    costs one read of the operands, one write and k reads of its output. Without this bound,
    gradient-accumulation chains of a deep model were cloned into every kernel downstream: kernel
    membership quadratic in depth, where XLA's own kernels stay linear."""
    ins = comp.instructions
    out_b = ins[p].shape.bytes if not ins[p].shape.is_tuple else 0
    in_b = sum(ins[o].shape.bytes for o in dict.fromkeys(comp.operands[p])
               if not ins[o].shape.is_tuple and ins[o].opcode not in ("broadcast", "iota")
               and not (ins[o].opcode == "constant" and ins[o].shape.rank == 0))
    k = len(comp.users[p])
    return k * in_b <= in_b + out_b + k * out_b


# The options of XLA:CPU (jaxlib 0.10.2) that changed the speed of real programs beyond the timing
# noise, each measured alone against XLA's default compile on 12 programs with its outputs checked
# against the default's (docs/lab-notes/2026-11-29-xla-cpu-options.md, benchmarks/xla_cpu_options.py).
# None helps every program: each is a per-program choice. Every value's outputs stayed as accurate as
# the default's, but all of them changed some program's outputs (not bit for bit): changes_numerics.
# Left out, measured: vector width (128 loses, 512 nothing), max ISA AVX2, LLVM's expensive passes,
# the FAST_RUNTIME preset, tiling propagation, the codegen split, the schedulers, single-threaded Eigen,
# copy insertion's region analysis, flush-to-zero, platform-dependent math, fast min/max, strict 16-bit
# dot/convolution math, excess precision (no effect or slower); fast-math alone and its other honor_*
# parts (no effect); the other YNNPACK lists (wins that did not survive a second timing under another
# load); XNNPACK's switches (no XNNPACK fusion in this jaxlib); oneDNN dot fusions (SIGILL on 5 of 12
# programs, slower on the rest). Not in this jaxlib at all: custom matmul tiling, loop unrolling.
_YNN = "LIBRARY_FUSION_TYPE_"
CPU_COMPILER_OPTIONS: tuple[CompilerOption, ...] = (
    CompilerOption(
        "xla_backend_optimization_level", (3, 2, 1), changes_numerics=True,
        doc="LLVM's optimization level of XLA:CPU's generated code. -O2/-O1 ran 7% (inception_small_infer), "
            "7-16% (gnn_medium_train) and 23-28% (lstm_medium_infer) faster than -O3, twice each; -O1 "
            "was 5% slower on vae_medium_train; outputs differ by <= 6e-7."),
    CompilerOption(
        "xla_cpu_use_fusion_emitters", (True, False), changes_numerics=True,
        doc="Off: XLA:CPU's legacy elemental IR emitter instead of its MLIR fusion emitters. 25-33% faster "
            "on inception_small_infer (twice), slower on 7 of 12 programs (up to 31%, gnn_medium_train)."),
    CompilerOption(
        "xla_cpu_opt_preset", ("CPU_OPT_PRESET_DEFAULT", "CPU_OPT_PRESET_FAST_COMPILE"), changes_numerics=True,
        doc="XLA:CPU's FAST_COMPILE preset: 21-24% faster on lstm_medium_infer (twice), slower on "
            "inception_small_infer; changes the HLO pipeline (outputs within 4e-3 on a bf16 program)."),
    CompilerOption(
        "xla_cpu_experimental_ynn_fusion_type",
        (f"{_YNN}INDIVIDUAL_DOT,{_YNN}INDIVIDUAL_CONVOLUTION,{_YNN}REDUCE",
         f"{_YNN}INDIVIDUAL_DOT,{_YNN}INDIVIDUAL_CONVOLUTION"), changes_numerics=True,
        doc="What YNNPACK takes as library fusions (default: single dots, convolutions, reductions). "
            "Reductions left to XLA's loop emitter: 8-9% faster on resnet_small_infer (twice, at loads 3.6 "
            "and 6.3), 5% slower on mlp_mixer_small_train and hf_gpt2_train_adamw. Library choices are "
            "load-sensitive on 2 shared cores."),
    CompilerOption(
        "xla_cpu_fast_math_honor_nans", (True, False), changes_numerics=True,
        requires=(("xla_cpu_enable_fast_math", True),),
        doc="Fast-math that may assume no NaNs: 34-36% faster on wavernn_medium_infer and 9-14% on "
            "haiku_resnet_bf16_infer (twice each, outputs bit-identical there); outputs within 3e-5 of the "
            "default's elsewhere. Fast-math with every honor_* part on had no effect."),
)

register_spec("cpu", host_cpu_spec, aliases=("host",))

CPU = register_target(Target(
    name="cpu", description="this machine's CPU through XLA:CPU (jaxlib)", spec_factory=host_cpu_spec,
    fusion_rules=CpuRules(), evaluators=("xla", "xla-inprogram"), xla_cpu_emission=True, aliases=("host",),
    compiler_options=CPU_COMPILER_OPTIONS))
