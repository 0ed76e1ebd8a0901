"""The options of a library run (`RunOptions`, what a caller gives besides the program, target, cost
model, strategy, evaluator, budget and stages), their resolved form (`RunSettings`: budgets in seconds,
names canonical), and the run's errors. Messages name the command-line flag of each option, as the CLI
prints them (autotune/cli/search.py), so that a Python run and a command refuse the same settings alike."""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional, Union

from autotune.tuning.paired_cost import DEFAULT_TRIAL_SECONDS, TRIAL_COSTS

__all__ = ["RunOptions", "RunSettings", "RunError", "SearchBudgetError", "duration"]

Duration = Union[str, float, int, None]   # "30s", "5m", "1h", a number of seconds, or None


class RunError(ValueError):
    """Settings a run cannot use, or a run refused before its search: one line saying why (the CLI
    prints it as a user error, exit status 2)."""


class SearchBudgetError(RunError):
    """Start-up used up what the budget held for the search: refused after start-up, before the search."""


@dataclass(frozen=True)
class RunOptions:
    """A run's options besides its main settings (`autotune.tune`'s keywords); each is the `autotune
    fusion` flag of the same name, with the same default."""

    hw_budget: Duration = None          # hardware verification (None: a tenth of the budget, 1m without one)
    options_budget: Duration = None     # the compiler-options stage (None: its default; 0 = off)
    formulations_budget: Duration = None  # the formulations stage (None: its default; 0 = off)
    top_k: int = 10                     # configurations verified on hardware
    seed: int = 0
    out_dir: Optional[Union[str, os.PathLike]] = None     # the run folder (None: a new one under ./autotune-runs/)
    resume_dir: Optional[Union[str, os.PathLike]] = None  # continue the run saved in this folder
    store: Any = None                   # measurement store: a path, "none" or a store (None: the default)
    batch_size: int = 64
    max_evals: Optional[int] = None     # stop the search after this many configurations
    progress: bool = True               # the progress bar and the stages' progress lines
    scheduler: Optional[str] = None     # xla: a dask.distributed cluster (tcp://HOST:PORT)
    workers: int = 1                    # xla: local measuring processes
    trial_cost: str = TRIAL_COSTS[0]    # with cost model "hardware": kernel-sum or paired
    trial_seconds: float = DEFAULT_TRIAL_SECONDS  # paired trials: seconds of paired timing per configuration
    strategy_params: Mapping[str, Any] = field(default_factory=dict)  # the strategy's constructor keywords
    transfer: str = "auto"              # transfer learning: auto, store, none or a cost model
    history_any_machine: bool = False   # transfer: learn from other machines' measurements too
    started: Optional[float] = None     # when the budget's clock started (time.monotonic; None: the call)
    log: Optional[Callable[[str], None]] = None  # where progress lines go (None: nowhere)


@dataclass(frozen=True)
class RunSettings:
    """A run's settings resolved: what every stage reads (`RunState.settings`)."""

    target: str                         # canonical target name
    cost_model: Optional[str]           # the cost-model spec as given (None: the default)
    strategy: Any                       # the strategy spec or class
    evaluator_name: str                 # the evaluator's name as given (or the target's default)
    budget_text: str                    # the budget as the user wrote it (messages)
    total_s: Optional[float]            # the whole budget in seconds (None: no limit)
    hw_s: float                         # hardware verification seconds
    hw_text: str                        # hw_budget as written (or the default's seconds)
    options: RunOptions

    @property
    def measuring_spec(self) -> bool:
        """The cost model is the hardware itself (every configuration measured)."""
        return (self.cost_model or "").strip().lower() == "hardware"


def duration(value: Duration, flag: str, allow_zero: bool = False) -> Optional[float]:
    """Seconds of a duration option (30s, 5m, 1h, a number; 'inf'/'none' = unlimited); one-line RunErrors
    naming the flag."""
    from hardware.base import BudgetError, parse_duration
    try:
        seconds = parse_duration(value)
    except BudgetError as e:
        raise RunError(f"{flag}: {e}") from None
    if seconds is not None and not math.isfinite(seconds):
        raise RunError(f"{flag} {value}: must be a finite duration (e.g. 30s, 5m, 1h; 'inf' for no limit)")
    if seconds is not None and seconds <= 0 and not allow_zero:
        raise RunError(f"{flag} {value}: too small to evaluate anything (use e.g. 30s, 5m, 1h)")
    return seconds


def budget_split(budget: Duration, hw_budget: Duration) -> tuple:
    """(total seconds, hardware-verification seconds, the hw budget as written): by default the paper's
    split, a tenth of the budget for verification (1m without a budget)."""
    total = duration(budget, "--budget")
    if hw_budget is None:
        hw = total / 10 if total is not None else 60.0
        return total, hw, f"{hw:g}s"
    seconds = duration(hw_budget, "--hw-budget", allow_zero=True)
    if seconds is None:
        raise RunError(f"--hw-budget {hw_budget}: must be finite (e.g. 30s, 1m; 0 = no verification)")
    return total, seconds, str(hw_budget)
