"""The HLO syntax tree: `HloInstruction`, `HloComputation`, `HloModule`, printed back as HLO text,
and reachability helpers over it."""
from __future__ import annotations

import re
from typing import Any, Callable, Iterable, Optional

from autotune.compiler.hlo.types import (Shape)
from autotune.compiler.hlo.attributes import (CALLED_COMPUTATION_ATTRS)

# --------------------------------------------------------------------------------------------------
# Syntax tree


class HloInstruction:
    """One instruction as written: name, opcode, shape, operand names, attributes (raw and parsed)."""

    __slots__ = ("name", "opcode", "shape", "operands", "attrs", "parsed", "is_root", "literal",
                 "parameter_number", "lineno", "col", "offset")

    def __init__(self, name: str, opcode: str, shape: Shape, operands: list, attrs: Optional[dict] = None,
                 parsed: Optional[dict] = None, is_root: bool = False, literal: Optional[str] = None,
                 parameter_number: Optional[int] = None, offset: int = -1):
        self.name = name
        self.opcode = opcode
        self.shape = shape
        self.operands = operands
        self.attrs = attrs if attrs is not None else {}
        self.parsed = parsed if parsed is not None else {}
        self.is_root = is_root
        self.literal = literal
        self.parameter_number = parameter_number
        self.lineno = 0  # 1-based line and column where the instruction starts (0: unknown; the parser sets them)
        self.col = 0
        self.offset = offset  # byte offset in the parsed text (-1: not parsed from text)

    def attr(self, key: str, default: Any = None) -> Any:
        """Parsed value of a structured attribute (or the raw text for the others)."""
        if key in self.parsed:
            return self.parsed[key]
        return self.attrs.get(key, default)

    def called_computations(self) -> list[str]:
        out: list[str] = []
        for k in CALLED_COMPUTATION_ATTRS:
            if k in self.parsed:
                v = self.parsed[k]
                out.extend(v if isinstance(v, tuple) else (v,))
        return out

    def copy(self, **changes: Any) -> "HloInstruction":
        new = HloInstruction(self.name, self.opcode, self.shape, list(self.operands), dict(self.attrs),
                             dict(self.parsed), self.is_root, self.literal, self.parameter_number, self.offset)
        new.lineno, new.col = self.lineno, self.col
        for k, v in changes.items():
            setattr(new, k, v)
        return new

    def to_text(self, percent: bool = True, metadata: bool = True) -> str:
        p = "%" if percent else ""
        if self.opcode == "parameter":
            args = str(self.parameter_number)
        elif self.opcode == "constant":
            args = self.literal or ""
        else:
            args = ", ".join(p + o for o in self.operands)
        parts = []
        for k, v in self.attrs.items():
            if not metadata and k == "metadata":
                continue
            if k in CALLED_COMPUTATION_ATTRS and percent != _has_percent(v):
                v = _restyle_names(v, percent)
            parts.append(f"{k}={v}")
        text = f"{'ROOT ' if self.is_root else ''}{p}{self.name} = {self.shape.to_text()} {self.opcode}({args})"
        if parts:
            text += ", " + ", ".join(parts)
        return text

    def location(self, filename: str) -> str:
        """`file:line:col` of the instruction (as HloParseError prints positions)."""
        return f"{filename}:{self.lineno}:{self.col}"

    def __repr__(self) -> str:
        return f"HloInstruction({self.to_text(metadata=False)!r})"


def _has_percent(v: str) -> bool:
    return "%" in v


def _restyle_names(v: str, percent: bool) -> str:
    if percent:
        return re.sub(r"(?<![%\w.\-])([A-Za-z_][\w.\-]*)", r"%\1", v)
    return v.replace("%", "")


class HloComputation:
    """A named list of instructions with one root; `is_entry` marks the module's entry."""

    __slots__ = ("name", "instructions", "is_entry", "trailer", "lineno", "col", "offset", "_by_name",
                 "_by_name_of")

    def __init__(self, name: str, instructions: list, is_entry: bool = False, trailer: Optional[dict] = None,
                 lineno: int = 0, col: int = 0, offset: int = -1):
        self.name = name
        self.instructions = instructions
        self.is_entry = is_entry
        self.trailer = trailer or {}
        self.lineno = lineno  # 1-based line and column of the computation's head (0: unknown)
        self.col = col
        self.offset = offset
        self._by_name: Optional[dict] = None
        self._by_name_of: Optional[list] = None  # the instruction list `_by_name` was built from

    @property
    def by_name(self) -> dict:
        """{name: instruction}; rebuilt when `instructions` is replaced (normalization does) or resized."""
        if (self._by_name is None or self._by_name_of is not self.instructions
                or len(self._by_name) != len(self.instructions)):
            self._by_name = {i.name: i for i in self.instructions}
            self._by_name_of = self.instructions
        return self._by_name

    @property
    def root(self) -> HloInstruction:
        for ins in reversed(self.instructions):
            if ins.is_root:
                return ins
        return self.instructions[-1]

    @property
    def parameters(self) -> list:
        ps = [i for i in self.instructions if i.opcode == "parameter"]
        return sorted(ps, key=lambda i: i.parameter_number)

    def signature_text(self, percent: bool) -> str:
        params = ", ".join(f"{i.name}: {i.shape.to_text()}" for i in self.parameters)
        return f"({params}) -> {self.root.shape.to_text()}"

    def to_text(self, percent: bool = True, metadata: bool = True, is_entry: Optional[bool] = None) -> str:
        p = "%" if percent else ""
        entry = self.is_entry if is_entry is None else is_entry
        head = f"{'ENTRY ' if entry else ''}{p}{self.name} {self.signature_text(percent)} {{"
        root = self.root
        lines = []
        for i in self.instructions:
            text = i.to_text(percent, metadata)
            if i is root and not i.is_root:
                text = "ROOT " + text
            lines.append("  " + text)
        body = "\n".join(lines)
        tail = "}"
        if self.trailer:
            tail += ", " + ", ".join(f"{k}={v}" for k, v in self.trailer.items())
        return f"{head}\n{body}\n{tail}"


class HloModule:
    """A parsed module: header attributes, computations in order, optional stack-frame tables."""

    def __init__(self, name: str, computations: list, attrs: Optional[dict] = None, tables: str = "",
                 percent: bool = True, filename: str = "<string>"):
        self.name = name
        self.computations = computations
        self.attrs = attrs or {}
        self.tables = tables
        self.percent = percent
        self.filename = filename

    @property
    def computations(self) -> list:
        """The computations in order (assign a new list to change them: the name index follows)."""
        return self._computations

    @computations.setter
    def computations(self, value: list) -> None:
        self._computations = value
        self._by_name: Optional[dict] = None

    @property
    def computations_by_name(self) -> dict:
        """{name: computation}, built once per list of computations (cost analysis asks it per instruction)."""
        if self._by_name is None or len(self._by_name) != len(self._computations):
            self._by_name = {c.name: c for c in self._computations}
        return self._by_name

    @property
    def entry(self) -> HloComputation:
        for c in self.computations:
            if c.is_entry:
                return c
        return self.computations[-1]

    def instruction_count(self) -> int:
        return sum(len(c.instructions) for c in self.computations)

    def to_text(self, percent: Optional[bool] = None, metadata: bool = True) -> str:
        """Print as HLO text that XLA's parser accepts (and that `parse_hlo` reads back identically)."""
        pct = self.percent if percent is None else percent
        header = f"HloModule {self.name}"
        if self.attrs:
            header += ", " + ", ".join(f"{k}={v}" for k, v in self.attrs.items())
        parts = [header, ""]
        if self.tables and metadata:
            # XLA prints (and only accepts) the stack-frame tables between the header and the bodies.
            parts += [self.tables.strip(), ""]
        entry = self.entry
        for c in self.computations:
            parts.append(c.to_text(pct, metadata, is_entry=c is entry))
            parts.append("")
        return "\n".join(parts)


def reachable_computations(module: HloModule, roots: "list[str]", comps: Optional[dict] = None) -> set:
    """Names of the computations `roots` name and, transitively, call (`comps`: the name -> computation
    map to follow, by default the module's)."""
    comps = module.computations_by_name if comps is None else comps
    return _closure(roots, lambda n: (c for ins in comps[n].instructions for c in ins.called_computations()))


def live_instructions(by_name: "dict[str, HloInstruction]", seeds: Iterable[str]) -> set:
    """Names of the instructions `seeds` name and, transitively, read (the live set of a dead-code pass)."""
    return _closure(seeds, lambda n: by_name[n].operands)


def _closure(seeds: Iterable[str], successors: Callable[[str], Iterable[str]]) -> set:
    """`seeds` and every name reachable from them through `successors` (a worklist walk)."""
    out: set[str] = set()
    stack = list(seeds)
    while stack:
        n = stack.pop()
        if n in out:
            continue
        out.add(n)
        stack.extend(successors(n))
    return out


