"""The formulations stage of a run: before fusion, each instruction with equivalent formulations
(autotune/compiler/formulations/) is written the way this machine runs fastest, measured per instance.

Per distinct instruction signature (largest first, within the stage's seconds): the instruction alone is
timed as written and as each alternative, each alternative's outputs checked against XLA's evaluation of
the original (`measure_program(..., reference=...)`); an alternative is chosen when it is faster by more
than `MARGIN`. The program with every choice is then checked end to end against the user's program
(outputs, then timed beside it: `confirm_paired`); it replaces the program the later stages see only when
its paired speedup's interval is above 1. Every dropped alternative is said in one line and in the report.
On a target whose evaluator does not time programs (the TPU simulator) the choice is the cost model's: the
alternatives are priced by the analytical model's flops and bytes, and the run says they are predictions.
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Optional

from autotune.run.settings import RunError, duration
from autotune.run.stages import RunState, Stage, StageBudget, StageResult

__all__ = ["FormulationsStage", "MARGIN", "DEFAULT_SHARE", "DEFAULT_CAP_S", "formulated_text", "adopt_formulated",
           "formulated_header", "store_namespace", "signature_key", "predicted_seconds"]

MARGIN = 1.10          # an alternative must be this much faster alone to be chosen (timing noise)
DEFAULT_SHARE = 0.3    # of the run's budget, by default (the gains are here: docs/results.md)
DEFAULT_CAP_S = 180.0  # at most, by default
_PAIRED_SHARE = 0.35   # of the stage's seconds kept for the end-to-end check ...
_PAIRED_CAP_S = 15.0   # ... at most (a rewrite worth keeping shows its interval within seconds)
CHECK_COMPILES = 2.5   # the end-to-end check's compiles, in compiles of the original (the rewrite's, the reference's)
FORMULATED_FILE = "formulated.hlo"  # in the run folder: the rewritten program, when verified faster
FORMULATED_RECORD = "formulated.json"  # beside it: its end-to-end check and the choices (what a resume reads)


class FormulationsStage(Stage):
    """Choose each instruction's formulation by timing the alternatives on this machine's XLA (the xla
    evaluator), then check the rewritten program end to end; the later stages see it when it is faster."""

    name = "formulations"
    requires = ()

    def reserve_s(self, settings: Any) -> float:
        o = settings.options
        measurable = settings.evaluator_name in ("xla", "xla-inprogram") and settings.target == "cpu"
        if o.formulations_budget is not None:
            s = duration(o.formulations_budget, "--formulations-budget", allow_zero=True)
            if s is None:
                raise RunError(f"--formulations-budget {o.formulations_budget}: must be finite (e.g. 1m; 0 = off)")
            if s > 0 and not measurable:
                raise RunError(f"--formulations-budget {o.formulations_budget}: formulations are timed with "
                               "--evaluator xla on --target cpu")
            return s
        if not measurable or settings.measuring_spec:
            return 0.0
        return min(DEFAULT_CAP_S, settings.total_s * DEFAULT_SHARE) if settings.total_s is not None else 60.0

    def prepare(self, state: RunState) -> None:
        from autotune.compiler.formulations import FormulationSpace
        state.extra["formulations"] = {"space": FormulationSpace(state.program_text, state.program_path)}

    def run(self, state: RunState, budget: StageBudget) -> StageResult:
        from hardware.base import ProgramEvaluator
        space = state.extra["formulations"]["space"]
        report: dict = {"sites": len(space.sites), "tunable": len(space.tunable), "choices": [],
                        "refused": _refusals(space)}
        if not space.tunable:
            report["decision"] = "no instruction has an alternative formulation"
            return StageResult(report={"formulations": report})
        resume = state.settings.options.resume_dir
        if resume:  # the resumed run's program, so that its checkpoint's fingerprint matches
            return self._resumed(state, Path(resume), report)
        seconds = budget.seconds
        left = budget.left_s()
        if left is not None:
            seconds = min(seconds, left)
        ev = state.evaluator
        if not isinstance(ev, ProgramEvaluator) or not ev.hand_fusions:
            return self._predicted(state, space, report)
        if seconds <= 0:
            report["decision"] = "not searched: no time reserved for it (--formulations-budget 0)"
            return StageResult(report={"formulations": report})
        started = time.monotonic()
        quiet = not state.settings.options.progress
        if not quiet:
            state.log(f"timing the alternative formulations of {len(space.tunable)} instructions "
                      f"for at most {seconds:.0f}s ...")
        # the original first: its compile time sizes the end-to-end check (the rewritten program's compile
        # and the original's again, then the paired timing), its time the instructions' shares
        from autotune.tuning.result import ORIGINAL_COMPILE_OPTIONS
        base = ev.measure_program(state.original_text, **ORIGINAL_COMPILE_OPTIONS)
        if not base.ok:
            report["decision"] = f"not searched: the original program could not be timed ({base.status})"
            return StageResult(report={"formulations": report},
                               warnings=[f"formulations: not searched: the original program could not be timed "
                                         f"({base.status})"])
        report["original_s"] = base.seconds
        paired_s = min(_PAIRED_CAP_S, seconds * _PAIRED_SHARE)
        check_s = CHECK_COMPILES * float(base.extra.get("compile_s") or 0.0) + paired_s
        timing_s = seconds - (time.monotonic() - started) - check_s
        if timing_s <= 0:
            why = (f"{seconds:.0f}s leave no time to time alternatives beside the end-to-end check of this program "
                   f"(about {check_s:.0f}s)")
            report["decision"] = f"not searched: {why}"
            return StageResult(report={"formulations": report}, warnings=[f"formulations: not searched: {why}"])
        choices, rows, warnings = _choose(space, ev, timing_s, state.log if not quiet else None)
        report["choices"] = rows
        chosen = {k: v for k, v in choices.items() if v != "original"}
        if not chosen:
            report["decision"] = "keep every instruction as written: no alternative was faster alone"
            return StageResult(report={"formulations": report}, warnings=warnings)
        text = space.apply(chosen)
        left_s = max(0.0, seconds - (time.monotonic() - started) - (check_s - paired_s))
        verdict, check = _check_program(ev, state.original_text, text, left_s)
        report["end_to_end"] = check
        _shares(rows, base.seconds)
        if verdict is not None:
            report["decision"] = f"keep the program as written: {verdict}"
            warnings.append(f"formulations: {len(chosen)} rewritten instructions dropped: {verdict}")
            return StageResult(report={"formulations": report}, warnings=warnings)
        report["decision"] = (f"{len(chosen)} instructions rewritten: x{check['speedup']:.3f} "
                              f"[{check['speedup_interval'][0]:.3f}, {check['speedup_interval'][1]:.3f}] "
                              "beside the original (XLA's own compile of each)")
        report["program_sha256"] = _sha(text)
        if state.out_dir is not None:
            state.out_dir.mkdir(parents=True, exist_ok=True)
            (state.out_dir / FORMULATED_FILE).write_text(text)
            (state.out_dir / FORMULATED_RECORD).write_text(json.dumps({"check": check, "chosen": chosen}, indent=1))
        state.extra["formulations"].update(text=text, check=check, chosen=chosen)
        if not quiet:
            state.log(f"formulations: {report['decision']}")
        return StageResult(program_text=text, verification=check, report={"formulations": report},
                           warnings=warnings)


    def _resumed(self, state: RunState, folder: Path, report: dict) -> StageResult:
        """A resumed run takes the formulated program its first part wrote (formulated.hlo), or the program
        as written where it kept it: the search resumes on the program it started on."""
        saved = folder / FORMULATED_FILE
        if not saved.exists():
            report["decision"] = f"resumed {folder}: its first part kept the program as written"
            return StageResult(report={"formulations": report})
        text = saved.read_text()
        record = folder / FORMULATED_RECORD
        if record.exists():
            saved_check = json.loads(record.read_text())
            state.extra["formulations"].update(text=text, check=saved_check["check"], chosen=saved_check["chosen"])
        report["decision"] = f"resumed {folder}: the formulated program its first part verified ({FORMULATED_FILE})"
        report["program_sha256"] = _sha(text)
        return StageResult(program_text=text, report={"formulations": report})

    def _predicted(self, state: RunState, space: Any, report: dict) -> StageResult:
        """Where the evaluator does not time programs (the TPU simulator): each distinct signature's
        alternatives priced by the run's cost model (the default configuration of the instruction alone,
        its kernels' predicted seconds summed); the cheapest by more than MARGIN is chosen. No hardware
        checks this: the report says the choices are predictions."""
        from autotune import api
        spec = state.settings.cost_model
        if (spec or "").strip().lower() in ("hardware", api.PROGRAM_MODEL_SPEC):
            spec = "analytical"  # a whole-program or measuring model prices no lone instruction
        model = api.make_cost_model(spec, "fusion", state.target, state.evaluator)
        chosen: dict = {}
        groups: dict = {}
        for s in space.tunable:
            groups.setdefault(s.signature, []).append(s)
        for g in groups.values():
            site = g[0]
            priced = predicted_seconds(space, site, model, state.target)
            best = min(priced, key=lambda c: priced[c])
            if best != "original" and priced[best] * MARGIN >= priced["original"]:
                best = "original"
            report["choices"].append({"instruction": site.name, "line": site.line, "count": len(g),
                                      "signature": site.signature, "predicted_s": priced, "choice": best,
                                      "timed": "predicted (no hardware timing on this target)"})
            chosen.update({s.key: best for s in g if best != "original"})
        if not chosen:
            report["decision"] = "keep every instruction as written: the cost model prices no alternative lower"
            return StageResult(report={"formulations": report})
        text = space.apply(chosen)
        report["decision"] = (f"{len(chosen)} instructions rewritten by the cost model's prices (predictions: not "
                              "timed on hardware)")
        report["program_sha256"] = _sha(text)
        return StageResult(program_text=text, report={"formulations": report},
                           warnings=[f"formulations: {len(chosen)} instructions rewritten by the cost model's "
                                     "prices, not timed on hardware (the target's evaluator does not time programs)"])


def predicted_seconds(space: Any, site: Any, model: Any, target: str) -> dict:
    """{choice: seconds} of one site's choices as `model` prices them: the instruction alone written each
    way (`FormulationSpace.site_program`), the default fusion configuration's kernels summed."""
    from autotune.compiler.fusion import FusionSpace
    from autotune.compiler.program import Program
    from autotune.tuning.pricing import space_cost
    out = {}
    for c in site.choices:
        fs = FusionSpace(Program.from_text(space.site_program(site.key, c)), target)
        out[c] = float(space_cost(fs, model)([fs.default()])[0])
    return out


def _shares(rows: list, whole: float) -> None:
    """Each timed instruction's share of the original program's time (`whole`, timed end to end): its time
    alone times its count over it. An estimate: an instruction alone and inside its program need not take
    the same time."""
    for row in rows:
        if row.get("original_s"):
            row["share_alone"] = round(row["original_s"] * row["count"] / whole, 4)


def _sha(text: str) -> str:
    from autotune.tuning.result import text_sha256
    return text_sha256(text)


def _refusals(space: Any) -> list:
    """Sites whose alternatives all refused, with the first reason (the report's "refused")."""
    return [{"instruction": s.name, "line": s.line, "why": "; ".join(f"{f}: {w}" for f, w in s.refused.items())}
            for s in space.sites if len(s.choices) == 1]


def store_namespace(ev: Any) -> str:
    """The store namespace of formulation timings: ``formulations/<evaluator>/<version>`` (keyed by machine)."""
    return f"formulations/{ev.name}/{ev.version}"


def signature_key(signature: str) -> str:
    """A site signature's store key (its SHA-1: the same operation in any program has the same key)."""
    import hashlib
    return hashlib.sha1(signature.encode()).hexdigest()


def _likely_gain(site: Any) -> int:
    """0 for the classes XLA:CPU runs far below this machine (depthwise convolutions, weight gradients:
    docs/results.md's operation map), 1 for the others: timed first when time is short."""
    return 0 if {"shifted_multiply_add", "window_dot", "shifted_reduce"} & set(site.choices) else 1


def _choose(space: Any, ev: Any, seconds: float, log: Any) -> tuple:
    """({site key: choice}, report rows, warnings): each distinct signature's alternatives timed alone, the
    likely gains first and then the largest (flops times count), until `seconds` are spent; the sites not
    reached keep the original. Timings are recorded in the evaluator's store under the signature and the
    machine; a signature timed before on this machine is not timed again (the transfer across programs)."""
    from autotune.tuning.result import ORIGINAL_COMPILE_OPTIONS
    from hardware.base import Measurement
    started = time.monotonic()
    groups: dict = {}
    for s in space.tunable:
        groups.setdefault(s.signature, []).append(s)
    order = sorted(groups.values(), key=lambda g: (_likely_gain(g[0]), -g[0].flops * len(g)))
    store = ev.store
    ns = store_namespace(ev)
    choices: dict = {}
    rows: list = []
    warnings: list = []
    timed = 0
    for g in order:
        site = g[0]
        key = signature_key(site.signature)
        known = {c: store.get("cpu", ns, key, c, machine=ev.machine) for c in site.choices} if store is not None else {}
        from_store = bool(known) and all(m is not None for m in known.values())
        spent = time.monotonic() - started
        mean = spent / timed if timed else 0.0  # what one more signature costs, by those so far
        if not from_store and spent + mean >= seconds:
            rows.append({"instruction": site.name, "count": len(g), "choice": "original",
                         "why": "not timed: the stage's time was spent"})
            continue
        ref = space.site_program(site.key)
        base = known["original"] if from_store else ev.measure_program(ref, **ORIGINAL_COMPILE_OPTIONS)
        timed += 0 if from_store else 1
        row: dict = {"instruction": site.name, "line": site.line, "count": len(g), "signature": site.signature,
                     "original_s": base.seconds if base.ok else None, "alternatives": {},
                     "timed": "stored (this machine, an earlier program)" if from_store else "now"}
        best, best_s = "original", base.seconds if base.ok else None
        fresh = [] if from_store else [("cpu", ns, key, "original", base)]
        if not base.ok:
            row["choice"], row["why"] = "original", f"the instruction alone could not be timed: {base.status}"
            rows.append(row)
            if store is not None and fresh:
                store.put_many(fresh, machine=ev.machine)
            continue
        for alt in site.choices[1:]:
            m = known[alt] if from_store else ev.measure_program(space.site_program(site.key, alt), reference=ref,
                                                                 **ORIGINAL_COMPILE_OPTIONS)
            assert isinstance(m, Measurement)
            if not from_store:
                fresh.append(("cpu", ns, key, alt, m))
            row["alternatives"][alt] = {"seconds": m.seconds if m.ok else None, "status": m.status,
                                        "output_error": m.extra.get("output_error")}
            if not m.ok:
                warnings.append(f"formulations: {site.name} (line {site.line}): {alt} dropped: {m.status}")
                continue
            if m.seconds * MARGIN < best_s:
                best, best_s = alt, m.seconds
        if store is not None and any(m.ok for *_, m in fresh):  # failures are timed again next time
            store.put_many([f for f in fresh if f[-1].ok], machine=ev.machine)
        row["choice"] = best
        row["speedup_alone"] = (base.seconds / best_s) if best != "original" else 1.0
        rows.append(row)
        for s in g:
            choices[s.key] = best
        if log is not None and best != "original":
            log(f"  {site.name} x{len(g)}: {best} x{row['speedup_alone']:.2f} alone")
    return choices, rows, warnings


def _check_program(ev: Any, original: str, text: str, seconds: float) -> tuple:
    """(None, the check) when `text` computes what `original` does and is faster beside it beyond the noise;
    else (why not, in a few words, the check)."""
    from autotune.tuning.result import ORIGINAL_COMPILE_OPTIONS
    from autotune.tuning.verification import confirm_paired
    m = ev.measure_program(text, reference=original, **ORIGINAL_COMPILE_OPTIONS)
    check: dict = {"outputs": m.status, "output_error": m.extra.get("output_error"),
                   "measured_s": m.seconds if m.ok else None}
    if not m.ok:
        return f"the rewritten program failed its end-to-end check ({m.status})", check
    paired = confirm_paired(lambda s: ev.measure_paired(original, text, s, reference_options=ORIGINAL_COMPILE_OPTIONS,
                                                        **ORIGINAL_COMPILE_OPTIONS), max(seconds, 0.0))
    check.update(paired.as_dict())
    if not paired.faster:
        if paired.skipped:
            return "no time was left to time it beside the original", check
        iv = paired.speedup_interval
        shown = (f"x{paired.speedup:.3f} [{iv[0]:.3f}, {iv[1]:.3f}]" if paired.speedup and iv else paired.status)
        return f"not shown faster than the original when timed beside it ({shown})", check
    return None, check


def formulated_text(state: RunState) -> Optional[str]:
    """The program the formulations stage verified faster than the original (None: it did not run or kept it)."""
    return (state.extra.get("formulations") or {}).get("text")


def formulated_header(check: dict, rewritten: int) -> str:
    """fused.hlo's first lines when the written program is the formulations stage's (XLA's own compile)."""
    lo, hi = check["speedup_interval"]
    return (f"// autotune: the program with {rewritten} instructions written as equivalent formulations, compiled\n"
            "// with XLA's default options (no XLA_FLAGS needed); measured "
            f"x{check['speedup']:.3f} (95% interval {lo:.3f}-{hi:.3f})\n"
            "// over XLA's own compile of the original, timed beside it.\n")


def adopt_formulated(result: Any, state: RunState) -> bool:
    """Where the fusion stage kept the original (no fused configuration beat XLA's own compile of it) but the
    formulations stage verified its rewritten program faster, the run writes that program instead: `result`
    then says so in every field (the written text, its compile options, its paired speedup, the winner)."""
    from autotune.tuning.result import ORIGINAL_COMPILE_OPTIONS, text_sha256
    f = state.extra.get("formulations") or {}
    text, check = f.get("text"), f.get("check")
    if text is None or check is None or not result.keep_original or result.measured_original is None:
        return False
    rewritten = sum(1 for v in f["space"].tunable if v.key in (f.get("chosen") or {}))
    result.keep_original = False
    result.fused_text = formulated_header(check, rewritten) + text
    result.compile_options = dict(ORIGINAL_COMPILE_OPTIONS)
    result.measured_best = check.get("measured_s")
    result.measured_best_config = None
    result.measured_best_predicted = None
    paired_keys = ("status", "ratio", "speedup", "speedup_interval", "confidence", "faster", "seconds", "requests")
    result.paired = {"candidate": "formulations", **{k: check[k] for k in paired_keys if k in check}}
    ver = result.verification
    why = ver.pop("keep_original", None)
    ver.update(winner="formulations", paired=result.paired, fused_hlo_sha256=text_sha256(result.fused_text))
    if why:
        ver["fusion_kept_original"] = why
    result.warnings[:] = [w for w in result.warnings if not w.startswith("keep the original")]
    return True
