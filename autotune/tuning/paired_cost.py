"""Hardware trials of fusion configurations costed end to end, paired with the default (issue 19).

On XLA:CPU the sum of a configuration's standalone kernel times is not its program's runtime
(bert_small_infer: 2.24 ms of kernels against 0.57 ms end to end,
docs/lab-notes/2026-11-25-xla-cpu-inprogram-costs.md), and
absolute end-to-end timings drift with the machine's load by more than most fusion gains. A
*paired trial* measures what the program does: the configuration is emitted as a whole program
(exactly as fused.hlo is written), compiled with ``EMITTED_CPU_COMPILE_OPTIONS`` and timed beside
the default configuration's program in short alternating blocks, D C D C ... D, for ``seconds``
(``XlaEvaluator.measure_paired``: each candidate block over the default block before it and the
one after it, the median ratio; the drift cancels). A trial's cost is that ratio times the
default's end-to-end time (measured once, when the pricer starts), so costs are seconds, ordered
as the ratios are, and the default costs exactly its own time (its ratio is 1 by definition).

:class:`PairedProgramCost` is a configuration-level ``Pricer`` (autotune/tuning/pricing.py: ``__call__``,
``is_priced``, ``config_cost``), as the tuner's kernel-sum ``ProgramCost`` is: the Tuner uses it as it
is (``space_cost``). What the search learns then is program-level: the model-based strategy's local
model is fitted on the configurations' edge bits against these end-to-end costs. A transfer prior
(a global kernel model trained on other programs' kernel measurements) prices kernel sums, whose
scale is not the end-to-end one, so with paired trials it enters the local model standardized and
weighted by its correlation with the measured costs (``transfer_prior(..., same_units=False)``).

A trial whose default blocks ran more than 2x off the default's own time (the default alone slowed by
load, which the pairing does not cancel) is timed once more; if it is still disturbed, it is kept and
flagged (``reference_disturbed`` in its record, counted in ``describe()``).

Trials are memoized per configuration (its digest): a configuration is measured once per pricer,
as a measurement store measures a kernel once. A configuration whose emission, compilation or run
fails costs inf (its status in ``records``).
"""
from __future__ import annotations

import math
import time
from typing import Any, Optional, Sequence

import numpy as np

from autotune.tuning.pricing import Pricer
from hardware.base import ProgramEvaluator

__all__ = ["PairedProgramCost", "TRIAL_COSTS", "DEFAULT_TRIAL_SECONDS"]

TRIAL_COSTS = ("kernel-sum", "paired")  # `--trial-cost` choices
DEFAULT_TRIAL_SECONDS = 0.3  # paired timing per trial, `--trial-seconds`' default (compilation comes on top)


class PairedProgramCost(Pricer):
    """Costs of fusion configurations: end-to-end time paired with the default's (module docstring).

    ``evaluator``: anything with ``measure_paired(reference_text, text, seconds, **compile_options)``
    and ``measure_program(text, reference=..., **compile_options)`` answering Measurements (the XLA
    evaluators on the cpu backend). ``reference_text``: the original program, whose outputs the
    default configuration's program must match (checked once, when the default is timed)."""

    trial_cost = "paired"

    def __init__(self, space: Any, evaluator: Any, seconds: float = DEFAULT_TRIAL_SECONDS, *,
                 reference_text: Optional[str] = None, compile_options: Optional[dict] = None,
                 pairs: int = 4, min_block_ms: float = 1.0, cache: Optional[dict] = None,
                 retries: int = 1, disturbed_factor: float = 2.0):
        from autotune.compiler.emission import EMITTED_CPU_COMPILE_OPTIONS
        if not isinstance(evaluator, ProgramEvaluator):
            raise ValueError(f"paired trials need an evaluator that times two programs side by side "
                             f"(measure_paired: the xla evaluators); {type(evaluator).__name__} does not")
        if not seconds > 0:
            raise ValueError(f"paired trial seconds must be > 0, got {seconds}")
        self.space = space
        self.evaluator = evaluator
        self.seconds = float(seconds)
        self.reference_text = reference_text
        self.compile_options = dict(EMITTED_CPU_COMPILE_OPTIONS if compile_options is None else compile_options)
        self.pairs = int(pairs)
        self.min_block_ms = float(min_block_ms)
        # a trial whose default blocks ran more than `disturbed_factor` off the default's own time is timed
        # again, up to `retries` times (`_reference_disturbed`)
        self.retries = int(retries)
        self.disturbed_factor = float(disturbed_factor)
        self.retried = 0              # trials timed again because the default's blocks were disturbed
        self.config_cost: dict = {}   # config digest -> seconds (ratio x default_s), of this pricer's calls
        self.records: dict = {}       # config digest -> {"ratio", "status", "ratios", "wall_s", ...}
        # `cache`: trials shared between pricers of one space (digest -> (cost, record), and the default's
        # time under "default_s"), as a measurement store shares kernels between runs: a configuration
        # another run measured is not timed again (and is still a fresh configuration for this pricer)
        self.cache = cache if cache is not None else {}
        self.memo: dict = {}          # (checkpoint compatibility with the kernel-sum pricer: no kernels)
        self.kernel_calls = 0
        self.kernels_priced = 0
        self.trials = 0               # configurations timed paired (fresh ones other than the default; re-timings: `retried`)
        self.trial_wall_s = 0.0       # wall time of those requests (compilation included)
        self._default_text: Optional[str] = None
        self.default_s: Optional[float] = None
        self.default_status = "ok"    # why the default's program could not be timed, if it could not

    # ---- the default: timed once, absolutely, its outputs checked
    def _emit(self, cfg: Any) -> str:
        from autotune.compiler.emission import emit_fused_text
        return emit_fused_text(self.space, cfg, header=True)

    def _start(self) -> None:
        if self._default_text is not None:
            return
        text = self._emit(self.space.default())
        self._default_text = text
        if "default_s" not in self.cache:
            m = self.evaluator.measure_program(text, reference=self.reference_text, **self.compile_options)
            # a default that cannot be timed (budget, crash, wrong outputs) leaves nothing to pair with: every
            # configuration then costs inf, with that status (report.json: trial_cost.default_status)
            self.cache["default_s"] = float(m.seconds) if m.ok else m.status
        if isinstance(self.cache["default_s"], str):
            self.default_status = self.cache["default_s"]
            self.records[self.config_key(self.space.default())] = {"status": self.default_status, "default": True}
            self.config_cost[self.config_key(self.space.default())] = math.inf
            return
        self.default_s = float(self.cache["default_s"])
        self.records[self.config_key(self.space.default())] = {"ratio": 1.0, "status": "ok", "default": True,
                                                                "seconds": self.default_s}
        self.config_cost[self.config_key(self.space.default())] = self.default_s

    # ---- the pricer's protocol
    def config_key(self, c: Any) -> Any:
        return self.space.config_digest(c)

    def is_priced(self, c: Any) -> bool:
        return self.config_key(c) in self.config_cost

    def ratio(self, c: Any) -> float:
        """The measured paired ratio of a priced configuration (inf: failed)."""
        return float(self.records[self.config_key(c)].get("ratio", math.inf))

    def _trial(self, cfg: Any) -> tuple:
        if self.default_s is None:
            return math.inf, {"status": f"not timed: the default configuration's program could not be: "
                                        f"{self.default_status}"}
        t0 = time.monotonic()
        try:
            text = self._emit(cfg)
        except Exception as e:  # an emitter bug fails this configuration, not the search
            return math.inf, {"status": f"emit_error: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"}
        retried = 0
        self.trials += 1  # one trial per configuration; its re-timings count in `retried`
        while True:
            m = self.evaluator.measure_paired(self._default_text, text, self.seconds, pairs=self.pairs,
                                              min_block_ms=self.min_block_ms, **self.compile_options)
            extra = getattr(m, "extra", {}) or {}
            disturbed = m.ok and self._reference_disturbed(extra.get("reference_s"))
            if not disturbed or retried >= self.retries:
                break
            retried += 1
            self.retried += 1
        wall = time.monotonic() - t0
        self.trial_wall_s += wall
        if not m.ok:
            return math.inf, {"status": m.status, "wall_s": wall}
        ratio = float(m.seconds)
        if not (math.isfinite(ratio) and ratio > 0):
            return math.inf, {"status": f"failed: paired ratio {ratio}", "wall_s": wall}
        record = {"status": "ok", "ratio": ratio, "wall_s": wall, "ratios": len(extra.get("ratios") or []),
                  "candidate_s": extra.get("candidate_s"), "reference_s": extra.get("reference_s")}
        if retried:
            record["retried"] = retried
        if disturbed:
            record["reference_disturbed"] = True  # kept (the search needs a cost), flagged in report.json
        return ratio * self.default_s, record

    def _reference_disturbed(self, reference_s: Any) -> bool:
        """The default's blocks in a trial ran far off its own time
        (docs/lab-notes/2026-11-27-autotvm-xla-cpu-64-trials.md: on a loaded 2-core machine the default
        program alone can run 3-5x slower for a whole trial while the candidate between its blocks does not,
        which the pairing does not cancel; such trials gave ratios of 0.3 for configurations that re-measure
        at 1.1)."""
        if reference_s is None or not self.default_s:
            return False
        return not (1.0 / self.disturbed_factor <= float(reference_s) / self.default_s <= self.disturbed_factor)

    def __call__(self, cfgs: Sequence[Any]) -> np.ndarray:
        self._start()
        out = np.empty(len(cfgs))
        for i, c in enumerate(cfgs):
            key = self.config_key(c)
            if key not in self.config_cost:
                if key not in self.cache:
                    self.cache[key] = self._trial(c)
                self.config_cost[key], self.records[key] = self.cache[key]
            out[i] = self.config_cost[key]
        return out

    def describe(self) -> dict:
        """What report.json says about the trials."""
        return {"trial_cost": "paired", "how": ("each configuration emitted as fused.hlo is written, compiled with "
                                                "compile_options and timed end to end beside the default "
                                                "configuration's program in alternating blocks (D C D C ... D); "
                                                "cost = the median of the block ratios (each candidate block over "
                                                "the default block before and after it) x the default's time"),
                "seconds_per_trial": self.seconds, "compile_options": self.compile_options,
                "default_s": self.default_s, "default_status": self.default_status, "trials": self.trials,
                "trial_wall_s": round(self.trial_wall_s, 3), "retried_disturbed": self.retried,
                "kept_disturbed": sum(1 for r in self.records.values() if r.get("reference_disturbed"))}
