"""The HLO text parser: `parse_hlo` (file:line:col errors, then the installed verifier) and
`parse_hlo_file`."""
from __future__ import annotations

import re
from typing import Any, Callable, Optional

from autotune.compiler.gc_pause import gc_paused
from autotune.compiler.hlo.types import (_NAME_FULL, DTYPE_BYTES, HloParseError, MAX_ELEMENTS, MAX_TUPLE_DEPTH, OPCODES, Shape, async_sugar)
from autotune.compiler.hlo.attributes import (AttributeError_, CALLED_BY_OPCODE, CALLED_COMPUTATION_ATTRS, _ATTR_PARSERS)
from autotune.compiler.hlo.ir import (HloComputation, HloInstruction, HloModule)

# --------------------------------------------------------------------------------------------------
# Parser

_WS = re.compile(r"(?:\s+|//[^\n]*|/\*.*?\*/|#[^\n]*)*", re.S)
_NAME = re.compile(r"%?([A-Za-z_][\w.\-]*)")
_OPCODE = re.compile(r"[a-z][a-z0-9\-]*")
_ARRAY_SHAPE = re.compile(r"([a-z][a-z0-9]*)\[([^\]\n]*)\](?:\{([^{}\n]*)\})?")
_INT = re.compile(r"-?\d+")
_ATTR_KEY = re.compile(r"([A-Za-z_][\w\-]*)\s*=")
_SPECIAL = re.compile(r'[{}()\[\],"]')
_TABLE_HEAD = re.compile(r"(FileNames|FunctionNames|FileLocations|StackFrames)\b")
_COMP_AFTER_TABLE = re.compile(r"^[ \t]*((?:ENTRY\s+)?%?[A-Za-z_][\w.\-]*\s*[({])", re.M)
_CLOSERS = {"}": "{", ")": "(", "]": "["}
_CALLED_NAMES = frozenset(CALLED_COMPUTATION_ATTRS)


class _Parser:
    def __init__(self, text: str, filename: str):
        self.text = text
        self.filename = filename
        self.pos = 0
        self.n = len(text)
        self.shape_cache: dict[str, Shape] = {}
        self.percent_seen = False
        self.tuple_depth = 0
        # For the verifier: computation signatures {name: (result shape, its offset, [(param name,
        # shape, offset)])} and shapes written on operands [(instruction, operand index, shape, offset)].
        self.signatures: dict[str, tuple] = {}
        self.operand_shapes: list[tuple] = []
        self.shapes_by_name: dict[str, dict] = {}  # computation -> {instruction name: its shape}
        # Instructions whose operands all have the result's shape object (interned: same text).
        self.same_shapes: set[HloInstruction] = set()
        # When a dict, `instruction()` records the offsets of its operands and attribute keys there
        # (the verifier re-reads one instruction this way to point at the exact column of an error).
        self.record: Optional[dict] = None

    # -- errors and positions
    def error(self, message: str, pos: Optional[int] = None) -> HloParseError:
        pos = self.pos if pos is None else pos
        pos = min(max(pos, 0), self.n)
        line = self.text.count("\n", 0, pos) + 1
        start = self.text.rfind("\n", 0, pos) + 1
        end = self.text.find("\n", pos)
        end = self.n if end < 0 else end
        return HloParseError(message, self.filename, line, pos - start + 1, self.text[start:end])

    def lineno(self, pos: int) -> int:
        return self.text.count("\n", 0, pos) + 1

    def locate(self, ins: HloInstruction, where: tuple) -> int:
        """Offset of an instruction's operand (("operand", i)) or attribute key (("attr", key)), found by
        reading the instruction again while recording; the instruction's own offset if not found."""
        saved = (self.pos, self.record, self.operand_shapes)
        record: dict = {}
        try:
            self.pos, self.record, self.operand_shapes = ins.offset, record, []
            self.instruction()
        except HloParseError:
            pass
        finally:
            self.pos, self.record, self.operand_shapes = saved
        kind, key = where
        if kind == "operand":
            offsets = record.get("operands", [])
            return offsets[key] if key < len(offsets) else ins.offset
        return record.get("attrs", {}).get(key, ins.offset)

    # -- lexing helpers
    def ws(self) -> None:
        self.pos = _WS.match(self.text, self.pos).end()

    def peek(self, s: str) -> bool:
        self.ws()
        return self.text.startswith(s, self.pos)

    def accept(self, s: str) -> bool:
        if self.peek(s):
            self.pos += len(s)
            return True
        return False

    def expect(self, s: str, what: str = "") -> None:
        if not self.accept(s):
            got = self.text[self.pos:self.pos + 12].split("\n")[0] or "end of input"
            raise self.error(f"expected '{s}'{' ' + what if what else ''}, got '{got}'")

    def name(self, what: str = "name") -> str:
        self.ws()
        m = _NAME.match(self.text, self.pos)
        if not m:
            got = self.text[self.pos:self.pos + 12].split("\n")[0] or "end of input"
            raise self.error(f"expected {what}, got '{got}'")
        if self.text[self.pos] == "%":
            self.percent_seen = True
        self.pos = m.end()
        return m.group(1)

    def balanced(self) -> str:
        """Raw text of one attribute value: up to the next top-level ',' or the end of the line group."""
        self.ws()
        start = self.pos
        text = self.text
        stack: list[str] = []
        pos = self.pos
        while True:
            m = _SPECIAL.search(text, pos)
            # A value without brackets ends at a newline.
            nl = text.find("\n", pos)
            if not stack:
                stop = m.start() if m else self.n
                if nl >= 0 and nl < stop:
                    pos = nl
                    break
            if not m:
                if stack:
                    raise self.error(f"unclosed '{stack[-1]}' in attribute value", start)
                pos = self.n
                break
            c = m.group(0)
            if c == '"':
                pos = self._skip_string(m.start())
                continue
            if c in "{([":
                stack.append(c)
            elif c in "})]":
                if not stack:
                    pos = m.start()
                    break
                if stack[-1] != _CLOSERS[c]:
                    raise self.error(f"mismatched '{c}' in attribute value", m.start())
                stack.pop()
            elif c == "," and not stack:
                pos = m.start()
                break
            pos = m.end()
        self.pos = pos
        value = text[start:pos].strip()
        if not value:
            raise self.error("expected an attribute value", start)
        return value

    def _skip_string(self, start: int) -> int:
        i = start + 1
        text = self.text
        while True:
            j = text.find('"', i)
            if j < 0:
                raise self.error("unterminated string", start)
            k = j - 1
            bs = 0
            while k >= start + 1 and text[k] == "\\":
                bs += 1
                k -= 1
            if bs % 2 == 0:
                return j + 1
            i = j + 1

    # -- shapes
    def shape(self) -> Shape:
        self.ws()
        text = self.text
        if text.startswith("(", self.pos):
            if self.tuple_depth >= MAX_TUPLE_DEPTH:
                raise self.error(f"tuple shape nested more than {MAX_TUPLE_DEPTH} deep")
            self.pos += 1
            self.tuple_depth += 1
            subs = []
            self.ws()
            if not text.startswith(")", self.pos):
                while True:
                    subs.append(self.shape())
                    if self.accept(","):
                        continue
                    break
            self.expect(")", "closing the tuple shape")
            self.tuple_depth -= 1
            return Shape("tuple", tuple_shapes=tuple(subs))
        m = _ARRAY_SHAPE.match(text, self.pos)
        if not m:
            if text.startswith("b(", self.pos):
                raise self.error("buffer shapes 'b(...)' (xla_data.proto BUFFER) are not supported")
            got = text[self.pos:self.pos + 12].split("\n")[0] or "end of input"
            raise self.error(f"expected a shape, got '{got}'")
        raw = m.group(0)
        cached = self.shape_cache.get(raw)
        if cached is None:
            cached = self._make_shape(m)
            self.shape_cache[raw] = cached
        self.pos = m.end()
        return cached

    def _make_shape(self, m: re.Match) -> Shape:
        dtype, dims_text, layout = m.group(1), m.group(2), m.group(3)
        if dtype not in DTYPE_BYTES:
            raise self.error(f"unknown element type '{dtype}'", m.start())
        dims: list[int] = []
        dyn: list[bool] = []
        body = dims_text.strip()
        if body:
            for d in body.split(","):
                d = d.strip()
                if d == "?":
                    dims.append(-1)
                    dyn.append(True)
                    continue
                dynamic = d.startswith("<=")
                if dynamic:
                    d = d[2:].strip()
                if not d.isdigit():
                    raise self.error(f"bad dimension '{d}' in shape", m.start(2))
                if len(d) > 19 or int(d) > MAX_ELEMENTS:
                    raise self.error(f"dimension {d[:24]}{'...' if len(d) > 24 else ''} is larger than "
                                     f"2^62", m.start(2))
                dims.append(int(d))
                dyn.append(dynamic)
        n = 1
        for d in dims:
            n *= max(d, 1)
        if n > MAX_ELEMENTS:
            raise self.error(f"shape {m.group(0)} has more than 2^62 elements", m.start())
        if layout is not None:
            head = layout.split(":", 1)[0].strip()
            if head:
                try:
                    mm = [int(x) for x in head.split(",")]
                except ValueError:
                    raise self.error(f"bad layout '{{{layout}}}'", m.start(3)) from None
                if sorted(mm) != list(range(len(dims))):
                    raise self.error(f"layout {{{head}}} does not match rank {len(dims)}", m.start(3))
            elif dims:
                # `{}` on a non-scalar is not a valid minor-to-major order.
                raise self.error(f"empty layout for rank-{len(dims)} shape", m.start(3))
        return Shape(dtype, tuple(dims), layout, tuple(dyn))

    # -- module structure
    def parse_module(self) -> HloModule:
        self.ws()
        name = "module"
        attrs: dict[str, str] = {}
        if self.text.startswith("HloModule", self.pos):
            self.pos += len("HloModule")
            name = self.name("module name")
            while self.accept(","):
                attrs.update(self.attribute())
        computations: list[HloComputation] = []
        tables = ""
        seen: set[str] = set()
        while True:
            self.ws()
            if self.pos >= self.n:
                break
            m = _COMP_AFTER_TABLE.search(self.text, self.pos) if _TABLE_HEAD.match(self.text, self.pos) else None
            if _TABLE_HEAD.match(self.text, self.pos) and (m is None or m.start(1) > self.pos):
                # Stack-frame tables: at the end (JAX) or between the header and the computations
                # (`compile().as_text()`); a table block runs up to the next computation head (a
                # computation named like a table, `FileNames.1 (...`, is a computation: no loop).
                end = m.start(1) if m else self.n
                block = self.text[self.pos:end].strip()
                self._validate_tables(block)
                tables = f"{tables}\n\n{block}" if tables else block
                self.pos = end
                continue
            comp = self.computation()
            if comp.name in seen:
                raise self.error(f"duplicate computation name '{comp.name}'", self._comp_start)
            seen.add(comp.name)
            computations.append(comp)
        if not computations:
            raise self.error("no computations in module")
        mod = HloModule(name, computations, attrs, tables, self.percent_seen, self.filename)
        self._check_module(mod)
        return mod

    def _validate_tables(self, tables: str) -> None:
        for line in tables.splitlines():
            s = line.strip()
            if not s or _TABLE_HEAD.fullmatch(s):
                continue
            if not re.match(r"\d+\s+(\".*\"|\{.*\})\s*$", s):
                pos = self.text.find(line)
                raise self.error("malformed stack-frame table row", pos if pos >= 0 else self.pos)

    def attribute(self) -> dict:
        self.ws()
        m = _ATTR_KEY.match(self.text, self.pos)
        if not m:
            got = self.text[self.pos:self.pos + 12].split("\n")[0] or "end of input"
            raise self.error(f"expected attribute 'key=value', got '{got}'")
        self.pos = m.end()
        return {m.group(1): self.balanced()}

    def computation(self) -> HloComputation:
        self.ws()
        self._comp_start = start = self.pos
        is_entry = False
        if self.text.startswith("ENTRY", self.pos) and not _NAME_FULL.match(self.text, self.pos + 5):
            is_entry = True
            self.pos += 5
        name = self.name("computation name")
        self.ws()
        if self.text.startswith("(", self.pos):
            # Signature: (p0: shape, ...) -> shape; the verifier checks it against the body.
            self.pos += 1
            self.ws()
            params = []
            if not self.text.startswith(")", self.pos):
                while True:
                    self.ws()
                    p_pos = self.pos
                    p_name = self.name("parameter name")
                    self.expect(":")
                    params.append((p_name, self.shape(), p_pos))
                    if not self.accept(","):
                        break
            self.expect(")", "closing the computation signature")
            self.expect("->", "in the computation signature")
            self.ws()
            result_pos = self.pos
            self.signatures[name] = (self.shape(), result_pos, params)
        self.expect("{", "opening the computation body")
        instructions: list[HloInstruction] = []
        names: dict[str, Shape] = {}
        later: list = []  # (instruction, operand) used before its definition or undefined: an error
        same_shapes = self.same_shapes
        while True:
            self.ws()
            if self.text.startswith("}", self.pos):
                self.pos += 1
                break
            if self.pos >= self.n:
                raise self.error(f"computation '{name}' is not closed with '}}'")
            ins_pos = self.pos
            ins = self.instruction()
            if ins.name in names:
                raise self.error(f"duplicate instruction name '{ins.name}'", ins_pos)
            shape = ins.shape
            uniform = True
            for o in ins.operands:
                s = names.get(o)
                if s is not shape:
                    uniform = False
                    if s is None:
                        later.append((ins, o))
            if uniform:
                same_shapes.add(ins)
            names[ins.name] = shape
            instructions.append(ins)
        if not instructions:
            raise self.error(f"computation '{name}' has no instructions", start)
        roots = [i for i in instructions if i.is_root]
        if len(roots) > 1:
            raise self.error(f"computation '{name}' has {len(roots)} ROOT instructions", start)
        trailer: dict[str, str] = {}
        save = self.pos
        self.ws()
        if self.text.startswith(",", self.pos):
            self.pos += 1
            while True:
                trailer.update(self.attribute())
                if not self.accept(","):
                    break
        else:
            self.pos = save
        comp = HloComputation(name, instructions, is_entry, trailer, offset=start)
        self._check_operands(comp, names, later)
        self.shapes_by_name[name] = names
        return comp

    def _check_operands(self, comp: HloComputation, names: dict, later: list) -> None:
        for ins, o in later:  # XLA's parser takes operands defined above their users only
            where = self.locate(ins, ("operand", ins.operands.index(o)))
            if o not in names:
                raise self.error(f"use of undefined value '{o}' in computation '{comp.name}'", where)
            raise self.error(f"'{ins.name}' uses '{o}' before its definition in computation '{comp.name}' "
                             "(XLA's parser takes an operand only after the line that defines it)", where)
        params = [i for i in comp.instructions if i.opcode == "parameter"]
        nums = sorted(i.parameter_number for i in params)
        if nums != list(range(len(nums))):
            raise self.error(f"computation '{comp.name}' has parameter numbers {nums}, expected 0..{len(nums) - 1}",
                             params[0].offset if params else self.pos)

    def instruction(self) -> HloInstruction:
        self.ws()
        is_root = False
        if self.text.startswith("ROOT", self.pos) and not _NAME_FULL.match(self.text, self.pos + 4):
            is_root = True
            self.pos += 4
            self.ws()
        start = self.pos  # the instruction's position: its name
        name = self.name("instruction name")
        self.expect("=", f"after instruction name '{name}'")
        shape = self.shape()
        self.ws()
        m = _OPCODE.match(self.text, self.pos)
        if not m:
            raise self.error("expected an opcode")
        opcode = m.group(0)
        if opcode not in OPCODES and async_sugar(opcode) is None:
            raise self.error(f"unknown opcode '{opcode}'")
        self.pos = m.end()
        self.expect("(", f"after opcode '{opcode}'")
        operands: list[str] = []
        literal = None
        parameter_number = None
        record = self.record
        inline_shapes: list = []
        if opcode == "constant":
            literal = self._literal()
        elif opcode == "parameter":
            self.ws()
            mi = _INT.match(self.text, self.pos)
            if not mi or mi.group(0).startswith("-") or len(mi.group(0)) > 9:
                raise self.error("expected parameter number (0 to 999999999)")
            parameter_number = int(mi.group(0))
            self.pos = mi.end()
            self.expect(")")
        else:
            self.ws()
            if not self.text.startswith(")", self.pos):
                while True:
                    self.ws()
                    c = self.text[self.pos:self.pos + 1]
                    # Operands may carry their shape: `f32[2]{0} %x` or `(f32[], s32[]) %t`.
                    if c == "(" or (_ARRAY_SHAPE.match(self.text, self.pos)
                                    and not _name_then_delim(self.text, self.pos)):
                        shape_pos = self.pos
                        inline_shapes.append((len(operands), self.shape(), shape_pos))
                    if record is not None:
                        self.ws()
                        record.setdefault("operands", []).append(self.pos)
                    operands.append(self.name("operand name"))
                    if self.accept(","):
                        continue
                    break
            self.expect(")", "closing the operand list")
        attrs: dict[str, str] = {}
        parsed: dict[str, Any] = {}
        while True:
            save = self.pos
            self.ws()
            if not self.text.startswith(",", self.pos):
                self.pos = save
                break
            self.pos += 1
            self.ws()
            key_pos = self.pos
            kv = self.attribute()
            (k, v), = kv.items()
            if record is not None:
                record.setdefault("attrs", {})[k] = key_pos
            if k in _CALLED_NAMES and k not in CALLED_BY_OPCODE.get(opcode, ((),))[0]:
                raise self.error(f"attribute '{k}' is not allowed on '{opcode}'", key_pos)
            if k in attrs:
                raise self.error(f"duplicate attribute '{k}'", key_pos)
            attrs[k] = v
            fn = _ATTR_PARSERS.get(k)
            if fn is not None:
                try:
                    parsed[k] = fn(v)
                except AttributeError_ as e:
                    raise self.error(f"attribute '{k}': {e}", key_pos) from None
        ins = HloInstruction(name, opcode, shape, operands, attrs, parsed, is_root, literal,
                             parameter_number, offset=start)
        if inline_shapes:
            for k, written, pos in inline_shapes:
                self.operand_shapes.append((ins, k, written, pos))
        self._check_instruction(ins, start)
        return ins

    def _literal(self) -> str:
        """Raw literal text of a constant, up to its matching ')'."""
        self.ws()
        start = self.pos
        depth = 0
        text = self.text
        pos = self.pos
        while pos < self.n:
            c = text[pos]
            if c == '"':
                pos = self._skip_string(pos)
                continue
            if c in "({[":
                depth += 1
            elif c in ")}]":
                if depth == 0:
                    if c != ")":
                        raise self.error(f"unexpected '{c}' in constant literal", pos)
                    break
                depth -= 1
            pos += 1
        else:
            raise self.error("unclosed constant literal", start)
        lit = text[start:pos].strip()
        self.pos = pos + 1
        if not lit:
            raise self.error("empty constant literal", start)
        if not re.fullmatch(r"[\w\s.,{}()\[\]\-+:\"/*<>=%!']+|\{\.\.\.\}", lit):
            raise self.error("malformed constant literal", start)
        return lit

    def _check_instruction(self, ins: HloInstruction, pos: int) -> None:
        op = ins.opcode
        if op == "get-tuple-element" and "index" not in ins.parsed:
            raise self.error("get-tuple-element needs index=", pos)
        called = CALLED_BY_OPCODE.get(op)
        if called is not None:
            for k in called[1]:
                if k not in ins.parsed:
                    raise self.error(f"'{op}' needs attribute {k}=", pos)
            if op == "conditional" and "branch_computations" not in ins.parsed and not (
                    "true_computation" in ins.parsed and "false_computation" in ins.parsed):
                raise self.error("'conditional' needs branch_computations= (or true_computation= and "
                                 "false_computation=)", pos)

    def _check_module(self, mod: HloModule) -> None:
        comps = mod.computations_by_name
        entries = [c for c in mod.computations if c.is_entry]
        if len(entries) > 1:
            raise self.error("more than one ENTRY computation", entries[1].offset)
        if "entry_computation_layout" in mod.attrs:
            self._check_entry_layout(mod)
        for c in mod.computations:
            for ins in c.instructions:
                for callee in ins.called_computations():
                    if callee not in comps:
                        raise self.error(f"instruction '{ins.name}' calls unknown computation '{callee}'",
                                         ins.offset)


    def _check_entry_layout(self, mod: HloModule) -> None:
        """The header's entry_computation_layout against the entry computation, as XLA's verifier
        checks it (XLA:CPU's StableHLO import aborts the process on a mismatch instead)."""
        start = self.text.find("entry_computation_layout")
        pos = self.text.find("{", start) + 1 if start >= 0 else -1
        if pos <= 0:
            return
        saved = self.pos
        self.pos = pos
        params = self.shape()
        self.ws()
        self.expect("->", "in entry_computation_layout")
        result = self.shape()
        self.pos = saved
        entry = mod.entry
        ps = sorted((i for i in entry.instructions if i.opcode == "parameter"), key=lambda i: i.parameter_number)
        subs = params.tuple_shapes if params.is_tuple else (params,)
        if len(subs) != len(ps):
            raise self.error(f"entry_computation_layout has {len(subs)} parameters, the entry computation "
                             f"'{entry.name}' has {len(ps)}", start)
        for k, (want, p) in enumerate(zip(subs, ps)):
            if not _compatible(want, p.shape):
                raise self.error(f"entry_computation_layout: parameter {k} is {want.to_text()}, the entry "
                                 f"computation's parameter {k} is {p.shape.to_text()}", start)
        if not _compatible(result, entry.root.shape):
            raise self.error(f"entry_computation_layout: the result is {result.to_text()}, the entry "
                             f"computation's root is {entry.root.shape.to_text()}", start)


def _compatible(a: Shape, b: Shape) -> bool:
    """Same element types and dimensions, layouts aside (XLA's ShapeUtil::Compatible)."""
    if a.is_tuple or b.is_tuple:
        return a.is_tuple and b.is_tuple and len(a.tuple_shapes) == len(b.tuple_shapes) and all(
            _compatible(x, y) for x, y in zip(a.tuple_shapes, b.tuple_shapes))
    return a.dtype == b.dtype and tuple(a.dims) == tuple(b.dims)


def _name_then_delim(text: str, pos: int) -> bool:
    """True when what looks like a shape at pos is really an operand name (e.g. `f32` is no name).

    An operand shape is always followed by a name; a bare name is followed by ',' or ')'.
    """
    m = _NAME.match(text, pos)
    if not m:
        return False
    rest = _WS.match(text, m.end()).end()
    return rest < len(text) and text[rest] in ",)"


@gc_paused()
def parse_hlo(text: str, filename: str = "<string>", verify: bool = True) -> HloModule:
    """Parse HLO text into an HloModule; raises HloParseError (with file:line:col) on bad input.

    With `verify` (the default), the module is also checked as XLA's HloVerifier does (shapes against
    each opcode's shape inference, names, call graph; autotune/compiler/verifier.py). `verify=False` is for
    re-parsing text this package printed itself.
    """
    p = _Parser(text, filename)
    try:
        mod = p.parse_module()
    except RecursionError:
        raise p.error("nesting too deep") from None
    _assign_positions(mod, text)
    if verify:
        if _module_verifier is None:
            raise RuntimeError("no HLO verifier installed (autotune/compiler/__init__.py installs it)")
        _module_verifier(mod, p)
    return mod


# The checker `parse_hlo(verify=True)` runs: autotune.compiler.verifier.verify_module, installed by the
# package's __init__ so that the parser stays below the verifier in the import graph (docs/architecture.md).
_module_verifier: Optional[Callable[[HloModule, Any], None]] = None


def install_module_verifier(verify: Callable[[HloModule, Any], None]) -> None:
    """Set the checker that `parse_hlo` runs on every module it parses unless `verify=False`."""
    global _module_verifier
    _module_verifier = verify


def _assign_positions(mod: HloModule, text: str) -> None:
    """Set the 1-based line and column of every computation and instruction from its byte offset
    (one pass over the text, in offset order)."""
    items: list = []
    for c in mod.computations:  # in text order already: each computation, then its instructions
        items.append(c)
        items.extend(c.instructions)
    line, last, rfind = 1, 0, text.rfind
    count = text.count
    for x in items:
        off = x.offset
        line += count("\n", last, off)
        last = off
        x.lineno = line
        x.col = off - rfind("\n", 0, off)


def parse_hlo_file(path: str, verify: bool = True) -> HloModule:
    """Read and parse an HLO text file; errors name the file."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except UnicodeDecodeError as e:
        raise HloParseError(f"not UTF-8 text ({e.reason})", str(path), 1, 1) from None
    return parse_hlo(text, str(path), verify)
