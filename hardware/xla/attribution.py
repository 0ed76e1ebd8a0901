"""Thunks back to kernels: each kernel of a fusion configuration gets the time of the thunks that
run it inside the compiled program (:func:`attribute_thunks`, :class:`InProgramTiming`)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

import numpy as np

from hardware.base import Measurement


# Kernels made only of these become layout bitcasts in XLA:CPU (no thunk, no time) when layout
# assignment can choose the layouts around them.
_LAYOUT_OPCODES = frozenset({"reshape", "bitcast", "transpose", "copy"})


@dataclass
class InProgramTiming:
    """A fusion configuration measured in place (:meth:`XlaEvaluator.measure_in_program`).

    ``end_to_end``: the emitted program's time per execution (median of the repeats of
    :func:`time_compiled`, unprofiled), its ``extra`` as an XLA measurement's plus ``thunks``.
    ``kernels``: one Measurement per kernel asked for, its in-program seconds per execution (median
    over the profiled executions of the time of its thunks in each, each with the idle time before
    it charged to it, divided by how often they ran per execution: :func:`attribute_thunks`);
    ``extra["thunks"]`` names them, ``extra["count"]`` says how often, ``extra["thunk_seconds"]`` and
    ``extra["gap_seconds"]`` split the time. A kernel no thunk ran for costs 0 s with
    ``extra["no_thunk"]`` saying why. ``unattributed``: thunks of no kernel (copies XLA inserted),
    seconds per program execution.
    """

    end_to_end: Measurement
    kernels: list[Measurement]
    unattributed: dict[str, float] = field(default_factory=dict)

    @property
    def kernel_sum(self) -> float:
        """Sum of the in-program kernel times weighted by how often each runs (nan if one failed)."""
        if not all(m.ok for m in self.kernels):
            return math.nan
        return float(sum(m.seconds * m.extra.get("count", 1) for m in self.kernels))


# Opcodes whose work XLA may move under another instruction's name (it folds transpose(dot(a, b))
# into dot(b, a) named after the transpose).
_MOVABLE_WORK_OPCODES = frozenset({"dot", "convolution"})


def _thunk_series(t: dict, charge_gaps: bool) -> np.ndarray:
    """A thunk's time in each profiled execution: its self time, plus the idle time before it when
    `charge_gaps` (a control thunk then costs 0: its overhead is in its body's gaps)."""
    own = np.asarray(t["seconds"], np.float64)
    if not charge_gaps:
        return own
    if t.get("control"):
        return np.zeros_like(own)
    gaps = np.asarray(t.get("gap_seconds") or [], np.float64)
    return own + gaps if gaps.shape == own.shape else own


def _folded_into(kernels: Sequence[Any], i: int, t: dict, taken: Any) -> Optional[int]:
    """The kernel whose dot/convolution XLA folded into kernel ``i``'s thunk ``t`` (named after
    ``i``'s root, which computes neither), or None: among the kernels without a thunk that compute
    what ``t`` computes and have its result size, the one producer of kernel ``i``, else the only one."""
    work = set(t.get("computes") or [t.get("opcode")]) & _MOVABLE_WORK_OPCODES
    if not work or set(kernels[i].opcodes) & _MOVABLE_WORK_OPCODES:
        return None
    cands = [j for j, k in enumerate(kernels) if j not in taken and work & set(k.opcodes)
             and k.root_instruction.shape.elements == t.get("elements")]
    inputs = set(getattr(kernels[i], "inputs", ()) or ())
    feeding = [j for j in cands if getattr(kernels[j], "comp", None) == getattr(kernels[i], "comp", None)
               and getattr(kernels[j], "root", None) in inputs]
    if len(feeding) == 1:
        return feeding[0]
    return cands[0] if len(cands) == 1 else None


def attribute_thunks(kernels: Sequence[Any], thunks: dict[str, dict], *,
                     charge_gaps: bool = True) -> tuple[list[Measurement], dict[str, float]]:
    """Each kernel's in-program time from a profiled program's thunks (``profile_answer``'s
    ``thunks``), and the thunks that belong to no kernel.

    A thunk belongs to the kernel whose root instruction it was made from (its ``origin``: the emitted
    program names each fusion after its kernel's root, or ``<root>.sunk.<n>`` where the emission moved a
    reshape past it: ``emitted_kernel_root``; XLA keeps that name as op_name), except a dot or
    convolution named after a kernel computing neither: XLA folded ``transpose(dot)`` into a dot
    named after the transpose, and the thunk belongs to the dot's kernel (:func:`_folded_into`,
    ``extra["matched_by"]``; the transpose kernel then has no thunk). A thunk
    without op_name (XLA rewrote the instruction, e.g. a batched dot) belongs to the one kernel
    without a thunk whose root has its opcode and result size (and, among several, runs as often per
    execution: ``multiplicity``), when exactly one does (``extra["matched_by"]``); the rest are ``unattributed``.

    With `charge_gaps` (the default) a thunk costs its self time plus the idle time before it in the
    same execution (``gap_seconds``, :func:`thunk_gaps`: the executor dispatching it), so the kernel
    times and the unattributed ones add up to the executor's run; each kernel's ``extra`` keeps both
    parts (``thunk_seconds``, ``gap_seconds``, medians per run of it). Kernels need
    ``root_instruction`` (name, opcode, shape) and ``opcodes``. See :class:`InProgramTiming`."""
    from autotune.compiler.emission import emitted_kernel_root
    by_root: dict[str, int] = {}
    for i, k in enumerate(kernels):
        by_root.setdefault(k.root_instruction.name, i)
    mine: dict[int, list[str]] = {}
    orphans: list[str] = []
    for name, t in thunks.items():
        i = by_root.get(emitted_kernel_root(t.get("origin") or ""))
        if i is None:
            orphans.append(name)
        else:
            mine.setdefault(i, []).append(name)
    matched: dict[int, str] = {}
    folded: dict[int, str] = {}  # kernel -> why its thunk went to another kernel
    for i in sorted(mine):
        for name in sorted(mine[i]):
            j = _folded_into(kernels, i, thunks[name], mine.keys() | matched.keys())
            if j is not None:
                mine[i].remove(name)
                mine[j] = [name]
                matched[j] = "XLA folded it into the thunk named after the kernel it feeds (transpose(dot) -> dot)"
                folded[i] = (f"XLA folded it into the {'/'.join(sorted(set(kernels[j].opcodes) & _MOVABLE_WORK_OPCODES))}"
                             f" of kernel {kernels[j].root_instruction.name}, whose thunk is named after it")
        if not mine[i]:
            del mine[i]
    # A thunk XLA made without op_name (e.g. a dot it rewrote) belongs to the one kernel without a
    # thunk whose root has its opcode and result size, if exactly one does.
    for name in sorted(orphans):
        t = thunks[name]
        if t.get("origin") is not None or t.get("opcode") in (None, "fusion", "copy") or not t.get("elements"):
            continue
        cands = [i for i, k in enumerate(kernels) if i not in mine and i not in matched
                 and k.root_instruction.opcode == t["opcode"] and k.root_instruction.shape.elements == t["elements"]]
        if len(cands) > 1:  # tell them apart by how often they run (a while body's kernel: trip count)
            cands = [i for i in cands if getattr(kernels[i], "multiplicity", None) == t["count"]]
        if len(cands) == 1:
            mine[cands[0]] = [name]
            matched[cands[0]] = "opcode and result size (the thunk has no op_name)"
    done = {n for names in mine.values() for n in names}
    unattributed = {n: float(np.median(_thunk_series(thunks[n], charge_gaps))) if thunks[n]["seconds"] else 0.0
                    for n in orphans if n not in done}
    out: list[Measurement] = []
    for i, k in enumerate(kernels):
        names = sorted(mine.get(i, []))
        if not names:
            ops = set(k.opcodes)
            why = folded.get(i) or ("a layout bitcast (no data moved)" if ops <= _LAYOUT_OPCODES else
                                    f"elided or folded by XLA ({', '.join(sorted(ops))})")
            out.append(Measurement(0.0, extra={"no_thunk": f"no thunk ran for it: {why}", "count": 1,
                                               "thunks": []}))
            continue
        per_run = np.sum([_thunk_series(thunks[n], charge_gaps) for n in names], axis=0)
        own = np.sum([np.asarray(thunks[n]["seconds"], np.float64) for n in names], axis=0)
        count = max(1, max(int(thunks[n]["count"]) for n in names))
        extra = {"thunks": names, "count": count, "repeats": [float(x) / count for x in per_run],
                 "thunk_seconds": float(np.median(own)) / count,
                 "gap_seconds": float(np.median(per_run - own)) / count if charge_gaps else 0.0}
        if i in matched:
            extra["matched_by"] = matched[i]
        out.append(Measurement(float(np.median(per_run)) / count, extra=extra))
    return out, unattributed
