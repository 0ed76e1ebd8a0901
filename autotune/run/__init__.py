"""The library run: `tune(program, target, ...)` runs a whole tuning run as `autotune fusion` does (budget
split, fingerprint and resume, transfer, pricing, verification, the stages and the report) and returns a
`RunResult`; stages (formulations, fusion, compiler options, plug-ins) share one small interface (`Stage`).

    from autotune.run import RunOptions, tune
    result = tune("model.hlo", "cpu", budget="2m", options=RunOptions(out_dir="runs/model"))
    print(result.report["measured_speedup"], result.verified)
"""
from autotune.run.run import RunResult, tune
from autotune.run.settings import RunError, RunOptions, SearchBudgetError
from autotune.run.stages import (DEFAULT_STAGES, STAGES, RunState, Stage, StageBudget, StageResult, get_stage,
                                 list_stages, register_stage)

__all__ = ["tune", "RunResult", "RunOptions", "RunError", "SearchBudgetError", "Stage", "StageBudget",
           "StageResult", "RunState", "STAGES", "DEFAULT_STAGES", "get_stage", "register_stage", "list_stages"]
