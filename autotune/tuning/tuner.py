"""The search loop: a Strategy proposes configurations of a space, the Tuner prices them.

One Tuner for both search spaces: a program's fusion space (`FusionSpace`, priced by `ProgramCost`)
and a kernel's tile space (`TileSpace`, priced by `TileCost`). As an Optuna study does, the Tuner
owns what strategies should not: the budgets (wall clock, `max_evaluations`), cost-model calls
batched and memoized (autotune/tuning/pricing.py; for fusion by kernel hash: a neighbor evaluation
only prices the kernels it changes), de-duplication of configurations, checkpoints (best configuration
and strategy state; autotune/tuning/checkpoint.py) and resuming (checked against a fingerprint of the
program and the options that matter, continuing with the remaining budget). The wall-clock budget holds
on programs of any size: batch sizes follow the measured pricing time of a configuration (a cold learned
model prices a from-scratch configuration of a 50k-instruction program in seconds), the search stops when
one more configuration and the final checkpoint would not fit, and on the simulator the hardware seconds
that kernel-sum verification will not need are lent to the search (`overhead_s`: what the caller
spends of the same budget outside the search, e.g. the CLI's start-up and outputs).
The options are two dataclasses (autotune/tuning/options.py): `TunerOptions` for the search,
`VerifyOptions` for hardware verification. What happens around the loop is callbacks
(autotune/tuning/callbacks.py): the progress bar, the jsonl log and periodic checkpoints are added from
the options, early stopping and anything else (a hook per batch or per fresh configuration) is passed
in `callbacks=`.

Hardware verification of the top predicted configurations is its own step, `Tuner.verify`, run
after the search (paper section 7): end to end, by kernel sums, or a race of tiles, by the space and the
evaluator (autotune/tuning/verifier.py). What was verified and how, and every failure, is in
`TuningResult.verification`/`warnings` (autotune/tuning/result.py).
"""
from __future__ import annotations

import heapq
import math
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Sequence

import numpy as np

from autotune.compiler.fusion import FusionConfig
from autotune.tuning.callbacks import BatchInfo, Callback, Checkpointer, JsonlLogger, ProgressBar
from autotune.tuning.checkpoint import (CHECKPOINT, SearchProgress, check_fingerprint, checkpoint_state, edge_count,
                                        read_checkpoint, remaining_search_seconds, save_best_config, space_fingerprint,
                                        write_checkpoint)
from autotune.tuning.options import TunerOptions, VerifyOptions
from autotune.tuning.pricing import is_fusion_space, space_cost
from autotune.tuning.result import TuningError, TuningResult
from autotune.tuning.verifier import Verifier, measure_config
from hardware.base import ProgramEvaluator

if TYPE_CHECKING:
    from autotune.compiler.space import Space
    from search.base import Strategy

# The names importers took from this module before pricing, checkpoints, the result and verification
# moved to their own modules (re-exported so that they still can).
from autotune.tuning.checkpoint import (FINGERPRINT_DEFAULTS, FINGERPRINT_LABELS,  # noqa: F401
                                        program_fingerprint)
from autotune.tuning.pricing import (LayoutCost, LearnedLayoutCost, ProgramCost, TileCost,  # noqa: F401
                                     is_layout_space)
from autotune.tuning.result import NOT_VERIFIED, ORIGINAL_COMPILE_OPTIONS, keep_original_text  # noqa: F401


class Tuner:
    """Runs a Strategy over a fusion, tile or layout space against a cost model within budgets (module
    docstring). `options` (TunerOptions) and `verify` (VerifyOptions, autotune/tuning/options.py)
    default to their dataclasses' defaults; `evaluator` is the hardware of verification (None: none);
    `callbacks` are Callback objects (autotune/tuning/callbacks.py)."""

    def __init__(self, space: Space, cost_model: Any, strategy: Strategy, budget: Any = "60s", *,
                 evaluator: Any = None, options: Optional[TunerOptions] = None,
                 verify: Optional[VerifyOptions] = None, callbacks: Sequence[Callback] = ()):
        from hardware.base import Budget

        self.options = options if options is not None else TunerOptions()
        self.verify_options = verify if verify is not None else VerifyOptions()
        self.space = space
        self.cost_model = cost_model
        self.strategy = strategy
        self.budget = budget if isinstance(budget, Budget) else Budget(budget)
        if self.budget.seconds is not None and self.budget.seconds <= 0:
            raise TuningError(f"budget {self.budget.seconds:g}s is too small to evaluate anything")
        self.evaluator = evaluator
        self.out_dir = Path(self.options.out_dir) if self.options.out_dir else None
        # What makes a checkpoint this run: {"program": sha256, "target", "cost_model", ...}.
        fingerprint = self.options.fingerprint
        self.fingerprint = dict(fingerprint) if fingerprint is not None else {"program": space_fingerprint(space),
                                                                               "target": str(space.target)}
        self.resumed_from: Optional[dict] = None
        self.cost = space_cost(space, cost_model)
        self.callbacks = self._default_callbacks() + list(callbacks)
        self._config_hooks: list = []  # the callbacks that override on_config (set when the search starts)
        self.evaluations = 0
        self.history: list = []
        self.best: Optional[FusionConfig] = None
        self.best_cost = math.inf
        self.default_cost = math.nan
        self._top: list = []   # max-heap (negated) of the best distinct predicted configurations
        self._stop: Optional[str] = None
        self._elapsed_before = 0.0
        # Wall clock of this session outside the search that its budget covers (the CLI's start-up,
        # hardware verification and writing the outputs): a resumed run continues with what the
        # sessions before, overheads included, left of it.
        self.overhead_s = max(float(self.options.overhead_s), 0.0)
        self._overhead_before = 0.0
        self._default_measurement: Optional[tuple] = None  # (seconds, status) of the default, measured early
        self._hw_slack = 0.0  # hardware seconds the verification will not need, lent to the search
        self._sec_per_config: Optional[float] = None  # measured pricing time of one configuration (batches)
        self._last_sec_per_config = 0.0               # the same, of the last batch alone
        self._scratch_s: Optional[float] = None       # measured pricing time of the default, from scratch
        self._checkpoint_s = 0.0                      # measured time of the last checkpoint

    def _default_callbacks(self) -> list:
        """Progress bar, log.jsonl and checkpoints from the options."""
        out: list = [ProgressBar()] if self.options.progress else []
        if self.out_dir is not None:
            log = JsonlLogger(self.out_dir / "log.jsonl")
            out += [log, Checkpointer(self.options.checkpoint_every_s, flush=log.flush)]
        return out

    def stop(self, reason: str) -> None:
        """End the search after the current batch; `reason` becomes TuningResult.stopped_by."""
        if self._stop is None:
            self._stop = reason

    # ------------------------------------------------------------------ bookkeeping
    def _note(self, cfgs: Sequence[Any], costs: np.ndarray) -> None:
        for c, v in zip(cfgs, costs):
            if v < self.best_cost:
                self.best_cost = float(v)
                self.best = self.space.decode(self.space.encode(c))  # detached from its derivation
            top_k = self.verify_options.top_k
            if len(self._top) < top_k or v < -self._top[0][0]:
                key = self.space.encode(c)
                if all(k != key for _, _, k in self._top):
                    heapq.heappush(self._top, (-float(v), self.evaluations, key))
                    if len(self._top) > top_k:
                        heapq.heappop(self._top)

    def top_predicted(self) -> list:
        """The best distinct configurations seen, in predicted order: [(cost, configuration)]."""
        return [(-c, self.space.decode(k)) for c, _, k in sorted(self._top, key=lambda t: -t[0])]

    def _elapsed(self) -> float:
        return self._elapsed_before + self.budget.elapsed

    def save_checkpoint(self) -> None:
        """Write best_config.json (fusion, layout) and checkpoint.pkl into out_dir (atomically)."""
        if self.out_dir is None or self.best is None:
            return
        t0 = self.budget.now()
        self._write_checkpoint()
        self._checkpoint_s = self.budget.now() - t0

    def _write_checkpoint(self) -> None:
        assert self.out_dir is not None  # save_checkpoint returns before this without an out_dir
        save_best_config(self.out_dir, self.space, self.best, self.best_cost, self.evaluations)
        write_checkpoint(self.out_dir, checkpoint_state(self.space, self.strategy, self.fingerprint, SearchProgress(
            best=self.best, best_cost=self.best_cost, default_cost=self.default_cost, evaluations=self.evaluations,
            history=self.history, memo=self.cost.memo, elapsed=self._elapsed(), top=self._top,
            overhead=self._overhead_before + self.overhead_s)))

    @staticmethod
    def read_checkpoint(directory: "str | Path") -> dict:
        """The checkpoint of a run folder (TuningError when missing or unreadable)."""
        return read_checkpoint(directory)

    def resume(self, directory: "str | Path") -> None:
        """Restore strategy state, memoized kernel costs and the best configuration of a run.

        The checkpoint must have this run's fingerprint (program, target, cost model, strategy,
        evaluator, seed; the CLI adds strategy parameters and the transfer history: TuningError naming
        what differs). The search budget becomes what the earlier run(s) left of it: `budget - elapsed` (TuningError when nothing is left)."""
        from hardware.base import Budget
        path = Path(directory) / CHECKPOINT
        state = read_checkpoint(directory)
        check_fingerprint(path, state, self.fingerprint, edge_count(self.space))
        elapsed = float(state.get("elapsed", 0.0))
        overhead_before = float(state.get("overhead", 0.0))
        total = self.budget.seconds
        if total is not None:
            used = elapsed + overhead_before           # what the earlier sessions spent of the budget
            self.budget = Budget(remaining_search_seconds(path, used, total, self.overhead_s))
        try:
            self.strategy.load_state_dict(state["strategy"])
        except Exception as e:  # another strategy's state or options (e.g. a different chain count)
            raise TuningError(f"{path}: checkpoint does not fit this strategy ({type(e).__name__}: "
                              f"{str(e).splitlines()[0] if str(e) else ''})") from None
        self.best = self.space.decode(state["best"])
        self.best_cost = state["best_cost"]
        self.default_cost = state["default_cost"]
        self.evaluations = state["evaluations"]
        self.history = list(state["history"])
        self.cost.memo.update(state["memo"])
        self._elapsed_before = elapsed
        self._overhead_before = overhead_before
        self._top = list(state["top"])
        self.resumed_from = {"directory": str(directory), "evaluations": self.evaluations, "elapsed_s": elapsed,
                             "search_budget_s": total, "remaining_s": self.budget.seconds}

    def _install_signals(self) -> dict:
        old = {}

        def handler(signum, frame):
            self._stop = signal.Signals(signum).name
        for s in (signal.SIGINT, signal.SIGTERM):
            try:
                old[s] = signal.signal(s, handler)
            except ValueError:  # not the main thread
                pass
        return old

    # ------------------------------------------------------------------ main loop
    def run(self) -> TuningResult:
        """Search until a budget, the strategy or a callback stops it; then verify on hardware."""
        if self.out_dir is not None:
            self.out_dir.mkdir(parents=True, exist_ok=True)
        default = self.space.default()
        if math.isnan(self.default_cost):
            t0 = self.budget.now()
            self.default_cost = float(self.cost([default])[0])
            # a configuration priced from scratch: what the first batch's size is planned with
            self._scratch_s = self.budget.now() - t0
        if self.best is None and self.options.include_default:
            self._note([default], np.array([self.default_cost]))
            self.history.append((self._elapsed(), self.evaluations, self.best_cost))
        self._lend_verification_slack()
        old_handlers = self._install_signals()
        result: Optional[TuningResult] = None
        # the callbacks with a per-configuration hook (the others are not called for every configuration)
        self._config_hooks = [cb for cb in self.callbacks if type(cb).on_config is not Callback.on_config]
        try:
            for cb in self.callbacks:
                cb.on_start(self)
            while self._stop is None:
                self._stop = self._budget_stop()
                if self._stop is None:
                    self._step()
        finally:
            for s, h in old_handlers.items():
                signal.signal(s, h)
            self.history.append((self._elapsed(), self.evaluations, self.best_cost))
            result = TuningResult(self.best, self.best_cost, self.default_cost, self.evaluations, self._elapsed(),
                                  list(self.history), stopped_by=self._stop or "budget",
                                  kernel_evaluations=self.cost.kernels_priced)
            for cb in self.callbacks:
                cb.on_end(self, result)
        if self.evaluator is None:
            result.verification = {"status": "skipped", "reason": "no hardware evaluator (no hardware budget)"}
        elif self._stop in ("budget", "strategy_finished", "max_evaluations", "early_stopping"):
            t0 = time.monotonic()
            self.verify(result)
            result.verification["seconds"] = round(time.monotonic() - t0, 3)
            if self._hw_slack:
                result.verification["hw_seconds_lent_to_search"] = round(self._hw_slack, 3)
        else:
            result.verification = {"status": "skipped", "reason": f"the search was interrupted ({self._stop})"}
            result.warnings.append(f"not verified: the search was interrupted ({self._stop}); "
                                   "fused.hlo holds the best predicted configuration")
        return result

    def _lend_verification_slack(self) -> None:
        """Kernel-sum verification on an exact evaluator (the simulator) takes about top_k times a
        warm measurement of the default: measure the default now (verification reuses it), time a
        second, warm measurement, and lend the hardware seconds verification will not need (with a
        2x margin) to the search, so that the run ends near its budget rather than early by the
        verification's spare time."""
        from hardware.base import Budget
        ev = self.evaluator
        if (ev is None or not is_fusion_space(self.space) or isinstance(ev, ProgramEvaluator)
                or self.budget.seconds is None or self._default_measurement is not None):
            return
        hw_budget = self.verify_options.hw_budget
        hw = hw_budget.seconds if isinstance(hw_budget, Budget) else Budget(hw_budget).seconds
        if not hw:
            return
        old = ev.budget
        ev.budget = Budget(None)
        try:
            self._default_measurement = self.measure_config(self.space.default(), ev)
            t0 = self.budget.now()  # again, warm (the first one sized and tiled every kernel)
            self.measure_config(self.space.default(), ev)
            took = self.budget.now() - t0
        finally:
            ev.budget = old
        slack = hw - 2.0 * took * self.verify_options.top_k
        if slack > 0:
            self._hw_slack = slack
            self.budget.seconds += slack

    def _budget_stop(self) -> Optional[str]:
        """Why the search must stop before the next batch (None: go on). The search also stops when
        what is left of the budget would not price one more configuration and write the final
        checkpoint (both measured), so that the run ends within its budget."""
        if self.budget.exhausted:
            return "budget"
        if self.budget.seconds is not None and self._sec_per_config is not None \
                and self.budget.remaining < max(self._sec_per_config, self._last_sec_per_config) + self._checkpoint_s:
            return "budget"
        max_evaluations = self.options.max_evaluations
        if max_evaluations is not None and self.evaluations >= max_evaluations:
            return "max_evaluations"
        if self.strategy.finished:
            return "strategy_finished"
        return None

    def _step(self) -> None:
        """One batch: ask, price (memoized), tell, book-keep, call the callbacks."""
        n = self._batch_len()
        t0 = self.budget.now()
        cfgs = self.strategy.ask(n)
        if not cfgs:
            self._stop = "strategy_finished"
            return
        fresh_idx = [i for i, c in enumerate(cfgs) if not self.cost.is_priced(c)]
        costs = self.cost(cfgs)
        per = (self.budget.now() - t0) / len(cfgs)
        self._sec_per_config = per if self._sec_per_config is None else 0.5 * (self._sec_per_config + per)
        self._last_sec_per_config = per
        if self._config_hooks:
            for i in fresh_idx:
                cfg, cost = cfgs[i], float(costs[i])
                for cb in self._config_hooks:
                    cb.on_config(self, cfg, cost)
        self.strategy.tell(cfgs, costs)
        self.evaluations += len(fresh_idx)
        before = self.best_cost
        self._note(cfgs, costs)
        now = self._elapsed()
        if self.best_cost < before or not self.history or now - self.history[-1][0] > 1.0:
            self.history.append((now, self.evaluations, self.best_cost))
        info = BatchInfo(t=now, evaluations=self.evaluations, batch=len(cfgs), new=len(fresh_idx),
                         batch_best_s=float(np.min(costs)), best_s=self.best_cost,
                         kernels_priced=self.cost.kernels_priced)
        for cb in self.callbacks:
            cb.on_batch(self, info)

    def _batch_len(self) -> int:
        """Configurations to ask for: `batch_size`, fewer when a whole batch at the measured cost of
        a configuration would overrun the budget (a cold learned model prices a from-scratch
        configuration of a large program in seconds), or `max_evaluations` is near. Before any batch
        is measured, a batch whose configurations priced like the default from scratch could take a
        quarter of what is left starts with one configuration."""
        n = self.options.batch_size
        max_evaluations = self.options.max_evaluations
        if max_evaluations is not None:
            n = max(1, min(n, max_evaluations - self.evaluations))
        if self.budget.seconds is None:
            return n
        room = self.budget.remaining - self._checkpoint_s
        per = self._sec_per_config
        if per is None:  # nothing measured yet (a resumed run: not even the default): one configuration
            scratch = self._scratch_s  # first, unless a batch is cheap for sure
            return n if scratch is not None and scratch * n <= room / 4 else 1
        per = max(per, self._last_sec_per_config)  # the slower of the running mean and the last batch
        if per > 0 and per * n > room:
            n = max(1, min(n, int(room / per)))
        return n

    # ------------------------------------------------------------------ hardware verification
    def measure_config(self, cfg: FusionConfig, evaluator: Any) -> tuple[float, str]:
        """Program runtime of a configuration on the evaluator: sum of its kernels' measurements."""
        return measure_config(self.space, cfg, evaluator)

    def verify(self, result: TuningResult) -> TuningResult:
        """Measure the default and the top predicted configurations on the evaluator within the
        hardware budget; the best measured one wins (section 7 of the paper). End to end where the
        evaluator runs whole programs, else by kernel sums (autotune/tuning/verifier.py)."""
        from hardware.base import Budget
        ev = self.evaluator
        old_budget = ev.budget
        hw_budget = self.verify_options.hw_budget
        hw = hw_budget if isinstance(hw_budget, Budget) else Budget(hw_budget)
        if self._hw_slack and hw.seconds is not None:
            hw = Budget(max(hw.seconds - self._hw_slack, 0.0))
        ev.budget = Budget(None)  # the verification keeps to the hardware budget itself
        try:
            Verifier(self.space, ev, self.top_predicted, self.verify_options,
                     default_measurement=self._default_measurement).verify(result, hw)
        finally:
            ev.budget = old_budget
        return result
