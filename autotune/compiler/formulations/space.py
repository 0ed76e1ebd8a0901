"""The formulations space: for every instruction with equivalent alternatives, the choice among them
(the original, "original", is the default). `FormulationSpace.apply` writes the program with the chosen
formulations; `site_program` is one instruction alone (its operands as parameters), the program a
per-instance measurement times; each site's `refused` says which alternatives do not apply and why."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Optional

from autotune.compiler.formulations.convolution import CONV_FORMULATIONS, ConvGeometry, write_convolution
from autotune.compiler.formulations.reduce_window import (REDUCE_WINDOW_FORMULATIONS, REDUCERS, ReduceWindowGeometry,
                                                          write_reduce_window)
from autotune.compiler.hlo import HloComputation, HloInstruction, HloModule, parse_hlo

__all__ = ["ORIGINAL", "FormulationSite", "FormulationSpace", "FormulationError"]

ORIGINAL = "original"


class FormulationError(ValueError):
    """A choice that names no site or no alternative of its site."""


@dataclass(frozen=True)
class FormulationSite:
    """One instruction with alternatives: where it is, what it computes (`signature`: opcode, shapes and
    attributes, the key its measurements are stored under), the alternatives that apply (`choices`,
    ORIGINAL first) and those that do not with why (`refused`)."""

    computation: str
    name: str
    opcode: str
    signature: str
    choices: tuple
    refused: dict = field(default_factory=dict)
    flops: float = 0.0
    line: int = 0

    @property
    def key(self) -> str:
        return f"{self.computation}/{self.name}"


def _fusion_bodies(module: HloModule) -> set:
    """Computations called as fusion bodies (rewritten only through their fusion's own choices)."""
    out = set()
    for c in module.computations:
        for ins in c.instructions:
            if ins.opcode == "fusion":
                out.update(ins.called_computations())
    return out


def _signature(ins: HloInstruction, operand_shapes: list) -> str:
    attrs = ", ".join(f"{k}={v}" for k, v in sorted(ins.attrs.items()) if k not in ("metadata", "frontend_attributes"))
    args = ", ".join(s.to_text() for s in operand_shapes)
    return f"{ins.shape.to_text()} {ins.opcode}({args}), {attrs}"


class FormulationSpace:
    """The formulation choices of one HLO program (text): `sites`, and `apply(choices)` -> program text,
    where `choices` maps a site's key to one of its `choices` (missing keys: ORIGINAL)."""

    def __init__(self, text: str, filename: str = "<string>"):
        self.text = text
        self.filename = filename
        self.module_ = parse_hlo(text, filename)
        self.sites = self._find_sites()

    def _find_sites(self) -> list:
        sites = []
        bodies = _fusion_bodies(self.module_)
        for comp in self.module_.computations:
            if comp.name in bodies:
                continue
            by_name = comp.by_name
            for ins in comp.instructions:
                if ins.opcode not in ("convolution", "reduce-window"):
                    continue
                shapes = [by_name[o].shape for o in ins.operands]
                if ins.opcode == "convolution":
                    g = ConvGeometry.of(ins, shapes[0], shapes[1])
                    refused = {f: why for f in CONV_FORMULATIONS if (why := g.refusal(f))}
                    choices, flops = (ORIGINAL,) + g.applicable(), g.flops()
                else:
                    rw = ReduceWindowGeometry(shapes[0], ins.shape, tuple(ins.attr("window") or ()),
                                              self.reducer(ins), len(ins.operands))
                    refused = {f: why for f in REDUCE_WINDOW_FORMULATIONS if (why := rw.refusal(f))}
                    choices, flops = (ORIGINAL,) + rw.applicable(), float(ins.shape.elements * rw.positions)
                sites.append(FormulationSite(comp.name, ins.name, ins.opcode, _signature(ins, shapes), choices,
                                             refused, flops, ins.lineno))
        return sites

    def reducer(self, ins: HloInstruction) -> Optional[str]:
        """The opcode of `ins`'s reducer computation when it is one of REDUCERS applied to its two parameters."""
        comp = self.module_.computations_by_name.get(ins.attr("to_apply") or "")
        if comp is None or len(comp.instructions) != 3:
            return None
        root, params = comp.root, comp.parameters
        if root.opcode not in REDUCERS or len(params) != 2 or root.shape.is_tuple:
            return None
        return root.opcode if sorted(root.operands) == sorted(p.name for p in params) else None

    @property
    def tunable(self) -> list:
        """The sites with at least one alternative to the original."""
        return [s for s in self.sites if len(s.choices) > 1]

    def site(self, key: str) -> FormulationSite:
        for s in self.sites:
            if s.key == key:
                return s
        raise FormulationError(f"no formulation site {key!r}")

    def _check(self, choices: Mapping[str, str]) -> None:
        for key, choice in choices.items():
            s = self.site(key)
            if choice not in s.choices:
                why = s.refused.get(choice, "not an alternative of this instruction")
                raise FormulationError(f"{key}: {choice}: {why}")

    def apply(self, choices: Mapping[str, str]) -> str:
        """The program with each site's chosen formulation (ORIGINAL: unchanged) as HLO text."""
        self._check(choices)
        chosen = {k: v for k, v in choices.items() if v != ORIGINAL}
        if not chosen:
            return self.text
        module = parse_hlo(self.text, self.filename)
        comps = []
        for comp in module.computations:
            todo = {s.name: (chosen[s.key], self.reducer(comp.by_name[s.name]))
                    for s in self.sites if s.computation == comp.name and s.key in chosen}
            comps.append(_rewrite(comp, todo) if todo else comp)
        module.computations = comps
        return module.to_text()

    def site_program(self, key: str, choice: str = ORIGINAL) -> str:
        """The site's instruction alone (its operands as parameters 0, 1, ...) as a module, with `choice`."""
        s = self.site(key)
        comp = self.module_.computations_by_name[s.computation]
        ins = comp.by_name[s.name]
        params = []
        for i, o in enumerate(ins.operands):
            params.append(HloInstruction(f"p{i}", "parameter", comp.by_name[o].shape, [], parameter_number=i))
        alone = ins.copy(operands=[f"p{i}" for i in range(len(ins.operands))], is_root=True,
                         attrs={k: v for k, v in ins.attrs.items() if k != "metadata"})
        body = HloComputation("main", params + [alone], is_entry=True)
        called = [self.module_.computations_by_name[c] for c in ins.called_computations()]
        if choice != ORIGINAL:
            body = _rewrite(body, {ins.name: (choice, self.reducer(ins))})
        return HloModule("formulation_site", called + [body]).to_text()


def _rewrite(comp: HloComputation, todo: dict) -> HloComputation:
    """`comp` with each instruction named in `todo` ({name: (formulation, reducer opcode or None)}) replaced
    by its formulation's instructions."""
    by_name = comp.by_name
    taken = set(by_name)
    out: list = []
    for ins in comp.instructions:
        if ins.name not in todo:
            out.append(ins)
            continue
        f, reducer = todo[ins.name]
        if ins.opcode == "reduce-window":
            new = write_reduce_window(ins, by_name[ins.operands[0]].shape, reducer, f, taken)
        else:
            new = write_convolution(ins, by_name[ins.operands[0]].shape, by_name[ins.operands[1]].shape, f, taken)
        new[-1].is_root = ins.is_root
        if ins.attrs.get("metadata"):
            for n in new:
                n.attrs["metadata"] = ins.attrs["metadata"]
        out.extend(new)
    return HloComputation(comp.name, out, comp.is_entry, comp.trailer)
