"""The formulations space: for every instruction with equivalent alternatives, the choice among them
(the original, "original", is the default). `FormulationSpace.apply` writes the program with the chosen
formulations; `site_program` is one instruction alone (its operands as parameters), the program a
per-instance measurement times; each site's `refused` says which alternatives do not apply and why."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Optional

from autotune.compiler.formulations.convolution import CONV_FORMULATIONS, ConvGeometry, write_convolution
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
                if ins.opcode != "convolution":
                    continue
                shapes = [by_name[o].shape for o in ins.operands]
                g = ConvGeometry.of(ins, shapes[0], shapes[1])
                refused = {f: why for f in CONV_FORMULATIONS if (why := g.refusal(f))}
                choices = (ORIGINAL,) + g.applicable()
                sites.append(FormulationSite(comp.name, ins.name, ins.opcode, _signature(ins, shapes), choices,
                                             refused, g.flops(), ins.lineno))
        return sites

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
            todo = {s.name: chosen[s.key] for s in self.sites if s.computation == comp.name and s.key in chosen}
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
        if choice != ORIGINAL:
            body = _rewrite(body, {ins.name: choice})
        return HloModule("formulation_site", [body]).to_text()


def _rewrite(comp: HloComputation, todo: dict) -> HloComputation:
    """`comp` with each instruction named in `todo` replaced by its formulation's instructions."""
    by_name = comp.by_name
    taken = set(by_name)
    out: list = []
    for ins in comp.instructions:
        f: Optional[str] = todo.get(ins.name)
        if f is None:
            out.append(ins)
            continue
        new = write_convolution(ins, by_name[ins.operands[0]].shape, by_name[ins.operands[1]].shape, f, taken)
        new[-1].is_root = ins.is_root
        if ins.attrs.get("metadata"):
            for n in new:
                n.attrs["metadata"] = ins.attrs["metadata"]
        out.extend(new)
    return HloComputation(comp.name, out, comp.is_entry, comp.trailer)
