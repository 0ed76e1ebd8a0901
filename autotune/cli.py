"""The `autotune` command line.

Every user error (malformed HLO, unknown option values, impossible budgets, corrupt files) is
printed as one line on stderr with a non-zero exit; tracebacks are for bugs only.
"""
from __future__ import annotations

import functools
import json
import sys
from pathlib import Path
from typing import Any, Callable, Optional

import click

from .hlo import HloParseError

TARGETS = ("tpu", "cpu")


class UserError(click.ClickException):
    """A clear one-line error for the user (exit status 2)."""

    exit_code = 2

    def show(self, file=None) -> None:  # one line, no "Error:" banner duplication
        click.echo(f"autotune: error: {self.format_message()}", err=True)


def _friendly(fn: Callable) -> Callable:
    """Turn known error types into one-line messages with a non-zero exit."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from .program import ProgramError
        try:
            return fn(*args, **kwargs)
        except HloParseError as e:
            raise UserError(e.one_line().replace(": error: ", ": ", 1)) from None
        except ProgramError as e:
            raise UserError(str(e)) from None
        except UserError:
            raise
        except (ValueError, KeyError, OSError) as e:
            if isinstance(e, KeyError):
                msg = f"unknown name {e}"
            else:
                msg = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise UserError(msg) from None
    return wrapper


def _load(path: str):
    """Parse + normalize a program; returns (Program, XLA-style cost of the unfused module)."""
    from .analysis import module_cost
    from .hlo import parse_hlo_file
    from .program import Program

    module = parse_hlo_file(path)
    cost = module_cost(module)
    return Program.from_module(module), cost


def _load_config(space, path: Optional[str]):
    from .config_io import load_config
    if path is None:
        return space.default()
    return load_config(space, path)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="autotune")
def main() -> None:
    """Autotuner for XLA HLO programs: operator fusion and tile sizes, with pluggable cost models."""


@main.command()
@click.argument("program", type=click.Path(exists=True, dir_okay=False))
@click.option("--target", type=click.Choice(TARGETS), default="tpu", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@_friendly
def show(program: str, target: str, as_json: bool) -> None:
    """Summarize a program: size, fusible edges, default kernels, static cost."""
    from .fusion import FusionSpace

    prog, cost = _load(program)
    space = FusionSpace(prog, target)
    default = space.default()
    kernels = space.state(default).refs()
    info = {
        "program": str(program),
        "target": target,
        "instructions": prog.instruction_count(),
        "computations": len(prog.module.computations),
        "kernel_computations": len(prog.computations),
        "fusible_edges": space.n_edges,
        "fused_edges_default": default.count(),
        "kernels_default": len(kernels),
        "flops": cost.flops,
        "transcendentals": cost.transcendentals,
        "bytes_accessed": cost.bytes_accessed,
        "while_loops": [{"instruction": w.instruction, "trip_count": w.trip_count, "source": w.source}
                        for w in prog.whiles],
        "warnings": prog.flags,
    }
    if as_json:
        click.echo(json.dumps(info, indent=2))
        return
    rows = [
        ("program", info["program"]), ("target", target),
        ("instructions", f"{info['instructions']:,}"),
        ("computations", f"{info['computations']} ({info['kernel_computations']} with kernels)"),
        ("fusible edges", f"{info['fusible_edges']:,} ({info['fused_edges_default']:,} fused by default)"),
        ("kernels (default)", f"{info['kernels_default']:,}"),
        ("flops", f"{cost.flops:,.0f}"), ("transcendentals", f"{cost.transcendentals:,.0f}"),
        ("bytes accessed", f"{cost.bytes_accessed:,.0f}"),
    ]
    for w in prog.whiles:
        rows.append(("while " + w.instruction, f"trip count {w.trip_count} ({w.source})"))
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        click.echo(f"{k:<{width}}  {v}")
    for w in prog.flags:
        click.echo(f"warning: {w}", err=True)


@main.command()
@click.argument("program", type=click.Path(exists=True, dir_okay=False))
@click.option("--target", type=click.Choice(TARGETS), default="tpu", show_default=True)
@click.option("--config", "config_path", type=click.Path(exists=True, dir_okay=False),
              help="Fusion configuration (best_config.json); default: the compiler's heuristic.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), required=True, help="Output .hlo file.")
@click.option("--no-metadata", is_flag=True, help="Drop metadata and stack-frame tables.")
@_friendly
def emit(program: str, target: str, config_path: Optional[str], output: str, no_metadata: bool) -> None:
    """Write the fused program (fusion instructions per kernel) for a configuration."""
    from .fusion import FusionSpace
    from .kernel import emit_fused_text

    prog, _ = _load(program)
    space = FusionSpace(prog, target)
    cfg = _load_config(space, config_path)
    text = emit_fused_text(space, cfg, metadata=not no_metadata)
    Path(output).write_text(text)
    kernels = len(space.state(cfg).refs())
    click.echo(f"wrote {output}: {kernels} kernels, {cfg.count()}/{space.n_edges} edges fused", err=True)


def run() -> None:  # pragma: no cover - console entry point alias
    main()


if __name__ == "__main__":  # pragma: no cover
    main()
