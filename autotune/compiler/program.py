"""Program model: a parsed module normalized as XLA does before fusion.

`Program.from_module` refuses what one device's program model cannot hold (`UNSUPPORTED_OPCODES`:
send/recv, one `file:line:col` ProgramError), rewrites asynchronous `*-start`/`*-done` pairs as their
synchronous operation (`ASYNC_DONE_TO_SYNC`), inlines `call`s and existing `fusion`s (so dumps that
are already fused can be re-tuned), forwards get-tuple-element of tuple, removes dead code and unused
computations, and finds while-loop trip counts (backend_config `known_trip_count`, else the
induction-variable pattern, else a flagged default). A program with host callbacks
(`HOST_CALLBACK_TARGETS`: custom calls into the process that traced it) gets one flag saying that it,
and anything tuned from it, runs only where the callback's handler is. Kernel-bearing computations (entry, while bodies/conditions, conditional
branches) become `Computation`s: instruction DAGs in topological order with integer operand/user
lists and a multiplicity (how often the computation runs per program execution).
"""
from __future__ import annotations

import itertools
import math
from collections import deque
from dataclasses import dataclass, field
from typing import Optional

from autotune.compiler.gc_pause import gc_paused
from autotune.compiler.hlo import (MAX_ELEMENTS, HloComputation, HloInstruction, HloModule, HloParseError, async_sugar,
                  live_instructions, parse_hlo, parse_hlo_file, reachable_computations)

DEFAULT_TRIP_COUNT = 1

# Instructions with effects beyond their result: never removed as dead code.
SIDE_EFFECTING = frozenset({
    "outfeed", "infeed", "send", "send-done", "recv", "recv-done", "after-all", "rng",
    "rng-get-and-update-state", "all-reduce-start", "all-reduce-done", "all-gather-start",
    "all-gather-done", "collective-permute-start", "collective-permute-done", "copy-start", "copy-done",
})

INLINED_OPCODES = frozenset({"call", "fusion"})

# Opcodes a single-device program model cannot represent: point-to-point transfers pair with an
# instruction of another program (the peer), whose timing decides theirs.
UNSUPPORTED_OPCODES = frozenset({"send", "send-done", "recv", "recv-done"})
_UNSUPPORTED_WHY = ("a point-to-point transfer waits for a peer device's program; autotune tunes one "
                    "device's program (send/recv, send-done/recv-done are not supported)")

# Asynchronous pairs and the synchronous instruction each `*-done` becomes (as XLA's
# ConvertAsyncCollectivesToSync does): kernels are timed one at a time, so the overlap an async
# pair allows is not modeled and the pair is priced as the one operation it performs.
ASYNC_DONE_TO_SYNC = {"all-gather-done": ("all-gather-start", "all-gather"),
                      "all-reduce-done": ("all-reduce-start", "all-reduce"),
                      "collective-permute-done": ("collective-permute-start", "collective-permute"),
                      "copy-done": ("copy-start", "copy"),
                      "async-done": ("async-start", "call")}


# Custom-call targets that call back into the host process that traced the program (jax's
# pure_callback/io_callback/debug.callback, equinox's error_if): the handler exists only there, so the
# program (and anything tuned from it) runs only where a callback handler is registered.
HOST_CALLBACK_TARGETS = frozenset({
    "xla_ffi_python_cpu_callback", "xla_ffi_python_gpu_callback", "xla_ffi_partitioned_python_cpu_callback",
    "xla_ffi_partitioned_python_gpu_callback", "xla_python_cpu_callback", "xla_python_gpu_callback",
})


def host_callbacks(module: HloModule) -> list[HloInstruction]:
    """The live custom-calls of `module` whose target is a host callback (`HOST_CALLBACK_TARGETS`)."""
    live = _reachable(module)
    return [i for c in module.computations if c.name in live for i in c.instructions
            if i.opcode == "custom-call" and i.attrs.get("custom_call_target", "").strip('"') in HOST_CALLBACK_TARGETS]


def host_callback_warning(module: HloModule) -> Optional[str]:
    """One line saying the program calls back into the process that traced it, or None."""
    calls = host_callbacks(module)
    if not calls:
        return None
    target = calls[0].attrs.get("custom_call_target", "").strip('"')
    return (f"{len(calls)} host callback{'s' if len(calls) > 1 else ''} ('{calls[0].name}', {target}): the program "
            f"and its tuned versions run only in a process with the callback's handler (the one that traced it); "
            f"elsewhere XLA fails or crashes when the callback runs, so measurement and verification may fail")


class ProgramError(HloParseError):
    """A well-formed module that the program model cannot represent, at the instruction at fault
    (file:line:col when known; the verifier rules out most of these before normalization)."""

    def __init__(self, message: str, ins: Optional[HloInstruction] = None, filename: str = "<string>"):
        super().__init__(message, filename, ins.lineno if ins is not None else 0, ins.col if ins is not None else 0)
        self.instruction = ins

    def _full(self) -> str:
        return self.one_line()  # (the source line is not kept after parsing: no caret)


@dataclass
class WhileInfo:
    """A while loop: where it is, its body/condition, trip count and where the count came from."""

    computation: str
    instruction: str
    body: str
    condition: str
    trip_count: int
    source: str  # "backend_config", "induction_variable", "evaluated" (the loop run on its constants), or "default"


class Computation:
    """A kernel-bearing computation: instructions in topological order with index-based edges."""

    def __init__(self, hlo: HloComputation, multiplicity: float = 1.0, kind: str = "entry",
                 filename: str = "<string>", in_loop: bool = False):
        self.hlo = hlo
        self.name = hlo.name
        self.kind = kind
        self.in_loop = in_loop  # runs inside a while loop (its body or condition, or called from one)
        self.multiplicity = multiplicity
        self.instructions: list[HloInstruction] = _topological(hlo, filename)
        hlo.instructions = self.instructions
        self.index = {ins.name: i for i, ins in enumerate(self.instructions)}
        self.operands: list[list[int]] = [[self.index[o] for o in ins.operands] for ins in self.instructions]
        users: list[list[int]] = [[] for _ in self.instructions]
        for i, ops in enumerate(self.operands):
            for o in dict.fromkeys(ops):
                users[o].append(i)
        self.users = users
        self.root = self.index[hlo.root.name]

    def __len__(self) -> int:
        return len(self.instructions)

    def __repr__(self) -> str:
        return f"Computation({self.name!r}, {len(self)} instructions, x{self.multiplicity:g})"


@dataclass
class Program:
    """A normalized module: the kernel-bearing computations plus everything needed to print it back."""

    module: HloModule
    computations: list[Computation]
    whiles: list[WhileInfo] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)
    name: str = ""
    source: str = "<string>"

    @classmethod
    @gc_paused()
    def from_module(cls, module: HloModule) -> "Program":
        return _normalize(module)

    @classmethod
    def from_text(cls, text: str, filename: str = "<string>") -> "Program":
        return _normalize(parse_hlo(text, filename))

    @classmethod
    def from_file(cls, path: str) -> "Program":
        return _normalize(parse_hlo_file(str(path)))

    @property
    def entry(self) -> Computation:
        return self.computations[0]

    def computation(self, name: str) -> Computation:
        for c in self.computations:
            if c.name == name:
                return c
        raise KeyError(name)

    def instruction_count(self) -> int:
        return sum(len(c) for c in self.computations)

    def to_text(self) -> str:
        return self.module.to_text()


# --------------------------------------------------------------------------------------------------


def _topological(comp: HloComputation, filename: str = "<string>") -> list[HloInstruction]:
    """Instructions in an order where operands come first (stable: keeps the written order if valid)."""
    ins = comp.instructions
    by_name = {i.name: i for i in ins}
    pos = {i.name: k for k, i in enumerate(ins)}
    if all(pos[o] < k for k, i in enumerate(ins) for o in i.operands):
        return list(ins)
    order: list[HloInstruction] = []
    state: dict[str, int] = {}
    for start in ins:
        if start.name in state:
            continue
        stack = [(start, iter(start.operands))]
        state[start.name] = 1
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                stack.pop()
                state[node.name] = 2
                order.append(node)
                continue
            s = state.get(nxt)
            if s == 1:
                raise ProgramError(f"cycle through instruction '{nxt}' in computation '{comp.name}'", by_name[nxt],
                                   filename)
            if s is None:
                state[nxt] = 1
                stack.append((by_name[nxt], iter(by_name[nxt].operands)))
    return order


class _Namer:
    def __init__(self, module: HloModule):
        self.used = {i.name for c in module.computations for i in c.instructions}
        self.counter = itertools.count(1)

    def fresh(self, base: str) -> str:
        if base not in self.used:
            self.used.add(base)
            return base
        while True:
            cand = f"{base}.i{next(self.counter)}"
            if cand not in self.used:
                self.used.add(cand)
                return cand


def _inline_calls(comp: HloComputation, comps: dict, namer: _Namer, done: set, stack: tuple = (),
                  filename: str = "<string>") -> None:
    """Inline every call/fusion in `comp` (recursively, callees first)."""
    if comp.name in done:
        return
    if comp.name in stack:
        raise ProgramError(f"recursive call through computation '{comp.name}'", None, filename)
    # Operands before users from here on (the text may define values after their uses).
    comp.instructions = _topological(comp, filename)
    if not any(i.opcode in INLINED_OPCODES for i in comp.instructions):
        done.add(comp.name)
        return
    root_name = comp.root.name
    alias: dict[str, str] = {}
    out: list[HloInstruction] = []
    for ins in comp.instructions:
        if ins.opcode not in INLINED_OPCODES:
            out.append(ins)
            continue
        callee = comps[ins.called_computations()[0]]
        _inline_calls(callee, comps, namer, done, stack + (comp.name,), filename)
        mapping: dict[str, str] = {}
        params = {p.parameter_number: p for p in callee.instructions if p.opcode == "parameter"}
        if len(params) != len(ins.operands):
            raise ProgramError(f"'{ins.name}' passes {len(ins.operands)} operands to '{callee.name}' "
                               f"which has {len(params)} parameters", ins, filename)
        for num, p in params.items():
            mapping[p.name] = ins.operands[num]
        for c_ins in callee.instructions:
            if c_ins.opcode == "parameter":
                continue
            new = c_ins.copy(name=namer.fresh(c_ins.name), is_root=False,
                             operands=[mapping[o] for o in c_ins.operands])
            mapping[c_ins.name] = new.name
            out.append(new)
        alias[ins.name] = mapping[callee.root.name]
    if alias:
        def resolve(n: str) -> str:
            while n in alias:
                n = alias[n]
            return n
        for ins in out:
            ins.operands = [resolve(o) for o in ins.operands]
        root_name = resolve(root_name)
    for ins in out:
        ins.is_root = ins.name == root_name
    comp.instructions = out
    done.add(comp.name)


def _forward_tuples(comp: HloComputation) -> None:
    """Replace get-tuple-element(tuple(...), i) by the tuple's i-th operand (XLA's simplifier does too)."""
    by_name = {i.name: i for i in comp.instructions}
    alias: dict[str, str] = {}
    for ins in comp.instructions:
        if ins.opcode == "get-tuple-element":
            src = by_name.get(alias.get(ins.operands[0], ins.operands[0]))
            if src is not None and src.opcode == "tuple":
                idx = ins.parsed["index"]
                if 0 <= idx < len(src.operands):
                    target = src.operands[idx]
                    alias[ins.name] = alias.get(target, target)
    if not alias:
        return
    root = comp.root
    for ins in comp.instructions:
        ins.operands = [alias.get(o, o) for o in ins.operands]
    if root.name in alias:
        new_root = by_name[alias[root.name]]
        root.is_root = False
        new_root.is_root = True
    # Make sure the new root is last-defined-compatible: keep order, DCE drops the old root.


_SPLAT_PRESERVING = frozenset({"slice", "dynamic-slice", "reshape", "transpose", "broadcast", "copy",
                               "reverse", "bitcast"})


def _fold_splats(comp: HloComputation) -> None:
    """Rewrite data movement of a splat (broadcast of a scalar constant) as a broadcast of that scalar,
    as XLA's algebraic simplifier (and MLIR's canonicalizer on the way through jaxlib) do; otherwise
    a fused computation can end up with a parameter that nothing reads, which XLA rejects."""
    by_name = {i.name: i for i in comp.instructions}
    scalar_of: dict[str, str] = {}
    for ins in comp.instructions:
        if ins.opcode == "constant" and ins.shape.rank == 0 and not ins.shape.is_tuple:
            scalar_of[ins.name] = ins.name
            continue
        if ins.opcode == "broadcast" and ins.operands and ins.operands[0] in scalar_of \
                and by_name[ins.operands[0]].shape.rank == 0:
            scalar_of[ins.name] = scalar_of[ins.operands[0]]
            continue
        if ins.opcode in _SPLAT_PRESERVING and ins.operands and ins.operands[0] in scalar_of \
                and not ins.shape.is_tuple and by_name[ins.operands[0]].shape.dtype == ins.shape.dtype:
            s = scalar_of[ins.operands[0]]
            scalar_of[ins.name] = s
            ins.opcode = "broadcast"
            ins.operands = [s]
            ins.attrs = {"dimensions": "{}", **({"metadata": ins.attrs["metadata"]} if "metadata" in ins.attrs else {})}
            ins.parsed = {"dimensions": ()}


def _is_noop(ins: HloInstruction, operand: HloInstruction) -> bool:
    """An instruction that returns its only operand unchanged (XLA's simplifier removes these)."""
    if ins.shape.is_tuple or operand.shape.is_tuple:
        return False
    same = ins.shape.dims == operand.shape.dims and ins.shape.dtype == operand.shape.dtype
    if not same:
        return False
    if ins.shape.minor_to_major() != operand.shape.minor_to_major():
        return False
    op = ins.opcode
    if op in ("reshape", "bitcast", "copy", "convert"):
        return True
    if op == "broadcast":
        return tuple(ins.parsed.get("dimensions", ())) == tuple(range(ins.shape.rank))
    if op == "transpose":
        return tuple(ins.parsed.get("dimensions", ())) == tuple(range(ins.shape.rank))
    if op == "reverse":
        return not ins.parsed.get("dimensions")
    if op == "slice":
        return all(d.start == 0 and d.stride == 1 and d.limit == n
                   for d, n in zip(ins.parsed.get("slice", ()), ins.shape.dims))
    if op == "concatenate":
        return len(ins.operands) == 1
    return False


_NOOP_OPCODES = frozenset({"reshape", "bitcast", "copy", "convert", "broadcast", "transpose", "reverse",
                           "slice", "concatenate"})


def _remove_noops(comp: HloComputation) -> None:
    """Forward the operand of identity reshapes/broadcasts/transposes/converts/slices/... to their users."""
    by_name = {i.name: i for i in comp.instructions}
    alias: dict[str, str] = {}
    for ins in comp.instructions:
        if ins.opcode in _NOOP_OPCODES and len(ins.operands) == 1 and not ins.is_root:
            src = alias.get(ins.operands[0], ins.operands[0])
            if _is_noop(ins, by_name[src]):
                alias[ins.name] = src
    if alias:
        for ins in comp.instructions:
            ins.operands = [alias.get(o, o) for o in ins.operands]


def _degenerate_reduces(comp: HloComputation) -> None:
    """Rewrite a reduce that only drops size-1 dimensions (same element count in and out) as a
    reshape of its operand, as XLA's algebraic simplifier does (the init value being the reducer's
    identity). Left as a reduce, the simplifier rewrites it *inside* a hand-made fusion into a
    reshape whose shape the verifier then rejects ("Fused computation shape ... is not equal to the
    fusion shape")."""
    by_name = {i.name: i for i in comp.instructions}
    for ins in comp.instructions:
        if ins.opcode != "reduce" or ins.shape.is_tuple or len(ins.operands) != 2:
            continue
        operand = by_name[ins.operands[0]]
        if operand.shape.is_tuple or any(d < 0 for d in operand.shape.dims):
            continue
        if _elements(operand.shape.dims) != _elements(ins.shape.dims):
            continue
        ins.opcode = "reshape"
        ins.operands = [ins.operands[0]]
        ins.attrs = {k: v for k, v in ins.attrs.items() if k == "metadata"}
        ins.parsed = {}


_NO_CSE = SIDE_EFFECTING | {"parameter", "custom-call", "rng-bit-generator", "while", "conditional",
                            "call", "all-reduce", "all-gather", "all-to-all", "reduce-scatter",
                            "collective-permute", "partition-id", "replica-id", "opt-barrier",
                            "add-dependency", "domain"}


def _cse(comp: HloComputation) -> None:
    """Merge identical instructions (same opcode, shape, operands, attributes), as XLA's HloCSE does
    before fusion. Left duplicated, two copies of e.g. one reshape become two operands of a fusion
    that XLA merges into one after our emission, and the now-shared fused broadcasts of that value
    break the fused computation's single-function partition (see targets.fusion_rules.single_function_partition)."""
    seen: dict[tuple, str] = {}
    alias: dict[str, str] = {}
    for ins in comp.instructions:
        if alias:
            ins.operands = [alias.get(o, o) for o in ins.operands]
        if ins.opcode in _NO_CSE or ins.is_root:
            continue
        key = (ins.opcode, ins.shape.to_text(), tuple(ins.operands), ins.literal,
               tuple(sorted((k, v) for k, v in ins.attrs.items() if k != "metadata")))
        prev = seen.get(key)
        if prev is None:
            seen[key] = ins.name
        else:
            alias[ins.name] = prev


def _elements(dims) -> int:
    n = 1
    for d in dims:
        n *= d
    return n


def _dce(comp: HloComputation) -> None:
    live = live_instructions({i.name: i for i in comp.instructions},
                             [comp.root.name] + [i.name for i in comp.instructions
                                                 if i.opcode in SIDE_EFFECTING or i.opcode == "parameter"
                                                 or (i.opcode == "custom-call"
                                                     and i.attrs.get("custom_call_has_side_effect") == "true")])
    comp.instructions = [i for i in comp.instructions if i.name in live]


def _trip_count(module: HloModule, comp: HloComputation, ins: HloInstruction) -> tuple[int, str]:
    cfg = ins.attrs.get("backend_config")
    if cfg:
        from autotune.compiler.hlo import parse_backend_config
        v = parse_backend_config(cfg)
        known = v.get("known_trip_count") if isinstance(v, dict) else None
        n = known.get("n") if isinstance(known, dict) else None
        if n is not None:
            text = str(n).strip()
            if not text.isdigit() or len(text) > 19 or int(text) > MAX_ELEMENTS:
                raise ProgramError(f"while '{ins.name}': backend_config known_trip_count n={str(n)[:24]!r} is not a "
                                   f"trip count (an integer from 0 to 2^62)", ins, module.filename)
            return int(text), "backend_config"
    comps = module.computations_by_name
    cond = comps[ins.parsed["condition"]]
    body = comps[ins.parsed["body"]]
    pattern = _induction_pattern(comp, ins, cond, body)
    if pattern is not None:
        return pattern, "induction_variable"
    counted = _brute_force_trip_count(comp, ins, cond, body)
    if counted is not None:
        return counted, "evaluated"
    return DEFAULT_TRIP_COUNT, "default"


# Iterations `_brute_force_trip_count` runs before it gives up (XLA's analysis stops at a bound too).
BRUTE_FORCE_TRIP_LIMIT = 100_000
_INT_TYPES = {"s8": 8, "s16": 16, "s32": 32, "s64": 64, "u8": 8, "u16": 16, "u32": 32, "u64": 64}
_SCALAR_BINARY = {
    "add": lambda a, b: a + b, "subtract": lambda a, b: a - b, "multiply": lambda a, b: a * b,
    "maximum": max, "minimum": min, "and": lambda a, b: a & b if not isinstance(a, bool) else a and b,
    "or": lambda a, b: a | b if not isinstance(a, bool) else a or b,
    "xor": lambda a, b: a ^ b,
}
_SCALAR_COMPARE = {"LT": lambda a, b: a < b, "LE": lambda a, b: a <= b, "GT": lambda a, b: a > b,
                   "GE": lambda a, b: a >= b, "EQ": lambda a, b: a == b, "NE": lambda a, b: a != b}


def _wrap_int(value: int, dtype: str) -> int:
    """`value` in the two's-complement range of an integer element type."""
    bits = _INT_TYPES[dtype]
    value &= (1 << bits) - 1
    return value - (1 << bits) if dtype.startswith("s") and value >= 1 << (bits - 1) else value


class _ScalarEval:
    """Evaluates the scalar integer and predicate values of a normalized computation whose parameter
    is a (nested) tuple of known scalars: enough of XLA's HloEvaluator for a loop's condition and the
    update of its counters. A value it cannot compute is None."""

    def __init__(self, comp: HloComputation):
        self.comp = comp
        self.by_name = comp.by_name

    def run(self, state: dict, name: str) -> object:
        memo: dict[str, object] = {}
        return self._value(name, state, memo)

    def _value(self, name: str, state: dict, memo: dict) -> object:
        if name in memo:
            return memo[name]
        ins = self.by_name[name]
        memo[name] = None  # (no cycles in a DAG; guards a malformed one)
        memo[name] = value = self._compute(ins, state, memo)
        return value

    def _compute(self, ins: HloInstruction, state: dict, memo: dict) -> object:
        op, shape = ins.opcode, ins.shape
        if op == "parameter":
            return ("path", ())
        if op == "get-tuple-element":
            src = self._value(ins.operands[0], state, memo)
            k = ins.parsed["index"]
            if isinstance(src, tuple) and src and src[0] == "path":
                path = src[1] + (k,)
                return state.get(path, ("path", path)) if shape.is_tuple else state.get(path)
            if isinstance(src, tuple) and src and src[0] == "tuple" and k < len(src[1]):
                return src[1][k]
            return None
        if op == "tuple":
            return ("tuple", [self._value(o, state, memo) for o in ins.operands])
        if shape.is_tuple or shape.dims or (shape.dtype not in _INT_TYPES and shape.dtype != "pred"):
            return None  # scalars of integers and predicates only
        if op == "constant":
            return _const_scalar(ins)
        vals = [self._value(o, state, memo) for o in ins.operands]
        if any(v is None or isinstance(v, tuple) for v in vals):
            if op == "select" and len(vals) == 3 and isinstance(vals[0], bool):
                v = vals[1] if vals[0] else vals[2]
                return None if isinstance(v, tuple) else v
            return None
        if op == "compare" and len(vals) == 2:
            fn = _SCALAR_COMPARE.get(str(ins.attrs.get("direction", "")))
            return None if fn is None else bool(fn(vals[0], vals[1]))
        if op == "not" and len(vals) == 1:
            return (not vals[0]) if shape.dtype == "pred" else _wrap_int(~vals[0], shape.dtype)
        if op in ("copy", "reshape", "bitcast", "broadcast") and len(vals) == 1:
            return vals[0]
        if op == "convert" and len(vals) == 1:
            return bool(vals[0]) if shape.dtype == "pred" else _wrap_int(int(vals[0]), shape.dtype)
        if op == "negate" and len(vals) == 1:
            return _wrap_int(-vals[0], shape.dtype)
        if op == "select" and len(vals) == 3:
            return vals[1] if vals[0] else vals[2]
        fn = _SCALAR_BINARY.get(op)
        if fn is not None and len(vals) == 2:
            v = fn(vals[0], vals[1])
            return bool(v) if shape.dtype == "pred" else _wrap_int(int(v), shape.dtype)
        return None


def _const_scalar(ins: HloInstruction) -> object:
    text = (ins.literal or "").strip()
    if ins.shape.dtype == "pred":
        return {"true": True, "false": False, "1": True, "0": False}.get(text)
    try:
        return _wrap_int(int(text, 0), ins.shape.dtype)
    except ValueError:
        return None


def _tuple_leaves(comp: HloComputation, name: str, path: tuple = ()) -> dict:
    """{path: scalar} of the integer/predicate constants in the (nested) tuple `name` builds."""
    ins = comp.by_name.get(name)
    if ins is None:
        return {}
    if ins.opcode == "tuple":
        out: dict = {}
        for k, o in enumerate(ins.operands):
            out.update(_tuple_leaves(comp, o, path + (k,)))
        return out
    if ins.opcode == "constant" and not ins.shape.is_tuple and not ins.shape.dims \
            and (ins.shape.dtype in _INT_TYPES or ins.shape.dtype == "pred"):
        v = _const_scalar(ins)
        return {path: v} if v is not None else {}
    return {}


def _root_leaf_names(comp: HloComputation, name: str, path: tuple = ()) -> dict:
    """{path: instruction name} of each leaf of the (nested) tuple a body's root builds."""
    ins = comp.by_name[name]
    if ins.opcode == "tuple":
        out: dict = {}
        for k, o in enumerate(ins.operands):
            out.update(_root_leaf_names(comp, o, path + (k,)))
        return out
    return {path: name}


def _brute_force_trip_count(comp: HloComputation, ins: HloInstruction, cond: HloComputation,
                            body: HloComputation) -> Optional[int]:
    """The trip count found by running the loop's scalar state, as XLA's analysis does when no
    induction pattern matches: the state's integer/predicate leaves that start as constants and that
    the body updates from known leaves (a TensorFlow loop counter and its maximum_iterations, nested
    tuples, conditions through `call`s, `and` of several bounds). None when the condition reads an
    unknown value or the loop outlives `BRUTE_FORCE_TRIP_LIMIT`."""
    state = _tuple_leaves(comp, ins.operands[0])
    if not state:
        return None
    updates = _root_leaf_names(body, body.root.name)
    cond_eval, body_eval = _ScalarEval(cond), _ScalarEval(body)
    for n in range(BRUTE_FORCE_TRIP_LIMIT + 1):
        go = cond_eval.run(state, cond.root.name)
        if not isinstance(go, bool):
            return None
        if not go:
            return n
        memo: dict = {}
        new = {}
        for path in state:
            name = updates.get(path)
            v = None if name is None else body_eval._value(name, state, memo)
            if v is not None and not isinstance(v, tuple):
                new[path] = v
        state = new
    return None


def _const_int(ins: Optional[HloInstruction]) -> Optional[int]:
    if ins is None or ins.opcode != "constant" or ins.shape.dims:
        return None
    try:
        return int(float(ins.literal))
    except (TypeError, ValueError, OverflowError):  # not a number, nan, inf
        return None


def _induction_pattern(comp: HloComputation, ins: HloInstruction, cond: HloComputation,
                       body: HloComputation) -> Optional[int]:
    """Trip count of `while i < N: i += step` with a constant start, as XLA's trip-count analysis."""
    cb = cond.by_name
    root = cond.root
    if root.opcode != "compare" or len(root.operands) != 2:
        return None
    direction = root.attrs.get("direction")
    a, b = cb[root.operands[0]], cb[root.operands[1]]
    if a.opcode == "get-tuple-element" and _const_int(b) is not None:
        gte, limit = a, _const_int(b)
    elif b.opcode == "get-tuple-element" and _const_int(a) is not None:
        gte, limit = b, _const_int(a)
        direction = {"GT": "LT", "GE": "LE", "LT": "GT", "LE": "GE"}.get(direction, direction)
    else:
        return None
    if cb[gte.operands[0]].opcode != "parameter":
        return None
    k = gte.parsed["index"]
    # Initial value: element k of the init tuple.
    init = comp.by_name.get(ins.operands[0])
    if init is None or init.opcode != "tuple" or k >= len(init.operands):
        return None
    start = _const_int(comp.by_name.get(init.operands[k]))
    if start is None:
        return None
    # Step: body root tuple element k = add(gte(param, k), constant).
    bb = body.by_name
    broot = body.root
    if broot.opcode != "tuple" or k >= len(broot.operands):
        return None
    upd = bb[broot.operands[k]]
    if upd.opcode != "add":
        return None
    x, y = bb[upd.operands[0]], bb[upd.operands[1]]
    if _const_int(x) is not None:
        x, y = y, x
    step = _const_int(y)
    if (step is None or step <= 0 or x.opcode != "get-tuple-element" or x.parsed["index"] != k
            or bb[x.operands[0]].opcode != "parameter"):
        return None
    if direction == "LT":
        n = -(-(limit - start) // step)
    elif direction == "LE":
        n = (limit - start) // step + 1
    elif direction == "NE" and (limit - start) % step == 0:
        n = (limit - start) // step
    else:
        return None
    return max(0, int(n)) if n <= MAX_ELEMENTS else None


def _refuse_unsupported(module: HloModule, names: set) -> None:
    """One clear error (file:line:col, instruction) for an opcode the program model cannot hold."""
    for comp in module.computations:
        if comp.name not in names:
            continue
        for ins in comp.instructions:
            if ins.opcode in UNSUPPORTED_OPCODES:
                raise ProgramError(f"instruction '{ins.name}' "
                                   f"('{ins.opcode}'): {_UNSUPPORTED_WHY}", ins, module.filename)


def _async_roles(opcode: str) -> Optional[tuple]:
    """(start opcode, update opcode or None, sync opcode) of an async `*-done` opcode, else None."""
    if opcode in ASYNC_DONE_TO_SYNC:
        start, sync = ASYNC_DONE_TO_SYNC[opcode]
        return start, ("async-update" if start == "async-start" else None), sync
    sugar = async_sugar(opcode)
    if sugar is not None and sugar[1] == "done":
        return f"{sugar[0]}-start", f"{sugar[0]}-update", sugar[0]
    return None


def _is_async_start_or_update(opcode: str) -> bool:
    sugar = async_sugar(opcode)
    return opcode in _ASYNC_STARTS or opcode == "async-update" or (sugar is not None and sugar[1] != "done")


def _sync_async_pairs(module: HloModule, comp: HloComputation) -> None:
    """Rewrite every `*-start` ... `*-done` pair of comp as the synchronous instruction (in place of
    the done): an async-start/update/done chain becomes a `call` of the wrapped computation (which
    `_inline_calls` then inlines), XLA's shorthand `X-start`/`X-update`/`X-done` the X it wraps."""
    if not any(_is_async_start_or_update(i.opcode) or _async_roles(i.opcode) for i in comp.instructions):
        return
    by_name = comp.by_name
    users: dict[str, list] = {i.name: [] for i in comp.instructions}
    for i in comp.instructions:
        for o in dict.fromkeys(i.operands):
            users[o].append(i)
    removed: set[str] = set()
    for done in [i for i in comp.instructions if _async_roles(i.opcode)]:
        start_op, update_op, sync_op = _async_roles(done.opcode)
        chain = [done]
        start = by_name[done.operands[0]] if done.operands else None
        while start is not None and update_op is not None and start.opcode == update_op:
            chain.append(start)
            start = by_name[start.operands[0]] if start.operands else None
        if start is None or start.opcode != start_op:
            raise ProgramError(f"instruction '{done.name}' "
                               f"('{done.opcode}') does not take a '{start_op}' as its operand", done,
                               module.filename)
        for link in chain[1:] + [start]:
            others = [u.name for u in users[link.name] if u not in chain]
            if others:
                allowed = f"{update_op}/{done.opcode}" if update_op else done.opcode
                raise ProgramError(f"instruction '{link.name}' "
                                   f"('{link.opcode}') is used by '{others[0]}'; only its {allowed} may use it",
                                   link, module.filename)
        meta = {"metadata": done.attrs["metadata"]} if "metadata" in done.attrs else {}
        if start_op == "async-start":
            callee = start.parsed["calls"][0]
            attrs, parsed = {"to_apply": callee, **meta}, {"to_apply": callee}
        elif sync_op == "copy":
            attrs, parsed = dict(meta), {}
        else:  # the operation's own attributes (groups, dimensions, reducer, target, ...) as written
            attrs = {k: v for k, v in start.attrs.items() if not k.startswith("async_")}
            parsed = {k: v for k, v in start.parsed.items() if k in attrs}
        done.opcode, done.operands, done.attrs, done.parsed = sync_op, list(start.operands), attrs, parsed
        removed.update(link.name for link in chain[1:] + [start])
    comp.instructions = [i for i in comp.instructions if i.name not in removed]
    for i in comp.instructions:
        if _is_async_start_or_update(i.opcode):
            raise ProgramError(f"instruction '{i.name}' ('{i.opcode}') "
                               "has no matching '-done' instruction", i, module.filename)


_ASYNC_STARTS = frozenset(start for start, _ in ASYNC_DONE_TO_SYNC.values())


def _normalize(module: HloModule) -> Program:
    comps = module.computations_by_name
    entry = module.entry
    live_comps = _reachable(module)
    _refuse_unsupported(module, live_comps)
    callback_note = host_callback_warning(module)
    for c in module.computations:
        if c.name in live_comps:
            _sync_async_pairs(module, c)
    filename = module.filename
    namer = _Namer(module)
    done: set[str] = set()
    whiles: list[WhileInfo] = []
    flags: list[str] = [callback_note] if callback_note else []
    # Kernel-bearing computations, discovered from the entry through control flow (each normalized
    # once, in discovery order), with the control-flow edges (callee, executions per caller
    # execution, kind, instruction).
    kinds: dict[str, str] = {entry.name: "entry"}
    edges: dict[str, list] = {}
    queue = deque([entry.name])
    normalized: set[str] = set()

    def normalize(name: str) -> HloComputation:
        comp = comps[name]
        if name not in normalized:
            normalized.add(name)
            _inline_calls(comp, comps, namer, done, filename=filename)
            _forward_tuples(comp)
            _fold_splats(comp)
            _degenerate_reduces(comp)
            _remove_noops(comp)
            _cse(comp)
            _dce(comp)
        return comp

    while queue:
        name = queue.popleft()
        comp = normalize(name)
        out = edges[name] = []
        for ins in comp.instructions:
            if ins.opcode == "while":
                normalize(ins.parsed["condition"])  # calls inlined, tuples forwarded: what the count reads
                normalize(ins.parsed["body"])
                n, src = _trip_count(module, comp, ins)
                whiles.append(WhileInfo(name, ins.name, ins.parsed["body"], ins.parsed["condition"], n, src))
                if src == "default":
                    flags.append(f"while '{ins.name}' in '{name}': trip count unknown, assumed "
                                 f"{DEFAULT_TRIP_COUNT}")
                out.append((ins.parsed["body"], float(n), "while_body", ins))
                out.append((ins.parsed["condition"], float(n) + 1, "while_condition", ins))
            elif ins.opcode == "conditional":
                branches = ins.called_computations()
                out.extend((b, 1.0 / len(branches), "branch", ins) for b in branches)
        for callee, _, kind, _ in out:
            if callee not in kinds:
                kinds[callee] = kind
                queue.append(callee)
    mult = _multiplicities(entry.name, kinds, edges, filename)
    # Keep only computations still referenced (called ones are inlined away).
    reachable = reachable_computations(module, [entry.name], comps)
    module.computations = [c for c in module.computations if c.name in reachable]
    # Attached computations (reducers, comparators) must not keep stale tuple structure; normalize
    # them lightly too (they may contain calls from JAX).
    for c in module.computations:
        if c.name not in mult:
            _inline_calls(c, comps, namer, done, filename=filename)
    live = _reachable(module)
    module.computations = [c for c in module.computations if c.name in live]
    looped = _inside_loops(kinds, edges)
    bearing = [Computation(comps[n], mult[n], kinds[n], filename, n in looped) for n in kinds]
    prog = Program(module, bearing, whiles, flags, module.name, module.filename)
    return prog


def _inside_loops(kinds: dict, edges: dict) -> set:
    """Kernel-bearing computations that run inside a while loop: bodies and conditions, and what
    control flow reaches from them."""
    looped = {n for n, k in kinds.items() if k.startswith("while_")}
    stack = list(looped)
    while stack:
        for callee, _, _, _ in edges.get(stack.pop(), ()):
            if callee not in looped:
                looped.add(callee)
                stack.append(callee)
    return looped


def _multiplicities(entry: str, kinds: dict, edges: dict, filename: str) -> dict:
    """Executions per program run of each kernel-bearing computation: summed over every control-flow
    path from the entry, callers before callees (one pass; the verifier rules out cycles)."""
    indegree = dict.fromkeys(kinds, 0)
    for out in edges.values():
        for callee, _, _, _ in out:
            indegree[callee] += 1
    mult = dict.fromkeys(kinds, 0.0)
    mult[entry] = 1.0
    ready = [entry] if indegree[entry] == 0 else []
    seen = 0
    while ready:
        name = ready.pop()
        seen += 1
        for callee, factor, _, ins in edges[name]:
            mult[callee] += mult[name] * factor
            if not math.isfinite(mult[callee]):
                raise ProgramError(f"while '{ins.name}': loops nested too deep to count executions "
                                   f"(more than 1e308)", ins, filename)
            indegree[callee] -= 1
            if indegree[callee] == 0:
                ready.append(callee)
    if seen != len(kinds):
        name = next(n for n, d in indegree.items() if d > 0)
        raise ProgramError(f"control flow through computation '{name}' is cyclic", None, filename)
    return mult


def _reachable(module: HloModule) -> set:
    return reachable_computations(module, [module.entry.name])


def load_program(path: str) -> Program:
    """Parse and normalize an HLO file (errors: HloParseError with file:line:col, or ProgramError)."""
    return Program.from_file(path)


__all__ = ["Program", "Computation", "WhileInfo", "ProgramError", "HloParseError", "load_program",
           "DEFAULT_TRIP_COUNT"]
