"""In-program thunk timing: a compiled program run under a jaxlib profiler session, each thunk's
time read from the trace (:func:`profile_compiled`, :func:`profile_answer`).

On XLA:CPU the sum of standalone kernel times is not a program's runtime (each standalone kernel
pays its own launch, cache misses on its inputs and output allocation), so kernels are also timed
*inside* the compiled program: while a jaxlib profiler session is active, XLA:CPU's thunk executor
records one trace event per thunk it runs, named after the instruction of the optimized module,
with ``hlo_op`` and ``run_id`` stats; the session hands them back in memory. (jaxlib 0.10.2 records
them without any compile option: ``xla_cpu_enable_xprof_traceme`` adds no thunk events, so the
profiled program is compiled exactly as the one timed end to end.) The executor's idle time
between thunks (dispatching the next one) is no thunk's: :func:`thunk_gaps` measures the gap
before each thunk, and :func:`~hardware.xla.attribution.attribute_thunks` charges it to the kernel
of that thunk, so that the kernels' times add up to the executor's run.
"""
from __future__ import annotations

import bisect
import math
import re
import statistics
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

import numpy as np

from hardware.xla._jaxlib import _api
from hardware.xla.compile import CompiledHlo
from hardware.xla.fusion_report import xla_fusion_report
from hardware.xla.timing import TimingOptions, TimingResult, _argument_source, time_compiled


_CONTROL_OPCODES = frozenset({"while", "conditional", "call", "async-start", "async-done"})


@dataclass
class ThunkTiming:
    """One thunk of a profiled program: its self time in each profiled execution (seconds, the sum
    over its events in that execution: a thunk in a while body runs once per iteration), how
    many times it ran per execution, and in each execution the idle time before its events
    (``gaps``, :func:`thunk_gaps`: the executor's dispatch of it)."""

    seconds: list[float]
    count: int
    gaps: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        """Repeat median of its per-execution time."""
        return float(statistics.median(self.seconds)) if self.seconds else 0.0


@dataclass
class ProgramProfile:
    """A compiled program's end-to-end time (unprofiled, :func:`time_compiled`) and the time of
    each thunk inside it over ``runs`` profiled executions (``thunks``: optimized-module instruction
    name -> :class:`ThunkTiming`); ``run_seconds`` is each profiled execution's span (its
    ``ThunkExecutor::Execute`` event, or from its first thunk's start to its last thunk's end where
    the trace has none) and ``tail_seconds`` the part of it after the last thunk ended."""

    end_to_end: TimingResult
    thunks: dict[str, ThunkTiming]
    runs: int
    run_seconds: list[float]
    tail_seconds: list[float] = field(default_factory=list)


def thunk_self_times(events: Sequence[tuple[Any, str, int, float, float]],
                     control: "frozenset[str] | set[str]" = frozenset()) -> dict[int, dict[str, tuple[float, int]]]:
    """{run id: {thunk name: (self seconds, events)}} from thunk trace events
    ``(thread, name, run_id, start_ns, duration_ns)``.

    A control thunk (a name in `control`: while, conditional, call) encloses the thunks of its body,
    which may run on other threads: its self time is its duration less the union of the intervals of
    the run's other events inside it, so that no time is counted twice. Other thunks' self time is
    their duration (independent thunks may overlap on two threads).
    """
    by_run: dict[int, list] = {}
    for ev in events:
        by_run.setdefault(int(ev[2]), []).append(ev)
    out: dict[int, dict[str, tuple[float, int]]] = {}
    for run, evs in by_run.items():
        evs.sort(key=lambda e: (e[3], -e[4]))
        acc: dict[str, list] = {}
        for j, (_, name, _, start, dur) in enumerate(evs):
            self_ns = dur
            if name in control:
                end, covered, reach = start + dur, 0.0, start
                for k in range(j + 1, len(evs)):
                    s2, d2 = evs[k][3], evs[k][4]
                    if s2 >= end:
                        break
                    if s2 + d2 > end:
                        continue  # not inside this thunk
                    lo, hi = max(s2, reach), s2 + d2
                    if hi > lo:
                        covered += hi - lo
                        reach = hi
                self_ns = dur - covered
            slot = acc.setdefault(name, [0.0, 0])
            slot[0] += max(self_ns, 0.0) * 1e-9
            slot[1] += 1
        out[run] = {n: (v[0], v[1]) for n, v in acc.items()}
    return out


def thunk_gaps(events: Sequence[tuple[Any, str, int, float, float]],
               control: "frozenset[str] | set[str]" = frozenset(),
               execute: Optional[dict[int, tuple[float, float]]] = None) -> dict[int, tuple[dict[str, float], float]]:
    """{run id: ({thunk name: seconds idle before it}, seconds after the last thunk)} from thunk
    trace events ``(thread, name, run_id, start_ns, duration_ns)``.

    Over the run's thunks in start order (all threads), a thunk's gap is the time from the latest
    end of the thunks started before it (the run's start: ``execute[run]``, the
    ``ThunkExecutor::Execute`` span ``(start_ns, end_ns)``, else its first thunk's start) to its own
    start, 0 when it starts while another runs. A control thunk (while, conditional, call) is no
    work of its own: it neither ends a gap nor gets one, so its overhead goes to the thunks of its
    body and after it. A thunk's gaps over its events add up; the gaps, the union of the
    non-control thunks' intervals and the tail cover the run exactly.
    """
    by_run: dict[int, list] = {}
    for ev in events:
        if ev[1] not in control:
            by_run.setdefault(int(ev[2]), []).append(ev)
    out: dict[int, tuple[dict[str, float], float]] = {}
    for run, evs in by_run.items():
        evs.sort(key=lambda e: (e[3], -e[4]))
        span = (execute or {}).get(run)
        reach = min(evs[0][3], span[0]) if span else evs[0][3]
        acc: dict[str, float] = {}
        for _, name, _, start, dur in evs:
            acc[name] = acc.get(name, 0.0) + max(start - reach, 0.0) * 1e-9
            reach = max(reach, start + dur)
        tail = max(span[1] - reach, 0.0) * 1e-9 if span else 0.0
        out[run] = (acc, tail)
    return out


def _thunk_events(profile_data: Any) -> tuple[list[tuple[Any, str, int, float, float]], dict[int, tuple[float, float]]]:
    """Thunk events ``(thread, hlo_op, run_id, start_ns, duration_ns)`` of jaxlib ProfileData, and
    each run's span ``(start_ns, end_ns)``: from the start of the last ``ThunkExecutor::Execute``
    event (any thread: the executor hands thunks to a thread pool) that began at or before its first
    thunk, else that thunk's start, to the end of its last thunk or of that event, whichever is later."""
    events: list = []
    first: dict[int, float] = {}
    last: dict[int, float] = {}
    executes: list[tuple[float, float]] = []
    for plane in profile_data.planes:
        for li, line in enumerate(plane.lines):
            for ev in line.events:
                if ev.name == "ThunkExecutor::Execute":
                    start = float(ev.start_ns)
                    executes.append((start, start + float(ev.duration_ns)))
                    continue
                stats = dict(ev.stats)
                op, run = stats.get("hlo_op"), stats.get("run_id")
                if op is None or run is None:
                    continue
                run = int(run)
                start, dur = float(ev.start_ns), float(ev.duration_ns)
                events.append(((plane.name, li), str(op), run, start, dur))
                first[run] = min(first.get(run, start), start)
                last[run] = max(last.get(run, start + dur), start + dur)
    executes.sort()
    starts = [e[0] for e in executes]
    spans: dict[int, tuple[float, float]] = {}
    for run, start in first.items():
        k = bisect.bisect_right(starts, start) - 1
        spans[run] = (executes[k][0], max(executes[k][1], last[run])) if k >= 0 else (start, last[run])
    return events, spans


def profile_compiled(compiled: CompiledHlo, inputs: Sequence[np.ndarray], runs: int = 20,
                     timing: TimingOptions = TimingOptions()) -> ProgramProfile:
    """End-to-end time of a program (:func:`time_compiled`, unprofiled) and each thunk's time inside
    it over `runs` profiled executions, spread over the end-to-end repeats (after each repeat, an
    equal share of the profiled executions, then ``timing.warmup`` (at least 1) untimed ones: the
    first execution after a profiler session runs up to 10x slow, and would count in the next repeat).
    RuntimeError when the profile holds no thunk event (an XLA backend that does not trace its thunks)."""
    fresh_args, _ = _argument_source(compiled, inputs)
    execute = compiled.execute
    session_type = _api().profiler_session
    n_repeats = max(1, int(timing.repeat))
    runs = max(1, int(runs))
    events: list = []
    spans: dict[int, tuple[float, float]] = {}

    def profiled_block(i: int) -> None:
        n = runs // n_repeats + (i < runs % n_repeats)
        if n == 0:
            return
        session = session_type()
        try:
            for _ in range(n):
                execute(fresh_args())
        finally:
            data = session.stop_and_get_profile_data()
        for _ in range(max(1, timing.warmup)):  # the first executions after a profiler session run slow
            execute(fresh_args())
        evs, sp = _thunk_events(data)
        events.extend(evs)
        spans.update(sp)

    end_to_end = time_compiled(compiled, inputs, timing, after_repeat=profiled_block)
    control = {r["name"] for r in xla_fusion_report("", include_unfused=True,
                                                    optimized_module=compiled.optimized_module())
               if r["kind"] is None and r["instructions"] and r["instructions"][0]["opcode"] in _CONTROL_OPCODES}
    per_run = thunk_self_times(events, control)
    if not per_run:
        raise RuntimeError("no thunk events in the profile: this XLA backend does not trace its thunks")
    gaps = thunk_gaps(events, control, spans)
    run_ids = sorted(per_run)
    names = sorted({n for d in per_run.values() for n in d})
    thunks = {}
    for n in names:
        seen = [per_run[r].get(n, (0.0, 0)) for r in run_ids]
        thunks[n] = ThunkTiming([s for s, _ in seen], int(statistics.median(c for _, c in seen)),
                                [gaps.get(r, ({}, 0.0))[0].get(n, 0.0) for r in run_ids])
    return ProgramProfile(end_to_end, thunks, len(run_ids),
                          [(spans[r][1] - spans[r][0]) * 1e-9 for r in run_ids],
                          [gaps.get(r, ({}, 0.0))[1] for r in run_ids])


def _result_elements(line: str) -> Optional[int]:
    """Elements of an instruction's array result, from its printed text (None for tuples)."""
    m = re.match(r"\s*(?:ROOT\s+)?%?[\w.\-]+ = \w+\[([\d,]*)\]", line)
    if m is None:
        return None
    return math.prod(int(d) for d in m.group(1).split(",") if d)


def profile_answer(compiled: CompiledHlo, inputs: Sequence[np.ndarray], runs: int,
                    timing: TimingOptions) -> dict:
    """A profiled program's answer (worker side): the end-to-end repeat median as ``seconds``, and
    per thunk its per-execution seconds, the idle time before it in each (``gap_seconds``), count
    and where it comes from in the input program (``origin``: the op_name of the optimized
    instruction, i.e. the input instruction it was made from, its ``opcode``, the opcodes it
    ``computes`` and whether it is a ``control`` thunk whose time is its body's); per profiled
    execution its span and the part after its last thunk (``run_seconds``, ``tail_seconds``)."""
    prof = profile_compiled(compiled, inputs, runs, timing)
    module = compiled.optimized_module()
    made_from = {r["name"]: r for r in xla_fusion_report("", include_unfused=True, optimized_module=module)}
    lines = {i.name: i.to_string() for c in module.computations() for i in c.instructions()}
    thunks = {}
    for name, t in prof.thunks.items():
        r = made_from.get(name)
        op_name = r["op_name"] if r else None
        opcode = (r["instructions"][0]["opcode"] if r and r["kind"] is None and r["instructions"]
                  else "fusion" if r else None)
        thunks[name] = {"seconds": t.seconds, "gap_seconds": t.gaps, "count": t.count,
                        "origin": op_name.rsplit("/", 1)[-1] if op_name else None,
                        "opcode": opcode, "control": opcode in _CONTROL_OPCODES,
                        "computes": sorted({i["opcode"] for i in r["instructions"]}) if r else [],
                        "elements": _result_elements(lines.get(name, ""))}
    return {"seconds": float(statistics.median(prof.end_to_end.repeats)), "repeats": prof.end_to_end.repeats,
            "number": prof.end_to_end.number, "thunks": thunks, "profiled_runs": prof.runs,
            "run_seconds": prof.run_seconds, "tail_seconds": prof.tail_seconds}
