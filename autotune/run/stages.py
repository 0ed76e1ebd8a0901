"""The stage interface of a run: what a stage takes (`RunState`, `StageBudget`), what it returns
(`StageResult`) and the registry that finds stages by name (`STAGES`, entry-point group `autotune.stages`).

A run (autotune/run/run.py) runs its stages in the declared order within one budget: each stage says
first what it reserves of the budget (`Stage.reserve_s`, checking its options before any work), then
checks what it needs of the parsed program before anything is written (`Stage.prepare`), then runs
(`Stage.run`). A stage may replace the program the later stages see (`StageResult.program_text`, e.g. a
formulations stage rewriting operations before fusion); `RunState.original_text` stays the user's program,
the reference every verification compares against.
"""
from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar, Optional

from autotune.plugins import Registry, UnknownPluginError

__all__ = ["Stage", "RunState", "StageBudget", "StageResult", "STAGES", "get_stage", "register_stage",
           "list_stages", "StageError", "DEFAULT_STAGES", "default_stages"]

DEFAULT_STAGES = ("formulations", "fusion", "options")  # `autotune fusion --target cpu`'s stages, in their order
# on the other targets the formulations stage runs only when asked (--stages): its choices there are the cost
# model's predictions, which no hardware checks
PREDICTED_ONLY_DEFAULT = ("fusion", "options")


def default_stages(target: str) -> tuple:
    """The stages a run takes when none are given: formulations first where the hardware times them (cpu)."""
    return DEFAULT_STAGES if target == "cpu" else PREDICTED_ONLY_DEFAULT


class StageError(UnknownPluginError):
    """A stage spec that names no stage, or names something that is not one."""


@dataclass(frozen=True)
class StageBudget:
    """The time a stage may spend: `seconds` it reserved (`Stage.reserve_s`; 0 for a stage that takes what
    the others leave, as fusion's search does), `later_s` reserved by the stages after it, and the run's
    whole budget `total_s` (None: no limit) counted from `started` (time.monotonic)."""

    seconds: float
    later_s: float
    total_s: Optional[float]
    started: float

    def left_s(self) -> Optional[float]:
        """What the run's budget leaves to this stage now, after the later stages' reserves (None: no limit)."""
        if self.total_s is None:
            return None
        return max(0.0, self.total_s - (time.monotonic() - self.started) - self.later_s)


@dataclass
class StageResult:
    """What a stage hands on: the program the later stages see (None: unchanged), how its result was
    verified, the fields it adds to report.json, and warning lines for the report and the user."""

    program_text: Optional[str] = None
    verification: dict = field(default_factory=dict)
    report: dict = field(default_factory=dict)
    warnings: list = field(default_factory=list)


@dataclass
class RunState:
    """What the stages of one run share: the program (`program_text` is what the next stage sees,
    `original_text` the user's program), the run's settings, its evaluator and run folder, and what the
    stages so far produced (`tuning`: the fusion search's TuningResult, whose written program and compile
    options later stages may improve; `space`: the fusion space; `results`: each stage's StageResult)."""

    program_path: str                     # the program file as the run was given it (report.json's "program")
    original_text: str                    # the user's program: the reference of every verification
    program_text: str                     # the program the next stage sees
    program: Any                          # program_text parsed and normalized (autotune.compiler.program.Program)
    target: str                           # the canonical target name
    settings: Any                         # the run's resolved settings (autotune.run.settings.RunSettings)
    out_dir: Optional[Path] = None        # the run folder (chosen after every stage's prepare)
    evaluator: Any = None                 # the hardware (started after every stage's prepare)
    clock: Any = None                     # the start-up clock (autotune.tuning.budget.StartupClock)
    load_s: float = 0.0                   # seconds the program's parsing took (the outputs' reserve grows with it)
    log: Callable[[str], None] = lambda line: None  # progress lines (the CLI prints them on stderr)
    tuning: Any = None                    # the TuningResult of the fusion stage (None before it ran)
    space: Any = None                     # the fusion space the written program comes from
    stage_seconds: dict = field(default_factory=dict)   # {stage name: seconds it reserved}
    results: dict = field(default_factory=dict)         # {stage name: its StageResult}
    extra: dict = field(default_factory=dict)           # what a stage keeps for later stages (by its name)

    def replace_program(self, text: str) -> None:
        """Make `text` the program the later stages see (parsed and normalized now: errors name the line)."""
        from autotune.compiler.program import Program
        self.program = Program.from_text(text)
        self.program_text = text


class Stage(ABC):
    """One step of a run (fusion, compiler options, a plug-in): a class with a `name`, constructed
    without arguments. `reserve_s` checks its options and says what it reserves of the run's budget,
    `prepare` checks the parsed program before any work is written, `run` does the work."""

    name: ClassVar[str] = "stage"
    requires: ClassVar[tuple] = ()   # the stages that must run before this one (their names)

    def reserve_s(self, settings: Any) -> float:
        """Seconds this stage needs of the run's budget (checked against it before any work); errors are
        one-line ValueErrors. Default: 0 (it takes no hardware time of its own)."""
        return 0.0

    def prepare(self, state: RunState) -> None:
        """Checks and set-up on the parsed program before the evaluator starts and anything is written."""

    @abstractmethod
    def run(self, state: RunState, budget: StageBudget) -> StageResult:
        """Do the stage's work within `budget` and say what it produced (module docstring)."""


def _check_stage(obj: Any, spec: str) -> Any:
    if isinstance(obj, type) and issubclass(obj, Stage):
        return obj
    raise StageError(f"{spec!r} is not a stage (a subclass of autotune.run.stages.Stage)")


STAGES = Registry("stage", "autotune.stages",
                  builtins={"formulations": "autotune.run.formulations:FormulationsStage",
                            "fusion": "autotune.run.fusion:FusionStage",
                            "options": "autotune.run.compiler_options:CompilerOptionsStage"},
                  aliases={"compiler-options": "options"}, check=_check_stage, error=StageError)


def get_stage(spec: Any) -> type[Stage]:
    """The Stage class of a name, entry point, `module:Class` or `path.py:Class` (or a Stage class)."""
    return STAGES.get(spec)


def register_stage(name: str, cls: Any = None) -> Any:
    """Register a Stage class under a name (usable as a decorator without `cls`)."""
    return STAGES.register(name, cls)


def list_stages() -> list[str]:
    return STAGES.names()
