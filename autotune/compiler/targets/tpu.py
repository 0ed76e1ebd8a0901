"""The TPU targets (`tpu` = TPU v3-like, `tpu-v2`): TensorCore specs from published numbers, XLA-TPU-like
fusion rules, the simulator as default evaluator.

Published numbers are cited next to each constant. Where no number is published (vector-unit and
transcendental throughput, fixed per-kernel and per-DMA overheads on TPUs) the value is an
estimate, marked as such; the simulator calibrates its own constants against the TPU v3
measurements in data/tpugraphs/ and treats these as starting points.
"""
from __future__ import annotations

from typing import Callable, Sequence

from autotune.compiler.opcodes import ELEMENTWISE, LAYOUT, is_elementwise
from autotune.compiler.program import Computation
from autotune.compiler.targets.base import GiB, MiB, Target, TargetSpec, register_spec, register_target
from autotune.compiler.targets.fusion_rules import FusionRules, SpaceView, default_facts, downstream, in_place_ok

__all__ = ["TPU_V2", "TPU_V3", "TpuRules", "TPU", "TPU_V2_TARGET"]

# ------------------------------------------------------------------------------------------------
# TPU v2 / v3 (per TensorCore)
#
# Sources:
#  [JYK20] N. P. Jouppi, D. H. Yoon, G. Kurian, S. Li, N. Patil, J. Laudon, C. Young, D. Patterson,
#          "A Domain-Specific Supercomputer for Training Deep Neural Networks", CACM 63(7), 2020:
#          TPUv2 chip = 2 TensorCores, 1 MXU (128x128) per core, 700 MHz, 46 TFLOPS bf16, 16 GiB HBM,
#          700 GB/s; TPUv3 = 2 cores, 2 MXUs per core, 940 MHz, 123 TFLOPS bf16, 32 GiB HBM,
#          900 GB/s; 32 MiB on-chip memory per chip; vector unit of 8 sublanes x 128 lanes.
#  [GCTPU] Google Cloud TPU documentation, "TPU v2" / "TPU v3" and "System architecture"
#          (cloud.google.com/tpu/docs/v3, .../system-architecture-tpu-vm): v3 chip 2 TensorCores,
#          2 MXUs each, 123 TFLOPS bf16 per chip, HBM2 32 GiB at 900 GBps; an MXU is 128 x 128
#          multiply-accumulators, 16K MACs per cycle, bf16 inputs with fp32 accumulation.
#          (The v2 page gives 45 TFLOPS per chip, 16 GiB HBM; its bandwidth figure, 600 GBps, is
#          lower than the paper's 700 GB/s. We use the paper.)
# Per-core rates below are chip rates divided by the 2 TensorCores: each core has its own HBM
# stack and runs its own XLA program, so one kernel sees one core.
# Check: v2 1 MXU x 128 x 128 MACs x 2 flops x 700 MHz = 22.9 TFLOPS/core (x2 = 45.9 per chip);
#        v3 2 MXUs x 128 x 128 x 2 x 940 MHz = 61.6 TFLOPS/core (x2 = 123 per chip).
# ------------------------------------------------------------------------------------------------
def _tpu(name: str, clock_hz: float, mxus: int, hbm_chip_bytes_per_s: float, hbm_chip_bytes: int,
         ici_link_bits_per_s: float, description: str) -> TargetSpec:
    width = 128
    matrix = mxus * width * width * 2 * clock_hz
    # Vector unit: 8 sublanes x 128 lanes [JYK20]. Ops per lane per cycle are not published; we
    # assume 2 f32 ALU ops/lane/cycle (estimate). Transcendentals (exp, log, tanh, ...) go through a
    # narrower unit: estimate a quarter of the lane rate.
    lanes = 8 * 128
    return TargetSpec(
        name=name, kind="tpu", clock_hz=clock_hz, num_cores=2, mxu_count=mxus, mxu_width=width,
        # f32 dots at XLA's DEFAULT precision take one bf16 pass on the MXU, so the same rate as bf16
        # (Precision.HIGHEST takes 6 passes).
        peak_flops=matrix, peak_flops_bf16=matrix,
        vector_flops=lanes * 2 * clock_hz,  # estimate (see above)
        transcendental_per_s=lanes * clock_hz / 4,  # estimate
        hbm_bytes_per_s=hbm_chip_bytes_per_s / 2, hbm_bytes=hbm_chip_bytes // 2,
        # 32 MiB on-chip memory per chip [JYK20] -> 16 MiB vector memory (VMEM) per core.
        scratchpad_bytes=16 * MiB,
        vector_shape=(8, 128),  # vregs are 8 sublanes x 128 lanes of 32 bits [JYK20]
        kernel_launch_s=2e-6,  # estimate: per-kernel sync and pipeline fill; calibrated by simulator
        dma_setup_s=5e-7,  # estimate: fixed cost per HBM<->VMEM DMA; calibrated by simulator
        description=description,
        sources=("Jouppi et al., A Domain-Specific Supercomputer for Training Deep Neural Networks, "
                 "CACM 63(7), 2020", "Google Cloud TPU docs: TPU v2, TPU v3, System architecture"),
        # 4 ICI links per chip [JYK20], shared by its 2 cores: 4 x link rate / 8 bits / 2.
        interconnect_bytes_per_s=4 * ici_link_bits_per_s / 8 / 2,
        # PCIe Gen3 x16 to the host, ~15.75 GB/s per chip, shared by 2 cores (estimate).
        host_link_bytes_per_s=15.75e9 / 2,
    )


# ICI link rates [JYK20]: 496 Gbit/s (v2) and 656 Gbit/s (v3) per link.
TPU_V2 = _tpu("tpu-v2", 700e6, 1, 700e9, 16 * GiB, 496e9,
              "TPU v2-like TensorCore: 1 MXU 128x128 at 700 MHz, 8 GiB HBM at 350 GB/s, 16 MiB VMEM")
TPU_V3 = _tpu("tpu-v3", 940e6, 2, 900e9, 32 * GiB, 656e9,
              "TPU v3-like TensorCore: 2 MXUs 128x128 at 940 MHz, 16 GiB HBM at 450 GB/s, 16 MiB VMEM")


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
            down = downstream(comp, heroes[0], mset)
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

    def default_edge(self, space: "SpaceView", e: int) -> bool:
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
            info = default_facts(space, ci)
            if comp.instructions[c].opcode in ("dot", "convolution") or info.no_duplicate[p] \
                    or info.output_fused[p]:
                return False
        return super().default_edge(space, e)


register_spec("tpu-v2", lambda: TPU_V2, aliases=("tpuv2", "tpu_v2", "v2"))
register_spec("tpu-v3", lambda: TPU_V3, aliases=("tpu", "tpuv3", "tpu_v3", "v3"))

_TPU_RULES = TpuRules()
TPU = register_target(Target(
    name="tpu", description="TPU v3-like TensorCore, XLA-TPU-like fusion (one hero per kernel)",
    spec_factory=lambda: TPU_V3, fusion_rules=_TPU_RULES, evaluators=("sim",),
    aliases=("tpu-v3", "tpuv3", "tpu_v3")))
TPU_V2_TARGET = register_target(Target(
    name="tpu-v2", description="TPU v2-like TensorCore, XLA-TPU-like fusion (one hero per kernel)",
    spec_factory=lambda: TPU_V2, fusion_rules=_TPU_RULES, evaluators=("sim",), aliases=("tpuv2", "tpu_v2")))
