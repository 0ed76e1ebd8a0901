"""The fusion stage of a run: the search of the program's fusion configurations with a cost model (the
Tuner, resumed from a checkpoint when asked), transfer priors, paired or recorded pricing when the cost
model is the hardware, then the hardware verification of the best predictions against XLA's own compile of
the user's program. What was `autotune fusion`'s wiring (autotune/cli/search.py), now one stage."""
from __future__ import annotations

import inspect
import time
from pathlib import Path
from typing import Any, Optional

from autotune import api
from autotune.run.settings import RunError, SearchBudgetError
from autotune.run.stages import RunState, Stage, StageBudget, StageResult
from autotune.tuning import budget as budget_model

__all__ = ["FusionStage", "check_strategy_params", "params_fingerprint", "setup_transfer", "SEARCH_FLOOR_S"]

SEARCH_FLOOR_S = 2.0  # the search's seconds when the stages before it overran the run's budget


def check_strategy_params(params: dict, strategy_cls: Any) -> dict:
    """The strategy's constructor keywords, checked against its parameters (one-line RunErrors)."""
    out = dict(params)
    try:
        accepted = [p for p in inspect.signature(strategy_cls.__init__).parameters
                    if p not in ("self", "space", "seed", "params", "prior")]
    except (TypeError, ValueError):
        accepted = list(out)
    unknown = sorted(set(out) - set(accepted))
    if unknown:
        raise RunError(f"--strategy-param {unknown[0]}: not a parameter of strategy "
                       f"{getattr(strategy_cls, 'name', strategy_cls.__name__)} (accepted: {', '.join(accepted) or 'none'})")
    return out


def params_fingerprint(params: dict) -> str:
    """Strategy parameters as a checkpoint records them ("none", or sorted KEY=VALUE; the prior is the
    transfer's entry)."""
    def norm(v: Any) -> Any:  # diversity=1 and diversity=1.0 are one setting
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v

    items = sorted((k, norm(v)) for k, v in params.items() if k != "prior")
    return ",".join(f"{k}={v!r}" for k, v in items) or "none"


def setup_transfer(spec: str, task: str, target: str, ev: Any, strategy_cls: Any, measuring: bool,
                   program_sha: str, any_machine: bool, seed: int) -> tuple[Any, dict, list]:
    """(global model or None, report entry, warnings) of the transfer option (api.make_transfer), with the
    one-line errors of settings where it cannot apply."""
    key = (spec or "auto").strip()
    applicable = api.takes_prior(strategy_cls) and measuring
    if key.lower() == "auto" and not applicable:
        why = ("the search does not measure on hardware" if not measuring
               else "the strategy takes no prior (use --strategy model-based)")
        return None, {"source": None, "reason": why}, []
    if key.lower() != "none" and not applicable:
        if not api.takes_prior(strategy_cls):
            raise RunError(f"--transfer {spec}: needs --strategy model-based (the strategy takes no prior)")
        raise RunError(f"--transfer {spec}: applies when the search measures on hardware "
                       "(autotune fusion --cost-model hardware, or an online autotune tile --strategy)")
    if any_machine and key.lower() not in ("auto", "store"):
        raise RunError("--history-any-machine applies to --transfer store/auto")
    try:
        return api.make_transfer(key, task, target, ev, program_sha, any_machine=any_machine, seed=seed)
    except api.UnknownPluginError as e:
        raise RunError(f"--transfer: {e}") from None
    except ValueError as e:
        raise RunError(f"--transfer: {e}") from None


def make_cost_model(spec: Optional[str], task: str, target: str, evaluator: Any) -> tuple:
    """(model, name): `api.make_cost_model`, and the spec it resolved to (a shipped model's path)."""
    try:
        name = api.resolve_cost_model(spec, task, target)
        return api.make_cost_model(name, task, target, evaluator), name
    except api.UnknownPluginError as e:
        raise RunError(f"--cost-model: {e}") from None
    except ValueError as e:
        raise RunError(str(e)) from None


class FusionStage(Stage):
    """Search the fusion configurations of the program, verify the best on hardware (module docstring).
    Its result is `state.tuning` (a TuningResult) over `state.space`, the report's search and verification
    fields; it takes what the run's budget leaves after the later stages' reserves."""

    name = "fusion"
    overrun: Optional[str] = None  # set when the stages before it left no search time (a warning line)

    def prepare(self, state: RunState) -> None:
        from search.base import get_strategy
        self._space(state)
        s = state.settings
        strategy_cls = get_strategy(s.strategy)
        state.extra["fusion"] = {"strategy_cls": strategy_cls,
                                 "params": check_strategy_params(dict(s.options.strategy_params), strategy_cls)}

    def _space(self, state: RunState) -> Any:
        """The fusion space of the program this stage sees (built again when an earlier stage replaced it)."""
        from autotune.compiler.fusion import FusionSpace
        if state.space is None or state.space.program is not state.program:
            state.space = FusionSpace(state.program, state.target)
            if state.clock is not None:
                state.clock.mark("fusion_space")
        return state.space

    def run(self, state: RunState, budget: StageBudget) -> StageResult:
        from autotune.tuning.checkpoint import program_fingerprint
        from hardware.base import ProgramEvaluator

        s, o, ev, target = state.settings, state.settings.options, state.evaluator, state.target
        space = self._space(state)
        prepared = state.extra.get("fusion") or {}
        if not prepared:
            self.prepare(state)
            prepared = state.extra["fusion"]
        strategy_cls, params = prepared["strategy_cls"], dict(prepared["params"])
        # No fusible edge: one configuration (the default), still emitted, reported and verified.
        no_edges = (f"{state.program_path}: no fusible producer->consumer edges on target {target}: the program has "
                    "one configuration, written as it is") if space.n_edges == 0 else None
        if (s.cost_model or "").strip().lower() == api.PROGRAM_MODEL_SPEC:
            model, model_name = api.make_program_cost(space, target)
        else:
            model, model_name = make_cost_model(s.cost_model, "fusion", target, ev)
        if state.clock is not None:
            state.clock.mark("cost_model")
        program_sha = program_fingerprint(space)
        measuring = model_name == "hardware"
        paired = o.trial_cost == "paired"
        if paired and not measuring:
            raise RunError("--trial-cost paired: applies with --cost-model hardware (the search measures every "
                           "configuration)")
        if paired and (not isinstance(ev, ProgramEvaluator) or not ev.hand_fusions):
            raise RunError(f"--trial-cost paired: needs an evaluator that times whole emitted programs side by side "
                           f"(--evaluator xla on the cpu backend), not {s.evaluator_name}")
        global_model, transfer_info, transfer_warnings = setup_transfer(
            o.transfer, "fusion", target, ev, strategy_cls, measuring, program_sha, o.history_any_machine, o.seed)
        if global_model is not None:
            from autotune.tuning.history import transfer_prior
            # paired trials are end-to-end times, the global model's kernel sums another scale: the prior is
            # then standardized and weighted by its correlation with the trials
            params["prior"] = transfer_prior(space, global_model, same_units=not paired)
        if paired:
            from autotune.tuning.paired_cost import PairedProgramCost
            model = PairedProgramCost(space, ev, o.trial_seconds, reference_text=state.original_text)
        elif measuring and getattr(ev, "store", None) is not None:  # every measured kernel becomes history
            from autotune.tuning.history import HistoryRecorder, RecordingCostModel
            model = RecordingCostModel(model, HistoryRecorder(ev.store, target, program_sha, Path(state.program_path).name))
        try:
            strat = strategy_cls(space, seed=o.seed, **params)
        except (TypeError, ValueError) as e:
            raise RunError(f"--strategy-param: {e}") from None
        extra = {"strategy_params": params_fingerprint(params), "transfer": api.transfer_fingerprint(transfer_info),
                 **({"trial_cost": "paired"} if paired else {})}
        result, meta = self._search(state, budget, space, model, strat, model_name, no_edges, program_sha, extra)
        from autotune.run.formulations import adopt_formulated
        if adopt_formulated(result, state):
            state.log("fusion: no fused configuration beat XLA's own compile; writing the formulations stage's program")
        result.warnings.extend(transfer_warnings)
        if meta.get("budget_split") and state.clock is not None:
            meta["budget_split"]["startup_breakdown"] = state.clock.breakdown(meta["budget_split"]["startup_s"])
        if getattr(strat, "prior_weight", None) is not None:
            transfer_info["prior_weight_last_fit"] = strat.prior_weight
        meta["strategy_params"] = {k: v for k, v in params.items() if k != "prior"}
        meta["transfer"] = transfer_info
        meta["trial_cost"] = (model.describe() if paired else
                              {"trial_cost": "kernel-sum", "how": "each kernel measured standalone, the "
                               "configuration's cost their sum"} if measuring else None)
        state.tuning = result
        state.extra["fusion"].update(model=model, strategy=strat, program_sha=program_sha)
        return StageResult(verification=result.verification, report=meta)

    def _search(self, state: RunState, budget: StageBudget, space: Any, model: Any, strat: Any, model_name: str,
                note: Optional[str], program_sha: str, fingerprint_extra: dict) -> tuple:
        """The Tuner over `space` (resumed when asked) within what start-up, verification, the later stages
        and writing the outputs leave of the run's budget; returns (TuningResult, the report's meta)."""
        from autotune.tuning.options import TunerOptions, VerifyOptions
        from autotune.tuning.tuner import Tuner
        from hardware.base import Budget

        s, o, ev, out = state.settings, state.settings.options, state.evaluator, state.out_dir
        total, hw, started = s.total_s, s.hw_s, budget.started
        assert out is not None  # the run chose its folder before the stages run
        try:
            search_budget, budget_note = budget_model.split_budget(
                total, hw + budget.later_s, model_name, time.monotonic() - started, state.load_s, s.budget_text)
        except budget_model.BudgetTooShort as e:
            if not state.results:  # start-up alone ate the budget: refused before any work
                raise SearchBudgetError(str(e)) from None
            # an earlier stage ran past its share (a loaded machine): what it found is not thrown away; the
            # search gets a token budget and the verification its reserve, and the run says it overran
            search_budget = SEARCH_FLOOR_S
            budget_note = {"startup_s": round(time.monotonic() - started, 3), "parse_s": round(state.load_s, 3),
                           "search_budget_s": search_budget, "overrun": str(e)}
            state.log(f"fusion: the earlier stages left no search time; searching {SEARCH_FLOOR_S:g}s")
            self.overrun = (f"the stages before fusion ({', '.join(state.results)}) left no time for the fusion "
                            f"search: it ran {SEARCH_FLOOR_S:g}s and the run may end past its budget")
        strategy_name = type(strat).name
        fingerprint = {"program": program_sha, "target": s.target,
                       "cost_model": api.model_identity(model_name), "strategy": strategy_name,
                       "evaluator": s.evaluator_name, "seed": o.seed}
        fingerprint.update(fingerprint_extra)
        options = TunerOptions(out_dir=out, batch_size=o.batch_size, progress=o.progress,
                               max_evaluations=o.max_evals, fingerprint=fingerprint,
                               overhead_s=(total - search_budget) if total is not None else 0.0)
        verify = VerifyOptions(hw_budget=hw, top_k=o.top_k, reference_text=state.original_text)
        tuner = Tuner(space, model, strat, Budget(search_budget), evaluator=ev if hw > 0 else None, options=options,
                      verify=verify)
        if o.resume_dir:
            tuner.resume(o.resume_dir)
            r = tuner.resumed_from
            assert r is not None
            left = (f"{r['remaining_s']:.1f}s of the {r['search_budget_s']:g}s search budget left"
                    if r["search_budget_s"] is not None else "no search time limit")
            state.log(f"resuming {o.resume_dir}: {r['evaluations']:,} configurations and {r['elapsed_s']:.1f}s of "
                      f"search done before; {left}")
        out.mkdir(parents=True, exist_ok=True)
        if model_name == "hardware":
            ev.budget = Budget(tuner.budget.seconds)
        result = tuner.run()
        if budget_note is not None:  # where the budget went: outputs_s follows when the report is written
            budget_note["search_s"] = round(result.elapsed_s, 3)
            budget_note["verification_s"] = result.verification.get("seconds", 0.0) if result.verification else 0.0
            budget_note["search_and_verification_end_s"] = round(time.monotonic() - started, 3)
        if note:
            result.warnings.insert(0, note)
        if self.overrun:
            result.warnings.append(self.overrun)
        if hw <= 0:
            result.verification = {"status": "skipped", "reason": "--hw-budget 0: no hardware verification asked for"}
        options_s = state.stage_seconds.get("options", 0.0)
        meta = {"program": str(state.program_path), "target": s.target, "cost_model": model_name,
                "strategy": strategy_name, "evaluator": s.evaluator_name, "budget_s": total, "hw_budget_s": hw,
                **({"options_budget_s": options_s} if options_s else {}), "seed": o.seed,
                "out_dir": str(out), "fingerprint": fingerprint, "resumed_from": tuner.resumed_from,
                "machine": ev.machine, "budget_split": budget_note}
        return result, meta
