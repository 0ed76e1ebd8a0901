"""The `autotune` command line.

Exit status: 0 done; 2 a user error (malformed HLO, bad option values, impossible budgets, unusable
paths, corrupt files, a checkpoint of another run), printed as one line on stderr
(`autotune: error: ...`) - tracebacks are for bugs only; 3 hardware measurement failed (`fusion`:
no configuration could be verified; `measure`: a kernel or an end-to-end timing failed), after every
output was written; 130 interrupted (Ctrl-C/SIGTERM), results so far written.
"""
from __future__ import annotations


import json
import sys
from pathlib import Path
from typing import Optional

import click

from autotune.cli.errors import OneLineErrorsGroup, UserError
from autotune.cli.errors import friendly as _friendly

from autotune.cli.common import (MEASUREMENT_FAILED_EXIT, _XLA_EVALUATORS, _default_evaluator, _load, _load_config, _output_file, _target_option, make_evaluator)


@click.group(cls=OneLineErrorsGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="autotune")
def main() -> None:
    """Autotuner for XLA HLO programs: operator fusion and tile sizes, with pluggable cost models."""


@main.command()
@click.argument("program", type=click.Path(exists=True, dir_okay=False))
@_target_option()
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@_friendly
def show(program: str, target: str, as_json: bool) -> None:
    """Summarize a program: size, fusible edges, default kernels, static cost."""
    from autotune.compiler.fusion import FusionSpace

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
@_target_option()
@click.option("--config", "config_path", type=click.Path(exists=True, dir_okay=False),
              help="Fusion configuration (best_config.json); default: the compiler's heuristic.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), required=True, help="Output .hlo file.")
@click.option("--no-metadata", is_flag=True, help="Drop metadata and stack-frame tables.")
@_friendly
def emit(program: str, target: str, config_path: Optional[str], output: str, no_metadata: bool) -> None:
    """Write the fused program (fusion instructions per kernel) for a configuration."""
    from autotune.compiler.fusion import FusionSpace
    from autotune.compiler.emission import emit_fused_text

    _output_file(output, "-o/--output")
    prog, _ = _load(program)
    space = FusionSpace(prog, target)
    cfg = _load_config(space, config_path)
    text = emit_fused_text(space, cfg, metadata=not no_metadata, header=True)
    Path(output).write_text(text)
    kernels = len(space.state(cfg).refs())
    click.echo(f"wrote {output}: {kernels} kernels, {cfg.count()}/{space.n_edges} edges fused", err=True)


@main.command()
@click.argument("program", type=click.Path(exists=True, dir_okay=False))
@click.option("--evaluator", default=None, metavar="sim|xla|xla-inprogram|PLUGIN",
              help="sim, xla (each kernel standalone), xla-inprogram (each kernel inside the compiled program), "
                   "or a plug-in (autotune.evaluators entry point, module:Class) [default: sim for tpu, xla for cpu]")
@_target_option()
@click.option("--config", "config_path", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Fusion configuration (best_config.json); default: the compiler's heuristic.")
@click.option("--store", default=None, help="Measurement store (SQLite path, or 'none').")
@click.option("--scheduler", default=None, help="xla: send kernels to a dask.distributed scheduler (tcp://HOST:PORT).")
@click.option("--workers", default=1, show_default=True, type=click.IntRange(1, 256),
              help="xla: local worker processes measuring in parallel (timings interfere on small machines).")
@click.option("--end-to-end", "end_to_end", is_flag=True,
              help="xla evaluator: also time the whole fused program (compiled as fusion verification "
                   "compiles it, outputs checked against the original's), and XLA's own default compilation.")
@click.option("--seed", default=0, show_default=True, type=click.IntRange(0, None))
@click.option("--json", "as_json", is_flag=True)
@_friendly
def measure(program: str, evaluator: Optional[str], target: str, config_path: Optional[str], store: Optional[str],
            scheduler: Optional[str], workers: int, end_to_end: bool, seed: int, as_json: bool) -> None:
    """Measure every kernel of a fusion configuration (and the program total) on an evaluator.

    Exit status 3 when a kernel or an end-to-end timing failed (one warning line each)."""
    from autotune.compiler.fusion import FusionSpace

    prog, _ = _load(program)
    space = FusionSpace(prog, target)
    cfg = _load_config(space, config_path)
    ev_name = evaluator or _default_evaluator(target)
    if (scheduler or workers > 1) and ev_name not in _XLA_EVALUATORS:
        raise UserError("--scheduler/--workers apply to the xla evaluators (the simulator is vectorized in-process)")
    if end_to_end and ev_name not in _XLA_EVALUATORS:
        raise UserError("--end-to-end needs the xla evaluator or xla-inprogram (--target cpu)")
    ev = make_evaluator(evaluator, target, store, seed, scheduler=scheduler, workers=workers)
    problems: list = []
    try:
        kernels = space.kernels(cfg)
        ms = ev.measure(kernels)
        rows = []
        total = 0.0
        failed = 0
        for k, m in zip(kernels, ms):
            rows.append({"hash": k.hash, "root": k.root_instruction.name, "computation": k.computation.name,
                         "multiplicity": k.multiplicity, "runtime_s": m.seconds if m.ok else None,
                         "status": "ok" if m.ok else m.status})
            if m.ok:
                total += m.seconds * k.multiplicity
            else:
                failed += 1
                if failed == 1:
                    first_failure = f"kernel {k.hash} ({k.root_instruction.name}): {m.status}"
        if failed:
            problems.append(f"{failed} of {len(kernels)} kernels failed to measure (first: {first_failure}); "
                            "no program total")
        info: dict = {"program": str(program), "target": target, "evaluator": evaluator or _default_evaluator(target),
                      "kernels_total": len(kernels), "kernels_failed": failed,
                      "total_s": total if not failed else None, "kernels": rows}
        if end_to_end:
            from autotune.compiler.emission import EMITTED_CPU_COMPILE_OPTIONS, emit_fused_text
            original = Path(program).read_text()
            m_cfg = ev.measure_program(emit_fused_text(space, cfg), reference=original, **EMITTED_CPU_COMPILE_OPTIONS)
            m_xla = ev.measure_program(original)
            info["end_to_end"] = {"config_s": m_cfg.seconds if m_cfg.ok else None, "config_status": m_cfg.status,
                                  "config_output_error": m_cfg.extra.get("output_error"),
                                  "config_compile_options": EMITTED_CPU_COMPILE_OPTIONS,
                                  "xla_default_s": m_xla.seconds if m_xla.ok else None,
                                  "xla_default_status": m_xla.status}
            for what, m in (("this configuration's fused program", m_cfg), ("the original program", m_xla)):
                if not m.ok:
                    problems.append(f"end-to-end timing of {what} failed: {m.status}")
        info["warnings"] = problems
    finally:
        ev.close()
    if as_json:
        click.echo(json.dumps(info, indent=2))
    else:
        for r in sorted(rows, key=lambda r: -(r["runtime_s"] or 0) * r["multiplicity"])[:20]:
            rt = f"{r['runtime_s'] * 1e6:10.2f} us" if r["runtime_s"] is not None else f"{'failed':>13}"
            click.echo(f"{r['hash']}  {rt}  x{r['multiplicity']:<4g} {r['root']} {'' if r['status'] == 'ok' else r['status']}")
        if len(rows) > 20:
            click.echo(f"... {len(rows) - 20} more kernels")
        tot = f"{total * 1e3:.4f} ms" if not failed else f"incomplete ({failed} kernels failed)"
        click.echo(f"total: {tot} over {len(rows)} kernels")
        if "end_to_end" in info:
            e = info["end_to_end"]
            click.echo(f"end-to-end: this configuration {e['config_s']} s ({e['config_status']}), "
                       f"XLA default {e['xla_default_s']} s ({e['xla_default_status']})")
    if problems:  # one line for the whole failure; the details are in the table / JSON above
        click.echo(f"autotune: error: measurement failed: {'; '.join(problems)}", err=True)
        sys.exit(MEASUREMENT_FAILED_EXIT)




def _attach_commands() -> None:
    """The search commands (autotune/cli/search.py), `options` (autotune/cli/options.py) and `dataset build`, `train`, `ensemble`, `evaluate`
    (autotune/cli/learn.py, learned cost models) are plain click commands, attached here."""
    from autotune.cli.learn import dataset, ensemble, evaluate, train
    from autotune.cli.options import options
    from autotune.cli.search import fusion, layout, tile
    for cmd in (fusion, layout, tile, options, dataset, train, ensemble, evaluate):
        main.add_command(cmd)


_attach_commands()


def run() -> None:  # pragma: no cover - console entry point alias
    main()


if __name__ == "__main__":  # pragma: no cover
    main()
