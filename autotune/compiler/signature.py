"""Name- and order-independent signatures of HLO instructions, shapes and attached computations:
the parts a kernel's canonical hash is made of (two kernels with the same structure, shapes and
attributes hash alike whatever their instruction names)."""
from __future__ import annotations

import hashlib
import struct

from autotune.compiler.hlo import CALLED_COMPUTATION_ATTRS, HloComputation, HloInstruction, HloModule, Shape
from autotune.compiler.program import ProgramError

# Attributes that do not change what a kernel computes or how fast it runs.
_IGNORED_ATTRS = frozenset({"metadata", "sharding", "frontend_attributes", "backend_config",
                            "statistics_viz", "control-predecessors", "origin", "schedule",
                            "operand_precision"})


def _h64(data: bytes) -> int:
    return struct.unpack("<q", hashlib.blake2b(data, digest_size=8).digest())[0]


def shape_signature(shape: Shape) -> int:
    """Signature of a shape (dtype, dimensions, layout)."""
    return _h64(b"shape|" + shape.to_text().encode())


def computation_signature(comp: HloComputation, module: HloModule, cache: dict) -> int:
    """Name- and order-independent signature of an attached computation (reducer, comparator, ...):
    instructions serialized in post-order from the root, operands by post-order position."""
    key = ("comp", comp.name)
    if key in cache:
        if cache[key] is None:  # re-entered: a computation that calls itself (the verifier refuses these)
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


__all__ = ["shape_signature", "instruction_signature", "computation_signature"]
