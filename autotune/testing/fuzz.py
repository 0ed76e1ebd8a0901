"""Seeded mutation fuzzer for HLO text, and the check every mutant must pass.

What: `Mutator` applies 1-3 random mutations to a real HLO program: syntactic (delete, duplicate or
swap characters, tokens and lines; insert stray characters; truncate) and semantic (change a
dimension of a shape, an element type, an operand name, an attribute value or a dimension number,
an opcode, a called computation, a window to huge sizes, a trip count, a parameter number; swap
operands). `run_pipeline` does to a program what `autotune show`, `autotune emit --target cpu|tpu`
and `autotune measure --evaluator sim` do (parse and verify, static cost, Program, FusionSpace per
target, default configuration and its kernels, emission, the TPU simulator). `classify` sorts the
outcome: ok, an error with a position, an error without one, or a bug (any other exception).

Why: bad input must end in one clear line with file:line:column, never a traceback, a hang or
unbounded memory. tests/autotune/test_fuzz_inputs.py runs a fast slice of this; the benchmark
benchmarks/fuzz_inputs.py runs >= 10,000 mutants through the real CLI in worker processes.

Reproducible: a mutant is a function of (seed file, seed number); `Mutator(seed).mutate(text)`.
"""
from __future__ import annotations

import glob
import os
import random
import re
import signal
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Optional, Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Outcome classes (see `classify`).
OK = "ok"
POSITIONED = "error_with_position"
UNPOSITIONED = "error_without_position"
TRACEBACK = "traceback"
HANG = "hang"
CRASH = "crash"
# `measure` exit status 3: the program was read fine but the evaluator could not time some kernels
# (the simulator refuses tiles that do not fit its scratchpad); not an input error.
MEASUREMENT_FAILED = "measurement_failed"
OUTCOMES = (OK, MEASUREMENT_FAILED, POSITIONED, UNPOSITIONED, TRACEBACK, HANG, CRASH)

# file:line:col at the start of a message (the form of HloParseError.one_line and the CLI's errors).
POSITION = re.compile(r"^.+?:\d+:\d+: ")


def corpus_files(root: str = ROOT, max_bytes: Optional[int] = None) -> list[str]:
    """The real programs mutants are made from: examples/hlo, examples/idioms, tests/fixtures/hlo (all
    of it) and the TpuGraphs module, sorted; optionally only files up to `max_bytes`."""
    files = sorted(glob.glob(os.path.join(root, "examples", "hlo", "*.hlo"))
                   + glob.glob(os.path.join(root, "examples", "idioms", "*.hlo"))
                   + glob.glob(os.path.join(root, "tests", "fixtures", "hlo", "**", "*.hlo"), recursive=True)
                   + [os.path.join(root, "data", "tpugraphs", "layout_module.hlo")])
    if max_bytes is not None:
        files = [f for f in files if os.path.getsize(f) <= max_bytes]
    return files


# --------------------------------------------------------------------------------------------------
# Mutations

_SHAPE = re.compile(r"\b(pred|token|bf16|[suf]\d+[a-z0-9]*|c64|c128)\[([^\]\n]*)\]")
_DTYPES = ("pred", "s8", "s32", "s64", "u8", "u32", "f16", "bf16", "f32", "f64", "c64", "s4", "f8e4m3fn")
_TOKEN = re.compile(r"%?[A-Za-z_][\w.\-]*|-?\d+|\S")
_INSTRUCTION = re.compile(r"^(\s*(?:ROOT\s+)?%?)([\w.\-]+)(\s*=\s*)(.*?)\s([a-z][a-z0-9\-]*)\(", re.M)
_ATTR = re.compile(r",\s*([a-z_]+)=(\{[^{}\n]*\}|[^,\s{}()]+)")
_CALLED = re.compile(r"\b(to_apply|calls|body|condition|select|scatter|true_computation|false_computation)"
                     r"=(%?[\w.\-]+)")
_COMPUTATION = re.compile(r"^(?:ENTRY\s+)?%?([\w.\-]+)\s*(?:\([^\n]*\)\s*->\s*[^\n{]*)?\{\s*$", re.M)
_WINDOW = re.compile(r"window=\{([^{}\n]*)\}")
_NUMBER = re.compile(r"-?\d+")
_SPECIAL = '{}()[],=:%"<>/*\nx1-._'
_OPCODE_SWAPS = ("add", "multiply", "subtract", "divide", "maximum", "negate", "exponential", "convert",
                 "broadcast", "reshape", "transpose", "reduce", "dot", "convolution", "slice", "concatenate",
                 "copy", "tuple", "get-tuple-element", "compare", "select", "iota", "pad", "reverse", "while",
                 "call", "fusion", "sort", "gather", "scatter", "dynamic-slice", "bitcast", "constant",
                 "parameter", "custom-call", "all-reduce", "fft", "rng", "abs", "and", "clamp")
_BIG = (0, 1, 2, 3, 7, 1000, 65536, 1 << 31, 1 << 40, 10 ** 12, 1 << 62, (1 << 62) + 1, 10 ** 30)


@dataclass
class Mutant:
    """A mutated program and how it was made."""

    text: str
    source: str
    seed: int
    mutations: list = field(default_factory=list)


class Mutator:
    """Random mutations of HLO text from a seed (or any `random.Random`, e.g. hypothesis's)."""

    def __init__(self, seed: "int | random.Random" = 0, syntactic_share: float = 0.4):
        self.rng = seed if isinstance(seed, random.Random) else random.Random(seed)
        self.syntactic_share = syntactic_share
        self.syntactic: list[Callable[[str], tuple]] = [
            self.delete_chars, self.insert_char, self.replace_char, self.duplicate_span, self.swap_chars,
            self.delete_token, self.duplicate_token, self.swap_tokens, self.delete_line,
            self.duplicate_line, self.swap_lines, self.truncate]
        self.semantic: list[Callable[[str], tuple]] = [
            self.change_dimension, self.change_dimension, self.change_dtype, self.change_operand,
            self.change_attribute, self.change_attribute, self.change_dimension_number,
            self.swap_operands, self.change_opcode, self.change_called_computation, self.huge_window,
            self.change_trip_count, self.change_parameter_number, self.drop_literal_value]

    def mutate(self, text: str, count: Optional[int] = None) -> tuple[str, list]:
        """Apply `count` (default 1-3) mutations; returns the text and their descriptions."""
        rng = self.rng
        n = count if count is not None else rng.choice((1, 1, 1, 2, 3))
        done = []
        for _ in range(n):
            pool = self.syntactic if rng.random() < self.syntactic_share else self.semantic
            for attempt in range(5):  # a semantic mutation may find nothing to change: then syntactic
                text, what = rng.choice(pool if attempt < 4 else self.syntactic)(text)
                if what:
                    done.append(what)
                    break
        return text, done

    # -- helpers
    def _pick(self, items: Sequence) -> Any:
        """A random element, or None when there is none (the mutation then does nothing)."""
        return self.rng.choice(items) if items else None

    def _pos(self, text: str) -> int:
        return self.rng.randrange(len(text)) if text else 0

    def _number(self, old: int) -> int:
        r = self.rng.random()
        if r < 0.3:
            return old + self.rng.choice((-1, 1))
        if r < 0.45:
            return -old - 1 if old >= 0 else 0
        if r < 0.6:
            return old * 2
        return self.rng.choice(_BIG)

    def _instructions(self, text: str) -> list:
        return list(_INSTRUCTION.finditer(text))

    def _operand_span(self, text: str, m: re.Match) -> tuple:
        """(start, end) of the operand list of the instruction matched by `_INSTRUCTION` (after '(')."""
        start = m.end()
        depth = 0
        for i in range(start, min(len(text), start + 20000)):
            c = text[i]
            if c in "([{":
                depth += 1
            elif c in ")]}":
                if depth == 0:
                    return start, i
                depth -= 1
            elif c == "\n":
                break
        return start, start

    def _operands(self, text: str, m: re.Match) -> list:
        """[(start, end)] of each top-level operand name in the instruction's operand list."""
        a, b = self._operand_span(text, m)
        out = []
        depth = 0
        piece = a
        for i in range(a, b + 1):
            c = text[i] if i < b else ","
            if c in "([{":
                depth += 1
            elif c in ")]}":
                depth -= 1
            elif c == "," and depth == 0:
                nm = re.search(r"(%?[A-Za-z_][\w.\-]*)\s*$", text[piece:i])
                if nm:
                    out.append((piece + nm.start(1), piece + nm.end(1)))
                piece = i + 1
        return out

    # -- syntactic
    def delete_chars(self, text: str) -> tuple:
        i = self._pos(text)
        j = min(len(text), i + self.rng.randint(1, 20))
        return text[:i] + text[j:], f"delete chars {i}:{j}"

    def insert_char(self, text: str) -> tuple:
        i = self._pos(text)
        c = self.rng.choice(_SPECIAL)
        return text[:i] + c + text[i:], f"insert {c!r} at {i}"

    def replace_char(self, text: str) -> tuple:
        i = self._pos(text)
        c = self.rng.choice(_SPECIAL)
        return text[:i] + c + text[i + 1:], f"replace char {i} by {c!r}"

    def duplicate_span(self, text: str) -> tuple:
        i = self._pos(text)
        j = min(len(text), i + self.rng.randint(1, 60))
        return text[:j] + text[i:j] + text[j:], f"duplicate {i}:{j}"

    def swap_chars(self, text: str) -> tuple:
        i = self._pos(text[:-1])
        return text[:i] + text[i + 1:i + 2] + text[i:i + 1] + text[i + 2:], f"swap chars {i},{i + 1}"

    def _tokens(self, text: str) -> list:
        i = self._pos(text)
        window = text[i:i + 400]
        return [(i + m.start(), i + m.end()) for m in _TOKEN.finditer(window)]

    def delete_token(self, text: str) -> tuple:
        toks = self._tokens(text)
        if not toks:
            return text, ""
        a, b = self.rng.choice(toks)
        return text[:a] + text[b:], f"delete token {text[a:b]!r} at {a}"

    def duplicate_token(self, text: str) -> tuple:
        toks = self._tokens(text)
        if not toks:
            return text, ""
        a, b = self.rng.choice(toks)
        return text[:b] + text[a:b] + text[b:], f"duplicate token {text[a:b]!r} at {a}"

    def swap_tokens(self, text: str) -> tuple:
        toks = self._tokens(text)
        if len(toks) < 2:
            return text, ""
        k = self.rng.randrange(len(toks) - 1)
        (a, b), (c, d) = toks[k], toks[k + 1 + self.rng.randrange(min(3, len(toks) - k - 1))]
        return text[:a] + text[c:d] + text[b:c] + text[a:b] + text[d:], f"swap tokens at {a},{c}"

    def _lines(self, text: str) -> list:
        return text.split("\n")

    def delete_line(self, text: str) -> tuple:
        lines = self._lines(text)
        k = self.rng.randrange(len(lines))
        return "\n".join(lines[:k] + lines[k + 1:]), f"delete line {k + 1}"

    def duplicate_line(self, text: str) -> tuple:
        lines = self._lines(text)
        k = self.rng.randrange(len(lines))
        return "\n".join(lines[:k + 1] + lines[k:]), f"duplicate line {k + 1}"

    def swap_lines(self, text: str) -> tuple:
        lines = self._lines(text)
        if len(lines) < 2:
            return text, ""
        k = self.rng.randrange(len(lines) - 1)
        j = min(len(lines) - 1, k + self.rng.randint(1, 5))
        lines[k], lines[j] = lines[j], lines[k]
        return "\n".join(lines), f"swap lines {k + 1},{j + 1}"

    def truncate(self, text: str) -> tuple:
        i = self._pos(text)
        return text[:i], f"truncate at {i}"

    # -- semantic
    def change_dimension(self, text: str) -> tuple:
        shapes = list(_SHAPE.finditer(text))
        shapes = [m for m in shapes if m.group(2).strip()]
        if not shapes:
            return text, ""
        m = self.rng.choice(shapes)
        dims = m.group(2).split(",")
        k = self.rng.randrange(len(dims))
        d = dims[k].strip()
        old = int(d[2:]) if d.startswith("<=") and d[2:].isdigit() else int(d) if d.isdigit() else 1
        new = self._number(old)
        dims[k] = str(new) if not d.startswith("<=") else f"<={new}"
        if self.rng.random() < 0.1:  # add or drop a dimension instead
            dims = dims[:k] + dims[k + 1:] if self.rng.random() < 0.5 else dims[:k] + ["2"] + dims[k:]
        new_text = f"{m.group(1)}[{','.join(dims)}]"
        return text[:m.start()] + new_text + text[m.end():], f"shape {m.group(0)} -> {new_text} at {m.start()}"

    def change_dtype(self, text: str) -> tuple:
        m = self._pick(list(_SHAPE.finditer(text)))
        if m is None:
            return text, ""
        new = self.rng.choice([t for t in _DTYPES if t != m.group(1)])
        return text[:m.start(1)] + new + text[m.end(1):], f"dtype {m.group(1)} -> {new} at {m.start()}"

    def change_operand(self, text: str) -> tuple:
        ins = self._instructions(text)
        m = self._pick(ins)
        if m is None:
            return text, ""
        ops = self._operands(text, m)
        if not ops:
            return text, ""
        a, b = self.rng.choice(ops)
        near = [x.group(2) for x in ins if abs(x.start() - m.start()) < 3000]
        new = self.rng.choice(near) if near and self.rng.random() < 0.85 else "undefined_value"
        pct = "%" if text[a] == "%" else ""
        return text[:a] + pct + new + text[b:], f"operand {text[a:b]} -> {new} in '{m.group(2)}'"

    def swap_operands(self, text: str) -> tuple:
        m = self._pick(self._instructions(text))
        if m is None:
            return text, ""
        ops = self._operands(text, m)
        if len(ops) < 2:
            return text, ""
        i, j = sorted(self.rng.sample(range(len(ops)), 2))
        (a, b), (c, d) = ops[i], ops[j]
        return (text[:a] + text[c:d] + text[b:c] + text[a:b] + text[d:],
                f"swap operands {i},{j} of '{m.group(2)}'")

    def change_attribute(self, text: str) -> tuple:
        attrs = [m for m in _ATTR.finditer(text) if _NUMBER.search(m.group(2)) and m.group(1) != "metadata"]
        if not attrs:
            return text, ""
        m = self.rng.choice(attrs)
        nums = list(_NUMBER.finditer(m.group(2)))
        if not nums:
            return text, ""
        n = self.rng.choice(nums)
        new = str(self._number(int(n.group(0)) if len(n.group(0)) < 20 else 0))
        a = m.start(2) + n.start()
        return text[:a] + new + text[m.start(2) + n.end():], f"attribute {m.group(1)}: {n.group(0)} -> {new}"

    def change_dimension_number(self, text: str) -> tuple:
        attrs = [m for m in _ATTR.finditer(text)
                 if (m.group(1).endswith("dims") or m.group(1) in ("dimensions", "index", "iota_dimension",
                                                                   "index_vector_dim", "feature_index",
                                                                   "dim_labels"))]
        if not attrs:
            return text, ""
        m = self.rng.choice(attrs)
        value = m.group(2)
        if m.group(1) == "dim_labels":
            chars = list(value)
            i, j = self.rng.sample(range(len(chars)), 2) if len(chars) > 1 else (0, 0)
            chars[i], chars[j] = chars[j], chars[i]
            new = "".join(chars)
        else:
            nums = list(_NUMBER.finditer(value))
            if nums and self.rng.random() < 0.8:
                n = self.rng.choice(nums)
                new = value[:n.start()] + str(self.rng.randint(-1, 6)) + value[n.end():]
            elif value.startswith("{"):
                body = value[1:-1]
                new = "{" + (body + "," if body else "") + str(self.rng.randint(0, 5)) + "}" \
                    if self.rng.random() < 0.5 else "{" + ",".join(body.split(",")[:-1]) + "}"
            else:
                return text, ""
        return (text[:m.start(2)] + new + text[m.end(2):],
                f"dimension numbers {m.group(1)}={value} -> {new}")

    def change_opcode(self, text: str) -> tuple:
        m = self._pick(self._instructions(text))
        if m is None:
            return text, ""
        new = self.rng.choice([o for o in _OPCODE_SWAPS if o != m.group(5)])
        return text[:m.start(5)] + new + text[m.end(5):], f"opcode {m.group(5)} -> {new} in '{m.group(2)}'"

    def change_called_computation(self, text: str) -> tuple:
        calls = list(_CALLED.finditer(text))
        comps = [c.group(1) for c in _COMPUTATION.finditer(text)]
        if not calls or not comps:
            return text, ""
        m = self.rng.choice(calls)
        new = self.rng.choice(comps)
        pct = "%" if m.group(2).startswith("%") else ""
        return (text[:m.start(2)] + pct + new + text[m.end(2):],
                f"{m.group(1)}={m.group(2)} -> {new}")

    def huge_window(self, text: str) -> tuple:
        m = self._pick(list(_WINDOW.finditer(text)))
        if m is None:
            return text, ""
        field_ = self.rng.choice(("size", "stride", "pad", "lhs_dilate", "rhs_dilate"))
        value = self.rng.choice(("1000000000", "4611686018427387904", "0", "-1", "100000"))
        body = m.group(1)
        parts = [p for p in body.split() if not p.startswith(field_ + "=")]
        n = max((len(p.split("=", 1)[1].split("x")) for p in parts if "=" in p), default=1)
        vals = "x".join(((value + "_" + value) if field_ == "pad" else value) for _ in range(n))
        new = "window={" + " ".join(parts + [f"{field_}={vals}"]) + "}"
        return text[:m.start()] + new + text[m.end():], f"window {field_} -> {value}"

    def change_trip_count(self, text: str) -> tuple:
        m = re.search(r'"known_trip_count":\{"n":"(\d+)"\}', text)
        whiles = [x for x in _INSTRUCTION.finditer(text) if x.group(5) == "while"]
        if m:
            new = self.rng.choice(("-1", "0", "99999999999999999999999", "1e9", "x", str(1 << 62)))
            return text[:m.start(1)] + new + text[m.end(1):], f"known_trip_count -> {new}"
        if whiles:  # add one
            w = self.rng.choice(whiles)
            end = text.find("\n", w.end())
            end = len(text) if end < 0 else end
            n = self.rng.choice(("1000000", str(1 << 62), "3"))
            return (text[:end] + f', backend_config={{"known_trip_count":{{"n":"{n}"}}}}' + text[end:],
                    f"known_trip_count={n} on '{w.group(2)}'")
        return text, ""

    def change_parameter_number(self, text: str) -> tuple:
        params = list(re.finditer(r"parameter\((\d+)\)", text))
        if not params:
            return text, ""
        m = self.rng.choice(params)
        new = str(self._number(int(m.group(1))))
        return text[:m.start(1)] + new + text[m.end(1):], f"parameter({m.group(1)}) -> parameter({new})"

    def drop_literal_value(self, text: str) -> tuple:
        lits = list(re.finditer(r"constant\(\{([^{}()\n]*)\}\)", text))
        if not lits:
            return text, ""
        m = self.rng.choice(lits)
        vals = m.group(1).split(",")
        new = ",".join(vals[:-1]) if len(vals) > 1 and self.rng.random() < 0.5 else m.group(1) + ", 0"
        return text[:m.start(1)] + new + text[m.end(1):], "constant literal length changed"


def mutants(files: Sequence[str], count: int, seed: int = 0) -> Iterator[Mutant]:
    """`count` mutants, round-robin over `files`; mutant k uses seed (seed, k): reproducible one by one."""
    texts: dict = {}
    for k in range(count):
        src = files[k % len(files)]
        if src not in texts:
            with open(src, encoding="utf-8") as f:
                texts[src] = f.read()
        s = seed * 1_000_003 + k
        text, what = Mutator(s).mutate(texts[src])
        yield Mutant(text, src, s, what)


# --------------------------------------------------------------------------------------------------
# The pipeline and its outcome


class CaseTimeout(BaseException):
    """Raised in the main thread when one case runs past its time limit (a hang)."""


@contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raise CaseTimeout after `seconds` of wall time (SIGALRM; main thread of a Unix process)."""
    def fire(signum: int, frame: Any) -> None:
        raise CaseTimeout(f"more than {seconds:g} s")
    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def run_pipeline(text: str, filename: str = "fuzz.hlo") -> dict:
    """What `autotune show`, `emit --target cpu|tpu` and `measure --evaluator sim` do to a program;
    returns a few numbers (raises what those commands would turn into their one-line errors)."""
    from hardware.simulator import TpuSimulator
    from autotune.compiler.analysis import module_cost
    from autotune.compiler.fusion import FusionSpace
    from autotune.compiler.hlo import parse_hlo
    from autotune.compiler.emission import emit_fused_text
    from autotune.compiler.program import Program
    from autotune.compiler.targets import get_target
    from autotune.tuning.store import MemoryStore

    module = parse_hlo(text, filename)
    cost = module_cost(module)
    program = Program.from_module(module)
    out = {"instructions": program.instruction_count(), "flops": cost.flops}
    for target in ("tpu", "cpu"):
        space = FusionSpace(program, target)
        cfg = space.default()
        out[f"kernels_{target}"] = len(space.state(cfg).refs())
        out[f"emitted_{target}"] = len(emit_fused_text(space, cfg))
        if get_target(target).default_evaluator == "sim":
            sim = TpuSimulator(target="tpu", seed=0, store=MemoryStore())
            try:
                ms = sim.measure(space.kernels(cfg))
            finally:
                sim.close()
            out["measured"] = sum(m.ok for m in ms)
    return out


def user_error_types() -> tuple:
    """Exception types the CLI turns into one-line errors (cli_errors.friendly)."""
    from autotune.compiler.hlo import HloParseError
    from autotune.compiler.program import ProgramError
    return (HloParseError, ProgramError)


def classify(exc: Optional[BaseException]) -> tuple[str, str]:
    """(outcome, one-line detail) for what `run_pipeline` raised (None: it succeeded)."""
    if exc is None:
        return OK, ""
    if isinstance(exc, CaseTimeout):
        return HANG, str(exc)
    from autotune.compiler.hlo import HloParseError
    if isinstance(exc, HloParseError):
        line = exc.one_line()
        if "\n" not in line and exc.line > 0 and POSITION.match(line):
            return POSITIONED, line
        return UNPOSITIONED, line.splitlines()[0] if line else type(exc).__name__
    if isinstance(exc, MemoryError):
        return CRASH, "MemoryError"
    return TRACEBACK, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


def check(text: str, filename: str = "fuzz.hlo", seconds: float = 20.0) -> tuple[str, str]:
    """Run the pipeline on one program under a time limit and classify the outcome."""
    try:
        with time_limit(seconds):
            run_pipeline(text, filename)
    except BaseException as e:  # noqa: BLE001 - classifying every outcome is the point
        if isinstance(e, KeyboardInterrupt):
            raise
        return classify(e)
    return classify(None)
