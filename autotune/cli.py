"""The `autotune` command line.

Every user error (malformed HLO, unknown option values, impossible budgets, corrupt files) is
printed as one line on stderr with a non-zero exit; tracebacks are for bugs only.
"""
from __future__ import annotations

import functools
import json
import math
import os
import sys
import time
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


# --------------------------------------------------------------------------------------------------
# Evaluators, cost models, strategies from command-line names

EVALUATORS = ("sim", "xla")
SHIPPED_DIR = Path(__file__).resolve().parent.parent / "costmodels" / "shipped"


def _default_evaluator(target: str) -> str:
    return "sim" if target.startswith("tpu") else "xla"


def make_evaluator(name: Optional[str], target: str, store: Optional[str] = None, seed: int = 0,
                   budget: Any = None, noise: Optional[float] = None, scheduler: Optional[str] = None,
                   workers: int = 1):
    """Evaluator by name for a target: `sim` (TPU-like simulator) or `xla` (real XLA on this machine)."""
    from autotune.store import open_store
    name = name or _default_evaluator(target)
    st = open_store(store)
    if name == "sim":
        if not target.startswith("tpu"):
            raise UserError(f"the sim evaluator simulates a TPU; use --target tpu (got --target {target})")
        from hardware.simulator import TpuSimulator
        return TpuSimulator(target=target, seed=seed, budget=budget, store=st, noise=noise)
    if name == "xla":
        if target.startswith("tpu"):
            raise UserError("the xla evaluator runs kernels on this machine's XLA backend; use --target cpu")
        try:
            import jaxlib  # noqa: F401
        except ImportError:
            raise UserError("the xla evaluator needs jax/jaxlib: pip install 'autotune[xla]'") from None
        from hardware.xla import XlaEvaluator
        return XlaEvaluator(target=target, budget=budget, store=st, seed=seed, n_workers=workers,
                            scheduler=scheduler)
    raise UserError(f"unknown evaluator {name!r} (known: {', '.join(EVALUATORS)})")


def shipped_model(kind: str, task: str, target: str) -> Optional[Path]:
    for ext in (".pt", ".json", ".ubj"):
        p = SHIPPED_DIR / f"{kind}_{task}_{target}{ext}"
        if p.exists():
            return p
    return None


def make_cost_model(spec: Optional[str], task: str, target: str, evaluator: Any):
    """Cost model by name (analytical, xgboost, gnn, hardware), model file, or module:Class.

    Default: the shipped GNN for the task and target when present, else the analytical model."""
    from costmodels.base import EvaluatorCostModel, get_cost_model
    if spec is None:
        spec = "gnn" if shipped_model("gnn", task, target) else "analytical"
    key = spec.lower()
    if key == "hardware":
        return EvaluatorCostModel(evaluator), "hardware"
    if key == "analytical":
        return get_cost_model("analytical", target=target), "analytical"
    if key in ("gnn", "xgboost"):
        path = shipped_model("gnn" if key == "gnn" else "xgb", task, target)
        if path is None:
            raise UserError(f"no shipped {key} model for task {task!r} and target {target!r}; "
                            f"train one with `autotune train` and pass its path")
        spec = str(path)
    if os.path.exists(spec):
        return _load_model_file(spec, task, target), spec
    return get_cost_model(spec), spec


def _load_model_file(path: str, task: str, target: str):
    """A trained model file: .pt = GNN, .json/.ubj = XGBoost; the file must match task and target."""
    ext = Path(path).suffix.lower()
    if ext == ".pt":
        from costmodels.gnn import GnnCostModel as cls
    elif ext in (".json", ".ubj", ".xgb"):
        from costmodels.xgb import XgbCostModel as cls
    else:
        raise UserError(f"{path}: unknown model file type {ext!r} (expected .pt for GNN, .json/.ubj for XGBoost)")
    model = cls.load(path)
    for attr, want in (("task", task), ("target", target)):
        have = getattr(model, attr, None)
        if have is not None and have != want:
            raise UserError(f"{path}: model was trained for {attr} {have!r}, not {want!r}")
    return model


def _run_dir(program: str, out: Optional[str], kind: str) -> Path:
    if out:
        return Path(out)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = Path("autotune-runs") / f"{Path(program).stem}-{kind}-{stamp}"
    p, k = base, 1
    while p.exists():
        k += 1
        p = base.with_name(f"{base.name}-{k}")
    return p


@main.command()
@click.argument("program", type=click.Path(exists=True, dir_okay=False))
@click.option("--budget", default="5m", show_default=True, help="Total wall-clock budget (30s, 5m, 1h).")
@click.option("--cost-model", "cost_model", default=None,
              help="analytical, xgboost, gnn, hardware, a model file, or module:Class "
                   "[default: shipped GNN if present, else analytical]")
@click.option("--strategy", default="annealing", show_default=True,
              help="annealing, genetic, random, or module:Class / path.py:Class")
@click.option("--evaluator", type=click.Choice(EVALUATORS), default=None,
              help="Hardware for verification [default: sim for tpu, xla for cpu]")
@click.option("--target", type=click.Choice(TARGETS), default="tpu", show_default=True)
@click.option("--hw-budget", default=None,
              help="Wall-clock budget for measuring the top predicted configurations (0 = none) "
                   "[default: a tenth of --budget, as the paper; 1m without a --budget].")
@click.option("--top-k", "top_k", default=10, show_default=True, help="Configurations to verify on hardware.")
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None,
              help="Output folder [default: a new folder under ./autotune-runs/]")
@click.option("--resume", "resume_dir", type=click.Path(exists=True, file_okay=False), default=None,
              help="Continue the run saved in this folder (its checkpoint).")
@click.option("--store", default=None, help="Measurement store (SQLite path, or 'none') [default: $AUTOTUNE_STORE "
              "or ~/.cache/autotune/measurements.sqlite]")
@click.option("--batch-size", default=64, show_default=True, type=int)
@click.option("--max-evals", "max_evals", default=None, type=int,
              help="Stop after this many configurations (with --seed: a reproducible run).")
@click.option("--no-progress", is_flag=True, help="No progress bar.")
@click.option("--scheduler", default=None,
              help="xla: measure on a dask.distributed cluster (tcp://HOST:PORT) instead of local workers.")
@click.option("--workers", default=1, show_default=True, type=click.IntRange(1, 256),
              help="xla: parallel local measuring processes.")
@_friendly
def fusion(program: str, budget: str, cost_model: Optional[str], strategy: str, evaluator: Optional[str],
           target: str, hw_budget: Optional[str], top_k: int, seed: int, out_dir: Optional[str], resume_dir: Optional[str],
           store: Optional[str], batch_size: int, max_evals: Optional[int], no_progress: bool,
           scheduler: Optional[str], workers: int) -> None:
    """Search fusion configurations of PROGRAM with a cost model, verify the best on hardware."""
    from hardware.base import Budget, parse_duration
    from search.base import get_strategy
    from .fusion import FusionSpace
    from .report import write_fusion_outputs
    from .tuner import Tuner, TuningError

    total = parse_duration(budget)
    if hw_budget is None:  # the paper's split: search with the model, verify with a tenth of the budget
        hw = total / 10 if total is not None else 60.0
        hw_budget = f"{hw:g}s"
    else:
        hw = parse_duration(hw_budget) or 0.0
    if total is not None and total <= 0:
        raise UserError(f"--budget {budget} is too small to evaluate anything")
    prog, _ = _load(program)
    space = FusionSpace(prog, target)
    if space.n_edges == 0:
        raise UserError(f"{program}: no fusible producer->consumer edges on target {target}; nothing to tune")
    strategy_cls = get_strategy(strategy)
    if (scheduler or workers > 1) and (evaluator or _default_evaluator(target)) != "xla":
        raise UserError("--scheduler/--workers apply to the xla evaluator (the simulator is vectorized in-process)")
    if total is not None and 0 < total <= hw and (cost_model or "").strip().lower() != "hardware":
        raise UserError(f"--hw-budget {hw_budget} leaves nothing of --budget {budget} for the search")
    out = Path(resume_dir) if resume_dir and not out_dir else _run_dir(program, out_dir, "fusion")
    out.mkdir(parents=True, exist_ok=True)
    ev = make_evaluator(evaluator, target, store, seed, scheduler=scheduler, workers=workers)
    model, model_name = make_cost_model(cost_model, "fusion", target, ev)
    # --budget is the total wall clock: search gets what hardware verification does not.
    search_budget = total
    if total is not None and hw > 0 and model_name != "hardware":
        if hw >= total:
            raise UserError(f"--hw-budget {hw_budget} leaves nothing of --budget {budget} for the search")
        search_budget = total - hw
    if model_name == "hardware":
        ev.budget = Budget(search_budget)
    strat = strategy_cls(space, seed=seed)
    tuner = Tuner(space, model, strat, Budget(search_budget), evaluator=ev if hw > 0 else None,
                  hw_budget=hw, top_k_verify=top_k, out_dir=out, batch_size=batch_size,
                  progress=not no_progress, max_evaluations=max_evals)
    if resume_dir:
        tuner.resume(resume_dir)
    try:
        result = tuner.run()
    except TuningError as e:
        raise UserError(str(e)) from None
    meta = {"program": str(program), "target": target, "cost_model": model_name,
            "strategy": getattr(strategy_cls, "name", strategy), "evaluator": evaluator or _default_evaluator(target),
            "budget_s": total, "hw_budget_s": hw, "seed": seed, "out_dir": str(out)}
    report = write_fusion_outputs(out, space, result, meta)
    ev.close()
    msg = (f"{Path(program).name}: predicted {report['default_cost_s'] * 1e3:.4g} ms -> "
           f"{report['best_cost_s'] * 1e3:.4g} ms (x{report['speedup']:.3f}) after {result.evaluations:,} "
           f"configurations")
    if report.get("measured_speedup"):
        msg += (f"; measured {report['measured_default_s'] * 1e3:.4g} ms -> {report['measured_best_s'] * 1e3:.4g} ms "
                f"(x{report['measured_speedup']:.3f})")
    click.echo(msg)
    click.echo(f"results in {out}/ (report.json, best_config.json, fused.hlo, search.png, log.jsonl)")
    if result.stopped_by in ("SIGINT", "SIGTERM"):
        sys.exit(130)


@main.command()
@click.argument("program", type=click.Path(exists=True, dir_okay=False))
@click.option("--evaluator", type=click.Choice(EVALUATORS), default=None,
              help="[default: sim for tpu, xla for cpu]")
@click.option("--target", type=click.Choice(TARGETS), default="tpu", show_default=True)
@click.option("--config", "config_path", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Fusion configuration (best_config.json); default: the compiler's heuristic.")
@click.option("--store", default=None, help="Measurement store (SQLite path, or 'none').")
@click.option("--scheduler", default=None, help="xla: send kernels to a dask.distributed scheduler (tcp://HOST:PORT).")
@click.option("--workers", default=1, show_default=True, type=int,
              help="xla: local worker processes measuring in parallel (timings interfere on small machines).")
@click.option("--end-to-end", "end_to_end", is_flag=True,
              help="xla evaluator: also time the whole fused program, and XLA's own default compilation.")
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--json", "as_json", is_flag=True)
@_friendly
def measure(program: str, evaluator: Optional[str], target: str, config_path: Optional[str], store: Optional[str],
            scheduler: Optional[str], workers: int, end_to_end: bool, seed: int, as_json: bool) -> None:
    """Measure every kernel of a fusion configuration (and the program total) on an evaluator."""
    from .fusion import FusionSpace

    prog, _ = _load(program)
    space = FusionSpace(prog, target)
    cfg = _load_config(space, config_path)
    if (scheduler or workers > 1) and (evaluator or _default_evaluator(target)) != "xla":
        raise UserError("--scheduler/--workers apply to the xla evaluator (the simulator is vectorized in-process)")
    ev = make_evaluator(evaluator, target, store, seed, scheduler=scheduler, workers=workers)
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
        info: dict = {"program": str(program), "target": target, "evaluator": evaluator or _default_evaluator(target),
                      "kernels_total": len(kernels), "kernels_failed": failed,
                      "total_s": total if not failed else None, "kernels": rows}
        if end_to_end:
            if not hasattr(ev, "measure_program"):
                raise UserError("--end-to-end needs the xla evaluator")
            from .kernel import emit_fused_text
            m_cfg = ev.measure_program(emit_fused_text(space, cfg, metadata=False))
            m_xla = ev.measure_program(open(program).read())
            info["end_to_end"] = {"config_s": m_cfg.seconds if m_cfg.ok else None, "config_status": m_cfg.status,
                                  "xla_default_s": m_xla.seconds if m_xla.ok else None,
                                  "xla_default_status": m_xla.status}
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
    if failed:
        sys.exit(1)


@main.command()
@click.argument("program", type=click.Path(exists=True, dir_okay=False))
@click.option("--top-k", "top_k", default=10, show_default=True, type=click.IntRange(1, None),
              help="Tiles per kernel measured on the evaluator (the model's K best).")
@click.option("--cost-model", "cost_model", default=None,
              help="analytical, xgboost, gnn, a model file, or module:Class "
                   "[default: shipped tile GNN if present, else analytical]")
@click.option("--evaluator", type=click.Choice(["sim"]), default="sim", show_default=True)
@click.option("--target", type=click.Choice(["tpu"]), default="tpu", show_default=True,
              help="Tile sizes are a TPU-target decision here (XLA:CPU picks its own tiling).")
@click.option("--config", "config_path", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Fusion configuration whose kernels are tiled (default: the compiler's heuristic).")
@click.option("--budget", default=None, help="Wall-clock budget for hardware measurements (e.g. 5m).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None)
@click.option("--store", default=None, help="Measurement store (SQLite path, or 'none').")
@click.option("--seed", default=0, show_default=True, type=int)
@_friendly
def tile(program: str, top_k: int, cost_model: Optional[str], evaluator: str, target: str,
         config_path: Optional[str], budget: Optional[str], out_dir: Optional[str], store: Optional[str],
         seed: int) -> None:
    """Choose a tile size per kernel: rank every valid tile with a cost model, measure the top K."""
    from search.topk import TopKTileSearch
    from .fusion import FusionSpace
    from .report import write_json
    from .tiles import TileSpace

    prog, _ = _load(program)
    space = FusionSpace(prog, target)
    cfg = _load_config(space, config_path)
    out = _run_dir(program, out_dir, "tile")
    out.mkdir(parents=True, exist_ok=True)
    ev = make_evaluator(evaluator, target, store, seed, budget=budget)
    model, model_name = make_cost_model(cost_model, "tile", target, ev)
    uniq: dict = {}
    mult: dict = {}
    for k in space.kernels(cfg):
        if k.is_trivial:
            continue
        uniq.setdefault(k.hash, k)
        mult[k.hash] = mult.get(k.hash, 0.0) + k.multiplicity
    kernels = list(uniq.values())
    spaces = [TileSpace(k, target) for k in kernels]
    ranked = TopKTileSearch(cost_model=model, k=top_k, target=target).candidates(kernels, spaces)
    rows = []
    try:
        from tqdm.auto import tqdm
        it = tqdm(list(zip(kernels, spaces, ranked)), desc="kernels", unit="kernel", leave=False, disable=None)
    except ImportError:  # pragma: no cover
        it = zip(kernels, spaces, ranked)
    total_default = total_best = 0.0
    for k, sp, cands in it:
        default = sp.default()
        tiles = [default] + [t for t in cands if t != default]
        ms = ev.measure([k] * len(tiles), tiles)
        d_m = ms[0]
        best_t, best_s = default, d_m.seconds if d_m.ok else math.inf
        for t, m in zip(tiles[1:], ms[1:]):
            if m.ok and m.seconds < best_s:
                best_t, best_s = t, m.seconds
        row = {"hash": k.hash, "root": k.root_instruction.name, "computation": k.computation.name,
               "multiplicity": mult[k.hash], "valid_tiles": len(sp), "default_tile": default.key(),
               "chosen_tile": best_t.key(), "default_s": d_m.seconds if d_m.ok else None,
               "chosen_s": best_s if math.isfinite(best_s) else None,
               "speedup": (d_m.seconds / best_s) if d_m.ok and math.isfinite(best_s) else None,
               "measured": sum(m.ok for m in ms), "status": d_m.status}
        rows.append(row)
        if d_m.ok and math.isfinite(best_s):
            total_default += d_m.seconds * mult[k.hash]
            total_best += best_s * mult[k.hash]
        write_json(out / "tiles.json", {"kernels": rows})  # on disk as soon as measured
        if ev.budget_exhausted or ev.budget.exhausted:
            break
    report = {"program": str(program), "target": target, "cost_model": model_name, "evaluator": evaluator,
              "top_k": top_k, "kernels": len(kernels), "kernels_tuned": len(rows),
              "default_total_s": total_default, "tuned_total_s": total_best,
              "speedup": total_default / total_best if total_best > 0 else None,
              "budget_exhausted": bool(ev.budget_exhausted or ev.budget.exhausted), "seed": seed,
              "config": config_path or "default"}
    write_json(out / "report.json", report)
    ev.close()
    sp_txt = f"x{report['speedup']:.3f}" if report["speedup"] else "n/a"
    click.echo(f"{Path(program).name}: {len(rows)}/{len(kernels)} kernels tuned; kernel time "
               f"{total_default * 1e3:.4g} ms -> {total_best * 1e3:.4g} ms ({sp_txt}) with top-{top_k} of {model_name}")
    click.echo(f"results in {out}/ (report.json, tiles.json)")


def _attach_learning_commands() -> None:
    """`dataset build`, `train`, `evaluate` live in cli_learn.py (learned cost models)."""
    from .cli_learn import dataset, evaluate, train
    for cmd in (dataset, train, evaluate):
        main.add_command(cmd)


_attach_learning_commands()


def run() -> None:  # pragma: no cover - console entry point alias
    main()


if __name__ == "__main__":  # pragma: no cover
    main()
