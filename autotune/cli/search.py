"""The search commands: `fusion`, `layout` and `tile` (search a space against a cost model within a
budget, verify on hardware, write the results)."""
from __future__ import annotations


import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import click

from autotune import api
from autotune.cli.arguments import FusionArgs, SearchArgs, TileArgs
from autotune.cli.errors import UserError
from autotune.cli.errors import friendly as _friendly
from autotune.compiler.targets import get_target
from autotune.tuning.paired_cost import DEFAULT_TRIAL_SECONDS, TRIAL_COSTS
from autotune.tuning.result import ORIGINAL_WITH_OPTIONS

from autotune.cli.common import (COST_MODEL_HELP, INTERRUPTED_EXIT, MEASUREMENT_FAILED_EXIT, _budget_split, _check_budget_after_parse, _check_target, _command_start, _default_evaluator, _duration, _is_main_program, _load, _load_config, _make_strategy, _output_dir, _run_dir, _search_budget, _search_options, _stamp_wall, _timed_load, _warn, make_cost_model, make_evaluator, model_identity)


@dataclass(frozen=True)
class _SearchRun:
    """What `_run_tuner` needs of the `layout` command besides the space, cost model, strategy
    and evaluator: its options and what start-up found."""

    args: SearchArgs                       # the command's options
    program: str                           # PROGRAM, as given
    out: Path                              # the run folder
    total: Optional[float]                 # --budget in seconds (None: no limit)
    hw: float                              # --hw-budget in seconds
    started: float                         # when --budget's wall clock started (time.monotonic)
    load_s: float                          # seconds the program's parsing took
    model_name: str                        # the cost-model spec as resolved (a shipped model's path)
    ev_name: str                           # the evaluator's name
    note: Optional[str] = None             # a warning to report first (e.g. a single configuration)
    task: Optional[str] = None             # recorded in the fingerprint and the report when given
    program_sha: Optional[str] = None      # the program's fingerprint when the caller has it already
    fingerprint_extra: Optional[dict] = None  # more options a checkpoint must match (strategy parameters, transfer)
    after_s: float = 0.0                   # hardware seconds after verification (the compiler-options stage)


def _run_tuner(space: Any, model: Any, strat: Any, ev: Any, run: _SearchRun) -> tuple:
    """The search of `layout`: the Tuner over `space` (resumed from --resume), the search
    budget being what start-up, verification and writing the outputs leave of --budget; returns
    (TuningResult, the report's meta)."""
    from hardware.base import Budget
    from autotune.tuning.checkpoint import program_fingerprint
    from autotune.tuning.options import TunerOptions, VerifyOptions
    from autotune.tuning.tuner import Tuner

    a, total, hw, started = run.args, run.total, run.hw, run.started
    try:
        search_budget, budget_note = _search_budget(total, hw + run.after_s, run.model_name, started, run.load_s,
                                                    a.budget)
    except UserError as err:
        if _is_main_program():  # refused after start-up: say so now, without freeing the model's heap object by object
            ev.close()
            err.show()
            sys.stderr.flush()
            os._exit(err.exit_code)
        raise
    strategy_name = type(strat).name
    fingerprint = {"program": run.program_sha or program_fingerprint(space), "target": a.target,
                   "cost_model": model_identity(run.model_name), "strategy": strategy_name, "evaluator": run.ev_name,
                   "seed": a.seed}
    if run.task is not None:
        fingerprint["task"] = run.task
    fingerprint.update(run.fingerprint_extra or {})
    options = TunerOptions(out_dir=run.out, batch_size=a.batch_size, progress=not a.no_progress,
                           max_evaluations=a.max_evals, fingerprint=fingerprint,
                           overhead_s=(total - search_budget) if total is not None else 0.0)
    verify = VerifyOptions(hw_budget=hw, top_k=a.top_k, reference_text=Path(run.program).read_text())
    tuner = Tuner(space, model, strat, Budget(search_budget), evaluator=ev if hw > 0 else None, options=options,
                  verify=verify)
    if a.resume_dir:
        tuner.resume(a.resume_dir)
        r = tuner.resumed_from
        left = (f"{r['remaining_s']:.1f}s of the {r['search_budget_s']:g}s search budget left"
                if r["search_budget_s"] is not None else "no search time limit")
        click.echo(f"resuming {a.resume_dir}: {r['evaluations']:,} configurations and {r['elapsed_s']:.1f}s of "
                   f"search done before; {left}", err=True)
    run.out.mkdir(parents=True, exist_ok=True)
    if run.model_name == "hardware":
        ev.budget = Budget(tuner.budget.seconds)
    result = tuner.run()
    if budget_note is not None:  # where the budget went: outputs_s follows in _stamp_wall
        budget_note["search_s"] = round(result.elapsed_s, 3)
        budget_note["verification_s"] = result.verification.get("seconds", 0.0) if result.verification else 0.0
        budget_note["search_and_verification_end_s"] = round(time.monotonic() - started, 3)
    if run.note:
        result.warnings.insert(0, run.note)
    if hw <= 0:
        result.verification = {"status": "skipped", "reason": "--hw-budget 0: no hardware verification asked for"}
    meta = {"program": str(run.program), "target": a.target, "cost_model": run.model_name, "strategy": strategy_name,
            "evaluator": run.ev_name, "budget_s": total, "hw_budget_s": hw,
            **({"options_budget_s": run.after_s} if run.after_s else {}), "seed": a.seed, "out_dir": str(run.out),
            "fingerprint": fingerprint, "resumed_from": tuner.resumed_from,
            "machine": ev.machine, "budget_split": budget_note}
    if run.task is not None:
        meta["task"] = run.task
    return result, meta


def _paired_note(report: dict, result: Any) -> str:
    """The kept winner's speedup, timed beside the baseline (XLA's own compile of the original), with its
    interval (and the race's medians)."""
    paired = result.verification.get("paired") or {}
    lo, hi = report["measured_speedup_interval"]
    note = (f"; measured (end to end, paired with the {_baseline_word(report)}) x{report['measured_speedup']:.3f} "
            f"({paired.get('confidence', 0.95):.0%} interval {lo:.3f}-{hi:.3f}, {paired.get('ratios')} block ratios")
    if report.get("XLA_FLAGS"):  # the compiler-options stage chose options: no race medians of that compile
        return note + f"; with compiler options, XLA_FLAGS='{report['XLA_FLAGS']}')"
    return note + (f"; race medians {report['measured_baseline_s'] * 1e3:.4g} ms -> "
                   f"{report['measured_best_s'] * 1e3:.4g} ms)")


def _baseline_word(report: dict) -> str:
    """What a measured speedup is over, in the summary line."""
    return "original (XLA's own compile)" if report.get("measured_original_s") is not None else "default"


def _written_note(report: dict, result: Any) -> str:
    """Say which configuration was written when the hardware race chose another than the search's best."""
    winner = result.verification.get("winner")
    if winner == "original":
        return "; written: the original program (keep it: nothing tuned beats XLA's own compile)"
    if winner == ORIGINAL_WITH_OPTIONS:
        return "; written: the original program, unchanged, to compile with the XLA_FLAGS above"
    if winner is None or winner == 0:
        return ""
    what = "the default configuration" if winner == "default" else f"prediction {winner}"
    pred = report.get("written_predicted_cost_s")
    return f"; written: {what}" + (f" (predicted {pred * 1e3:.4g} ms)" if pred else "")


def _finish_search(msg: str, result: Any, out: Path, files: str) -> None:
    """The last lines of a search command and its exit status (130 interrupted, 3 nothing verified):
    `result` is a TuningResult (layout) or the library run's RunResult (fusion)."""
    from autotune.run import RunResult
    click.echo(msg)
    click.echo(f"results in {out}/ ({files})")
    if isinstance(result, RunResult):
        interrupted, failed = result.interrupted, not result.verified
    else:
        interrupted, failed = result.stopped_by in ("SIGINT", "SIGTERM"), result.verification_failed
    code = INTERRUPTED_EXIT if interrupted else MEASUREMENT_FAILED_EXIT if failed else 0
    if _is_main_program():
        # Everything is written and the evaluator closed: skip freeing the search's heap object by
        # object (seconds on a large program, after the budget's end) when the process ends anyway.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    if code:
        sys.exit(code)
def _strategy_params(pairs: tuple) -> dict:
    """`--strategy-param KEY=VALUE` pairs as constructor keywords (numbers and booleans parsed; the
    library run checks them against the strategy's parameters)."""
    out: dict = {}
    for pair in pairs:
        key, eq, text = pair.partition("=")
        key = key.strip().replace("-", "_")
        if not eq or not key:
            raise UserError(f"--strategy-param {pair}: expected KEY=VALUE (e.g. diversity=1.0)")
        low = text.strip().lower()
        value: Any = {"true": True, "false": False, "none": None}.get(low, text.strip())
        if isinstance(value, str):
            for cast in (int, float):
                try:
                    value = cast(value)
                    break
                except ValueError:
                    pass
        out[key] = value
    return out


def _transfer_options(f: Callable) -> Callable:
    """--strategy-param, --transfer and --history-any-machine (fusion and tile)."""
    f = click.option("--history-any-machine", "history_any_machine", is_flag=True,
                     help="Transfer: also learn from measurements of other machines in the store "
                          "(the report lists the machines used).")(f)
    f = click.option("--transfer", default="auto", show_default=True, metavar="auto|store|none|MODEL",
                     help="Transfer learning for --strategy model-based when the search measures on hardware: "
                          "a global model trained on the store's measurements of other programs (same target, "
                          "evaluator and machine) is the local model's prior (AutoTVM). auto = store when it "
                          "has history; MODEL = a cost model or model file as the global model.")(f)
    f = click.option("--strategy-param", "strategy_param", multiple=True, metavar="KEY=VALUE",
                     help="A parameter of the strategy, repeatable; model-based: objective=rank|reg, "
                          "diversity=1.0, epsilon=0.1, model=xgboost|gnn (gnn: the shipped GNN fine-tuned on "
                          "the measurements), ...")(f)
    return f


def _transfer_line(info: dict) -> Optional[str]:
    """The summary line about the history a run learned from (None when transfer was not eligible)."""
    if info.get("source") == "store":
        machines = ", ".join(f"{m or 'unknown machine'} ({n})" for m, n in info["machines"].items())
        return (f"transfer: global model on {info['rows']:,} measurements of {info['kernels']:,} kernels from "
                f"{info['programs']} other program{'s' if info['programs'] != 1 else ''}, machine {machines}")
    if info.get("source") == "model":
        return f"transfer: global model {info['model']}"
    if "history" in info:
        return f"transfer: none ({info['reason']})"
    return None


@click.command()
@click.argument("program", type=click.Path(exists=True, dir_okay=False))
@_search_options(cost_model_help=COST_MODEL_HELP + "; hardware = measure every configuration on the evaluator "
                 "[default: the shipped GNN if present, else analytical]",
                 evaluator_help="Hardware for verification: sim, xla, or a plug-in (autotune.evaluators entry point, "
                 "module:Class) [default: sim for tpu, xla for cpu]",
                 hw_help="Wall-clock budget for verifying the top predicted configurations on hardware (0 = none) "
                 "[default: a tenth of --budget, as the paper; 1m without a --budget]. With --evaluator xla, 60% "
                 "races the default configuration and the predictions against XLA's own compile of the original, "
                 "the rest times the race's winner beside the original (paired) for the reported speedup and its "
                 "interval; when nothing is shown faster, fused.hlo is the original (keep it).", batch_size=64)
@click.option("--scheduler", default=None,
              help="xla: measure on a dask.distributed cluster (tcp://HOST:PORT) instead of local workers.")
@click.option("--workers", default=1, show_default=True, type=click.IntRange(1, 256),
              help="xla: parallel local measuring processes.")
@click.option("--trial-cost", "trial_cost", default=TRIAL_COSTS[0], show_default=True,
              type=click.Choice(list(TRIAL_COSTS)),
              help="With --cost-model hardware: what a hardware trial costs a configuration. kernel-sum = its "
                   "kernels' standalone measurements summed (recorded in the store as history); paired = its whole "
                   "emitted program timed end to end beside the default's (XLA:CPU, alternating blocks, the drift "
                   "cancels): the default's time x the paired ratio.")
@click.option("--options-budget", "options_budget", default=None,
              help="Hardware time for the compiler-options stage after verification (0 = off): the target's own "
                   "compiler options (cpu: XLA:CPU's DebugOptions) searched for the program the run would write, "
                   "outputs checked, timed beside XLA's defaults, learning from earlier programs on this machine "
                   "(--store); fused.hlo then names the XLA_FLAGS it was verified with [default: a quarter of "
                   "--budget (1m without one) where the target declares compiler options and --evaluator is xla; "
                   "else 0]")
@click.option("--formulations-budget", "formulations_budget", default=None,
              help="Hardware time for the formulations stage before fusion (0 = off): each instruction with "
                   "equivalent formulations (depthwise, grouped and 1x1 convolutions, convolution gradients) "
                   "timed alone as written and as each alternative, outputs checked against the original; the "
                   "rewritten program is kept only when timed faster beside the original [default: 30% of "
                   "--budget, at most 3m (1m without one) with --evaluator xla on --target cpu; else 0]")
@click.option("--trial-seconds", "trial_seconds", default=DEFAULT_TRIAL_SECONDS, show_default=True, type=click.FloatRange(0.01, 60),
              help="--trial-cost paired: seconds of paired timing per configuration (its compilation comes on top).")
@click.option("--stages", default=None, metavar="STAGE[,STAGE...]",
              help="The stages to run, in order, comma-separated: formulations (equivalent formulations, before "
                   "fusion), fusion (search and verify), options (the compiler-options stage, after fusion), or a "
                   "plug-in stage (a registered name, an autotune.stages entry point, module:Class or "
                   "path.py:Class) [default: formulations,fusion,options on --target cpu, where the formulations are "
                   "timed; fusion,options on the others, where they would be the cost model's predictions]")
@_transfer_options
@_friendly
def fusion(program: str, **options: Any) -> None:
    """Search fusion configurations of PROGRAM with a cost model, verify the best on hardware.

    Exit status 3 when no configuration could be verified (outputs are still written)."""
    from autotune.run import RunOptions, SearchBudgetError, tune

    a = FusionArgs(**options)
    started = _command_start()
    run_options = RunOptions(
        hw_budget=a.hw_budget, options_budget=a.options_budget, formulations_budget=a.formulations_budget, top_k=a.top_k, seed=a.seed, out_dir=a.out_dir,
        resume_dir=a.resume_dir, store=a.store, batch_size=a.batch_size, max_evals=a.max_evals,
        progress=not a.no_progress, scheduler=a.scheduler, workers=a.workers, trial_cost=a.trial_cost,
        trial_seconds=a.trial_seconds, strategy_params=_strategy_params(a.strategy_param), transfer=a.transfer,
        history_any_machine=a.history_any_machine, started=started, log=lambda line: click.echo(line, err=True))
    try:
        run = tune(program, a.target, cost_model=a.cost_model, strategy=a.strategy, evaluator=a.evaluator,
                   budget=a.budget, stages=a.stages, options=run_options)
    except SearchBudgetError as err:
        if _is_main_program():  # refused after start-up: say so now, without freeing the model's heap object by object
            UserError(str(err)).show()
            sys.stderr.flush()
            os._exit(UserError.exit_code)
        raise UserError(str(err)) from None
    report, result, out = run.report, run.tuning, run.run_dir
    for w in report["warnings"]:  # the program's normalization notes, then every failed or skipped step
        _warn(w)
    if result is None:  # no fusion stage: the stages' own report fields
        _finish_search(f"{Path(program).name}: stages {', '.join(run.stages)} run", run, out, "report.json")
        return
    msg = (f"{Path(program).name}: predicted {report['default_cost_s'] * 1e3:.4g} ms -> "
           f"{report['best_cost_s'] * 1e3:.4g} ms (x{report['speedup']:.3f}) after {result.evaluations:,} "
           f"configurations")
    if report.get("measured_speedup"):
        how = "end to end" if result.verification.get("method") == "end-to-end" else "kernel sums"
        if report.get("measured_speedup_interval"):
            msg += _paired_note(report, result)
        else:
            over = f", against the {_baseline_word(report)}" if how == "end to end" else ""
            msg += (f"; measured ({how}{over}) {report['measured_baseline_s'] * 1e3:.4g} ms -> "
                    f"{report['measured_best_s'] * 1e3:.4g} ms (x{report['measured_speedup']:.3f})")
            if result.verification.get("kept_original"):
                msg += f" [{result.verification['kept_original']}]"
        msg += _written_note(report, result)
    elif result.verification.get("status") != "verified":
        msg += f"; not verified ({result.verification.get('reason', result.verification.get('status'))})"
    line = _transfer_line(report.get("transfer") or {})
    _finish_search(msg + (f"\n{line}" if line else ""), run, out,
                   "report.json, best_config.json, fused.hlo, search.png, log.jsonl")


@click.command()
@click.argument("program", type=click.Path(exists=True, dir_okay=False))
@_search_options(cost_model_help="gnn or xgboost (the shipped layout model for the target: ranks whole "
                 "configurations on the program's layout graph; also shipped:gnn, or a layout model file), or a kernel "
                 "cost model (analytical, sim, hardware, plug-ins) pricing the kernels of the program rewritten with "
                 "each configuration [default: sim (the simulator, noise-free) for tpu targets, else analytical]",
                 evaluator_help="Hardware for verification: sim (kernel sums), xla (outputs of the rewritten programs; "
                 "XLA:CPU drops the layouts) [default: sim for tpu, xla for cpu]",
                 hw_help="Wall-clock budget for verification (0 = none) [default: a tenth of --budget].", batch_size=16)
@_friendly
def layout(program: str, **options: Any) -> None:
    """Search the layouts (minor-to-major orders) of PROGRAM's convolutions, dots and reshapes.

    Each configuration is priced as the program rewritten with its layouts and the copies they need
    (autotune.compiler.layouts); the best is verified and written as layouts.hlo. Exit status 3 when
    no configuration could be verified (outputs are still written)."""
    from search.base import get_strategy
    from autotune.compiler.layouts import LayoutSpace
    from autotune.tuning.report import write_layout_outputs
    from autotune.tuning.tuner import Tuner

    a = SearchArgs(**options)
    target = a.target
    started = _command_start()
    total, hw, hw_budget = _budget_split(a.budget, a.hw_budget)
    prog, load_s = _timed_load(program)
    space = LayoutSpace(prog, target)
    single = (f"{program}: no convolution, dot or reshape with a choice of layout on target {target}: the program "
              "has one layout configuration, written as it is") if not space.free_slots else None
    strategy_cls = get_strategy(a.strategy)
    ev_name = a.evaluator or _default_evaluator(target)
    spec = a.cost_model or ("sim" if get_target(target).spec.kind == "tpu" else "analytical")
    if total is not None and 0 < total <= hw and (spec or "").strip().lower() != "hardware":
        raise UserError(f"--hw-budget {hw_budget} leaves nothing of --budget {a.budget} for the search")
    if a.resume_dir:
        Tuner.read_checkpoint(a.resume_dir)
    _check_budget_after_parse(total, hw, spec, started, load_s, a.budget)
    out = Path(a.resume_dir) if a.resume_dir and not a.out_dir else _run_dir(program, a.out_dir, "layout")
    _output_dir(out, "--out")
    ev = make_evaluator(a.evaluator, target, a.store, a.seed)
    try:
        model, model_name = make_cost_model(spec, "layout" if api.is_learned_spec(spec) else "fusion", target, ev)
        result, meta = _run_tuner(space, model, _make_strategy(strategy_cls, space, a.seed, {}), ev, _SearchRun(
            args=a, program=program, out=out, total=total, hw=hw, started=started, load_s=load_s,
            model_name=model_name, ev_name=ev_name, note=single, task="layout"))
        report = write_layout_outputs(out, space, result, meta)
        _stamp_wall(out, report, started)
    finally:
        ev.close()
    for w in report["warnings"]:
        _warn(w)
    msg = (f"{Path(program).name}: {report['configurable_nodes']} configurable nodes, predicted "
           f"{report['default_cost_s'] * 1e3:.4g} ms -> {report['best_cost_s'] * 1e3:.4g} ms (x{report['speedup']:.3f}) "
           f"after {result.evaluations:,} configurations; {report['tensors_changed_from_default']} tensors off the "
           f"default layout, {report['copies_best']} copies")
    if report.get("measured_speedup"):
        msg += (f"; measured (kernel sums) {report['measured_default_s'] * 1e3:.4g} ms -> "
                f"{report['measured_best_s'] * 1e3:.4g} ms (x{report['measured_speedup']:.3f})")
    elif result.verification.get("status") == "verified":
        msg += f"; verified ({result.verification.get('method')})"
    else:
        msg += f"; not verified ({result.verification.get('reason', result.verification.get('status'))})"
    _finish_search(msg, result, out, "report.json, best_config.json, layouts.hlo, search.png, log.jsonl")




@click.command()
@click.argument("program", type=click.Path(exists=True, dir_okay=False))
@click.option("--top-k", "top_k", default=10, show_default=True, type=click.IntRange(1, None),
              help="Tiles per kernel raced on the evaluator (the model's K best; with an online strategy "
                   "the K best measured).")
@click.option("--strategy", default="topk", show_default=True,
              help="topk (rank all tiles with --cost-model, measure the top K), or an online search whose "
                   "costs are measurements: model-based (AutoTVM), random, annealing, genetic, module:Class")
@click.option("--trials", default=32, show_default=True, type=click.IntRange(1, None),
              help="Measurements per kernel for an online --strategy (not topk).")
@click.option("--repeats", default=3, show_default=True, type=click.IntRange(0, None),
              help="Extra timings of the finalists and the default in the race; the lowest median wins.")
@click.option("--cost-model", "cost_model", default=None,
              help=COST_MODEL_HELP + " [default: the shipped tile GNN if present, else analytical]")
@click.option("--evaluator", type=click.Choice(["sim"]), default="sim", show_default=True)
@click.option("--target", default="tpu", show_default=True, callback=_check_target, metavar="TARGET",
              help="A target with a tile knob: tpu, tpu-v2 (XLA:CPU picks its own tiling; --target cpu has none).")
@click.option("--config", "config_path", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Fusion configuration whose kernels are tiled (default: the compiler's heuristic).")
@click.option("--budget", default=None, help="Wall-clock budget for hardware measurements (e.g. 5m).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None)
@click.option("--store", default=None, help="Measurement store (SQLite path, or 'none').")
@click.option("--seed", default=0, show_default=True, type=click.IntRange(0, None))
@_transfer_options
@_friendly
def tile(program: str, **options: Any) -> None:
    """Choose a tile size per kernel: search each kernel's tiles, race the best on the evaluator."""
    a = TileArgs(**options)
    target, top_k, strategy, trials, repeats, evaluator, seed = (a.target, a.top_k, a.strategy, a.trials, a.repeats,
                                                                 a.evaluator, a.seed)
    if get_target(target).xla_cpu_emission:
        raise UserError(f"--target {target}: XLA:CPU has no tile knob (it picks each kernel's loop tiling "
                        f"and parallel split itself; no tile size reaches the compiled program): nothing to tune")
    if get_target(target).default_evaluator != "sim":
        raise UserError(f"--target {target}: tile sizes are measured on the TPU simulator; use --target tpu")
    from search.base import get_strategy
    from autotune.compiler.fusion import FusionSpace
    from autotune.tuning.report import write_json
    from autotune.tuning.tile_tuning import TileTuningOptions, program_kernels, tune_program_tiles

    from autotune.tuning.history import HistoryRecorder
    from autotune.tuning.checkpoint import program_fingerprint
    from autotune.run.fusion import check_strategy_params, setup_transfer

    seconds = _duration(a.budget, "--budget")
    strategy_cls = get_strategy(strategy)  # an unknown name fails before any work
    strategy_name = strategy_cls.name
    online = strategy_name != "topk"
    params = check_strategy_params(_strategy_params(a.strategy_param), strategy_cls)
    if params and not online:
        raise UserError("--strategy-param applies to an online --strategy (topk takes --top-k)")
    prog, _ = _load(program)
    space = FusionSpace(prog, target)
    cfg = _load_config(space, a.config_path)
    out = _output_dir(_run_dir(program, a.out_dir, "tile"), "--out")
    ev = make_evaluator(evaluator, target, a.store, seed, budget=seconds)
    model, model_name = make_cost_model(a.cost_model, "tile", target, ev)
    program_sha = program_fingerprint(space)
    global_model, transfer_info, transfer_warnings = setup_transfer(
        a.transfer, "tile", target, ev, strategy_cls, online, program_sha, a.history_any_machine, seed)
    recorder = HistoryRecorder(ev.store, target, program_sha, Path(program).name) \
        if online and getattr(ev, "store", None) is not None else None
    out.mkdir(parents=True, exist_ok=True)
    kernels = space.kernels(cfg)
    n_kernels = len(program_kernels(kernels))
    rows: list = []
    try:
        from tqdm.auto import tqdm
        bar = tqdm(total=n_kernels, desc="kernels", unit="kernel", leave=False, disable=None)
    except ImportError:  # pragma: no cover
        bar = None

    def on_kernel(tiling) -> None:
        rows.append(tiling.row())
        write_json(out / "tiles.json", {"kernels": rows})  # on disk as soon as measured
        if bar is not None:
            bar.update(1)

    try:
        tune_program_tiles(kernels, model, ev, TileTuningOptions(strategy=strategy, top_k=top_k, trials=trials,
                                                                 repeats=repeats, seed=seed, target=target,
                                                                 strategy_params=params),
                           on_kernel=on_kernel, stop=lambda: ev.budget_exhausted or ev.budget.exhausted,
                           transfer=global_model, recorder=recorder)
    finally:
        if bar is not None:
            bar.close()
    ok = [r for r in rows if r["default_s"] is not None and r["chosen_s"] is not None]
    total_default = sum(r["default_s"] * r["multiplicity"] for r in ok)
    total_best = sum(r["chosen_s"] * r["multiplicity"] for r in ok)
    report = {"program": str(program), "target": target, "cost_model": model_name, "strategy": strategy_name,
              "evaluator": evaluator, "top_k": top_k, "trials": trials if strategy_name != "topk" else None,
              "kernels": n_kernels, "kernels_tuned": len(rows),
              "default_total_s": total_default, "tuned_total_s": total_best,
              "speedup": total_default / total_best if total_best > 0 else None,
              "verification": {"method": "race", "estimate": "median of each tile's timings",
                               "repeats": repeats, "finalists": 2,
                               "timings": sum(r["timings"] for r in rows)},
              "budget_exhausted": bool(ev.budget_exhausted or ev.budget.exhausted), "seed": seed,
              "config": a.config_path or "default", "strategy_params": params, "machine": ev.machine,
              "transfer": transfer_info, "warnings": list(transfer_warnings)}
    failed = [r for r in rows if r["default_s"] is None or r["chosen_s"] is None]
    if failed:
        report["warnings"].append(f"{len(failed)} of {len(rows)} kernels left out of the totals: no tile measured "
                                  f"(first: {failed[0]['hash']} ({failed[0]['root']}): {failed[0]['status']})")
    if len(rows) < n_kernels:
        report["warnings"].append(f"the hardware budget ran out after {len(rows)} of {n_kernels} kernels")
    write_json(out / "report.json", report)
    ev.close()
    for w in report["warnings"]:
        _warn(w)
    sp_txt = f"x{report['speedup']:.3f}" if report["speedup"] else "n/a"
    how = f"top-{top_k} of {model_name}" if strategy_name == "topk" else f"{strategy_name}, {trials} trials per kernel"
    click.echo(f"{Path(program).name}: {len(rows)}/{n_kernels} kernels tuned; kernel time "
               f"{total_default * 1e3:.4g} ms -> {total_best * 1e3:.4g} ms ({sp_txt}) with {how}, measured "
               f"(median of {repeats + 1} timings per finalist)")
    line = _transfer_line(transfer_info)
    if line:
        click.echo(line)
    click.echo(f"results in {out}/ (report.json, tiles.json)")


