"""The compiler-options stage of a fusion run, after its end-to-end verification: the target's own compiler
options (``Target.compiler_options``, XLA:CPU's DebugOptions) searched for the program the run would write
(autotune/tuning/options_search.py), learning from the searches of other programs on this machine (the
measurement store's ``options/...`` rows), so that fusion and options are tuned together:

* the run kept the original (nothing tuned beat XLA's own compile): the options are searched on the
  original program; a setting shown faster than XLA's defaults (95% interval above 1) makes the written
  program the original, unchanged, compiled with those options;
* a tuned fusion configuration won: the options are searched on its emission (compiled with fusion off,
  as verified), outputs checked against XLA's default compile of the original; the combination is then
  timed beside the original's default compile and kept only if faster beyond its interval and faster than
  the configuration alone.

Either way the result's ``compile_options`` say exactly how fused.hlo compiles as it was verified, and
``verification["compiler_options"]`` records the search and its decision.
"""
from __future__ import annotations

import time
from typing import Any, Callable, Optional

from autotune.tuning.options_search import (
    OptionsSearchResult, options_prior, record_options, search_options, xla_flags_line,
)
from autotune.tuning.result import ORIGINAL_COMPILE_OPTIONS, ORIGINAL_WITH_OPTIONS, TuningResult, text_sha256
from autotune.tuning.verification import confirm_paired
from hardware.base import ProgramEvaluator

__all__ = ["tune_compiler_options", "FINAL_SHARE", "options_header"]

FINAL_SHARE = 0.3  # of the stage's budget kept to time a tuned configuration with its options beside the original


def options_header(speedup: float, interval: list, flags: dict) -> str:
    """fused.hlo's first lines when the written program is the original compiled with compiler options."""
    return ("// autotune: the original program, unchanged, compiled with compiler options: run it with\n"
            f"// XLA_FLAGS='{xla_flags_line(flags)}'\n"
            f"// measured x{speedup:.3f} (95% interval {interval[0]:.3f}-{interval[1]:.3f}) over XLA's default "
            "compile, timed beside it.\n")


def tune_compiler_options(result: TuningResult, target: Any, evaluator: ProgramEvaluator, original: str,
                          budget_s: float, *, program_sha: str, store: Any = None,
                          log: Optional[Callable[[str], None]] = None, confidence: float = 0.95,
                          clock: Callable[[], float] = time.monotonic) -> Optional[OptionsSearchResult]:
    """Search ``target``'s compiler options for what ``result`` would write (module docstring) within
    ``budget_s`` seconds of hardware time, and update ``result`` (its written program, compile options,
    paired speedup) where they are shown faster. ``store``: the machine-keyed measurement store the
    search learns from and records into (None: neither). Returns the search's result, or None where the
    stage could not run (``verification["compiler_options"]`` says why; the verification's failure has its
    own warning line). ``clock``: the budget's clock."""
    from autotune.compiler.emission import EMITTED_CPU_COMPILE_OPTIONS, compile_flags_text
    started = clock()
    ver = result.verification
    if ver.get("status") != "verified" or result.measured_original is None:
        # the verification's own warning line says what failed; this stage only records that it did not run
        ver["compiler_options"] = {"searched": None, "decision": "not searched: the end-to-end verification did "
                                   "not time XLA's own compile of the original"}
        return None
    tuned = not result.keep_original and result.fused_text is not None and bool((result.paired or {}).get("faster"))
    program = result.fused_text if tuned else original
    assert program is not None
    # how the written program compiles as verified: its own options (a rewritten program compiled with XLA's
    # defaults), else an emitted configuration's
    base = (dict(result.compile_options) if tuned and result.compile_options else
            dict(EMITTED_CPU_COMPILE_OPTIONS) if tuned else dict(ORIGINAL_COMPILE_OPTIONS))
    prior = options_prior(store, evaluator, target.name, exclude_program=program_sha) if store is not None else None
    search_s = budget_s * (1 - FINAL_SHARE) if tuned else budget_s
    found = search_options(program, target, evaluator, search_s, base_options=base,
                           reference_text=original if tuned else None, prior=prior, log=log, clock=clock)
    if store is not None:
        record_options(store, evaluator, target.name, program_sha, found)
    entry: dict = {"searched": "the tuned configuration's emission" if tuned else "the original program",
                   **found.as_dict(), "decision": None}
    ver["compiler_options"] = entry
    if not found.flags:
        entry["decision"] = f"keep the compile as verified: {found.message}"
        return found
    chosen = next(c for c in found.candidates if c.chosen)
    if not tuned:
        assert found.speedup is not None and found.speedup_interval is not None
        flags = dict(found.flags)
        result.keep_original = False
        result.compile_options = {"disable_fusion": False, "xla_flags": flags}
        result.xla_flags_text = xla_flags_line(flags)
        result.fused_text = options_header(found.speedup, list(found.speedup_interval), flags) + original
        ver["fused_hlo_sha256"] = text_sha256(result.fused_text)
        result.paired = {"candidate": f"original with {chosen.name}", **(chosen.confirmed_check or {})}
        ver["paired"] = result.paired
        ver["winner"] = ORIGINAL_WITH_OPTIONS
        ver.pop("keep_original", None)
        entry["decision"] = f"written: the original program with {found.xla_flags}"
        return found
    # A tuned configuration with its options: timed beside the original's default compile.
    flags = {**(base.get("xla_flags") or {}), **found.flags}
    fused = bool(base.get("disable_fusion"))
    left = max(0.0, budget_s - (clock() - started))
    check = confirm_paired(
        lambda s: evaluator.measure_paired(original, program, s, disable_fusion=fused, xla_flags=flags,
                                           reference_options=ORIGINAL_COMPILE_OPTIONS),
        left, confidence=confidence, clock=clock)
    alone = (result.paired or {}).get("speedup") or 1.0
    entry["combined_paired"] = check.as_dict()
    if check.faster and (check.speedup or 0.0) > alone:
        result.compile_options = {"disable_fusion": fused, "xla_flags": flags}
        result.xla_flags_text = (f"{compile_flags_text()} " if fused else "") + xla_flags_line(found.flags)
        result.fused_text = _with_flags_line(program, result.xla_flags_text)
        ver["fused_hlo_sha256"] = text_sha256(result.fused_text)
        result.paired = {"candidate": f"{ver.get('winner')} with {chosen.name}", **check.as_dict()}
        ver["paired"] = result.paired
        entry["decision"] = f"written: the tuned configuration with {found.xla_flags}"
    else:
        iv = check.speedup_interval
        entry["decision"] = ("keep the tuned configuration without options: with them "
                             + (f"x{check.speedup:.3f} [{iv[0]:.3f}, {iv[1]:.3f}]" if check.speedup and iv
                                else check.status)
                             + f" beside the original, against x{alone:.3f} without")
    return found


def _with_flags_line(text: str, flags_text: str) -> str:
    """An emitted program's header with its XLA_FLAGS line replaced by one that adds the compiler options."""
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if not line.startswith("//"):
            break
        if line.startswith('// XLA_FLAGS="'):
            lines[i] = f'// XLA_FLAGS="{flags_text}"  (fusion as tuned, plus the compiler options found)'
            return "\n".join(lines)
    return f'// autotune: compile with XLA_FLAGS="{flags_text}"\n' + text
