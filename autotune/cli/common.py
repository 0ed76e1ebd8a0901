"""What the commands share: option checks and conversions, program loading, the evaluator, cost model
and strategy from command-line names, and the budget split of a search command."""
from __future__ import annotations

import functools

import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, Optional

import click

from autotune import api
from autotune.cli.errors import UserError
from autotune.compiler.targets import UnknownTargetError, get_target, target_names
from autotune.tuning import budget as budget_model


_XLA_EVALUATORS = ("xla", "xla-inprogram")  # evaluators that run programs on this machine's XLA
MEASUREMENT_FAILED_EXIT = 3   # hardware measurement failed / nothing verified (outputs are written)
INTERRUPTED_EXIT = 130


def _is_main_program() -> bool:
    """This process runs the `autotune` command line itself (`python -m autotune.cli`, the console
    script), not a caller that invoked it in-process (tests, notebooks)."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return getattr(spec, "name", None) == "autotune.cli.__main__" or os.path.basename(sys.argv[0]) == "autotune"


def _check_target(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """--target: the canonical name of a registered target (anything else is a one-line usage error)."""
    try:
        return get_target(value).name
    except UnknownTargetError as e:
        raise click.BadParameter(str(e), ctx=ctx, param=param) from None


@functools.lru_cache(maxsize=None)
def _target_help() -> str:
    """The --target help, built once (listing the names reads the entry-point metadata: ~2 ms)."""
    return f"Compilation target: {', '.join(target_names())}."


def _target_option() -> Callable:
    return click.option("--target", default="tpu", show_default=True, callback=_check_target, metavar="TARGET",
                        help=_target_help())


def _warn(message: str) -> None:
    """One warning line on stderr (the same text is recorded in the report)."""
    click.echo(f"autotune: warning: {message}", err=True)


def _output_file(path: str, flag: str) -> Path:
    """An output file path whose folder exists and is writable (checked before any work)."""
    p = Path(path)
    if p.is_dir():
        raise UserError(f"{flag} {path}: is a directory, not a file")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise UserError(f"{flag} {path}: folder {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UserError(f"{flag} {path}: folder {parent} is not writable")
    return p


def _output_dir(path: "str | Path", flag: str) -> Path:
    """An output folder that exists and is writable, or that can be created (checked, not created)."""
    from autotune.run.run import check_output_dir
    from autotune.run.settings import RunError
    try:
        return check_output_dir(path, flag)
    except RunError as e:
        raise UserError(str(e)) from None


def _duration(text: Optional[str], flag: str, allow_zero: bool = False) -> Optional[float]:
    """Seconds of a duration flag (30s, 5m, 1h; 'inf'/'none' = unlimited): `autotune.run.settings.duration`,
    its one-line errors as UserErrors."""
    from autotune.run.settings import RunError, duration
    try:
        return duration(text, flag, allow_zero=allow_zero)
    except RunError as e:
        raise UserError(str(e)) from None


def _budget_split(budget: str, hw_budget: Optional[str]) -> tuple:
    """(total seconds, hardware-verification seconds, the --hw-budget text): `autotune.run.settings.budget_split`
    (the paper's split by default), its one-line errors as UserErrors."""
    from autotune.run.settings import RunError, budget_split
    try:
        return budget_split(budget, hw_budget)
    except RunError as e:
        raise UserError(str(e)) from None


def _load(path: str):
    """Parse + normalize a program; returns (Program, XLA-style cost of the unfused module)."""
    from autotune.compiler.analysis import module_cost
    from autotune.compiler.hlo import parse_hlo_file
    from autotune.compiler.program import Program

    module = parse_hlo_file(path)
    cost = module_cost(module)
    return Program.from_module(module), cost


def _timed_load(path: str) -> tuple:
    """(Program, seconds its parsing took): the search commands size their output reserve by it."""
    t0 = time.monotonic()
    prog, _ = _load(path)
    return prog, time.monotonic() - t0


def _load_config(space, path: Optional[str]):
    from autotune.tuning.config_io import load_config
    if path is None:
        return space.default()
    return load_config(space, path)




# --------------------------------------------------------------------------------------------------
# Evaluators, cost models, strategies from command-line names

COST_MODEL_HELP = ("analytical, gnn or xgboost (the shipped model for the task and target; also shipped:gnn), "
                   "a model file, a registered name, or module:Class / path.py:Class")
_default_evaluator = api.default_evaluator


def make_evaluator(name: Optional[str], target: str, store: Optional[str] = None, seed: int = 0,
                   budget: Any = None, noise: Optional[float] = None, scheduler: Optional[str] = None,
                   workers: int = 1):
    """`api.make_evaluator` with its errors as one-line user errors."""
    try:
        return api.make_evaluator(name, target, store, seed, budget=budget, noise=noise, scheduler=scheduler,
                                  workers=workers)
    except api.UnknownPluginError as e:
        raise UserError(f"--evaluator: {e}") from None
    except ValueError as e:
        raise UserError(str(e)) from None


def make_cost_model(spec: Optional[str], task: str, target: str, evaluator: Any):
    """(model, name): `autotune.run.fusion.make_cost_model`, its one-line errors as UserErrors."""
    from autotune.run.fusion import make_cost_model as run_make_cost_model
    from autotune.run.settings import RunError
    try:
        return run_make_cost_model(spec, task, target, evaluator)
    except RunError as e:
        raise UserError(str(e)) from None


def _run_dir(program: str, out: Optional[str], kind: str) -> Path:
    from autotune.run.run import run_dir
    return run_dir(program, out, kind)


model_identity = api.model_identity  # what a resumed run's cost model must equal


def _strategy_names() -> list:
    """The built-in strategies, from the registry (the help lists what the code accepts)."""
    from search.base import STRATEGIES
    return STRATEGIES.builtin_names()


def _search_options(cost_model_help: str, evaluator_help: str, hw_help: str, batch_size: int) -> Callable:
    """The options `fusion` and `layout` share (budgets, cost model, strategy, evaluator, target, run folder)."""
    options = [
        click.option("--budget", default="5m", show_default=True,
                     help="Wall-clock budget of the whole command: start-up, search, verification and writing the "
                          "outputs (30s, 5m, 1h)."),
        click.option("--cost-model", "cost_model", default=None, help=cost_model_help),
        click.option("--strategy", default="annealing", show_default=True,
                     help=f"{', '.join(_strategy_names())}, or module:Class / path.py:Class (topk ranks tiles; "
                          "model-based is AutoTVM's search, with --cost-model hardware)"),
        click.option("--evaluator", default=None, metavar="sim|xla|PLUGIN", help=evaluator_help),
        _target_option(),
        click.option("--hw-budget", default=None, help=hw_help),
        click.option("--top-k", "top_k", default=10, show_default=True, type=click.IntRange(1, None),
                     help="Configurations to verify on hardware."),
        click.option("--seed", default=0, show_default=True, type=click.IntRange(0, None)),
        click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None,
                     help="Output folder [default: a new folder under ./autotune-runs/]"),
        click.option("--resume", "resume_dir", type=click.Path(exists=True, file_okay=False), default=None,
                     help="Continue the run saved in this folder (its checkpoint), with what is left of --budget."),
        click.option("--store", default=None, help="Measurement store (SQLite path, or 'none') [default: "
                     "$AUTOTUNE_STORE or ~/.cache/autotune/measurements.sqlite]"),
        click.option("--batch-size", default=batch_size, show_default=True, type=click.IntRange(1, None)),
        click.option("--max-evals", "max_evals", default=None, type=click.IntRange(1, None),
                     help="Stop after this many configurations (with --seed: a reproducible run)."),
        click.option("--no-progress", is_flag=True, help="No progress bar."),
    ]

    def apply(f: Callable) -> Callable:
        for opt in reversed(options):
            f = opt(f)
        return f
    return apply


def _command_start() -> float:
    """When --budget's wall clock started: the process's start when it runs the command line itself
    (interpreter and imports count), else now."""
    return time.monotonic() - (budget_model.process_age() if _is_main_program() else 0.0)


def _check_budget_after_parse(total: Optional[float], hw: float, model_spec: Optional[str], started: float,
                              load_s: float, budget_text: str) -> None:
    """`budget_model.check_after_parse` as a one-line usage error."""
    try:
        budget_model.check_after_parse(total, hw, (model_spec or "").strip().lower(), time.monotonic() - started, load_s,
                                 budget_text)
    except budget_model.BudgetTooShort as e:
        raise UserError(str(e)) from None


def _search_budget(total: Optional[float], hw: float, model_name: str, started: float, load_s: float,
                   budget_text: str) -> tuple:
    """`budget_model.split_budget` from this command's start, as a one-line usage error when it cannot be held."""
    try:
        return budget_model.split_budget(total, hw, model_name, time.monotonic() - started, load_s, budget_text)
    except budget_model.BudgetTooShort as e:
        raise UserError(str(e)) from None


def _stamp_wall(out: Path, report: dict, started: float) -> None:
    """Record the command's wall clock so far (outputs written) in report.json."""
    from autotune.tuning.report import write_json
    report["wall_s"] = time.monotonic() - started
    split = report.get("budget_split")
    if split and "search_and_verification_end_s" in split:  # writing the outputs, against its reserve
        split["outputs_s"] = round(report["wall_s"] - split["search_and_verification_end_s"], 3)
    write_json(out / "report.json", report)


def _make_strategy(strategy_cls: Any, space: Any, seed: int, params: dict) -> Any:
    """The strategy object (`--strategy-param` values it rejects are a one-line error)."""
    try:
        return strategy_cls(space, seed=seed, **params)
    except (TypeError, ValueError) as e:
        raise UserError(f"--strategy-param: {e}") from None


