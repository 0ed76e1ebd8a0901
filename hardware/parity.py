"""Output parity on real XLA: does an emitted (fused) program compute what the original computes?

Optional extra ``xla`` (jax/jaxlib), imported lazily like :mod:`hardware.xla`.

* :func:`hardware.xla.output_error` compares output arrays (the metric below) and
  :func:`hardware.xla.verification_inputs` makes the inputs both programs run on.
* :func:`check_program` emits configurations of a program for a target and checks each one on
  XLA:CPU: our parser and XLA's re-read the text, XLA compiles it (its verifier runs first) with the
  options a user would use (``xla``: XLA's defaults) and with those our evaluator measures with
  (``measure``: :data:`autotune.compiler.emission.EMITTED_CPU_COMPILE_OPTIONS`), runs it and compares the
  outputs with the original's. Each (program, target) runs in its own subprocess: an XLA
  ``Check failed`` aborts the process, and then each (configuration, options) case is run alone to
  say which one did it.

Configurations for a target other than ``cpu`` are checked in the form XLA:CPU can run
(:func:`autotune.compiler.emission.cpu_checkable`): every fusion kLoop, and kernels XLA:CPU cannot compile as
one loop fusion split into single instructions; each result says how many of the configuration's
multi-instruction kernels were checked as fusions.

Outputs are compared with :func:`hardware.xla.output_error` (relative error with a floor for
cancellations; 1e-4 for 32/64-bit floats, 1e-2 for 16-bit and for every float output of a program that
computes in 16-bit floats, integers exact). The reference is the
original program compiled by XLA with the same options as the emitted one; an output within
tolerance of the original compiled with the other options also passes (XLA's own fused and unfused
compiles of a program differ by up to ~1.4e-4 in f32 sums). For a program that computes in 16-bit
floats, an output outside both also passes when it is within tolerance of the original with both
compiled without excess precision (:func:`hardware.xla.strict_precision_error`: XLA:CPU keeps fused
chains of bf16 ops in f32, so moving the fusion boundaries moves the roundings by a few bf16 ulps;
without excess precision both round where the HLO says).

A program with host callbacks (custom calls to a handler in the process that traced it,
:data:`autotune.compiler.program.HOST_CALLBACK_TARGETS`) cannot run in another process: XLA fails or
crashes when the callback runs. Its configurations are emitted, re-read and compiled by XLA:CPU as
usual (an emission error, a parse or compile error is reported as such), but neither it nor the
original is run: each such case gets the status ``skipped: host callback (compiled, not run)``,
which is neither ok nor a failure (:func:`summarize` counts it apart).
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

from hardware.base import Measurement
from hardware.pool import run_isolated
from hardware.xla import output_error, verification_inputs

__all__ = ["MODES", "output_error", "verification_inputs", "config_for", "ParityResult", "check_program",
           "summarize", "as_dicts"]

MODES = ("xla", "measure")  # XLA's default options / the evaluator's (EMITTED_CPU_COMPILE_OPTIONS)


SKIPPED = "skipped"  # the status prefix of a case emitted and compiled but not run (host callbacks)
HOST_CALLBACK_SKIP = f"{SKIPPED}: host callback (compiled, not run)"

FORMULATED = "+formulations"  # a spec suffix: the program with random formulation choices first


def formulated(text: str, spec: str, path: str = "<string>") -> tuple:
    """(program text, {site: choice}) of a configuration spec: with the FORMULATED suffix, every instruction
    with equivalent formulations takes a random one of its choices (the original included), drawn from the
    spec's seed (autotune/compiler/formulations/); else the program as it is."""
    if not spec.endswith(FORMULATED):
        return text, {}
    from autotune.compiler.formulations import FormulationSpace
    base = spec.removesuffix(FORMULATED)
    seed = int(base.split(":", 1)[1]) if base.startswith("random:") else 0
    rng = np.random.default_rng(seed + 1_000_003)
    space = FormulationSpace(text, path)
    choices = {s.key: s.choices[int(rng.integers(len(s.choices)))] for s in space.tunable}
    return space.apply(choices), {k: v for k, v in choices.items() if v != "original"}


def config_for(space: Any, spec: str) -> Any:
    """A configuration by name: "default", "unfused" or "random:SEED" (`space.random`)."""
    if spec == "default":
        return space.default()
    if spec == "unfused":
        return space.unfused()
    if spec.startswith("random:"):
        return space.random(np.random.default_rng(int(spec.split(":", 1)[1])))
    raise ValueError(f"unknown configuration {spec!r} (default, unfused, random:SEED)")


@dataclass
class ParityResult:
    """One (program, target, configuration, XLA options) check."""

    program: str
    target: str
    config: str
    mode: str
    status: str                 # ok | mismatch | emit_error: | parse_error: | compile_error: | crash: | timeout
    #                             | skipped: (compiled, not run: a host callback)
    error: Optional[float] = None
    compile_s: Optional[float] = None
    kernels: int = 0            # kernels of the configuration
    fusions_checked: int = 0    # multi-instruction kernels emitted (and so checked) as fusions
    fusions_total: int = 0      # multi-instruction kernels of the configuration
    vs_f64: Optional[dict] = None  # where judged against the program in f64: both errors there
    formulations: Optional[dict] = None  # with a FORMULATED spec: the sites rewritten, {site: formulation}

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def skipped(self) -> bool:
        return self.status.startswith(SKIPPED)


def _compile_options(mode: str) -> dict:
    from autotune.compiler.emission import EMITTED_CPU_COMPILE_OPTIONS
    if mode == "xla":
        return {}
    if mode == "measure":
        return dict(EMITTED_CPU_COMPILE_OPTIONS)
    raise ValueError(f"unknown mode {mode!r} (known: {', '.join(MODES)})")


def _first_line(exc: BaseException) -> str:
    for line in str(exc).splitlines():
        if line.strip():
            return line.strip()[:300]
    return type(exc).__name__


def _check_in_process(path: str, target: str, specs: Sequence[str], modes: Sequence[str],
                      record_f64: bool = False) -> list[dict]:
    """The work of one subprocess: reference outputs once per XLA option set, then every
    (configuration, option set)."""
    from autotune.compiler.fusion import FusionSpace
    from autotune.compiler.hlo import parse_hlo
    from autotune.compiler.emission import cpu_checkable
    from autotune.compiler.program import Program, host_callbacks
    from hardware.xla import accuracy_fallback, compile_hlo, computes_in_16bit, f64_accuracy, parse_hlo_text

    text = Path(path).read_text()
    original = Program.from_text(text, filename=path)
    callbacks = bool(host_callbacks(original.module))
    inputs = verification_inputs(text)
    low = computes_in_16bit(text)
    # a program with host callbacks runs only in the process that traced it: compiled, never run
    refs = {} if callbacks else {m: compile_hlo(text, **_compile_options(m))(*inputs) for m in MODES}
    spaces = {text: FusionSpace(original, target)}
    out = []
    for spec in specs:
        base = {"program": Path(path).stem, "target": target, "config": spec}
        try:
            program, formulations = formulated(text, spec, path)
            if formulations:
                base["formulations"] = formulations
            if program not in spaces:
                spaces[program] = FusionSpace(Program.from_text(program, filename=path), target)
            space = spaces[program]
            cfg = config_for(space, spec.removesuffix(FORMULATED))
            base["kernels"] = len(space.state(cfg).refs())
            rendered = cpu_checkable(space, cfg)
            base["fusions_checked"], base["fusions_total"] = rendered.fusions_checked, rendered.fusions_total
            emitted = rendered.text
        except Exception as exc:
            out += [{**base, "mode": m, "status": f"emit_error: {type(exc).__name__}: {_first_line(exc)}"}
                    for m in modes]
            continue
        try:
            parse_hlo(emitted)
            parse_hlo_text(emitted)
        except Exception as exc:
            out += [{**base, "mode": m, "status": f"parse_error: {_first_line(exc)}"} for m in modes]
            continue
        for mode in modes:
            row = {**base, "mode": mode}
            try:
                compiled = compile_hlo(emitted, **_compile_options(mode))
                if callbacks:
                    out.append({**row, "status": HOST_CALLBACK_SKIP, "compile_s": compiled.compile_seconds})
                    continue
                got = compiled(*inputs)
            except Exception as exc:
                out.append({**row, "status": f"compile_error: {_first_line(exc)}"})
                continue
            err, ok = output_error(got, refs[mode], low_precision=low)
            if not ok:  # within XLA's own spread between its option sets?
                other = [m for m in MODES if m != mode][0]
                err2, ok = output_error(got, refs[other], low_precision=low)
                err = min(err, err2)
            ok, notes = accuracy_fallback(ok, low, emitted, text, inputs, got, refs[mode], _compile_options(mode))
            if "without_excess_precision" in notes:
                err = min(err, notes["without_excess_precision"])
            if "vs_f64" in notes:
                row["vs_f64"] = notes["vs_f64"]
            elif record_f64:  # recorded for every case where the program has an f64 version
                try:
                    acc = f64_accuracy(got, refs[mode], text, inputs)
                    row["vs_f64"] = {"emitted": acc["emitted"], "original": acc["original"]}
                except Exception:  # noqa: BLE001  (no f64 version: nothing to record)
                    pass
            out.append({**row, "status": "ok" if ok else "mismatch", "error": err,
                        "compile_s": compiled.compile_seconds})
    return out


def _check_child(args: tuple) -> Measurement:
    """`_check_in_process` as a measurement-pool item: its rows ride in ``extra``."""
    os.environ["JAX_PLATFORMS"] = "cpu"  # a fresh subprocess: jax is not imported yet
    return Measurement(0.0, extra={"rows": _check_in_process(*args)})


def _run_child(path: str, target: str, specs: Sequence[str], modes: Sequence[str],
               timeout: float, record_f64: bool = False) -> tuple[str, list]:
    """One (program, target) in a fresh subprocess (:func:`hardware.pool.run_isolated`): an XLA
    ``Check failed`` aborts that process only, and becomes the status ``crash: ...``."""
    m = run_isolated(_check_child, (path, target, list(specs), list(modes), record_f64), timeout=timeout)
    if m.ok:
        return "ok", m.extra["rows"]
    return m.status, []


def check_program(path: str, target: str = "cpu", specs: Sequence[str] = ("default", "random:0"),
                  modes: Sequence[str] = MODES, timeout: float = 900.0, record_f64: bool = False) -> list[ParityResult]:
    """Check configurations `specs` of the program at `path` for `target`, under each XLA option
    set of `modes` (see the module docstring). Never raises for a bad program or an XLA crash:
    every case gets a status. `record_f64`: every case records its error and the original's against
    the program computed in f64 (`vs_f64`; otherwise only cases judged that way carry it)."""
    for m in modes:
        _compile_options(m)  # unknown names fail here, not in the subprocess
    status, rows = _run_child(path, target, specs, modes, timeout, record_f64)
    if status != "ok":  # say which (configuration, options) crashed or hung
        rows = []
        for spec in specs:
            for mode in modes:
                st, one = _run_child(path, target, [spec], [mode], timeout, record_f64) \
                    if len(specs) * len(modes) > 1 \
                    else (status, [])
                rows += one or [{"program": Path(path).stem, "target": target, "config": spec,
                                 "mode": mode, "status": st}]
    return [ParityResult(**r) for r in rows]


def summarize(results: Sequence[ParityResult]) -> dict:
    """Counts over results: cases (skipped ones excluded), ok, failures by status kind, fusions
    checked/total, and `skipped` where some case was (host callbacks)."""
    fails: dict[str, int] = {}
    for r in results:
        if not r.ok and not r.skipped:
            k = r.status.split(":")[0]
            fails[k] = fails.get(k, 0) + 1
    skipped = sum(r.skipped for r in results)
    return {"cases": len(results) - skipped, "ok": sum(r.ok for r in results), "failures": fails,
            **({"skipped": skipped} if skipped else {}),
            "fusions_checked": sum(r.fusions_checked for r in results),
            "fusions_total": sum(r.fusions_total for r in results)}


def as_dicts(results: Sequence[ParityResult]) -> list[dict]:
    return [asdict(r) for r in results]
