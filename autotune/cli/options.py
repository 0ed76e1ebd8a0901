"""`autotune options`: search the target compiler's own options (``Target.compiler_options``) for one
program, each checked against and timed beside XLA's default compile (autotune/tuning/options_search.py)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import click

from autotune.cli.common import _check_target, _duration, _output_dir, _run_dir, make_evaluator
from autotune.cli.errors import UserError
from autotune.cli.errors import friendly as _friendly
from autotune.compiler.targets import get_target

__all__ = ["OptionsArgs", "options"]


@dataclass(frozen=True)
class OptionsArgs:
    """`autotune options`'s options (besides PROGRAM)."""

    target: str              # --target, canonical name
    budget: str              # --budget: hardware time of the search (text, e.g. 2m)
    out_dir: Optional[str]   # --out (None: a new folder under ./autotune-runs/)
    seed: int                # the inputs the outputs are compared on


@click.command()
@click.argument("program", type=click.Path(exists=True, dir_okay=False))
@click.option("--target", default="cpu", show_default=True, callback=_check_target, metavar="TARGET",
              help="Compilation target whose compiler options are searched (cpu: XLA:CPU's DebugOptions).")
@click.option("--budget", default="2m", show_default=True,
              help="Hardware time of the search (e.g. 30s, 2m), after the measuring worker has started.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None,
              help="Folder for report.json (default: a new folder under ./autotune-runs/).")
@click.option("--seed", default=0, show_default=True, type=click.IntRange(0, None),
              help="Seed of the inputs the outputs are compared on.")
@_friendly
def options(program: str, **opts: Any) -> None:
    """Search the compiler's own options for PROGRAM: each option alone, then pairs of the best, outputs
    checked against XLA's default compile, timed paired beside it; keep the best only if faster beyond
    the timing noise (95% interval above 1). Writes report.json; prints one line."""
    a = OptionsArgs(**opts)
    target = get_target(a.target)
    if not target.compiler_options:
        raise UserError(f"--target {a.target}: declares no compiler options to search (the options search "
                        f"runs on targets that declare them, e.g. --target cpu)")
    seconds = _duration(a.budget, "--budget")
    if seconds is None:
        raise UserError(f"--budget {a.budget}: the options search needs a finite budget (e.g. 2m)")
    text = Path(program).read_text()
    from autotune.compiler.hlo import parse_hlo
    parse_hlo(text)  # malformed HLO: a one-line error before any worker starts
    out = _output_dir(_run_dir(program, a.out_dir, "options"), "--out")
    from autotune.tuning.options_search import search_options
    from autotune.tuning.report import write_json
    ev = make_evaluator("xla", a.target, "none", a.seed)
    try:
        machine = ev.machine  # starts the worker: its start-up is not the search's budget
        result = search_options(text, target, ev, seconds)
    finally:
        ev.close()
    out.mkdir(parents=True, exist_ok=True)
    report = {"program": str(program), "target": target.name, "budget": a.budget, "budget_s": seconds,
              "machine": machine, "seed": a.seed, "winner": _winner(result), **result.as_dict()}
    write_json(out / "report.json", report)
    click.echo(f"{Path(program).name}: {result.message}")
    click.echo(f"results in {out}/ (report.json)")


def _winner(result: Any) -> Optional[dict]:
    chosen = [c for c in result.candidates if c.chosen]
    return chosen[0].as_dict() if chosen else None
