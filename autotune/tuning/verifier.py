"""Hardware verification of a search's top predictions: the four ways `Tuner.verify` (autotune/tuning/tuner.py)
checks them on the evaluator, chosen by the space and what the evaluator can do, apart from the search loop.
Run after the search (paper section 7):

* an evaluator that runs whole programs and compiles hand-made fusions (XLA:CPU: `measure_program`,
  `hand_fusions`): each candidate is emitted exactly as fused.hlo is written
  (`autotune.compiler.emission.emit_fused_text`), compiled with `EMITTED_CPU_COMPILE_OPTIONS` and run end to
  end; its outputs must match the original program's on the same random inputs
  (`hardware.xla.output_error`), and the candidates race the default configuration's program
  (`autotune.tuning.verification.race_programs`). Where the evaluator times two programs side by side
  (`measure_paired`), the race has `1 - paired_share` of the hardware budget and its winner is then
  timed beside the default for the rest (`confirm_paired`: drift-cancelling pairs); the reported speedup
  is that paired one with its interval, and the winner is kept only if the interval is above 1 (else the
  default, with one warning). The kept program's text is what fused.hlo holds, byte for byte.
* any other evaluator (the TPU simulator): every kernel of the candidate configuration - exactly
  the kernels of its fused.hlo - is measured, times its multiplicity, summed.
* a tile space: the default tile and the top predicted tiles race on the evaluator
  (`race_programs`, as end-to-end verification): each is timed once, then the `finalists` fastest and
  the default are timed again, interleaved, `rounds` more times; the lowest median wins and
  the number of timings of each is in the report, so that one lucky run cannot win.
* a layout space: on an evaluator that runs whole programs, the outputs of the default's and the best
  predicted programs are checked (XLA:CPU drops layouts, so none is timed); elsewhere, kernel sums.

`paired_share`, `finalists` and `rounds` are `VerifyOptions` fields (autotune/tuning/options.py). What
was verified and how, and every failure, is in `TuningResult.verification`/`warnings`. The race and the
paired timing themselves are autotune/tuning/verification.py.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from autotune.compiler.fusion import FusionConfig
from autotune.compiler.layouts import XLA_CPU_DROPS_LAYOUTS
from autotune.tuning.options import VerifyOptions
from autotune.tuning.pricing import is_fusion_space, is_layout_space
from autotune.tuning.result import ORIGINAL_COMPILE_OPTIONS, TuningResult, keep_original_text, text_sha256
from autotune.tuning.verification import confirm_paired, race_programs, race_tiles
from hardware.base import ProgramEvaluator


def _warn(result: TuningResult, message: str) -> None:
    if message not in result.warnings:
        result.warnings.append(message)


def measure_config(space: Any, cfg: FusionConfig, evaluator: Any) -> tuple[float, str]:
    """Program runtime of a configuration on the evaluator: sum of its kernels' measurements."""
    kernels = space.kernels(cfg)
    ms = evaluator.measure(kernels)
    total = 0.0
    for k, m in zip(kernels, ms):
        if not m.ok:
            return math.inf, f"kernel {k.hash} ({k.root_instruction.name}): {m.status}"
        total += m.seconds * k.multiplicity
    return total, "ok"


@dataclass
class Verifier:
    """The verification of one search's result on `evaluator`: what it needs of the Tuner's state
    (the space, its top predictions, the default's early measurement) and the verification options."""

    space: Any
    evaluator: Any
    top_predicted: Callable[[], list]          # [(predicted cost, configuration)], best first
    options: VerifyOptions = field(default_factory=VerifyOptions)
    default_measurement: Optional[tuple] = None  # (seconds, status) of the default, measured before the search

    def verify(self, result: TuningResult, hw: Any) -> None:
        """Fill `result`'s verification within the hardware budget `hw` (a hardware.base.Budget) by the
        path for this space and evaluator (module docstring)."""
        ev = self.evaluator
        if is_layout_space(self.space) and isinstance(ev, ProgramEvaluator):
            self.layout_outputs(result, hw.seconds)
        elif is_layout_space(self.space):
            self.kernel_sums(result, hw)
            if "how" in result.verification:
                result.verification["how"] = result.verification["how"].replace("fused.hlo", "layouts.hlo")
        elif not is_fusion_space(self.space):
            self.tile_race(result, hw.seconds)
        elif isinstance(ev, ProgramEvaluator) and ev.hand_fusions:
            self.end_to_end(result, hw.seconds)
        else:
            self.kernel_sums(result, hw)

    def kernel_sums(self, result: TuningResult, hw: Any) -> None:
        """Kernel-sum verification: the default first, then the top predictions in predicted order
        while the hardware budget `hw` lasts (the default and the best prediction always)."""
        ev = self.evaluator
        exact = not isinstance(ev, ProgramEvaluator)  # the simulator times kernels; XLA runs programs
        md, status = self.default_measurement or measure_config(self.space, self.space.default(), ev)
        result.measured_default = md if status == "ok" else None
        default_status = status
        best_m, best_cfg, best_pred, best_rank = math.inf, None, None, None
        took = 0.0  # the longest measurement of a configuration so far
        for rank, (pred, cfg) in enumerate(self.top_predicted()):
            # the best prediction always; another only when what is left covers one more measurement
            if rank > 0 and (hw.exhausted or (hw.seconds is not None and hw.remaining < took)):
                break
            t0 = hw.now()
            m, status = measure_config(self.space, cfg, ev)
            took = max(took, hw.now() - t0)
            result.verified.append({"rank": rank, "predicted_s": pred, "measured_s": m if status == "ok" else None,
                                    "status": status})
            if m < best_m:
                best_m, best_cfg, best_pred, best_rank = m, cfg, pred, rank
        if best_cfg is not None and result.measured_default is not None and best_m > result.measured_default:
            # Nothing verified beat the default on hardware: keep the default, as the paper does.
            best_m, best_cfg, best_pred, best_rank = (result.measured_default, self.space.default(),
                                                      result.default_cost, "default")
        if best_cfg is None and result.measured_default is not None:
            best_m, best_cfg, best_pred, best_rank = (result.measured_default, self.space.default(),
                                                      result.default_cost, "default")
        result.measured_best = best_m if best_cfg is not None else None
        result.measured_best_config = best_cfg
        result.measured_best_predicted = best_pred
        name = ev.name
        result.verification = {
            "status": "verified" if best_cfg is not None else "failed",
            "method": "kernel-sum",
            "exact": exact,
            "evaluator": name,
            "how": ("every kernel of each configuration (exactly the kernels its fused.hlo holds) measured on "
                    f"the {name} evaluator, times its multiplicity, summed; the default first, then the best "
                    "predictions in predicted order within the hardware budget; the lowest sum wins, the "
                    "default unless something measured faster"),
            "winner": best_rank,
        }
        if best_cfg is None:  # one line for the whole failure
            first = result.verified[0]["status"] if result.verified else "none measured"
            result.verification["reason"] = f"no configuration could be measured (default: {default_status}; " \
                                            f"best predicted: {first})"
            _warn(result, f"verification failed: {result.verification['reason']} on the {name} evaluator; "
                          "fused.hlo holds the best predicted configuration, unverified")
            return
        if default_status != "ok":
            _warn(result, f"the default configuration could not be measured ({default_status}): no measured speedup")
        if result.verified and result.verified[0]["status"] != "ok":
            _warn(result, f"the best predicted configuration failed verification ({result.verified[0]['status']})")
        if not exact:
            # Kernel sums of real hardware are not the program that runs: no measured speedup.
            result.verification["reason"] = (f"the {name} evaluator on {ev.platform if isinstance(ev, ProgramEvaluator) else ev.target} cannot run "
                                             "hand-made fusions end to end; kernel sums are estimates")
            result.verification["kernel_sum_default_s"] = result.measured_default
            result.verification["kernel_sum_best_s"] = result.measured_best
            result.measured_default = result.measured_best = None
            _warn(result, "not verified end to end: " + result.verification["reason"])

    def layout_outputs(self, result: TuningResult, seconds: Optional[float]) -> None:
        """Layouts on XLA: the default and the best predicted programs (rewritten with their layouts)
        run end to end on verification inputs; their outputs must match the original program's. The
        best predicted configuration whose outputs match is kept (the default when none does)."""
        from hardware.base import Budget
        ev, space = self.evaluator, self.space
        reference = self.options.reference_text
        if reference is None:
            reference = space.program.module.to_text()
        budget = Budget(seconds)
        chosen, chosen_pred = None, None
        ranked = [("default", result.default_cost, space.default())] + \
                 [(rank, pred, cfg) for rank, (pred, cfg) in enumerate(self.top_predicted())]
        for rank, pred, cfg in ranked:
            if rank not in ("default", 0) and (budget.exhausted or chosen is not None):
                break
            text = space.emit_text(cfg)
            m = ev.measure_program(text, reference=reference)
            match = bool(m.ok and m.extra.get("outputs_match", True))
            entry = {"rank": rank, "predicted_s": pred, "sha256": text_sha256(text),
                     "config_hash": space.config_hash(cfg), "copies": space.copies(cfg),
                     "status": m.status if not m.ok else ("ok" if match else "output_mismatch"),
                     "output_error": m.extra.get("output_error"), "outputs_match": match}
            if "output_error_without_excess_precision" in m.extra:  # a 16-bit program judged without it
                entry["output_error_without_excess_precision"] = m.extra["output_error_without_excess_precision"]
            result.verified.append(entry)
            if match and rank != "default":
                chosen, chosen_pred = cfg, pred
        default_ok = bool(result.verified and result.verified[0]["outputs_match"])
        if chosen is None and default_ok:
            chosen, chosen_pred = space.default(), result.default_cost
        result.measured_best_config = chosen
        result.measured_best_predicted = chosen_pred
        name = ev.name
        result.verification = {
            "status": "verified" if chosen is not None else "failed", "method": "outputs", "exact": False,
            "evaluator": name, "platform": ev.platform,
            "inputs": f"hardware.xla.verification_inputs (seed {ev.seed})",
            "how": ("the default's and the best predicted configurations' programs (rewritten with their layouts and "
                    "copies) run end to end; their outputs compared with the original program's on the same inputs "
                    "(layouts change no values); the best predicted one that matches is kept"),
            "layouts_honoured": False, "reason": XLA_CPU_DROPS_LAYOUTS,
        }
        _warn(result, "layout timings not measured: " + XLA_CPU_DROPS_LAYOUTS)
        if chosen is None:
            reasons = "; ".join(f"{v['rank']}: {v['status']}" for v in result.verified[:2])
            result.verification["reason"] = "no program computed the original's outputs: " + reasons
            _warn(result, f"verification failed: {result.verification['reason']}")

    def tile_race(self, result: TuningResult, seconds: Optional[float]) -> None:
        """Race the default tile and the top predicted tiles on the evaluator (module docstring)."""
        ev, space = self.evaluator, self.space
        kernel = space.kernel
        default_key = space.encode(space.default())
        ranked: dict = {default_key: ("default", result.default_cost)}
        for rank, (pred, cfg) in enumerate(self.top_predicted()):
            ranked.setdefault(space.encode(cfg), (rank, pred))
        race = race_tiles(kernel, space, (space.decode(k) for k in ranked if k != default_key), ev, seconds,
                          baseline=space.decode(default_key), finalists=self.options.finalists,
                          repeats=self.options.rounds)
        for key, e in race.entries.items():
            rank, pred = ranked[key]
            result.verified.append({"rank": rank, "tile": key, "predicted_s": pred,
                                    "measured_s": e.best if e.ok else None, "timings": len(e.timings),
                                    "status": e.status})
        base = race.entry(default_key)
        result.measured_default = base.best if base is not None and base.ok else None
        if race.winner is not None:
            result.measured_best = race.entries[race.winner].best
            result.measured_best_config = space.decode(race.winner)
            result.measured_best_predicted = ranked[race.winner][1]
        name = ev.name
        result.verification = {
            "status": "verified" if race.winner is not None else "failed",
            "method": "race", "exact": True, "evaluator": name, "estimate": "median",
            "repeats": self.options.rounds, "finalists": self.options.finalists,
            "how": (f"the default tile and the {len(ranked) - 1} best predicted tiles timed once each on the {name} "
                    f"evaluator (while 2/3 of the hardware budget lasts), then the {self.options.finalists} fastest "
                    f"and the default timed {self.options.rounds} more times, interleaved; the lowest median of a tile's "
                    "timings wins" + ("; the simulator's noise is a fixed function of (seed, kernel, tile), so its "
                                      "repeated timings agree" if name == "sim" else "")),
            "timings": race.timings, "race_rounds": race.rounds,
            "winner": ranked[race.winner][0] if race.winner is not None else None,
        }
        if race.winner is None:
            reasons = "; ".join(f"{v['rank']}: {v['status']}" for v in result.verified[:2])
            result.verification["reason"] = "every tile failed: " + reasons
            _warn(result, f"verification failed: no tile of kernel {kernel.hash} could be measured ({reasons})")
        elif base is None or not base.ok:
            _warn(result, f"the default tile of kernel {kernel.hash} could not be measured "
                          f"({base.status if base is not None else 'not timed'}): no measured speedup")

    def end_to_end(self, result: TuningResult, seconds: Optional[float]) -> None:
        """Race the emitted programs of the default configuration and the top predictions against XLA's
        own compile of the original program (default options: what the user runs today; module
        docstring); where the evaluator times programs side by side (``measure_paired``), the race gets
        ``1 - paired_share`` of the budget and its winner is then timed beside the original for the
        rest (`confirm_paired`): it is kept only if the paired speedup's interval is above 1. When no
        emitted program is shown faster, the result is to keep the original: fused.hlo is the original
        program with a header saying so (`keep_original_text`), and one warning line says it."""
        from autotune.compiler.emission import EMITTED_CPU_COMPILE_OPTIONS, emit_fused_text
        from hardware.xla import OUTPUT_TOL, OUTPUT_TOL_16BIT
        started = time.monotonic()
        ev = self.evaluator
        space = self.space
        original = self.options.reference_text
        if original is None:
            original = space.program.module.to_text()
        emitted: dict = {}    # text -> (rank or "default", FusionConfig, predicted seconds)
        emit_failures: list = []

        def emit(cfg: FusionConfig) -> Optional[str]:
            try:
                return emit_fused_text(space, cfg, header=True)  # exactly as write_fusion_outputs writes fused.hlo
            except Exception as e:  # an emitter bug must not lose the run: record it, go on
                emit_failures.append(f"emit_error: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
                return None

        default_cfg = space.default()
        default_text = emit(default_cfg)

        def candidates():
            if default_text is not None:
                emitted[default_text] = ("default", default_cfg, result.default_cost)
                yield default_text
            for rank, (pred, cfg) in enumerate(self.top_predicted()):
                text = emit(cfg)
                if text is None:
                    result.verified.append({"rank": rank, "predicted_s": pred, "measured_s": None,
                                            "status": emit_failures[-1]})
                    continue
                if text not in emitted:
                    emitted[text] = (rank, cfg, pred)
                    yield text

        def time_program(text: str, first: bool) -> Any:
            if text == original:  # XLA's own compile, as the user runs it today
                return ev.measure_program(text, **ORIGINAL_COMPILE_OPTIONS)
            return ev.measure_program(text, reference=original if first else None, **EMITTED_CPU_COMPILE_OPTIONS)

        race_seconds = seconds * (1 - self.options.paired_share) if seconds is not None else seconds
        race = race_programs(time_program, candidates(), race_seconds, baseline=original,
                             max_rounds=self.options.rounds, min_rounds=min(2, self.options.rounds))
        for text, e in race.entries.items():
            if text == original:
                continue
            rank, cfg, pred = emitted[text]
            result.verified.append({"rank": rank, "sha256": text_sha256(text), "predicted_s": pred,
                                    "measured_s": e.best if e.ok else None,
                                    "timings": len(e.timings), "status": e.status,
                                    "output_error": e.extra.get("output_error"),
                                    **({"output_error_vs_f64": e.extra["output_error_vs_f64"]}
                                       if "output_error_vs_f64" in e.extra else {}),
                                    "kernels": len(space.state(cfg).refs()), "fused_edges": cfg.count()})
        result.verified.sort(key=lambda v: (v["rank"] != "default", v["rank"] if v["rank"] != "default" else -1))
        base = race.entry(original)
        result.measured_original = base.best if base is not None and base.ok else None
        dflt = race.entry(default_text)
        result.measured_default = dflt.best if dflt is not None and dflt.ok else None
        winner = race.winner if race.winner != original else None
        if winner is not None:
            rank, cfg, pred = emitted[winner]
            result.measured_best = race.entries[winner].best
            result.measured_best_config = cfg
            result.measured_best_predicted = pred
            result.fused_text = winner
        verified_any = any(t != original and e.ok for t, e in race.entries.items())
        result.verification = {
            "status": "verified" if verified_any else "failed",
            "method": "end-to-end",
            "exact": True,
            "evaluator": ev.name,
            "platform": ev.platform,
            "baseline": "original: XLA's own compile of the original program (default options)",
            "baseline_compile_options": ORIGINAL_COMPILE_OPTIONS,
            "compile_options": EMITTED_CPU_COMPILE_OPTIONS,
            "inputs": f"hardware.xla.verification_inputs (seed {ev.seed})",
            "output_tolerance": {"float": OUTPUT_TOL, "16-bit float": OUTPUT_TOL_16BIT,
                                 "float of a program computing in 16-bit floats": OUTPUT_TOL_16BIT,
                                 "integer": "exact",
                                 "beyond tolerance": "passes if as accurate as the original against the "
                                                     "program computed in f64 (hardware.xla.accuracy_fallback)"},
            "how": ("the original program compiled by XLA with its default options (what the user runs "
                    "today) is the baseline and the output reference; each candidate (the default "
                    "configuration, then the best predictions) emitted exactly as fused.hlo is written, "
                    "compiled with compile_options and run end to end; its outputs compared with the "
                    "original's on the same inputs (a mismatch fails it); the original timed first, the "
                    "candidates once each in that order for 2/3 of the hardware budget, then the two fastest "
                    "and the original timed again, interleaved, for at least two rounds and until the budget "
                    f"is spent or {self.options.rounds} rounds are done; the lowest median over a program's "
                    "timings wins; when the original wins, or no candidate is shown faster, fused.hlo is the "
                    "original program (keep it)"
                    f"; the race had {1 - self.options.paired_share:.0%} of the hardware budget, then its winner "
                    "was timed beside the original for the rest (paired: short alternating blocks O W O W ... O, each "
                    "winner block over the original's block before it and over the one after it, so that the "
                    "machine's drift cancels; the median ratio, with a block-bootstrap interval), and kept only "
                    "if the whole "
                    f"{self.options.paired_confidence:.0%} interval of the paired speedup is above 1"),
            "programs_timed": len(race.entries), "timings": race.timings, "race_rounds": race.rounds,
            "winner": (emitted[winner][0] if winner is not None else "original" if race.winner == original
                       else None),
            "fused_hlo_sha256": text_sha256(winner) if winner is not None else None,
        }
        if not verified_any:  # one line for the whole failure
            reasons = "; ".join(f"{v['rank']}: {v['status']}" for v in result.verified[:2])
            if not result.verified and emit_failures:
                reasons = emit_failures[0]
            result.verification["reason"] = "every program failed: " + reasons
            if base is not None and base.ok:
                self._keep_original(result, original, f"no tuned program could be verified end to end ({reasons})")
            else:
                _warn(result, "verification failed: no program could be verified end to end "
                              f"({reasons}); fused.hlo holds the best predicted configuration, unverified")
            return
        if base is None or not base.ok:
            why = base.status if base is not None else "not timed"
            _warn(result, f"XLA's own compile of the original program could not be timed ({why}): "
                          "no measured speedup")
        first = next((v for v in result.verified if v["rank"] == 0), None)
        if first is not None and first["status"] != "ok":
            _warn(result, f"the best predicted configuration failed verification ({first['status']}); "
                          "fused.hlo holds the best verified program")
        if base is None or not base.ok:
            return
        if winner is None:
            self._keep_original(result, original, "XLA's own compile of the original won the race "
                                f"({len(race.entries) - 1} tuned programs timed)")
            return
        remaining = None if seconds is None else max(0.0, seconds - (time.monotonic() - started))
        self._confirm_paired(result, race, emitted, original, remaining)

    def _keep_original(self, result: TuningResult, original: str, why: str) -> None:
        """Nothing verified beats XLA's own compile of the original: the result is to keep the original
        (fused.hlo is it, with a header saying so), said in one warning line."""
        result.keep_original = True
        result.fused_text = keep_original_text(original, why)
        result.measured_best = result.measured_original
        result.measured_best_config = None
        result.measured_best_predicted = None
        result.verification["winner"] = "original"
        result.verification["keep_original"] = why
        result.verification["fused_hlo_sha256"] = text_sha256(result.fused_text)
        _warn(result, f"keep the original: no tuned program was shown faster than XLA's own compile of it "
                      f"({why}); fused.hlo is the original program")

    def _confirm_paired(self, result: TuningResult, race: Any, emitted: dict, original: str,
                        seconds: Optional[float]) -> None:
        """Time the race's winner beside XLA's own compile of the original (`confirm_paired`); keep the
        original unless the paired speedup is above 1 beyond its interval (one warning line otherwise)."""
        from autotune.compiler.emission import EMITTED_CPU_COMPILE_OPTIONS
        ev = self.evaluator
        ver = result.verification
        race_speedup = (result.measured_original / result.measured_best
                        if result.measured_original and result.measured_best else None)
        ver["race_speedup"] = race_speedup
        winner = emitted[race.winner][0]
        check = confirm_paired(
            lambda s: ev.measure_paired(original, race.winner, s, reference_options=ORIGINAL_COMPILE_OPTIONS,
                                        **EMITTED_CPU_COMPILE_OPTIONS),
            seconds, confidence=self.options.paired_confidence)
        ver["paired"] = {"candidate": winner, **check.as_dict()}
        result.paired = ver["paired"]
        if check.faster:
            return
        ver["race_winner"] = winner
        if check.skipped:
            why = f"the paired timing was skipped ({check.status.partition(': ')[2]})"
        elif check.status != "ok":
            why = f"the paired timing failed ({check.status})"
        elif check.low is None:
            why = f"{len(check.ratios)} block ratios are too few for an interval"
        else:
            lo, hi = check.speedup_interval
            why = (f"paired x{check.speedup:.3f}, {check.confidence:.0%} interval [{lo:.3f}, {hi:.3f}], "
                   f"{len(check.ratios)} block ratios")
        race_txt = f" (x{race_speedup:.3f} by race medians)" if race_speedup else ""
        what = f"prediction {winner}" if winner != "default" else "the default configuration"
        shown = "not timed beside the original" if check.skipped else \
            "not shown faster than the original when timed beside it"
        ver["kept_original"] = f"{what}{race_txt} {shown}: {why}"
        self._keep_original(result, original, ver["kept_original"])
