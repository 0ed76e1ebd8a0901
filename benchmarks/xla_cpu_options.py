"""XLA:CPU's own compiler options, each timed against XLA's default compile of the same program
(issue: "find what makes XLA:CPU programs faster", first half).

    python -m benchmarks.xla_cpu_options [--programs a,b] [--options x,y+z] [--seconds S] [--combine K]
                                         [--confirm] [--json OUT] [--md OUT]
    python -m benchmarks.xla_cpu_options --quick       # 1 tiny program, 2 options, short timing
    python -m benchmarks.xla_cpu_options --list        # the option settings and what they set

For each program and each option setting (:data:`SETTINGS`; ``a+b`` joins two settings' flags): compile
the program with XLA's default pipeline plus the setting's DebugOptions (``compile_hlo(..., xla_flags=)``,
XLA's own fusion on), run it and the default compile on the same inputs
(:func:`hardware.xla.outputs.verification_inputs`) and compare the outputs (:func:`output_error`; a
mismatch is judged again without excess precision for programs computing in 16-bit floats, then against
the program computed in f64: as accurate as the default passes, :func:`f64_accuracy`), then time it
paired with the default compile (:func:`hardware.xla.timing.time_paired_for`: blocks of the candidate
alternating with blocks of the default, single-block ratios, ``--seconds`` per measurement). One worker
process (:class:`hardware.pool.MeasurementPool`) does all of it, so that an XLA abort on some option
fails that measurement only.

Per program and setting: the speedup (default time / option time: the inverse of the median ratio) with
its 95% block-bootstrap interval (:func:`autotune.tuning.verification.median_interval`), the output
error, whether the outputs are bit-identical to the default's, whether they are as accurate as the
default's, whether XLA's optimized HLO differs from the default's. Per setting: the median and the
geometric mean of the speedups over programs (the median with a 95% bootstrap interval over programs),
how many programs improve beyond their interval and how many slow down beyond it, and the verdict of the
rule written before the run (:func:`verdict`; docs/lab-notes/2026-11-29-xla-cpu-options.md).

``--combine K`` adds, after the single settings, combinations chosen by a rule fixed in advance
(:func:`choose_combinations`): every pair and the whole set of the K accuracy-preserving singles with the
best geometric-mean speedup above 1, and the best numerics-changing single joined with the best
accuracy-preserving one. ``--confirm`` times every (program, setting) that improved by more than 5%
beyond its interval a second time (twice as long, a new compile); the verdict counts only confirmed wins.
"""
from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import math
import os
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import numpy as np

from benchmarks.tables import bootstrap_median, git_commit, machine_info

from hardware.base import Measurement

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"

# ---- the option settings ------------------------------------------------------------------------
# LibraryFusionType names of this jaxlib's xla.proto (XLA's default for the YNN list is
# INDIVIDUAL_DOT, INDIVIDUAL_CONVOLUTION, REDUCE; the XNN and oneDNN lists are empty).
_L = "LIBRARY_FUSION_TYPE_"


def _types(*names: str) -> str:
    return ",".join(_L + n for n in names)


YNN = "xla_cpu_experimental_ynn_fusion_type"
ONEDNN = "xla_cpu_experimental_onednn_fusion_type"
XNN = "xla_cpu_experimental_xnn_fusion_type"
_FAST = {"xla_cpu_enable_fast_math": True}

# name -> (group, DebugOptions overrides, declared to change numerics, what it does)
SETTINGS: dict[str, tuple[str, dict, bool, str]] = {
    "default": ("control", {}, False,
                "XLA's default compile again, compiled separately: the null control of the timing"),
    # dot / convolution / reduction paths
    "ynn_off": ("library", {YNN: ""}, True,
                "no YNNPACK fusions: dots and convolutions go to Eigen, reductions to XLA's loop emitter"),
    "ynn_dot_only": ("library", {YNN: _types("INDIVIDUAL_DOT")}, True,
                     "YNNPACK for dots only (convolutions to Eigen, reductions to XLA's loops)"),
    "ynn_no_reduce": ("library", {YNN: _types("INDIVIDUAL_DOT", "INDIVIDUAL_CONVOLUTION")}, True,
                      "YNNPACK for dots and convolutions; reductions to XLA's loop emitter"),
    "ynn_no_conv": ("library", {YNN: _types("INDIVIDUAL_DOT", "REDUCE")}, True,
                    "YNNPACK for dots and reductions; convolutions to Eigen"),
    "ynn_no_dot": ("library", {YNN: _types("INDIVIDUAL_CONVOLUTION", "REDUCE")}, True,
                   "YNNPACK for convolutions and reductions; dots to Eigen"),
    "ynn_fused_dot": ("library", {YNN: _types("DOT", "INDIVIDUAL_CONVOLUTION", "REDUCE")}, True,
                      "YNNPACK dot fusions (a dot with its neighbouring ops) instead of single dots"),
    "ynn_eltwise": ("library", {YNN: _types("INDIVIDUAL_DOT", "INDIVIDUAL_CONVOLUTION", "REDUCE", "ELTWISE")},
                    True, "the default YNNPACK list plus elementwise fusions"),
    "onednn_dot": ("library", {"xla_cpu_use_onednn": True, ONEDNN: _types("DOT"),
                               YNN: _types("INDIVIDUAL_CONVOLUTION", "REDUCE")}, True,
                   "oneDNN dot fusions instead of YNNPACK's dots"),
    "onednn_dot_eltwise": ("library", {"xla_cpu_use_onednn": True, ONEDNN: _types("DOT", "ELTWISE"),
                                       YNN: _types("INDIVIDUAL_CONVOLUTION", "REDUCE")}, True,
                           "oneDNN dot and elementwise fusions instead of YNNPACK's dots"),
    "xnn_dot": ("library", {XNN: _types("DOT"), YNN: _types("INDIVIDUAL_CONVOLUTION", "REDUCE")}, True,
                "XNNPACK dot fusions asked for instead of YNNPACK's dots"),
    "xnn_graph_greedy": ("library", {"xla_cpu_experimental_xnn_graph_fusion_mode": "XNN_GRAPH_FUSION_MODE_GREEDY"},
                         True, "XnnGraphFusion pass, greedy"),
    "xnnpack_off": ("library", {"xla_cpu_use_xnnpack": False}, True, "xla_cpu_use_xnnpack off"),
    # floating-point semantics
    "fast_math": ("math", dict(_FAST), True, "fast-math on, every honor_* part left on (XLA's defaults)"),
    "fast_math_all": ("math", {**_FAST, "xla_cpu_fast_math_honor_nans": False, "xla_cpu_fast_math_honor_infs": False,
                               "xla_cpu_fast_math_honor_division": False,
                               "xla_cpu_fast_math_honor_functions": False}, True,
                      "fast-math with every honor_* part off"),
    "fast_math_no_nans": ("math", {**_FAST, "xla_cpu_fast_math_honor_nans": False}, True,
                          "fast-math, NaNs not honoured"),
    "fast_math_no_infs": ("math", {**_FAST, "xla_cpu_fast_math_honor_infs": False}, True,
                          "fast-math, infinities not honoured"),
    "fast_math_no_division": ("math", {**_FAST, "xla_cpu_fast_math_honor_division": False}, True,
                              "fast-math, division by reciprocal multiplication allowed"),
    "fast_math_no_functions": ("math", {**_FAST, "xla_cpu_fast_math_honor_functions": False}, True,
                               "fast-math, approximate library functions allowed"),
    "fast_min_max": ("math", {"xla_cpu_enable_fast_min_max": True}, True,
                     "min/max without NaN propagation (jax compiles with it off)"),
    "no_platform_math": ("math", {"xla_cpu_enable_platform_dependent_math": False}, True,
                         "no platform-dependent math (the same results across CPUs)"),
    "no_ftz": ("math", {"xla_cpu_ftz": False}, True, "denormals kept (flush-to-zero off)"),
    "no_excess_precision": ("math", {"xla_allow_excess_precision": False}, True,
                            "every instruction rounds to its declared type (16-bit floats)"),
    "strict_dot_conv_math": ("math", {"xla_cpu_strict_dot_conv_math": True}, True,
                             "16-bit dots/convolutions computed in 16 bits, not upcast to f32"),
    # code generation
    "vector_width_512": ("codegen", {"xla_cpu_prefer_vector_width": 512}, False,
                         "LLVM prefers 512-bit vectors (default 256)"),
    "vector_width_128": ("codegen", {"xla_cpu_prefer_vector_width": 128}, False, "LLVM prefers 128-bit vectors"),
    "max_isa_avx2": ("codegen", {"xla_cpu_max_isa": "AVX2"}, False, "no AVX-512 instructions in generated code"),
    "opt_level_2": ("codegen", {"xla_backend_optimization_level": 2}, False, "LLVM -O2 (default 3)"),
    "opt_level_1": ("codegen", {"xla_backend_optimization_level": 1}, False, "LLVM -O1"),
    "llvm_cheap_passes": ("codegen", {"xla_llvm_disable_expensive_passes": True}, False,
                          "LLVM's expensive passes off"),
    "preset_fast_runtime": ("codegen", {"xla_cpu_opt_preset": "CPU_OPT_PRESET_FAST_RUNTIME"}, False,
                            "XLA:CPU's optimization preset FAST_RUNTIME"),
    "preset_fast_compile": ("codegen", {"xla_cpu_opt_preset": "CPU_OPT_PRESET_FAST_COMPILE"}, False,
                            "XLA:CPU's optimization preset FAST_COMPILE"),
    "fusion_emitters_off": ("codegen", {"xla_cpu_use_fusion_emitters": False}, False,
                            "the legacy elemental IR emitter instead of the MLIR fusion emitters"),
    "tiling_propagation": ("codegen", {"xla_cpu_experimental_enable_tiling_propagation": True}, False,
                           "experimental tiling propagation"),
    "codegen_split_1": ("codegen", {"xla_cpu_parallel_codegen_split_count": 1}, False,
                        "the LLVM module compiled in one part (default: split in up to 32)"),
    "no_inline_before_split": ("codegen", {"xla_llvm_force_inline_before_split": False}, False,
                               "no forced inlining before the module is split"),
    # scheduling and runtime
    "scheduler_memory": ("scheduler", {"xla_cpu_scheduler_type": "CPU_SCHEDULER_TYPE_MEMORY_OPTIMIZED"}, False,
                         "memory-optimized HLO schedule"),
    "scheduler_concurrency": ("scheduler", {"xla_cpu_scheduler_type": "CPU_SCHEDULER_TYPE_CONCURRENCY_OPTIMIZED"},
                              False, "concurrency-optimized HLO schedule"),
    "concurrency_scheduler_flag": ("scheduler", {"xla_cpu_enable_concurrency_optimized_scheduler": True}, False,
                                   "xla_cpu_enable_concurrency_optimized_scheduler on"),
    "eigen_single_thread": ("scheduler", {"xla_cpu_multi_thread_eigen": False}, False,
                            "Eigen's dot/convolution kernels single-threaded"),
    "copy_region_analysis": ("scheduler", {"xla_cpu_copy_insertion_use_region_analysis": True}, False,
                             "copy insertion with region analysis"),
}

DEFAULT_PROGRAMS = (
    "bert_small_infer", "mlp_mixer_small_train", "vae_medium_train", "resnet_small_infer", "inception_small_infer",
    "efficientnet_small_infer", "segmentation_small_train", "lstm_medium_infer", "gnn_medium_train",
    "wavernn_medium_infer", "haiku_resnet_bf16_infer", "hf_gpt2_train_adamw",
)
QUICK_PROGRAMS = ("recommender_small_infer",)
QUICK_OPTIONS = ("ynn_off", "fast_math_all")
CORPORA = (ROOT / "examples" / "hlo", ROOT / "examples" / "hlo_library")  # never examples/hlo_heldout

# The rule written before the run (docs/lab-notes/2026-11-29-xla-cpu-options.md).
MEDIAN_BAR = 1.02        # the median speedup over programs: its interval's lower end above this
PROGRAM_BAR = 1.05       # or one program's speedup interval's lower end above this, outputs accurate
CONFIDENCE = 0.95


def program_path(name: str) -> Path:
    """examples/hlo/NAME.hlo or examples/hlo_library/NAME.hlo (a path is taken as given)."""
    p = Path(name)
    if p.suffix == ".hlo" and p.exists():
        if "hlo_heldout" in p.resolve().parts:
            raise ValueError(f"{name}: examples/hlo_heldout is the frozen test set, not for this benchmark")
        return p
    for corpus in CORPORA:
        if (corpus / f"{name}.hlo").exists():
            return corpus / f"{name}.hlo"
    raise ValueError(f"no program {name!r} in examples/hlo or examples/hlo_library")


def setting_flags(name: str) -> dict:
    """The DebugOptions of a setting, or of ``a+b+...`` (their union; two settings giving one option two
    values are refused)."""
    flags: dict = {}
    for part in name.split("+"):
        if part not in SETTINGS:
            raise ValueError(f"unknown option setting {part!r}; known: {', '.join(SETTINGS)}")
        for k, v in SETTINGS[part][1].items():
            if k in flags and flags[k] != v:
                raise ValueError(f"{name}: {part} sets {k}={v!r}, another part {flags[k]!r}")
            flags[k] = v
    return flags


def declared_numerics(name: str) -> bool:
    """Whether any part of a setting may change the outputs by design (library paths, fast-math...)."""
    return any(SETTINGS[p][2] for p in name.split("+"))


def setting_group(name: str) -> str:
    return "combination" if "+" in name else SETTINGS[name][0]


# ---- the worker side ----------------------------------------------------------------------------
_DEFAULT: dict = {}  # the current program's default compile, inputs and outputs (one program at a time)


def _start_worker() -> None:
    """Pool initializer: import jax before the first item's timeout starts."""
    try:
        from hardware.xla import backend_platform
        backend_platform()  # starts jaxlib's client
    except Exception:  # noqa: BLE001 - the first item reports it
        pass


def _strip(text: str) -> str:
    return re.sub(r",? metadata=\{[^}]*\}", "", text)


def _digest(text: str) -> str:
    return hashlib.sha1(_strip(text).encode()).hexdigest()[:16]


def _identical(got: Sequence[Any], ref: Sequence[Any]) -> bool:
    from hardware.xla.accuracy import outputs_identical
    return outputs_identical(got, ref)


def _default_for(path: str) -> dict:
    """The default compile of a program, its verification inputs and outputs (cached for one program)."""
    from hardware.xla.compile import compile_hlo
    from hardware.xla.outputs import verification_inputs
    if _DEFAULT.get("path") != path:
        _DEFAULT.clear()
        text = Path(path).read_text()
        compiled = compile_hlo(text)
        inputs = verification_inputs(text, 0)
        _DEFAULT.update(path=path, text=text, compiled=compiled, inputs=inputs, outputs=compiled(*inputs),
                        digest=_digest(compiled.optimized_text()), compile_s=compiled.compile_seconds)
    return _DEFAULT


def check_outputs(text: str, flags: dict, got: Sequence[Any], ref: Sequence[Any],
                  inputs: Sequence[np.ndarray]) -> dict:
    """The outputs of the program compiled with `flags` (`got`) against the default compile's (`ref`):
    :func:`hardware.xla.accuracy.option_output_check` (``identical``, ``error``, ``accurate``, and the
    second opinions' errors)."""
    from hardware.xla.accuracy import option_output_check
    return option_output_check(text, flags, got, ref, inputs)


def measure_option(req: dict) -> Measurement:
    """One (program, setting) in the worker: compile, check the outputs, time paired with the default.

    ``seconds`` of the answer is the median ratio option / default; ``extra`` holds the ratios, both
    median block times, the output check (:func:`check_outputs`), compile times and HLO digests."""
    from hardware.xla.compile import compile_hlo
    from hardware.xla.timing import time_paired_for
    try:
        base = _default_for(req["path"])
    except Exception as exc:  # noqa: BLE001
        return Measurement.failure(f"reference_error: {str(exc).splitlines()[0][:300]}")
    flags = dict(req["flags"])
    try:
        cand = compile_hlo(base["text"], xla_flags=flags)
    except Exception as exc:  # noqa: BLE001
        return Measurement.failure(f"compile_error: {str(exc).splitlines()[0][:300]}")
    extra: dict = {"compile_s": cand.compile_seconds, "default_compile_s": base["compile_s"],
                   "hlo_changed": _digest(cand.optimized_text()) != base["digest"]}
    try:
        got = cand(*base["inputs"])
    except Exception as exc:  # noqa: BLE001
        return Measurement(None, f"runtime_error: {str(exc).splitlines()[0][:300]}", extra=extra)
    extra["outputs"] = check_outputs(base["text"], flags, got, base["outputs"], base["inputs"])
    try:
        p = time_paired_for(base["compiled"], cand, base["inputs"], float(req["seconds"]),
                            pairs=int(req.get("pairs", 4)), min_block_ms=float(req.get("min_block_ms", 1.0)))
    except Exception as exc:  # noqa: BLE001
        return Measurement(None, f"runtime_error: {str(exc).splitlines()[0][:300]}", extra=extra)
    extra.update(ratios=p.ratios, option_s=float(statistics.median(p.seconds)),
                 default_s=float(statistics.median(p.reference_seconds)))
    return Measurement(p.ratio, extra=extra)


# ---- the parent side: rows, summaries, the rule -------------------------------------------------

def _f(x: Optional[float], nd: int = 4) -> Optional[float]:
    return None if x is None or not math.isfinite(x) else round(float(x), nd)


def row_from(program: str, setting: str, m: Measurement, load: tuple, confidence: float = CONFIDENCE) -> dict:
    """One table row (JSON-friendly) from a worker's answer."""
    from autotune.tuning.verification import median_interval
    row: dict = {"program": program, "option": setting, "group": setting_group(setting),
                 "flags": setting_flags(setting), "declared_numerics": declared_numerics(setting),
                 "status": m.status, "load_average": [round(x, 2) for x in load]}
    ex = dict(m.extra or {})
    for k in ("compile_s", "default_compile_s", "hlo_changed", "outputs", "option_s", "default_s"):
        if k in ex:
            row[k] = ex[k]
    if m.ok:
        ratios = [float(r) for r in ex.get("ratios", [])]
        lo, hi = median_interval(ratios, confidence)
        row.update(ratio=_f(m.seconds), ratio_interval=[_f(lo), _f(hi)] if lo is not None else None,
                   n_ratios=len(ratios), speedup=_f(1.0 / m.seconds),
                   speedup_interval=[_f(1.0 / hi), _f(1.0 / lo)] if lo else None)
    out = row.get("outputs") or {}
    if isinstance(out.get("error"), float) and not math.isfinite(out["error"]):
        out["error"] = "inf"
    return row


def improved(row: dict, bar: float = 1.0) -> bool:
    """Faster than the default beyond the interval (its lower end above `bar`)."""
    iv = row.get("speedup_interval")
    return bool(iv and iv[0] is not None and iv[0] > bar)


def slowed(row: dict, bar: float = 1.0) -> bool:
    iv = row.get("speedup_interval")
    return bool(iv and iv[1] is not None and iv[1] < bar)


def accurate(row: dict) -> bool:
    return bool((row.get("outputs") or {}).get("accurate"))


def summarize(rows: Sequence[dict], setting: str, confirm: bool = False) -> dict:
    """One option's line of the summary over the programs it was measured on."""
    mine = [r for r in rows if r["option"] == setting and not r.get("confirmation")]
    timed = [r for r in mine if r["status"] == "ok"]
    sp = [r["speedup"] for r in timed if r.get("speedup")]
    lo, hi = bootstrap_median(sp)
    errs = [(r.get("outputs") or {}).get("error") for r in mine if r.get("outputs")]
    num_errs = [e for e in errs if isinstance(e, (int, float))]
    confirmed = {(r["program"]) for r in rows if r["option"] == setting and r.get("confirmation")
                 and improved(r, PROGRAM_BAR) and accurate(r)}
    wins = [r["program"] for r in timed if improved(r, PROGRAM_BAR) and accurate(r)]
    s = {
        "option": setting, "group": setting_group(setting), "flags": setting_flags(setting),
        "declared_numerics": declared_numerics(setting),
        "programs": len(mine), "timed": len(timed),
        "failed": {r["program"]: r["status"] for r in mine if r["status"] != "ok"},
        "median_speedup": _f(statistics.median(sp)) if sp else None,
        "median_speedup_interval": [_f(lo), _f(hi)] if lo is not None else None,
        "geomean_speedup": _f(math.exp(statistics.fmean(math.log(x) for x in sp))) if sp else None,
        "improved": sum(improved(r) for r in timed), "slowed": sum(slowed(r) for r in timed),
        "improved_5pct": wins, "slowed_5pct": [r["program"] for r in timed if slowed(r, 1 / PROGRAM_BAR)],
        "confirmed_5pct": sorted(confirmed),
        "identical_outputs": sum(bool((r.get("outputs") or {}).get("identical")) for r in mine),
        "accurate_outputs": sum(accurate(r) for r in mine),
        "checked_outputs": sum(1 for r in mine if r.get("outputs")),
        "max_error": float(f"{max(num_errs):.3g}") if num_errs else ("inf" if errs else None),
        "hlo_changed": sum(bool(r.get("hlo_changed")) for r in mine),
    }
    s["changes_numerics"] = s["identical_outputs"] < s["checked_outputs"]
    s["confirm"] = confirm
    s["verdict"] = verdict(s)
    return s


def verdict(s: dict) -> str:
    """The rule written before the run. "matters": the median speedup over programs has its 95% interval
    above MEDIAN_BAR with every program's outputs as accurate as the default's, or at least one program
    improves by more than 5% beyond its interval with accurate outputs (confirmed by the second timing
    where ``--confirm`` ran). "matters (numerics)": the same, where some program's outputs are not as
    accurate as the default's (listed apart: not a free win). "hurts": no win, and some program slows
    down by more than 5% beyond its interval. "refused"/"crashes": it compiled nowhere. Else "no effect"."""
    if s["timed"] == 0:
        statuses = " ".join(s["failed"].values())
        return "crashes" if "crash" in statuses or "timeout" in statuses else "refused"
    wins = s["confirmed_5pct"] if s.get("confirm") else s["improved_5pct"]
    iv = s["median_speedup_interval"]
    median_win = bool(iv and iv[0] is not None and iv[0] > MEDIAN_BAR)
    all_accurate = s["accurate_outputs"] == s["checked_outputs"]
    if (median_win and all_accurate) or wins:
        return "matters"
    if median_win:
        return "matters (numerics)"
    if s["slowed_5pct"]:
        return "hurts"
    return "no effect"


def choose_combinations(summaries: Sequence[dict], k: int) -> list[str]:
    """Combinations fixed in advance: the K singles with the best geometric-mean speedup above 1 whose
    outputs were as accurate as the default's on every program (each pair, and all K together), and
    the best numerics-changing single (by geometric mean, above 1) joined with the best accurate one.
    Settings whose flags clash (two YNN lists) are skipped."""
    singles = [s for s in summaries if "+" not in s["option"] and s["option"] != "default"
               and s["geomean_speedup"] and s["geomean_speedup"] > 1]
    acc = sorted((s for s in singles if s["accurate_outputs"] == s["checked_outputs"] and s["checked_outputs"]),
                 key=lambda s: -s["geomean_speedup"])
    num = sorted((s for s in singles if s["accurate_outputs"] < s["checked_outputs"]),
                 key=lambda s: -s["geomean_speedup"])
    top = []
    for s in acc:
        if len(top) == k:
            break
        if all(_compatible(s["option"], t) for t in top):
            top.append(s["option"])
    combos = [f"{a}+{b}" for i, a in enumerate(top) for b in top[i + 1:]]
    if len(top) > 2:
        combos.append("+".join(top))
    if num and top and _compatible(num[0]["option"], top[0]):
        combos.append(f"{top[0]}+{num[0]['option']}")
    return combos


def _compatible(a: str, b: str) -> bool:
    try:
        setting_flags(f"{a}+{b}")
        return True
    except ValueError:
        return False


# ---- running ------------------------------------------------------------------------------------

def measure(programs: Sequence[str], settings: Sequence[str], seconds: float, *, combine: int = 0,
            confirm: bool = False, timeout_s: float = 300.0, log: Callable[[str], None] = print,
            min_block_ms: float = 1.0) -> dict:
    """Measure every (program, setting); then the combinations (``combine``) and the confirmations."""
    from hardware.pool import MeasurementPool
    paths = {p: str(program_path(p)) for p in programs}
    for s in settings:
        setting_flags(s)  # unknown names fail before anything runs
    started = time.time()
    load_start = os.getloadavg()
    rows: list[dict] = []
    pool = MeasurementPool(n_workers=1, timeout=timeout_s, initializer=_start_worker)

    def run(items: list[tuple[str, str, float]], confirmation: bool = False) -> None:
        reqs = [{"path": paths[p], "flags": setting_flags(s), "seconds": sec, "min_block_ms": min_block_ms}
                for p, s, sec in items]

        def done(i: int, m: Measurement) -> None:
            p, s, _ = items[i]
            row = row_from(p, s, m, os.getloadavg())
            if confirmation:
                row["confirmation"] = True
            rows.append(row)
            sp, iv = row.get("speedup"), row.get("speedup_interval")
            out = row.get("outputs") or {}
            log(f"[{time.time() - started:7.1f}s] {p:28s} {s:34s} "
                + (f"speedup {sp:.3f} [{iv[0]:.3f}, {iv[1]:.3f}]" if sp and iv else f"{row['status'][:90]}")
                + (f"  err {out.get('error'):.2g}{'' if out.get('identical') else ' (differs)'}"
                   f"{'' if out.get('accurate', True) else ' INACCURATE'}"
                   if isinstance(out.get("error"), float) else "")
                + (" hlo" if row.get("hlo_changed") else "")
                + ("  (confirmation)" if confirmation else ""))

        pool.map(measure_option, reqs, on_result=done)

    try:
        # programs outer, settings inner: the worker compiles each program's default once
        run([(p, s, seconds) for p in programs for s in settings])
        combos: list[str] = []
        if combine:
            singles = [summarize(rows, s) for s in settings]
            combos = [c for c in choose_combinations(singles, combine) if c not in settings]
            log(f"combinations (rule of --combine {combine}): {combos}")
            if combos:
                run([(p, c, seconds) for p in programs for c in combos])
        all_settings = list(settings) + combos
        if confirm:
            todo = [(r["program"], r["option"], 2 * seconds) for r in rows
                    if r["status"] == "ok" and improved(r, PROGRAM_BAR) and accurate(r) and r["option"] != "default"]
            log(f"confirmations: {len(todo)}")
            if todo:
                run(todo, confirmation=True)
    finally:
        pool.close()
    summaries = [summarize(rows, s, confirm) for s in all_settings]
    return {"rows": rows, "summary": summaries, "programs": list(programs), "options": all_settings,
            "combinations": combos, "seconds": seconds, "confirm": confirm,
            "wall_s": round(time.time() - started, 1),
            "load_average_start": [round(x, 2) for x in load_start],
            "load_average_end": [round(x, 2) for x in os.getloadavg()]}


# ---- the table ----------------------------------------------------------------------------------

def _iv(iv: Optional[list]) -> str:
    return f"[{iv[0]:.3f}, {iv[1]:.3f}]" if iv and iv[0] is not None else "-"


def _err(out: dict) -> str:
    e = out.get("error")
    if e is None:
        return "-"
    s = "inf" if e == "inf" else f"{e:.1e}"
    if out.get("identical"):
        return "0 (identical)"
    return s + ("" if out.get("accurate") else " **inaccurate**")


def markdown(result: dict) -> str:
    """The summary table, then one table per option with its programs."""
    meta = result.get("meta", {})
    lines = ["# XLA:CPU compiler options, paired against XLA's default compile", ""]
    if meta:
        lines += [f"- command: `{meta.get('command')}`", f"- date: {meta.get('date')}",
                  f"- machine: {meta.get('machine')}", f"- commit: {meta.get('commit')}"]
    lines += [f"- {len(result['programs'])} programs: {', '.join(result['programs'])}",
              f"- {result['seconds']} s of paired timing per measurement; wall {result['wall_s']} s; load average "
              f"{result['load_average_start']} at the start, {result['load_average_end']} at the end",
              "- speedup = default time / option time (median of single-block ratios, inverted); intervals 95% "
              "(per program: block bootstrap of the ratios; the median over programs: bootstrap over programs)",
              "- outputs: max relative error against the default compile's outputs on the same inputs; "
              "`identical` = bit for bit; **inaccurate** = beyond tolerance and less accurate than the default "
              "against the program in f64", ""]
    lines += ["## Summary", "",
              "| option | group | median speedup [95%] | geomean | improved / slowed (beyond interval) | "
              ">5% wins (accurate) | >5% losses | outputs identical / accurate / checked | max error | HLO changed | verdict |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for s in result["summary"]:
        ms = f"{s['median_speedup']:.3f} {_iv(s['median_speedup_interval'])}" if s["median_speedup"] else "-"
        gm = f"{s['geomean_speedup']:.3f}" if s["geomean_speedup"] else "-"
        wins = ", ".join(s["confirmed_5pct"] if s.get("confirm") else s["improved_5pct"]) or "-"
        if s.get("confirm") and s["improved_5pct"] and set(s["improved_5pct"]) != set(s["confirmed_5pct"]):
            wins += f" (first timing: {', '.join(s['improved_5pct'])})"
        me = s["max_error"]
        me = "-" if me is None else (me if isinstance(me, str) else f"{me:.1e}")
        fails = f" ({len(s['failed'])} failed)" if s["failed"] else ""
        lines.append(f"| `{s['option']}` | {s['group']} | {ms} | {gm} | {s['improved']} / {s['slowed']}{fails} | "
                     f"{wins} | {', '.join(s['slowed_5pct']) or '-'} | {s['identical_outputs']} / "
                     f"{s['accurate_outputs']} / {s['checked_outputs']} | {me} | {s['hlo_changed']} | "
                     f"{s['verdict']} |")
    lines += ["", "## Per program", ""]
    for s in result["summary"]:
        lines += [f"### `{s['option']}`", "", f"flags: `{json.dumps(s['flags'])}`", "",
                  "| program | speedup [95%] | option / default ms | output error | HLO changed | status |",
                  "|---|---|---|---|---|---|"]
        for r in result["rows"]:
            if r["option"] != s["option"]:
                continue
            sp = f"{r['speedup']:.3f} {_iv(r.get('speedup_interval'))}" if r.get("speedup") else "-"
            ms = (f"{r['option_s'] * 1e3:.3f} / {r['default_s'] * 1e3:.3f}" if r.get("option_s") else "-")
            tag = " (confirmation)" if r.get("confirmation") else ""
            lines.append(f"| {r['program']}{tag} | {sp} | {ms} | {_err(r.get('outputs') or {})} | "
                         f"{'yes' if r.get('hlo_changed') else 'no'} | {r['status'][:120]} |")
        lines.append("")
    return "\n".join(lines) + "\n"


def main(argv: Optional[Sequence[str]] = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--programs", help="comma-separated program names (examples/hlo, examples/hlo_library)")
    ap.add_argument("--options", help="comma-separated settings (a+b joins two); default: all of SETTINGS")
    ap.add_argument("--seconds", type=float, default=1.2, help="paired timing per measurement (default 1.2)")
    ap.add_argument("--combine", type=int, default=0, metavar="K",
                    help="then time the combinations of the K best accurate singles (choose_combinations)")
    ap.add_argument("--confirm", action="store_true", help="time every >5%% win a second time")
    ap.add_argument("--timeout", type=float, default=300.0, help="per measurement, compile included")
    ap.add_argument("--quick", action="store_true", help="1 tiny program, 2 options, 0.2 s each")
    ap.add_argument("--list", action="store_true", help="print the settings and exit")
    ap.add_argument("--json", help="write the raw result here")
    ap.add_argument("--md", help="write the table here")
    a = ap.parse_args(argv)
    if a.list:
        for name, (group, flags, numerics, doc) in SETTINGS.items():
            print(f"{name:28s} {group:10s} {'numerics' if numerics else '        '} {json.dumps(flags)}  # {doc}")
        return {}
    programs = list(QUICK_PROGRAMS) if a.quick else list(DEFAULT_PROGRAMS)
    settings = list(QUICK_OPTIONS) if a.quick else list(SETTINGS)
    seconds = 0.2 if a.quick and a.seconds == ap.get_default("seconds") else a.seconds
    if a.programs:
        programs = [p.strip() for p in a.programs.split(",") if p.strip()]
    if a.options:
        settings = [s.strip() for s in a.options.split(",") if s.strip()]
    meta = {"command": "python -m benchmarks.xla_cpu_options " + " ".join(argv if argv is not None else sys.argv[1:]),
            "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "commit": git_commit(), **machine_info()}  # (the code that runs: taken before the run)
    result = measure(programs, settings, seconds, combine=0 if a.quick else a.combine, confirm=a.confirm,
                     timeout_s=a.timeout, log=lambda s: print(s, flush=True))
    result["meta"] = meta
    result["meta"]["machine"] = f"{result['meta']['machine']}, {result['meta']['arch']}, Python " \
                                f"{result['meta']['python']}, jaxlib {result['meta']['jaxlib']}"
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps(result, indent=1, default=str) + "\n")
    md = markdown(result)
    if a.md:
        Path(a.md).parent.mkdir(parents=True, exist_ok=True)
        Path(a.md).write_text(md)
    if not a.md:
        print(md)
    return result


if __name__ == "__main__":
    main()
