"""Emission: a whole program with one `fusion` instruction per kernel of any fusion configuration,
how to compile it so its fusions are the kernels that run, and its XLA:CPU-checkable form.

The emission policy is the target's (`Target.xla_cpu_emission`, the rules' `wrap_single` and
`inline_constants`). Kernels themselves (`Kernel`, `KernelRef`, a kernel's standalone module) live in
autotune/compiler/fusion/kernels.py, signatures in autotune/compiler/signature.py; both are
re-exported here for `from autotune.compiler.emission import Kernel`.
"""
from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass
from typing import Any, Callable, Optional

import numpy as np

from autotune.compiler.fusion import FusionConfig, FusionSpace, Kernel, KernelRef
from autotune.compiler.fused_folds import fold_fused_body, layout_safe_selects, literal_splat
from autotune.compiler.gc_pause import gc_paused
from autotune.compiler.hlo import HloComputation, HloInstruction, HloModule, Shape, SliceDim
from autotune.compiler.opcodes import NODE_FUSIBLE, is_scalar_constant
from autotune.compiler.signature import instruction_signature, shape_signature
from autotune.compiler.targets import CpuRules
from autotune.compiler.targets.fusion_rules import cpu_normalized_float

# --------------------------------------------------------------------------------------------------
# Whole-program emission


# How to compile an emitted (fused) program on XLA:CPU so that it runs exactly our kernels
# (docs/design.md): `hardware.xla.compile_hlo(text, **EMITTED_CPU_COMPILE_OPTIONS)`.
# * disable_fusion: XLA's fusion passes would otherwise fuse the instructions we left outside
#   fusions (reshapes, transposes, dots' neighbours) into our kernels, so the measured program would
#   no longer be the configuration. With it, XLA:CPU only wraps the remaining lone ops into
#   single-op `wrapped_*` loop fusions and keeps dots as library calls.
# * reshape-mover disabled: it treats a hand-made fusion of elementwise ops as an elementwise
#   instruction and sinks a degenerate reshape through it by cloning the fusion with a new shape but
#   the old fused computation -> "Fused computation shape ... is not equal to the fusion shape".
# XLA's passes that decide fusion (what `disable_fusion` turns off).
XLA_FUSION_PASSES = ("fusion", "priority-fusion", "multi_output_fusion", "horizontal-loop-fusion",
                     "sibling-fusion", "fusion-merger")
EMITTED_CPU_COMPILE_OPTIONS = {"disable_fusion": True,
                               "xla_flags": {"xla_disable_hlo_passes": "reshape-mover"}}


@gc_paused()
def emit_fused_module(space: "FusionSpace", cfg: "FusionConfig", metadata: bool = True,
                      kind: Optional[str] = None,
                      keep: Optional[Callable[["KernelRef"], bool]] = None) -> HloModule:
    """The program with one `fusion` instruction per kernel (kinds from the target's rules).

    Kernel roots keep their names as the fusion instruction, so nothing outside changes; members
    are cloned into each fused computation that holds them. Single-instruction kernels are wrapped
    too where the target's compiler would otherwise re-fuse them (XLA:CPU keeps hand-made fusions).

    For checking a configuration on another compiler than its target's: `kind` gives every fusion
    that kind (kinds say how to generate code, not what is computed), and kernels for which
    `keep(ref)` is False are emitted as their plain instructions. Elementwise kernels of one element
    (scalar arithmetic, f32[1] optimizer state) are always emitted plain: XLA's simplifier turns
    the values around them into reshapes that add or drop size-1 dims, and its ReshapeMover would
    then clone such a fusion with a new shape but its old body (rejected by XLA's verifier).
    """

    program = space.program
    module = program.module
    state = space.state(cfg)
    used = {i.name for c in module.computations for i in c.instructions} | {c.name for c in module.computations}
    counter = itertools.count()

    def fresh(base: str) -> str:
        while True:
            cand = f"{base}.{next(counter)}"
            if cand not in used:
                used.add(cand)
                return cand

    by_comp: dict[int, dict[int, "KernelRef"]] = {}
    for ref in state.refs():
        by_comp.setdefault(ref.comp, {})[ref.root] = ref
    new_comps: dict[str, list[HloComputation]] = {}  # computation name -> fused comps to put before it
    replaced: dict[str, HloComputation] = {}
    by_xla_cpu = space.compilation_target.xla_cpu_emission or kind is not None
    for ci, comp in enumerate(program.computations):
        roots = by_comp.get(ci, {})
        members_anywhere: set[int] = set()
        plain: set[int] = set()  # members of kernels emitted unfused (`keep`)
        members_of: dict[int, tuple] = {}  # kernel root -> the members its fusion holds
        for n, ref in roots.items():
            if (keep is None or keep(ref)) and not _one_element_elementwise(comp, ref):
                outside = _upcasts_at_inputs(comp, ref) if by_xla_cpu else set()
                members_of[n] = tuple(m for m in ref.members if m not in outside)
                members_anywhere.update(members_of[n])
                plain.update(outside)
            else:
                plain.update(ref.members)
        out: list[HloInstruction] = []
        fused_here: list[HloComputation] = []
        insts = comp.instructions
        for n, ins in enumerate(insts):
            ref = roots.get(n)
            if ref is None or n in plain:
                if n not in plain and n in members_anywhere and space.node_class[ci][n] == NODE_FUSIBLE:
                    continue  # lives only inside fusions
                out.append(ins.copy())
                continue
            members = members_of[n]
            if len(members) == 1 and (space.node_class[ci][n] != NODE_FUSIBLE
                                      or not space.rules.wrap_single(comp, n)):
                out.append(ins.copy())
                continue
            inputs = space.kernel_inputs(ci, n, members)
            if not space.rules.inline_constants:
                mset = set(members)
                inputs += list(dict.fromkeys(o for m in members for o in comp.operands[m]
                                             if o not in mset and is_scalar_constant(insts[o])))
            fname = fresh(f"fused_{ins.name}")
            body: list[HloInstruction] = []
            local: dict[int, str] = {}
            same = _same_constant_inputs(insts, comp.operands, inputs) if by_xla_cpu else {}
            inputs = [i for i in inputs if i not in same]
            for k, i in enumerate(inputs):
                local[i] = fresh(f"param_{k}")
                body.append(HloInstruction(local[i], "parameter", insts[i].shape, [], parameter_number=k))
            local.update((i, local[r]) for i, r in same.items())
            mset = set(members)
            for m in members:
                for o in comp.operands[m]:
                    if o not in mset and o not in local and is_scalar_constant(insts[o]):
                        local[o] = fresh(insts[o].name)
                        c = insts[o].copy(name=local[o], is_root=False)
                        body.append(c)
            for m in members:
                local[m] = fresh(insts[m].name)
            for m in members:
                c = insts[m].copy(name=local[m], operands=[local[o] for o in comp.operands[m]],
                                  is_root=(m == n))
                if not metadata:
                    c.attrs.pop("metadata", None)
                body.append(c)
            operand_names = [insts[i].name for i in inputs]
            if by_xla_cpu:
                body, ones = expand_logistic(body, len(inputs), fresh)
                for dtype, one in ones.items():  # its scalar 1, a kernel input (CpuRules.inline_constants)
                    out.append(HloInstruction(one, "constant", Shape(dtype, (), None, ()), [], literal="1"))
                    operand_names.append(one)
            body, kept = fold_fused_body(body)
            operand_names = [operand_names[k] for k in kept]
            inputs = [inputs[k] for k in kept if k < len(inputs)]
            if next(b for b in body if b.is_root).opcode == "parameter":  # folded to an input: no fusion
                src = insts[inputs[0]]
                if by_xla_cpu and src.opcode in ("reshape", "transpose") and src.shape.dims == ins.shape.dims \
                        and src.shape.dtype == ins.shape.dtype:
                    # the rearrange itself, again: XLA's simplifier drops a copy, and ReshapeMover would
                    # then sink the reshape through the fusions reading it, unseen by
                    # sink_rearranges_through_fusions (a haiku ResNet's mean over a 1x1 image, /1)
                    out.append(src.copy(name=ins.name, is_root=ins.is_root, shape=ins.shape))
                    continue
                out.append(HloInstruction(ins.name, "copy", ins.shape, [src.name],
                                          {"metadata": ins.attrs["metadata"]} if metadata and "metadata" in ins.attrs
                                          else {}, is_root=ins.is_root))
                continue
            body = layout_safe_selects(body, fresh)
            fcomp = HloComputation(fname, body)
            fused_here.append(fcomp)
            attrs = {"kind": kind or space.rules.fusion_kind(comp, n, members), "calls": fname}
            if metadata and "metadata" in ins.attrs:
                attrs["metadata"] = ins.attrs["metadata"]
            out.append(HloInstruction(ins.name, "fusion", ins.shape, operand_names, attrs,
                                      {"calls": (fname,)}, is_root=ins.is_root))
        if space.compilation_target.xla_cpu_emission or kind is not None:  # compiled by XLA:CPU
            out = _wrap_transposes_into_reshapes(out, fused_here, fresh)
        root_name = comp.hlo.root.name
        for i in out:
            i.is_root = i.name == root_name
        replaced[comp.name] = HloComputation(comp.name, out, comp.hlo.is_entry, dict(comp.hlo.trailer))
        new_comps[comp.name] = fused_here
    for name, comp_new in replaced.items():
        fused = {c.name: c for c in new_comps[name]}
        if by_xla_cpu:
            canonicalize_gathers(comp_new, fresh)
        sink_rearranges_through_fusions(comp_new, fused, fresh)
    computations: list[HloComputation] = []
    for c in module.computations:
        computations.extend(new_comps.get(c.name, []))
        computations.append(replaced.get(c.name, c))
    attrs = {k: v for k, v in module.attrs.items() if k != "is_scheduled"}
    return HloModule(module.name, computations, attrs, module.tables if metadata else "", module.percent,
                     module.filename)


def expand_logistic(body: list[HloInstruction], n_params: int,
                    fresh: Callable[[str], str]) -> tuple[list[HloInstruction], dict[str, str]]:
    """`body` with each `logistic(x)` written as XLA's LogisticExpander writes it, 1 / (1 + exp(-x)),
    and {element type: name of the scalar 1 it needs} (a new parameter each, numbered from
    `n_params`; the caller passes a constant 1 of that type as the fusion's operand).

    XLA:CPU expands `logistic` before fusion and its loop emitter has none ("Unsupported elementwise
    operation ... logistic"), so a hand-made fusion holding one is refused; expanded as XLA itself
    does, the fusion computes the bits the original's compile computes."""
    if not any(b.opcode == "logistic" for b in body):
        return body, {}
    ones: dict[str, str] = {}   # dtype -> name of the top-level constant
    params: dict[str, str] = {}  # dtype -> name of its parameter inside the body
    extra: list[HloInstruction] = []
    out: list[HloInstruction] = []
    for b in body:
        if b.opcode != "logistic":
            out.append(b)
            continue
        dtype, shape = b.shape.dtype, b.shape
        if dtype not in params:
            ones[dtype] = fresh(f"logistic_one_{dtype}")
            params[dtype] = fresh(f"param_{n_params + len(extra)}")
            extra.append(HloInstruction(params[dtype], "parameter", Shape(dtype, (), None, ()), [],
                                        parameter_number=n_params + len(extra)))
        meta = {"metadata": b.attrs["metadata"]} if "metadata" in b.attrs else {}
        one = HloInstruction(fresh(f"{b.name}.one"), "broadcast", shape, [params[dtype]],
                             {"dimensions": "{}"}, {"dimensions": ()})
        neg = HloInstruction(fresh(f"{b.name}.negate"), "negate", shape, [b.operands[0]], dict(meta))
        exp = HloInstruction(fresh(f"{b.name}.exp"), "exponential", shape, [neg.name], dict(meta))
        den = HloInstruction(fresh(f"{b.name}.add"), "add", shape, [one.name, exp.name], dict(meta))
        out += [one, neg, exp, den, b.copy(opcode="divide", operands=[one.name, den.name])]
    last = max(k for k, b in enumerate(out) if b.opcode == "parameter") if extra and any(
        b.opcode == "parameter" for b in out) else -1
    return out[:last + 1] + extra + out[last + 1:], ones  # parameters stay in their numbers' order


_WIDE_FLOATS = frozenset({"f32", "f64"})
_NARROW_FLOATS = frozenset({"bf16", "f16"})


def _constant_value_key(insts: list, operands: list, i: int) -> Optional[tuple]:
    """What XLA's constant folding and CSE make of input `i` when it is a constant value: equal keys,
    one instruction (a constant, or a broadcast of a scalar constant, by splat value or literal)."""
    ins = insts[i]
    if ins.shape.is_tuple:
        return None
    if ins.opcode == "constant":
        v = literal_splat(ins)
        return ("splat", ins.shape.dtype, ins.shape.dims, repr(v)) if v is not None \
            else ("literal", ins.shape.dtype, ins.shape.dims, ins.literal)
    if ins.opcode == "broadcast" and operands[i] and is_scalar_constant(insts[operands[i][0]]):
        v = literal_splat(insts[operands[i][0]])
        return ("splat", ins.shape.dtype, ins.shape.dims, repr(v)) if v is not None else None
    return None


def _same_constant_inputs(insts: list, operands: list, inputs: list) -> dict:
    """{input: the earlier input with the same constant value} among a kernel's inputs.

    XLA's constant folding and CSE merge equal constants (`f32[1] broadcast(f32[] 0)` and
    `f32[1] constant({0})`), which leaves a hand-made fusion with the same operand twice; XLA:CPU's
    instruction fusion then aborts when it fuses that constant into the fusion
    ("std::out_of_range: raw_hash_map<>::at", mujoco-mjx's contact solver). One parameter per
    value avoids it."""
    first: dict = {}
    same: dict = {}
    for i in inputs:
        key = _constant_value_key(insts, operands, i)
        if key is None:
            continue
        if key in first:
            same[i] = first[key]
        else:
            first[key] = i
    return same


def _upcasts_at_inputs(comp: Any, ref: "KernelRef") -> set:
    """Members of a kernel emitted for XLA:CPU that stay outside its fusion: converts from a 16-bit
    float to f32/f64 of a value computed outside the kernel (not a parameter or constant), unless
    the convert is the root of a larger kernel. XLA:CPU computes 16-bit convolutions, dots and
    elementwise chains in f32 and, with its default ``xla_allow_excess_precision``, cancels the
    round trip ``convert(convert(f32 result, bf16), f32)``; a fusion boundary between the 16-bit
    value and its upcast forces the rounding (measured: jmp's bf16 compute with f32 batch norm in
    a haiku ResNet train step, `f32 multiply(convert(bf16 convolution), ...)` fused, max relative
    error 2.79 against the original compiled by XLA; 0 under strict precision). Outside, the
    convert meets its producer and XLA keeps the excess precision as it does for the original."""
    insts = comp.instructions
    out = set()
    for m in ref.members:
        ins = insts[m]
        if ins.opcode != "convert" or (m == ref.root and len(ref.members) > 1):
            continue
        o = comp.operands[m][0]
        if o in ref.members or ins.shape.dtype not in _WIDE_FLOATS:
            continue
        src = insts[o]
        if src.shape.dtype in _NARROW_FLOATS and src.opcode not in ("parameter", "constant"):
            out.add(m)
    return out


def _one_element_elementwise(comp: Any, ref: "KernelRef") -> bool:
    """A kernel of elementwise instructions computing one element from at least one value that is
    not a constant (a kernel of constants only is folded by XLA into a constant, which XLA:CPU
    then fails to pass to the fusions reading it: an out_of_range abort, donated_adam_train).
    Broadcasts, reshapes and bitcasts of one element count as elementwise here: XLA's simplifier
    turns them into reshapes without a layout inside the fusion, and XLA:CPU aborts on those
    ("Check failed: output_shape.has_layout() u32[1]" in ReshapeIsBitcast: the threefry counter
    `u32[1] add(broadcast(c), x)` of flax/HF dropout in train mode)."""
    insts = comp.instructions
    root = insts[ref.root]
    if root.shape.is_tuple or root.shape.elements > 1 or any(
            insts[m].opcode not in _XLA_ELEMENTWISE and insts[m].opcode not in _ONE_ELEMENT_SHAPE_OPS
            for m in ref.members):
        return False
    members = set(ref.members)
    return any(o not in members and insts[o].opcode != "constant" for m in ref.members for o in comp.operands[m])


def _wrap_transposes_into_reshapes(out: list[HloInstruction], fused_here: list[HloComputation],
                                   fresh: Callable[[str], str]) -> list[HloInstruction]:
    """Each plain transpose that a reshape or bitcast reads, as a one-instruction kLoop fusion.

    XLA:CPU with its fusion pass disabled (EMITTED_CPU_COMPILE_OPTIONS) miscompiles
    `reshape(transpose(x))`: layout assignment makes the transpose a layout-only bitcast plus a copy
    into the reshape's layout, and the algebraic simplifier after layout assignment then drops the
    copy with the permutation (measured, jaxlib 0.10.2: `u32[4] reshape(u32[2,2] transpose(a))`
    returns a's elements unpermuted; the XLA fusion pass normally fuses the copy first). That
    dropped the rbg dropout key's transpose (wrong random bits; relative error 8.8e-3 on its
    gradients, the original program compiled with the same options too). Inside a fusion the
    transpose reads a parameter, whose layout XLA:CPU keeps, and is computed as written.
    Not for bf16 and 8-bit floats: XLA:CPU's float normalization computes such a transpose in f32,
    through converts inside the fusion that have no layout, and aborts ("Check failed:
    input_shape.has_layout()", jax.nn.dot_product_attention in bf16); plain, a bf16 transpose read by
    a reshape keeps its permutation (checked with the emission's compile options)."""
    by_name = {i.name: i for i in out}
    readers = {n for i in out if i.opcode in ("reshape", "bitcast") for n in i.operands}
    result = []
    for ins in out:
        if ins.opcode != "transpose" or ins.name not in readers or cpu_normalized_float(ins.shape.dtype):
            result.append(ins)
            continue
        operand = by_name[ins.operands[0]]
        fname = fresh(f"fused_{ins.name}")
        pname = fresh("param_0")
        body = [HloInstruction(pname, "parameter", operand.shape, [], parameter_number=0),
                ins.copy(name=fresh(ins.name), operands=[pname], is_root=True)]
        fused_here.append(HloComputation(fname, body))
        attrs = {"kind": "kLoop", "calls": fname}
        if "metadata" in ins.attrs:
            attrs["metadata"] = ins.attrs["metadata"]
        result.append(HloInstruction(ins.name, "fusion", ins.shape, [operand.name], attrs, {"calls": (fname,)},
                                     is_root=ins.is_root))
    return result


# --------------------------------------------------------------------------------------------------
# Reshape/transpose sinking (XLA's ReshapeMover, applied to the fusions we emit)

# HloInstruction::IsElementwise for the opcodes a fused computation can hold (a fusion is elementwise
# when every fused instruction is; bitcast-convert only between equal bit widths).
_XLA_ELEMENTWISE = frozenset("""
abs add and atan2 cbrt ceil clamp compare complex constant convert copy cosine count-leading-zeros
divide erf exponential exponential-minus-one floor imag is-finite log log-plus-one logistic map
maximum minimum multiply negate not or popcnt power real reduce-precision remainder
round-nearest-afz round-nearest-even rsqrt select shift-left shift-right-arithmetic
shift-right-logical sign sine sqrt stochastic-convert subtract tan tanh xor rng
""".split())


# Shape-only ops that move one element (`_one_element_elementwise`).
_ONE_ELEMENT_SHAPE_OPS = frozenset({"broadcast", "reshape", "bitcast"})


@dataclass(frozen=True)
class _Rearrange:
    """A value that is (or that XLA's passes before the mover will make) a reshape or transpose of
    a value of shape `src_dims`: ReshapeMover's "rearrange" operand."""

    kind: str            # "reshape" or "transpose"
    src_dims: tuple
    dims: tuple
    perm: tuple = ()
    virtual: bool = False  # a dot/broadcast XLA rewrites into a reshape (no reshape in our text)

    def equivalent(self, other: "_Rearrange") -> bool:
        return (self.kind, self.src_dims, self.dims, self.perm) == (other.kind, other.src_dims, other.dims, other.perm)

    @property
    def trivial(self) -> bool:
        return self.src_dims == self.dims if self.kind == "reshape" else self.perm == tuple(range(len(self.perm)))


def _canonical_dot_dims(ins: HloInstruction, by_name: dict) -> Optional[tuple]:
    """The output dims of XLA's DotDecomposer canonical form of a dot ([batch..., M, N], M and N the
    products of the free dimensions, omitted when 1; size-1 batch dims dropped as
    BatchDotSimplification does; a canonical dot's size-1 dims dropped as AlgebraicSimplifier
    does), or None when XLA keeps the dot as it is."""
    p = ins.parsed
    lhs, rhs = by_name[ins.operands[0]].shape, by_name[ins.operands[1]].shape
    lb, rb = tuple(p.get("lhs_batch_dims", ())), tuple(p.get("rhs_batch_dims", ()))
    lc, rc = tuple(p.get("lhs_contracting_dims", ())), tuple(p.get("rhs_contracting_dims", ()))
    canonical = (len(lc) == 1 and len(lb) + 2 >= lhs.rank and len(rb) + 2 >= rhs.rank
                 and (lb or lc) and lb == tuple(range(len(lb))) and rb == tuple(range(len(rb)))
                 and all(lhs.dims[d] != 1 for d in lb))
    if canonical:  # AlgebraicSimplifier's RemoveDegenerateDimensionFromDot: size-1 dims dropped
        out = tuple(d for d in ins.shape.dims if d != 1)
        return out if out != ins.shape.dims else None
    m = n = 1
    for d in range(lhs.rank):
        if d not in lb and d not in lc:
            m *= lhs.dims[d]
    for d in range(rhs.rank):
        if d not in rb and d not in rc:
            n *= rhs.dims[d]
    out = tuple(lhs.dims[d] for d in lb if lhs.dims[d] != 1) + ((m,) if m != 1 else ()) + ((n,) if n != 1 else ())
    return out if out != ins.shape.dims else None


def _canonical_convolution(ins: HloInstruction) -> Optional[_Rearrange]:
    """XLA:CPU's ConvCanonicalization (before the simplification pipeline, entry computation only):
    a convolution whose dimension numbers are not Eigen's (input NHWC, kernel HWIO, output NHWC)
    is rewritten as a convolution with output [batch, spatial..., feature] followed by a transpose
    to the original output order (torch_xla's `bf01_oi01->bf01`). That transpose, or None."""
    lab = ins.parsed.get("dim_labels")
    if lab is None or ins.shape.is_tuple or not 1 <= len(lab.out_spatial) <= 3:
        return None
    canonical = (lab.lhs_batch == 0 and tuple(lab.lhs_spatial) == tuple(range(1, len(lab.lhs_spatial) + 1))
                 and tuple(lab.kernel_spatial) == tuple(range(len(lab.kernel_spatial)))
                 and lab.kernel_input_feature == len(lab.kernel_spatial)
                 and lab.kernel_output_feature == len(lab.kernel_spatial) + 1
                 and lab.lhs_feature == len(lab.lhs_spatial) + 1 and lab.out_batch == 0
                 and tuple(lab.out_spatial) == tuple(range(1, len(lab.out_spatial) + 1)))
    if canonical:
        return None
    rank = ins.shape.rank
    order = [lab.out_batch, *lab.out_spatial, lab.out_feature]  # canonical position -> output dim
    inverse = [0] * rank
    for k, d in enumerate(order):
        inverse[d] = k
    perm = tuple(inverse)  # output dim i = canonical dim perm[i]
    src = tuple(ins.shape.dims[d] for d in order)
    return _Rearrange("transpose", src, ins.shape.dims, perm, virtual=True)


def _rearrange_of(ins: HloInstruction, by_name: dict, entry: bool = False) -> Optional[_Rearrange]:
    """What ReshapeMover will see `ins` as: a rearrange, or None (`entry`: `ins` is in the entry
    computation, where XLA:CPU canonicalizes convolutions)."""
    if ins.shape.is_tuple:
        return None
    if ins.opcode == "convolution":
        return _canonical_convolution(ins) if entry else None
    if ins.opcode == "reshape":
        src = by_name[ins.operands[0]]
        inner = _rearrange_of(src, by_name) if src.opcode in ("dot", "gather", "broadcast") else None
        if inner is not None and inner.virtual and inner.kind == "reshape" and inner.src_dims == ins.shape.dims:
            return None  # reshape(reshape(canonical dot/gather/...)): XLA folds it to the canonical value
        return _Rearrange("reshape", src.shape.dims, ins.shape.dims)
    if ins.opcode == "transpose":
        return _Rearrange("transpose", by_name[ins.operands[0]].shape.dims, ins.shape.dims,
                          tuple(ins.parsed.get("dimensions", ())))
    if ins.opcode == "dot":
        canon = _canonical_dot_dims(ins, by_name)
        return _Rearrange("reshape", canon, ins.shape.dims, virtual=True) if canon is not None else None
    if ins.opcode == "gather" and len(ins.operands) == 2:
        # GatherSimplifier: a gather of one slice with collapsed dims becomes a gather of the whole
        # slice (its slice_sizes) and a reshape dropping the collapsed size-1 dims.
        idx = by_name[ins.operands[1]].shape
        sizes = tuple(ins.parsed.get("slice_sizes", ()))
        if (not idx.is_tuple and idx.elements == len(ins.parsed.get("start_index_map", ())) and sizes
                and ins.parsed.get("collapsed_slice_dims") and not ins.parsed.get("operand_batching_dims")
                and sizes != ins.shape.dims and math.prod(sizes) == ins.shape.elements):
            return _Rearrange("reshape", sizes, ins.shape.dims, virtual=True)
        # Every other gather that GatherExpander leaves (trip count > 1, not a broadcast) and that is
        # not in GatherSimplifier's canonical form is rewritten there: a gather of [N, slice_sizes...]
        # (N the product of the index batch dims), the collapsed dims dropped and the batch dims
        # restored by reshapes (folded into one), transposes around it when start_index_map is not
        # the identity or the offset dims are not trailing (left alone here). Scalar gathers too
        # (mujoco-mjx: `f32[2] gather(x, s32[2,1])` becomes `reshape(f32[2,1] gather)`).
        ivd = ins.parsed.get("index_vector_dim", idx.rank)
        offs = tuple(ins.parsed.get("offset_dims", ()))
        smap = tuple(ins.parsed.get("start_index_map", ()))
        collapsed = tuple(ins.parsed.get("collapsed_slice_dims", ()))
        rank = ins.shape.rank
        operand = by_name[ins.operands[0]].shape
        batch = tuple(d for k, d in enumerate(idx.dims) if k != ivd) if not idx.is_tuple else ()
        canonical = (idx.rank == 2 and ivd == 1 and smap == tuple(range(len(smap))) and not collapsed
                     and bool(offs) and offs[0] == 1 and offs[-1] == len(offs))
        if (sizes and not idx.is_tuple and math.prod(batch) > 1 and sizes != operand.dims and not canonical
                and not ins.parsed.get("operand_batching_dims") and smap == tuple(range(len(smap)))
                and offs == tuple(range(rank - len(offs), rank))):
            src = (math.prod(batch),) + sizes
            if src != ins.shape.dims and math.prod(src) == ins.shape.elements:
                return _Rearrange("reshape", src, ins.shape.dims, virtual=True)
        return None
    if ins.opcode == "broadcast" and ins.operands:
        # AlgebraicSimplifier turns a broadcast that only inserts size-1 dims into a reshape.
        src = by_name[ins.operands[0]].shape
        dims = tuple(ins.parsed.get("dimensions", ()))
        if src.rank and list(dims) == sorted(dims) and src.elements == ins.shape.elements \
                and tuple(ins.shape.dims[d] for d in dims) == src.dims:
            return _Rearrange("reshape", src.dims, ins.shape.dims, virtual=True)
    return None


def _laid_out(dtype: str, dims: tuple) -> Shape:
    """An array shape with XLA's default (descending) layout written out: every shape the emission
    makes carries a layout, as the ones it copies do (a scalar's is implied: XLA reads `f32[]{}`
    as a syntax error)."""
    layout = ",".join(str(d) for d in reversed(range(len(dims)))) if dims else None
    return Shape(dtype, tuple(dims), layout, (False,) * len(dims))


def _gather_canonical_form(ins: HloInstruction, by_name: dict) -> Optional[str]:
    """How XLA:CPU's simplification pipeline rewrites a gather: "dynamic-slice" (GatherExpander: one
    slice, trip count 1), "gather" (GatherSimplifier: a gather of [N, slice_sizes...] followed by
    reshapes), or None (left alone, or rewritten with transposes or batching dims not modelled)."""
    if len(ins.operands) != 2 or ins.shape.is_tuple:
        return None
    p = ins.parsed
    idx = by_name[ins.operands[1]].shape
    operand = by_name[ins.operands[0]].shape
    sizes = tuple(p.get("slice_sizes", ()))
    smap = tuple(p.get("start_index_map", ()))
    offs = tuple(p.get("offset_dims", ()))
    collapsed = tuple(p.get("collapsed_slice_dims", ()))
    ivd = p.get("index_vector_dim", idx.rank)
    rank = ins.shape.rank
    batching = tuple(p.get("operand_batching_dims", ()))
    if batching:  # BatchedGatherScatterNormalizer first: batch indices (iotas) lead the index vectors
        if ivd != idx.rank - 1:
            return None
        smap = batching + smap
    if (idx.is_tuple or not sizes or sizes == operand.dims
            or smap != tuple(range(len(smap))) or offs != tuple(range(rank - len(offs), rank))
            or ivd < idx.rank - 1 or 0 in sizes):
        return None
    batch = math.prod(d for k, d in enumerate(idx.dims) if k != ivd)
    if batching and batch == 1:
        return None
    if batch == 1:
        return "dynamic-slice" if sizes != ins.shape.dims else None
    canonical = (idx.rank == 2 and ivd == 1 and not collapsed and bool(offs) and offs[0] == 1
                 and offs[-1] == len(offs))
    return None if canonical or (batch,) + sizes == ins.shape.dims else "gather"


def canonicalize_gathers(comp: HloComputation, fresh) -> None:
    """Write every plain gather of `comp` in the form XLA:CPU's simplification pipeline gives it
    (`_gather_canonical_form`), followed by a reshape to its shape under its name.

    GatherExpander and GatherSimplifier run after the pipeline's algebraic simplifier and before
    its ReshapeMover: in that round a fusion reading a gather reads a fresh reshape, which the mover
    sinks through it by cloning the fusion with a new shape but its old body ("Fused computation
    shape ... is not equal to the fusion shape": mujoco-mjx's `f32[2] gather(x, s32[2,1])`), and a
    fusion we sink below such a reshape would be moved back. With the canonical form written out,
    `sink_rearranges_through_fusions` sees real reshapes, and XLA has nothing left to rewrite."""
    by_name = {i.name: i for i in comp.instructions}
    out: list[HloInstruction] = []
    changed = False
    for ins in comp.instructions:
        form = _gather_canonical_form(ins, by_name) if ins.opcode == "gather" else None
        if form is None:
            out.append(ins)
            continue
        changed = True
        p = ins.parsed
        x, idx = by_name[ins.operands[0]], by_name[ins.operands[1]]
        sizes = tuple(p["slice_sizes"])
        smap = tuple(p.get("start_index_map", ()))
        k = len(smap)
        itype = idx.shape.dtype
        if form == "dynamic-slice":
            flat = HloInstruction(fresh(f"{idx.name}.vector"), "reshape", _laid_out(itype, (k,)), [idx.name])
            out.append(flat)
            starts = []
            for d in range(x.shape.rank):
                if d < k:
                    sl = HloInstruction(fresh(f"{idx.name}.{d}"), "slice", _laid_out(itype, (1,)), [flat.name],
                                        {"slice": "{[" + f"{d}:{d + 1}" + "]}"}, {"slice": (SliceDim(d, d + 1, 1),)})
                    sc = HloInstruction(fresh(f"{idx.name}.start{d}"), "reshape", Shape(itype, (), None, ()), [sl.name])
                    out += [sl, sc]
                    starts.append(sc.name)
                else:
                    z = HloInstruction(fresh(f"{ins.name}.zero"), "constant", Shape(itype, (), None, ()), [],
                                       literal="0")
                    out.append(z)
                    starts.append(z.name)
            canon = HloInstruction(fresh(f"{ins.name}.canonical"), "dynamic-slice", _laid_out(x.shape.dtype, sizes),
                                   [x.name, *starts], {"dynamic_slice_sizes": "{" + ",".join(map(str, sizes)) + "}"},
                                   {"dynamic_slice_sizes": sizes})
        else:
            n = ins.shape.elements // math.prod(sizes)
            ind, ind_dims = idx.name, idx.shape.dims
            batching = tuple(p.get("operand_batching_dims", ()))
            if batching:  # as BatchedGatherScatterNormalizer: an iota per batching dim before the indices
                ivd = p.get("index_vector_dim", idx.shape.rank)
                one = _laid_out(itype, idx.shape.dims[:ivd] + (1,))
                parts = []
                for bd in p.get("start_indices_batching_dims", ()):
                    io = HloInstruction(fresh(f"{idx.name}.batch{bd}"), "iota", one, [],
                                        {"iota_dimension": str(bd)}, {"iota_dimension": bd})
                    out.append(io)
                    parts.append(io.name)
                k = len(batching) + k
                cat = HloInstruction(fresh(f"{idx.name}.batched"), "concatenate",
                                     _laid_out(itype, idx.shape.dims[:ivd] + (k,)), [*parts, idx.name],
                                     {"dimensions": "{" + str(ivd) + "}"}, {"dimensions": (ivd,)})
                out.append(cat)
                ind, ind_dims = cat.name, cat.shape.dims
            if ind_dims != (n, k):
                r = HloInstruction(fresh(f"{idx.name}.indices"), "reshape", _laid_out(itype, (n, k)), [ind])
                out.append(r)
                ind = r.name
            offs = tuple(range(1, len(sizes) + 1))
            attrs = {"offset_dims": "{" + ",".join(map(str, offs)) + "}", "collapsed_slice_dims": "{}",
                     "start_index_map": "{" + ",".join(map(str, range(k))) + "}", "index_vector_dim": "1",
                     "slice_sizes": "{" + ",".join(map(str, sizes)) + "}"}
            if "indices_are_sorted" in ins.attrs:
                attrs["indices_are_sorted"] = ins.attrs["indices_are_sorted"]
            parsed = {"offset_dims": offs, "collapsed_slice_dims": (), "start_index_map": tuple(range(k)),
                      "index_vector_dim": 1, "slice_sizes": sizes}
            canon = HloInstruction(fresh(f"{ins.name}.canonical"), "gather", _laid_out(x.shape.dtype, (n, *sizes)),
                                   [x.name, ind], attrs, parsed)
        out.append(canon)
        out.append(HloInstruction(ins.name, "reshape", ins.shape, [canon.name], is_root=ins.is_root))
    if changed:
        comp.instructions = out
        comp._by_name = None


def _trivially_rearrangeable(ins: HloInstruction, users: dict) -> bool:
    """ReshapeMover::CanTriviallyRearrange for a non-rearrange operand, in its most permissive form
    (every option on): sinking more than XLA would is exact; sinking less leaves XLA a fusion to
    break."""
    if ins.opcode == "constant" or (ins.opcode == "rng" and users.get(ins.name, 0) == 1):
        return True
    if ins.opcode == "broadcast":
        dims = tuple(ins.parsed.get("dimensions", ()))
        return list(dims) == sorted(dims)
    return False


def _rearranges_trivial_value(ins: HloInstruction, by_name: dict, users: dict) -> bool:
    """A real reshape/transpose of a constant or broadcast: AlgebraicSimplifier folds it into a
    constant or broadcast (trivially rearrangeable) before the mover looks."""
    return ins.opcode in ("reshape", "transpose") and _trivially_rearrangeable(by_name[ins.operands[0]], users)


def _movable(ins: HloInstruction, fused: dict) -> bool:
    """XLA's IsElementwise for an emitted instruction (a fusion: all its instructions are)."""
    if ins.opcode == "fusion":
        body = fused.get(ins.parsed["calls"][0])
        return body is not None and all(b.opcode == "parameter" or b.opcode in _XLA_ELEMENTWISE
                                        for b in body.instructions)
    # A plain elementwise op: XLA moves it too, which can make a fusion movable next.
    return (ins.opcode in _XLA_ELEMENTWISE and ins.opcode not in ("rng", "copy", "constant")
            and bool(ins.operands) and not ins.shape.is_tuple)


def _rearranged_literal(literal: Optional[str], dims: tuple, src_dims: tuple, rearrange: "_Rearrange") -> Optional[str]:
    """The literal of a constant of shape `dims` rewritten for shape `src_dims` (the inverse of the
    reshape/transpose `rearrange`), or None when its elements cannot be read (an elided literal)."""
    if literal is None:
        return None
    values = re.findall(r"[^{},\s]+", literal)
    if len(values) != math.prod(dims):
        return None
    arr = np.array(values, dtype=object).reshape(dims)
    if rearrange.kind == "reshape":
        arr = arr.reshape(src_dims)
    else:  # dims = transpose(src, perm): src = transpose(dims, inverse perm)
        inverse = [0] * len(rearrange.perm)
        for k, d in enumerate(rearrange.perm):
            inverse[d] = k
        arr = arr.transpose(inverse)

    def render(a: Any) -> str:
        return "{" + ", ".join(render(x) for x in a) + "}" if isinstance(a, np.ndarray) else str(a)
    return render(arr) if arr.ndim else str(arr.item())


def _fold_reshape_chains(comp: HloComputation) -> None:
    """As AlgebraicSimplifier does before the ReshapeMover looks: a reshape of a reshape reads the
    first one's operand, and a reshape to its operand's own shape is that operand (unused
    reshapes left behind are dropped). Sinking sees the rearranges XLA will see."""
    by_name: dict = {}
    alias: dict = {}
    out = []
    for ins in comp.instructions:
        if any(o in alias for o in ins.operands):
            ins = ins.copy(operands=[alias.get(o, o) for o in ins.operands])
        if ins.opcode == "reshape" and ins.operands:
            src = by_name[ins.operands[0]]
            if src.opcode == "reshape" and src.operands:
                ins = ins.copy(operands=[src.operands[0]])
                src = by_name[src.operands[0]]
            if not ins.is_root and not src.shape.is_tuple and src.shape.dims == ins.shape.dims \
                    and src.shape.dtype == ins.shape.dtype:
                alias[ins.name] = src.name
                continue
        by_name[ins.name] = ins
        out.append(ins)
    used = {o for i in out for o in i.operands}
    comp.instructions = [i for i in out if i.opcode != "reshape" or i.is_root or i.name in used]
    comp._by_name = None


# A kernel that `sink_rearranges_through_fusions` moves keeps its root's name on the reshape/transpose
# after it; the moved fusion itself is named `<root>.sunk.<n>`.
SUNK_SUFFIX = ".sunk"
_SUNK_NAME = re.compile(r"^(.+)" + re.escape(SUNK_SUFFIX) + r"\.\d+$")


def emitted_kernel_root(name: str) -> str:
    """The kernel root an instruction of an emitted program computes: its own name, or for a fusion
    moved by `sink_rearranges_through_fusions` (`<root>.sunk.<n>`), that root's name."""
    m = _SUNK_NAME.match(name)
    return m.group(1) if m else name


def sink_rearranges_through_fusions(comp: HloComputation, fused: dict, fresh) -> None:
    """Rewrite every elementwise-only fusion (and plain elementwise instruction) whose operands are
    equivalent reshapes/transposes (or trivially rearrangeable values) as XLA's ReshapeMover would,
    to a fixed point: it computes on the rearranges' input shape and one reshape/transpose follows.

    XLA's mover treats an elementwise-only fusion as an elementwise instruction, clones it with the
    new shape but keeps its fused computation, and the verifier then rejects the module ("Fused
    computation shape ... is not equal to the fusion shape"): emitting the moved form ourselves
    leaves it nothing to move. The passes that run before the mover count: a dot that XLA's
    DotDecomposer canonicalizes and a broadcast that only inserts size-1 dims become reshapes
    there, so they count as reshapes here (the moved fusion reads an explicit reshape of them,
    which XLA folds). Exact: elementwise ops commute with rearranges of all their operands.
    `fused` maps fused-computation names to the computations emitted for `comp` (updated in place).
    """
    changed = True
    rounds = 0
    while changed and rounds < 64:  # each round sinks one layer of rearranges; real chains are short
        changed = False
        rounds += 1
        _fold_reshape_chains(comp)
        by_name = {i.name: i for i in comp.instructions}
        users: dict[str, int] = {}
        for i in comp.instructions:
            for o in dict.fromkeys(i.operands):
                users[o] = users.get(o, 0) + 1
        out: list[HloInstruction] = []
        for ins in comp.instructions:
            if not _movable(ins, fused):
                out.append(ins)
                continue
            ops = [by_name[o] for o in ins.operands]
            arr = [_rearrange_of(o, by_name, comp.is_entry) for o in ops]
            first = next((a for a, o in zip(arr, ops) if a is not None and not a.trivial and (
                a.virtual or not _trivially_rearrangeable(by_name[o.operands[0]], users))), None)
            if first is None or not all((a is not None and a.equivalent(first))
                                        or (a is None and _trivially_rearrangeable(o, users))
                                        or (a is not None and (a.trivial or _rearranges_trivial_value(o, by_name, users)))
                                        for a, o in zip(arr, ops)):
                out.append(ins)
                continue
            src = Shape("f32", first.src_dims)  # dims only: each value keeps its element type
            dims = ins.shape.dims
            new_ops = []
            for o, a in zip(ops, arr):
                if a is not None and a.equivalent(first) and (not a.virtual or o.opcode == "broadcast"):
                    new_ops.append(o.operands[0])  # (a size-1-dims broadcast reads the same elements)
                    continue
                if o.shape.dims != dims:  # a scalar bound of clamp/select: shape-independent
                    new_ops.append(o.name)
                    continue
                # Inverse rearrange of a dot/constant/broadcast/rng operand, as a new instruction.
                new_shape = _laid_out(o.shape.dtype, src.dims)
                if first.kind == "reshape":
                    inv = HloInstruction(fresh(f"{o.name}.unreshaped"), "reshape", new_shape, [o.name])
                else:
                    inverse = [0] * len(first.perm)
                    for k, d in enumerate(first.perm):
                        inverse[d] = k
                    inv = HloInstruction(fresh(f"{o.name}.untransposed"), "transpose", new_shape, [o.name],
                                         {"dimensions": "{" + ",".join(map(str, inverse)) + "}"},
                                         {"dimensions": tuple(inverse)})
                out.append(inv)
                new_ops.append(inv.name)
            body = fused.get(ins.parsed["calls"][0]) if ins.opcode == "fusion" else None
            literals = {}
            for b in body.instructions if body is not None else ():
                if b.opcode == "constant" and not b.shape.is_tuple and b.shape.dims == dims:
                    literals[b.name] = _rearranged_literal(b.literal, dims, src.dims, first)
            if None in literals.values():  # a constant whose literal cannot be rewritten: left as is
                out.append(ins)
                continue
            for b in body.instructions if body is not None else ():
                # elementwise: every value but scalar bounds has the fusion's dims
                if not b.shape.is_tuple and b.shape.dims == dims:
                    b.shape = _laid_out(b.shape.dtype, src.dims)
                    if b.name in literals:
                        b.literal = literals[b.name]
            moved = ins.copy(name=fresh(f"{ins.name}{SUNK_SUFFIX}"), operands=new_ops, is_root=False,
                             shape=_laid_out(ins.shape.dtype, src.dims))
            out.append(moved)
            if first.kind == "reshape":
                out.append(HloInstruction(ins.name, "reshape", ins.shape, [moved.name], is_root=ins.is_root))
            else:
                out.append(HloInstruction(ins.name, "transpose", ins.shape, [moved.name],
                                          {"dimensions": "{" + ",".join(map(str, first.perm)) + "}"},
                                          {"dimensions": first.perm}, is_root=ins.is_root))
            changed = True
        comp.instructions = out
        comp._by_name = None


def compile_flags_text() -> str:
    """EMITTED_CPU_COMPILE_OPTIONS as the XLA_FLAGS value a user passes to run an emitted program."""
    passes = [*XLA_FUSION_PASSES, *EMITTED_CPU_COMPILE_OPTIONS["xla_flags"]["xla_disable_hlo_passes"].split(",")]
    return "--xla_disable_hlo_passes=" + ",".join(dict.fromkeys(passes))


def emit_fused_text(space: "FusionSpace", cfg: "FusionConfig", metadata: bool = True,
                    kind: Optional[str] = None, keep: Optional[Callable[["KernelRef"], bool]] = None,
                    header: bool = False) -> str:
    """`emit_fused_module` as HLO text; `header` starts it with comment lines (which XLA's parser
    skips) saying what it holds and how to compile it so that its fusions are the kernels that run."""
    text = emit_fused_module(space, cfg, metadata, kind, keep).to_text()
    if not header:
        return text
    n = len(space.state(cfg).refs())
    lines = [f"// autotune: {space.program.name or 'program'} for target {space.rules.name}: "
             f"{n} kernels, {cfg.count()} of {space.n_edges} fusible edges fused.",
             "// Each fusion is one tuned kernel (elementwise kernels of one element are left as plain",
             "// instructions). Compiled with XLA's default options XLA re-decides fusion",
             "// around them; to run exactly these kernels (as autotune measured them), compile with",
             f'// XLA_FLAGS="{compile_flags_text()}"']
    return "\n".join(lines) + "\n" + text


@dataclass
class CpuCheckable:
    """A configuration rendered for XLA:CPU (`cpu_checkable`): the text, and how many of the
    configuration's multi-instruction kernels it holds as fusions."""

    text: str
    fusions_checked: int
    fusions_total: int


def cpu_checkable(space: "FusionSpace", cfg: "FusionConfig") -> CpuCheckable:
    """A configuration of any target emitted so that XLA:CPU (this machine) can run it.

    For the `cpu` target: the emitted program itself. For others: every fusion kLoop (kinds say how
    to generate code, not what is computed); a kernel XLA:CPU cannot compile as one loop fusion
    (`CpuRules.loop_fusion_compiles`) is split into single-instruction kernels (its inner edges
    unfused), and single instructions XLA:CPU cannot compile as a loop fusion (or lone dots, which
    XLA:CPU's loop emitter sums in another order than its dot library: errors of 1e-2 after a
    decomposition) are emitted plain.
    Emitting the split kernels' elementwise ops plain would let XLA's simplifier and ReshapeMover
    rewrite them into reshapes around the checked fusions, which the real emission never has."""
    refs = space.state(cfg).refs()
    multi = [r for r in refs if len(r.members) > 1]
    if space.compilation_target.xla_cpu_emission:
        comps = space.program.computations
        fused = [r for r in multi if not _one_element_elementwise(comps[r.comp], r)]
        return CpuCheckable(emit_fused_text(space, cfg, metadata=False), len(fused), len(multi))
    comps = space.program.computations

    def compiles(r) -> bool:
        return CpuRules.loop_fusion_compiles(comps[r.comp], r.root, r.members)

    bits = bytearray(cfg.bits)
    checked = 0
    for r in multi:
        if compiles(r):
            checked += not _one_element_elementwise(comps[r.comp], r)
            continue
        mset = set(r.members)
        for m in r.members:
            for e, p in space.in_edges[r.comp][m]:
                if p in mset:
                    bits[e] = 0
    def keep(r) -> bool:  # a lone dot stays a library call: a loop-emitted dot sums in another order
        return compiles(r) and not (len(r.members) == 1 and comps[r.comp].instructions[r.root].opcode == "dot")

    text = emit_fused_text(space, FusionConfig(bits), metadata=False, kind="kLoop", keep=keep)
    return CpuCheckable(text, checked, len(multi))


def cpu_checkable_text(space: "FusionSpace", cfg: "FusionConfig") -> str:
    """`cpu_checkable(space, cfg).text`."""
    return cpu_checkable(space, cfg).text


__all__ = ["Kernel", "EMITTED_CPU_COMPILE_OPTIONS", "emitted_kernel_root", "emit_fused_module", "emit_fused_text", "cpu_checkable", "CpuCheckable", "cpu_checkable_text", "compile_flags_text", "instruction_signature", "shape_signature"]
