"""The compiler-options stage of a run: after the fusion stage's verification, the target's own compiler
options (XLA:CPU's DebugOptions) searched for the program the run would write, learning from earlier
programs on this machine (autotune/tuning/compiler_options.py). It improves the fusion stage's result in
place (written program, compile options, paired speedup); `verification["compiler_options"]` records it."""
from __future__ import annotations

from typing import Any

from autotune.compiler.targets import get_target
from autotune.run.settings import RunError, duration
from autotune.run.stages import RunState, Stage, StageBudget, StageResult

__all__ = ["CompilerOptionsStage"]


class CompilerOptionsStage(Stage):
    """Search the target's compiler options for the written program within its own hardware seconds:
    the options budget, else a quarter of the run's budget (60 s without one) where the target declares
    compiler options, the evaluator is xla, verification runs and the cost model is not the hardware."""

    name = "options"
    requires = ("fusion",)

    def reserve_s(self, settings: Any) -> float:
        o = settings.options
        target = get_target(settings.target)
        xla = settings.evaluator_name == "xla"
        if o.options_budget is not None:
            s = duration(o.options_budget, "--options-budget", allow_zero=True)
            if s is None:
                raise RunError(f"--options-budget {o.options_budget}: must be finite (e.g. 1m; 0 = off)")
            if s > 0 and not target.compiler_options:
                raise RunError(f"--options-budget {o.options_budget}: target {settings.target} declares no compiler "
                               "options")
            if s > 0 and not xla:
                raise RunError(f"--options-budget {o.options_budget}: the compiler-options stage needs --evaluator xla")
            if s > 0 and settings.hw_s <= 0:
                raise RunError(f"--options-budget {o.options_budget}: needs verification (--hw-budget above 0): "
                               "options are searched for the program the verification chose")
            return s
        if not target.compiler_options or not xla or settings.hw_s <= 0 or settings.measuring_spec:
            return 0.0
        return settings.total_s / 4 if settings.total_s is not None else 60.0

    def run(self, state: RunState, budget: StageBudget) -> StageResult:
        from autotune.tuning.checkpoint import program_fingerprint
        from autotune.tuning.compiler_options import tune_compiler_options
        seconds, result, ev = budget.seconds, state.tuning, state.evaluator
        if seconds <= 0 or result is None:
            return StageResult()
        quiet = not state.settings.options.progress
        if not quiet:
            state.log(f"searching {state.target}'s compiler options for {seconds:g}s ...")
        program_sha = (state.extra.get("fusion") or {}).get("program_sha") or program_fingerprint(state.space)
        found = tune_compiler_options(result, get_target(state.target), ev, state.original_text, seconds,
                                      program_sha=program_sha, store=ev.store)
        if found is not None and not quiet:
            state.log(f"compiler options: {result.verification['compiler_options']['decision']}")
        return StageResult(verification=result.verification.get("compiler_options") or {})
