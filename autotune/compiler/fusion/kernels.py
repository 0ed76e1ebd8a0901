"""Kernels: one concept in two layers.

`KernelRef` is a kernel as a fusion state holds it: computation, root, members (topological) and
whether the target's rules allow it; slotted and cheap, as a search creates many. `Kernel` is the
same kernel materialized for pricing and measuring: a `KernelRef` subclass adding its
instructions, inputs, static metrics and its standalone HLO module. Both take their canonical hash
from the fusion space (`FusionSpace.kernel_hash`), computed on first use.
"""
from __future__ import annotations

from functools import cached_property
from itertools import chain
from typing import TYPE_CHECKING, Optional, Sequence

from autotune.compiler.analysis import Cost
from autotune.compiler.fused_folds import fold_fused_body, layout_safe_selects
from autotune.compiler.hlo import HloComputation, HloInstruction, HloModule, Shape, reachable_computations
from autotune.compiler.opcodes import NODE_FUSIBLE

if TYPE_CHECKING:  # pragma: no cover
    from autotune.compiler.fusion.space import FusionSpace

__all__ = ["KernelRef", "Kernel", "attached_computations"]


class KernelRef:
    """A kernel inside a FusionState: computation index, root, members (topological), whether the
    target's rules allow it, and its canonical hash, computed on first use (a search prices only some
    of the kernels it creates)."""

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
        """Canonical hash (computed on first use: cheap cost models never need it)."""
        if self._hash is None:
            self._hash = self.space.kernel_hash(self.comp, self.root, self.members)
        return self._hash

    @hash.setter
    def hash(self, value: str) -> None:
        self._hash = value

    def __repr__(self) -> str:
        return f"KernelRef(comp={self.comp}, root={self.root}, n={len(self.members)}, hash={self.hash})"


class Kernel(KernelRef):
    """A kernel materialized for pricing and measuring: a KernelRef of a legal configuration plus its
    instructions, external inputs, static metrics and standalone HLO emission.

    `multiplicity` is how many times it runs per program execution (while trip counts).
    """

    def __init__(self, space: "FusionSpace", comp: int, root: int, members: tuple, hash: Optional[str] = None,
                 valid: bool = True):
        super().__init__(comp, root, members, hash, valid, space)

    @classmethod
    def from_ref(cls, space: "FusionSpace", ref: KernelRef) -> "Kernel":
        """The materialized form of a fusion state's kernel (shares its hash once computed)."""
        return cls(space, ref.comp, ref.root, ref.members, ref._hash, ref.valid)

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

    @cached_property
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
            fused = self.space.compilation_target.xla_cpu_emission and rules.wrap_single(comp, self.root) \
                and all(self.space.node_class[self.comp][m] == NODE_FUSIBLE for m in self.members)
        if fused and len(self.members) == 1 and not rules.wrap_single(comp, self.root):
            fused = False  # e.g. a lone dot on XLA:CPU: a library call, never a fusion
        inputs = list(self.inputs)
        mset = set(self.members)
        consts = list(dict.fromkeys(o for m in self.members for o in comp.operands[m]
                                    if o not in mset and o not in inputs))
        if fused and not rules.inline_constants:
            inputs += consts
            consts = []
        names: dict[int, str] = {}
        body: list[HloInstruction] = []
        for k, i in enumerate(inputs):
            names[i] = f"p{k}"
            body.append(HloInstruction(f"p{k}", "parameter", insts[i].shape, [], parameter_number=k))
        for k, c in enumerate(consts):
            names[c] = f"c{k}"
            body.append(HloInstruction(f"c{k}", "constant", insts[c].shape, [], literal=insts[c].literal))
        called: list[str] = []
        for k, m in enumerate(self.members):
            names[m] = f"i{k}"
        for m in self.members:
            new = insts[m].copy(name=names[m], operands=[names[o] for o in comp.operands[m]],
                                is_root=(m == self.root))
            new.attrs.pop("metadata", None)
            called.extend(new.called_computations())
            body.append(new)
        if fused:  # what XLA folds inside a fusion, folded here (no parameter left unread)
            body, kept = fold_fused_body(body)
            inputs = [inputs[k] for k in kept]
            if next(b for b in body if b.is_root).opcode == "parameter":
                fused = False  # the kernel folds to its input (x + 0): XLA:CPU aborts on an identity fusion
                root = next(b for b in body if b.is_root)
                body = [root.copy(name="p0", parameter_number=0, is_root=False),
                        HloInstruction("i0", "copy", self.output_shape, ["p0"], is_root=True)]
            else:
                body = layout_safe_selects(body)
        lines = ["  " + b.to_text(percent=False) for b in body]
        attached = attached_computations(module, called)
        out = [f"HloModule kernel_{self.hash}", ""]
        for c in attached:
            out.append(c.to_text(percent=False, metadata=False, is_entry=False))
            out.append("")
        if fused:
            out.append("fused_kernel {")
            out.extend(lines)
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
            out.extend(lines)
            out.append("}")
        return "\n".join(out) + "\n"


def attached_computations(module: HloModule, roots: Sequence[str]) -> list[HloComputation]:
    """The computations named (transitively), in module order so callees precede callers."""
    need = reachable_computations(module, list(roots))
    return [c for c in module.computations if c.name in need]
