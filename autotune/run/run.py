"""One library call for a whole tuning run, as `autotune fusion` runs it: `tune(program, target, ...)`
owns the budget split, the run folder, resume, the evaluator, the stages (on cpu the formulations, then
fusion, then the compiler-options stage; any subset, plug-ins too: autotune/run/stages.py) and the report. The CLI parses its options into
this call and prints the result; `autotune.jax.tune` and the benchmarks call it in-process (a crashing XLA
compile is isolated by the measurement workers). Runs of the same settings have the same fingerprint
whether started from Python or the command line, and resume each other."""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence, Union

from autotune import api
from autotune.run.settings import Duration, RunError, RunOptions, RunSettings, budget_split
from autotune.run.stages import RunState, Stage, StageBudget, StageError, default_stages, get_stage
from autotune.tuning import budget as budget_model

__all__ = ["tune", "RunResult", "run_dir", "check_output_dir", "XLA_EVALUATORS"]

XLA_EVALUATORS = ("xla", "xla-inprogram")  # evaluators that run programs on this machine's XLA


@dataclass
class RunResult:
    """What a run produced: the fusion stage's TuningResult (None when it did not run), report.json as a
    dictionary, the run folder, the stages run, and the run's final state (program, space, stage results)."""

    tuning: Any
    report: dict
    run_dir: Path
    stages: tuple
    state: RunState = field(repr=False)

    @property
    def verified(self) -> bool:
        """Whether the written result was verified as asked (False: nothing could be; the CLI's exit status 3)."""
        return self.tuning is None or not self.tuning.verification_failed

    @property
    def interrupted(self) -> bool:
        """The search was stopped by SIGINT or SIGTERM (results so far written; the CLI's exit status 130)."""
        return self.tuning is not None and self.tuning.stopped_by in ("SIGINT", "SIGTERM")


def run_dir(program: "str | os.PathLike[str]", out: "Optional[str | os.PathLike[str]]", kind: str) -> Path:
    """The run folder: `out`, else a new folder under ./autotune-runs/ named after the program and the time."""
    if out:
        return Path(out)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = Path("autotune-runs") / f"{Path(program).stem}-{kind}-{stamp}"
    p, k = base, 1
    while p.exists():
        k += 1
        p = base.with_name(f"{base.name}-{k}")
    return p


def check_output_dir(path: "str | Path", flag: str) -> Path:
    """An output folder that exists and is writable, or that can be created (checked, not created)."""
    p = Path(path)
    if p.exists():
        if not p.is_dir():
            raise RunError(f"{flag} {path}: exists and is not a folder")
        if not os.access(p, os.W_OK | os.X_OK):
            raise RunError(f"{flag} {path}: folder is not writable")
        return p
    ancestor = p.absolute().parent
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir() or not os.access(ancestor, os.W_OK | os.X_OK):
        raise RunError(f"{flag} {path}: cannot create it ({ancestor} is not a writable folder)")
    return p


def _stage_classes(stages: Union[None, str, Sequence[Any]], target: str) -> list:
    """The Stage classes of `stages` (names, `module:Class`, `file.py:Class` or classes; a string may list
    several, comma-separated), in the order given; each stage's `requires` must come before it."""
    specs: Sequence[Any] = default_stages(target) if stages is None else (
        [s for s in stages.split(",") if s.strip()] if isinstance(stages, str) else stages)
    if not specs:
        raise RunError("--stages: give at least one stage (e.g. fusion,options)")
    classes: list = []
    for spec in specs:
        try:
            cls = get_stage(spec.strip() if isinstance(spec, str) else spec)
        except StageError as e:
            raise RunError(f"--stages: {e}") from None
        if any(c.name == cls.name for c in classes):
            raise RunError(f"--stages: stage {cls.name} is listed twice")
        missing = [r for r in cls.requires if r not in {c.name for c in classes}]
        if missing:
            raise RunError(f"--stages: the {cls.name} stage needs the {missing[0]} stage before it")
        classes.append(cls)
    return classes


def _canonical_target(target: str) -> str:
    from autotune.compiler.targets import get_target
    return get_target(target).name


def _load(path: str) -> tuple:
    """(Program, seconds its parsing took): the program parsed, verified and normalized."""
    from autotune.compiler.analysis import module_cost
    from autotune.compiler.hlo import parse_hlo_file
    from autotune.compiler.program import Program
    t0 = time.monotonic()
    module = parse_hlo_file(path)
    module_cost(module)  # as `autotune show` reads it: part of the parse time the outputs' reserve grows with
    return Program.from_module(module), time.monotonic() - t0


def _make_evaluator(spec: Any, settings: RunSettings) -> tuple:
    """(evaluator, whether this run owns it and closes it): a name made here, or an Evaluator given."""
    from hardware.base import Evaluator
    if isinstance(spec, Evaluator):
        return spec, False
    o = settings.options
    try:
        return api.make_evaluator(spec, settings.target, o.store, o.seed, scheduler=o.scheduler,
                                  workers=o.workers), True
    except api.UnknownPluginError as e:
        raise RunError(f"--evaluator: {e}") from None
    except ValueError as e:
        raise RunError(str(e)) from None


def _check_reserve(settings: RunSettings, stage_seconds: dict) -> float:
    """The seconds reserved after the search (verification and the later stages): refused when they leave
    nothing of the budget for the search."""
    total, hw = settings.total_s, settings.hw_s if "fusion" in stage_seconds else 0.0
    others = {name: s for name, s in stage_seconds.items() if name != "fusion" and s}
    later = sum(others.values())
    if total is not None and 0 < total <= hw + later and not settings.measuring_spec:
        if not others:
            what = f"--hw-budget {settings.hw_text} leaves"
        elif set(others) == {"options"}:
            what = f"--hw-budget {settings.hw_text} and --options-budget {later:g}s leave"
        else:
            what = f"--hw-budget {settings.hw_text} and the {', '.join(others)} stages' {later:g}s leave"
        raise RunError(f"{what} nothing of --budget {settings.budget_text} for the search")
    return hw + later


def _check_after_parse(settings: RunSettings, reserve_s: float, started: float, load_s: float) -> None:
    """`budget_model.check_after_parse` as a RunError: start-up so far and the reserves leave a search."""
    try:
        budget_model.check_after_parse(settings.total_s, reserve_s, (settings.cost_model or "").strip().lower(),
                                       time.monotonic() - started, load_s, settings.budget_text)
    except budget_model.BudgetTooShort as e:
        raise RunError(str(e)) from None


def tune(program: "str | os.PathLike[str]", target: str = "tpu", *, cost_model: Optional[str] = None,
         strategy: Any = "annealing", evaluator: Any = None, budget: Duration = "5m",
         stages: Union[None, str, Sequence[Any]] = None, options: Optional[RunOptions] = None) -> RunResult:
    """Tune the HLO program in the file `program` for `target` within `budget` (the whole run's wall clock:
    start-up, search, verification, the later stages and the outputs), as `autotune fusion` does, and write
    its run folder. `cost_model`, `strategy` and `evaluator` are specs as on the command line (`evaluator`
    may also be an Evaluator, left open); `stages` defaults to `default_stages(target)` (formulations on cpu, fusion, compiler options);
    `options` (RunOptions) holds the rest. Errors are one-line ValueErrors (RunError) naming the option."""
    o = options if options is not None else RunOptions()
    started = o.started if o.started is not None else time.monotonic()
    clock = budget_model.StartupClock(started, time.monotonic() - started)
    try:
        target = _canonical_target(target)
    except api.UnknownPluginError as e:
        raise RunError(f"--target: {e}") from None
    classes = _stage_classes(stages, target)
    total, hw, hw_text = budget_split(budget, o.hw_budget)
    from hardware.base import Evaluator
    ev_name = evaluator.name if isinstance(evaluator, Evaluator) else (evaluator or api.default_evaluator(target))
    settings = RunSettings(target=target, cost_model=cost_model, strategy=strategy, evaluator_name=ev_name,
                           budget_text=str(budget), total_s=total, hw_s=hw, hw_text=hw_text, options=o)
    chosen: list[Stage] = [cls() for cls in classes]
    stage_seconds = {st.name: float(st.reserve_s(settings)) for st in chosen}
    if "options" not in stage_seconds and o.options_budget not in (None, 0, "0"):
        raise RunError(f"--options-budget {o.options_budget}: the options stage is not among the stages run")
    if "formulations" not in stage_seconds and o.formulations_budget not in (None, 0, "0"):
        raise RunError(f"--formulations-budget {o.formulations_budget}: the formulations stage is not among the "
                       "stages run")
    prog, load_s = _load(str(program))
    clock.mark("parse")
    text = Path(program).read_text()
    state = RunState(program_path=str(program), original_text=text, program_text=text, program=prog, target=target,
                     settings=settings, clock=clock, load_s=load_s, log=o.log or (lambda line: None),
                     stage_seconds=stage_seconds)
    for st in chosen:
        st.prepare(state)
    if (o.scheduler or o.workers > 1) and ev_name not in XLA_EVALUATORS:
        raise RunError("--scheduler/--workers apply to the xla evaluators (the simulator is vectorized in-process)")
    reserve_s = _check_reserve(settings, stage_seconds)
    if o.resume_dir:
        from autotune.tuning.checkpoint import read_checkpoint
        read_checkpoint(str(o.resume_dir))  # a missing or corrupt checkpoint fails before any work
    _check_after_parse(settings, reserve_s, started, load_s)
    out = Path(o.resume_dir) if o.resume_dir and not o.out_dir else run_dir(program, o.out_dir, "fusion")
    state.out_dir = check_output_dir(out, "--out")
    ev, owned = _make_evaluator(evaluator, settings)
    state.evaluator = ev
    clock.mark("evaluator")
    try:
        report = _run_stages(state, chosen, started)
    finally:
        if owned:
            ev.close()
    return RunResult(state.tuning, report, out, tuple(st.name for st in chosen), state)


def _run_stages(state: RunState, chosen: list, started: float) -> dict:
    """Each stage in order within the run's budget, then report.json (and the fusion stage's outputs)."""
    from autotune.tuning.report import write_fusion_outputs, write_json
    settings, out = state.settings, state.out_dir
    assert out is not None
    warnings: list = []
    for i, st in enumerate(chosen):
        later = sum(state.stage_seconds[s.name] for s in chosen[i + 1:])
        result = st.run(state, StageBudget(seconds=state.stage_seconds[st.name], later_s=later,
                                           total_s=settings.total_s, started=started))
        state.results[st.name] = result
        warnings.extend(result.warnings)
        if result.program_text is not None and result.program_text != state.program_text:
            state.replace_program(result.program_text)
    meta: dict = {}
    for r in state.results.values():
        meta.update(r.report)
    out.mkdir(parents=True, exist_ok=True)
    if state.tuning is not None and state.space is not None:
        report = write_fusion_outputs(out, state.space, state.tuning, meta)
        report["warnings"].extend(warnings)
    else:
        report = {"program": state.program_path, "target": state.target, **meta,
                  "warnings": list(state.program.flags) + warnings}
    report["wall_s"] = time.monotonic() - started
    split = report.get("budget_split")
    if split and "search_and_verification_end_s" in split:  # writing the outputs, against its reserve
        split["outputs_s"] = round(report["wall_s"] - split["search_and_verification_end_s"], 3)
    write_json(out / "report.json", report)
    return report
