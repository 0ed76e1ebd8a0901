"""Kernels: fused subgraphs with a canonical hash, static metrics and standalone HLO emission.

Also emits a whole program with `fusion` instructions for any fusion configuration.
"""
from __future__ import annotations

import hashlib
import itertools
import struct
from functools import cached_property
from itertools import chain
from typing import TYPE_CHECKING, Optional, Sequence

from .hlo import CALLED_COMPUTATION_ATTRS, HloComputation, HloInstruction, HloModule, Shape

if TYPE_CHECKING:  # pragma: no cover
    from .fusion import FusionConfig, FusionSpace, KernelRef

# Attributes that do not change what a kernel computes or how fast it runs.
_IGNORED_ATTRS = frozenset({"metadata", "sharding", "frontend_attributes", "backend_config",
                            "statistics_viz", "control-predecessors", "origin", "schedule",
                            "operand_precision"})


def _h64(data: bytes) -> int:
    return struct.unpack("<q", hashlib.blake2b(data, digest_size=8).digest())[0]


def shape_signature(shape: Shape) -> int:
    return _h64(b"shape|" + shape.to_text().encode())


def computation_signature(comp: HloComputation, module: HloModule, cache: dict) -> int:
    """Name- and order-independent signature of an attached computation (reducer, comparator, ...):
    instructions serialized in post-order from the root, operands by post-order position."""
    key = ("comp", comp.name)
    if key in cache:
        if cache[key] is None:  # re-entered: a computation that calls itself (the verifier refuses these)
            from .program import ProgramError
            raise ProgramError(f"computation '{comp.name}' calls itself")
        return cache[key]
    cache[key] = None
    by_name = comp.by_name
    pos: dict[str, int] = {}
    parts: list[str] = []
    stack: list[tuple[str, bool]] = [(comp.root.name, False)]
    while stack:
        n, done = stack.pop()
        if n in pos:
            continue
        ins = by_name[n]
        if not done:
            stack.append((n, True))
            stack.extend((o, False) for o in reversed(ins.operands) if o not in pos)
            continue
        pos[n] = len(pos)
        sig = instruction_signature(ins, module, cache)
        if ins.opcode == "parameter":
            sig = _h64(f"param{ins.parameter_number}|{sig}".encode())
        parts.append(f"{sig}({','.join(str(pos[o]) for o in ins.operands)})")
    v = _h64("|".join(parts).encode())
    cache[key] = v
    return v


def instruction_signature(ins: HloInstruction, module: HloModule, cache: dict) -> int:
    """Name-independent signature of one instruction: opcode, shape (with layout), attributes."""
    comps = module.computations_by_name if "__comps" not in cache else cache["__comps"]
    cache["__comps"] = comps
    parts = [ins.opcode, ins.shape.to_text()]
    if ins.opcode == "constant":
        parts.append(ins.literal or "")
    elif ins.opcode == "parameter":
        return shape_signature(ins.shape)
    for k in sorted(ins.attrs):
        if k in _IGNORED_ATTRS:
            continue
        if k in CALLED_COMPUTATION_ATTRS:
            names = ins.parsed[k]
            names = names if isinstance(names, tuple) else (names,)
            parts.append(k + "=" + ",".join(str(computation_signature(comps[n], module, cache)) for n in names))
        else:
            parts.append(f"{k}={ins.attrs[k]}")
    return _h64("|".join(parts).encode())


class Kernel:
    """A fused subgraph of one computation: root, members (topological), external inputs, hash.

    `multiplicity` is how many times it runs per program execution (while trip counts).
    """

    def __init__(self, space: "FusionSpace", comp: int, root: int, members: tuple, hash: Optional[str] = None):
        self.space = space
        self.comp = comp
        self.root = root
        self.members = members
        self._hash = hash

    @property
    def hash(self) -> str:
        """Canonical hash (computed on first use: cheap cost models never need it)."""
        if self._hash is None:
            self._hash = self.space.kernel_hash(self.comp, self.root, self.members)
        return self._hash

    @hash.setter
    def hash(self, value: str) -> None:
        self._hash = value

    @classmethod
    def from_ref(cls, space: "FusionSpace", ref: "KernelRef") -> "Kernel":
        return cls(space, ref.comp, ref.root, ref.members, ref._hash)

    def __repr__(self) -> str:
        ops = ",".join(i.opcode for i in self.instructions[:6])
        return f"Kernel({self.hash}, root={self.root_instruction.name}, n={len(self.members)}, ops={ops})"

    # ---- structure
    @property
    def computation(self):
        return self.space.program.computations[self.comp]

    @property
    def multiplicity(self) -> float:
        return self.space.multiplicity[self.comp]

    @cached_property
    def instructions(self) -> list[HloInstruction]:
        ins = self.computation.instructions
        return [ins[m] for m in self.members]

    @property
    def root_instruction(self) -> HloInstruction:
        return self.computation.instructions[self.root]

    @cached_property
    def inputs(self) -> list[int]:
        return self.space.kernel_inputs(self.comp, self.root, self.members)

    @property
    def input_shapes(self) -> list[Shape]:
        ins = self.computation.instructions
        return [ins[i].shape for i in self.inputs]

    @property
    def output_shape(self) -> Shape:
        return self.root_instruction.shape

    @property
    def opcodes(self) -> list[str]:
        return [i.opcode for i in self.instructions]

    @property
    def fusion_kind(self) -> str:
        return self.space.fusion_kind(self.comp, self.root, self.members)

    @property
    def is_trivial(self) -> bool:
        """Only bitcasts: no data moves, no time."""
        insts = self.computation.instructions
        return all(insts[m].opcode == "bitcast" for m in self.members)

    # ---- static metrics (HloCostAnalysis-like, bytes at the kernel boundary)
    @cached_property
    def cost(self):
        from .analysis import Cost
        space, members = self.space, self.members
        flops, trans, nbytes, consts = space.node_sums(self.comp)
        # Bytes read: each distinct external operand once, scalar constants excluded (order does
        # not matter here, so set algebra instead of the canonical input walk; this is the inner
        # loop of fusion search with cheap cost models).
        ops = space.program.computations[self.comp].operands
        ext = set(chain.from_iterable(map(ops.__getitem__, members)))
        ext.difference_update(members)
        ext -= consts
        return Cost(sum(map(flops.__getitem__, members)), sum(map(trans.__getitem__, members)),
                    sum(map(nbytes.__getitem__, ext)), nbytes[self.root])

    @property
    def flops(self) -> float:
        return self.cost.flops

    @property
    def transcendentals(self) -> float:
        return self.cost.transcendentals

    @property
    def bytes_read(self) -> float:
        return self.cost.bytes_read

    @property
    def bytes_written(self) -> float:
        return self.cost.bytes_written

    # ---- emission
    def to_hlo_module(self, fused: Optional[bool] = None) -> str:
        """A standalone HLO module computing this kernel: parameters for its inputs, its members, the
        scalar constants it reads, and the attached computations (reducers) it calls.

        With `fused` (default: True for multi-instruction kernels on targets whose compiler keeps
        hand-made fusions, i.e. `cpu`), the members are wrapped in one `fusion` instruction so the
        compiler measures exactly this kernel rather than re-deciding its fusion.
        """
        comp = self.computation
        module = self.space.program.module
        rules = self.space.rules
        insts = comp.instructions
        if fused is None:
            fused = rules.name == "cpu" and rules.wrap_single(self.root_instruction) and \
                all(self.space.node_class[self.comp][m] == 3 for m in self.members)
        if fused and len(self.members) == 1 and not rules.wrap_single(self.root_instruction):
            fused = False  # e.g. a lone dot on XLA:CPU: a library call, never a fusion
        inputs = list(self.inputs)
        mset = set(self.members)
        consts = list(dict.fromkeys(o for m in self.members for o in comp.operands[m]
                                    if o not in mset and o not in inputs))
        if fused and not rules.inline_constants:
            inputs += consts
            consts = []
        names: dict[int, str] = {}
        params: list[str] = []
        for k, i in enumerate(inputs):
            names[i] = f"p{k}"
            params.append(f"  p{k} = {insts[i].shape.to_text()} parameter({k})")
        body: list[str] = []
        for k, c in enumerate(consts):
            names[c] = f"c{k}"
            body.append(f"  c{k} = {insts[c].shape.to_text()} constant({insts[c].literal})")
        called: list[str] = []
        for k, m in enumerate(self.members):
            names[m] = f"i{k}"
        for m in self.members:
            new = insts[m].copy(name=names[m], operands=[names[o] for o in comp.operands[m]],
                                is_root=(m == self.root))
            new.attrs.pop("metadata", None)
            called.extend(new.called_computations())
            body.append("  " + new.to_text(percent=False))
        attached = _attached_computations(module, called)
        out = [f"HloModule kernel_{self.hash}", ""]
        for c in attached:
            out.append(c.to_text(percent=False, metadata=False, is_entry=False))
            out.append("")
        if fused:
            out.append("fused_kernel {")
            out.extend(params)
            out.extend(body)
            out.append("}")
            out.append("")
            out.append("ENTRY main {")
            out.extend(f"  a{k} = {insts[i].shape.to_text()} parameter({k})" for k, i in enumerate(inputs))
            args = ", ".join(f"a{k}" for k in range(len(inputs)))
            kind = rules.fusion_kind(comp, self.root, self.members)
            out.append(f"  ROOT f = {self.output_shape.to_text()} fusion({args}), kind={kind}, calls=fused_kernel")
            out.append("}")
        else:
            out.append("ENTRY main {")
            out.extend(params)
            out.extend(body)
            out.append("}")
        return "\n".join(out) + "\n"


def _attached_computations(module: HloModule, roots: Sequence[str]) -> list[HloComputation]:
    """The computations named (transitively), in module order so callees precede callers."""
    comps = module.computations_by_name
    need: set[str] = set()
    stack = list(roots)
    while stack:
        n = stack.pop()
        if n in need:
            continue
        need.add(n)
        for ins in comps[n].instructions:
            stack.extend(ins.called_computations())
    return [c for c in module.computations if c.name in need]


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
EMITTED_CPU_COMPILE_OPTIONS = {"disable_fusion": True,
                               "xla_flags": {"xla_disable_hlo_passes": "reshape-mover"}}


def emit_fused_module(space: "FusionSpace", cfg: "FusionConfig", metadata: bool = True) -> HloModule:
    """The program with one `fusion` instruction per kernel (kinds from the target's rules).

    Kernel roots keep their names as the fusion instruction, so nothing outside changes; members
    are cloned into each fused computation that holds them. Single-instruction kernels are wrapped
    too where the target's compiler would otherwise re-fuse them (XLA:CPU keeps hand-made fusions).
    """
    from .fusion import NODE_FUSIBLE, is_scalar_constant

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
    for ci, comp in enumerate(program.computations):
        roots = by_comp.get(ci, {})
        members_anywhere: set[int] = set()
        for ref in roots.values():
            members_anywhere.update(ref.members)
        out: list[HloInstruction] = []
        fused_here: list[HloComputation] = []
        insts = comp.instructions
        for n, ins in enumerate(insts):
            ref = roots.get(n)
            if ref is None:
                if n in members_anywhere and space.node_class[ci][n] == NODE_FUSIBLE:
                    continue  # lives only inside fusions
                out.append(ins.copy())
                continue
            if len(ref.members) == 1 and (space.node_class[ci][n] != NODE_FUSIBLE
                                          or not space.rules.wrap_single(ins)):
                out.append(ins.copy())
                continue
            inputs = space.kernel_inputs(ci, n, ref.members)
            if not space.rules.inline_constants:
                mset = set(ref.members)
                inputs += list(dict.fromkeys(o for m in ref.members for o in comp.operands[m]
                                             if o not in mset and is_scalar_constant(insts[o])))
            fname = fresh(f"fused_{ins.name}")
            body: list[HloInstruction] = []
            local: dict[int, str] = {}
            for k, i in enumerate(inputs):
                local[i] = fresh(f"param_{k}")
                body.append(HloInstruction(local[i], "parameter", insts[i].shape, [], parameter_number=k))
            mset = set(ref.members)
            for m in ref.members:
                for o in comp.operands[m]:
                    if o not in mset and o not in local and is_scalar_constant(insts[o]):
                        local[o] = fresh(insts[o].name)
                        c = insts[o].copy(name=local[o], is_root=False)
                        body.append(c)
            for m in ref.members:
                local[m] = fresh(insts[m].name)
            for m in ref.members:
                c = insts[m].copy(name=local[m], operands=[local[o] for o in comp.operands[m]],
                                  is_root=(m == n))
                if not metadata:
                    c.attrs.pop("metadata", None)
                body.append(c)
            fcomp = HloComputation(fname, body)
            fused_here.append(fcomp)
            kind = space.rules.fusion_kind(comp, n, ref.members)
            attrs = {"kind": kind, "calls": fname}
            if metadata and "metadata" in ins.attrs:
                attrs["metadata"] = ins.attrs["metadata"]
            out.append(HloInstruction(ins.name, "fusion", ins.shape, [insts[i].name for i in inputs], attrs,
                                      {"calls": (fname,)}, is_root=ins.is_root))
        root_name = comp.hlo.root.name
        for i in out:
            i.is_root = i.name == root_name
        replaced[comp.name] = HloComputation(comp.name, out, comp.hlo.is_entry, dict(comp.hlo.trailer))
        new_comps[comp.name] = fused_here
    computations: list[HloComputation] = []
    for c in module.computations:
        computations.extend(new_comps.get(c.name, []))
        computations.append(replaced.get(c.name, c))
    attrs = {k: v for k, v in module.attrs.items() if k != "is_scheduled"}
    return HloModule(module.name, computations, attrs, module.tables if metadata else "", module.percent,
                     module.filename)


def emit_fused_text(space: "FusionSpace", cfg: "FusionConfig", metadata: bool = True) -> str:
    return emit_fused_module(space, cfg, metadata).to_text()


__all__ = ["Kernel", "EMITTED_CPU_COMPILE_OPTIONS", "emit_fused_module", "emit_fused_text", "instruction_signature", "shape_signature"]
