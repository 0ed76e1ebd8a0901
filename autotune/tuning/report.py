"""Run outputs: report.json, best_config.json, fused.hlo (fusion) or layouts.hlo (layouts), search.png."""
from __future__ import annotations

import json
import math
import os
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:
    from autotune.tuning.result import TuningResult


def _finite(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def write_json(path: "str | Path", data: dict) -> None:
    """Atomic JSON write (temp file + rename): a crash never leaves a half-written report."""
    path = Path(path)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=_finite))
    os.replace(tmp, path)


def plot_search(history: list, path: "str | Path", title: str = "", default_cost: Optional[float] = None) -> None:
    """Best cost so far against wall-clock time and against evaluations (two panels)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not history:
        return
    t = [h[0] for h in history]
    n = [h[1] for h in history]
    c = [h[2] * 1e3 for h in history]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for ax, x, label in ((axes[0], t, "wall-clock time (s)"), (axes[1], n, "evaluated configurations")):
        ax.step(x, c, where="post", label="best found")
        if default_cost is not None and math.isfinite(default_cost):
            ax.axhline(default_cost * 1e3, color="grey", ls="--", lw=1, label="default")
        ax.set_xlabel(label)
        ax.set_ylabel("predicted program time (ms)")
        ax.grid(alpha=0.3)
    axes[0].legend(loc="upper right", fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _result_report(meta: dict, result: TuningResult) -> dict:
    """The report fields every tuning run has (fusion and layout): meta, predicted and measured costs,
    verification, bookkeeping."""
    report = dict(meta)
    baseline = result.measured_baseline
    original = result.measured_original
    report.update({
        "default_cost_s": result.default_cost,
        "best_cost_s": result.best_cost,
        "speedup": result.speedup,
        # the configuration written out is the hardware race's winner when verification ran: its own price
        "written_predicted_cost_s": (result.best_cost if result.measured_best_config is None
                                     or result.measured_best_config is result.best
                                     else result.measured_best_predicted),
        "measured_default_s": result.measured_default,
        # end-to-end fusion verification: XLA's own compile of the original program, the baseline
        "measured_original_s": original,
        "measured_baseline_s": baseline,
        "measured_baseline": ("original (XLA's own compile, default options)" if original is not None
                              else "default configuration" if baseline is not None else None),
        "measured_best_s": result.measured_best,
        # paired (the winner timed beside the baseline) where the verification did that, else the race's ratio
        "measured_speedup": result.measured_speedup,
        "measured_speedup_interval": result.measured_speedup_interval,
        "measured_speedup_method": ("paired" if result.measured_speedup_interval else
                                    "race medians" if baseline and result.measured_best else None),
        "keep_original": bool(result.keep_original),
        # how the written program compiles as verified, where the compiler-options stage chose options
        "compile_options": result.compile_options,
        "XLA_FLAGS": result.xla_flags_text,
        "verification": result.verification,
        "evaluations": result.evaluations,
        "kernel_evaluations": result.kernel_evaluations,
        "elapsed_s": result.elapsed_s,
        "stopped_by": result.stopped_by,
    })
    return report


def _write_report_and_plot(out: Path, report: dict, result: Any, meta: dict) -> dict:
    """report.json, then search.png (a plotting problem is recorded in the report, never fatal)."""
    write_json(out / "report.json", report)
    try:
        plot_search(result.history, out / "search.png",
                    f"{Path(str(meta.get('program', ''))).name}: {meta.get('strategy', '')} with "
                    f"{Path(str(meta.get('cost_model', ''))).name}",
                    result.default_cost)
    except Exception as e:  # a plotting problem must not lose the results above
        report["plot_error"] = f"{type(e).__name__}: {e}"
        write_json(out / "report.json", report)
    return report


def write_fusion_outputs(out_dir: "str | Path", space: Any, result: TuningResult, meta: dict) -> dict:
    """Everything a fusion run leaves behind; returns the report dictionary.

    fused.hlo is the program verified end to end when there is one (`result.fused_text`, byte for
    byte), else the chosen configuration emitted as verification emits it. A measured speedup is
    reported only for verified programs (`verification` says what was verified and how;
    `warnings` lists every failed or skipped step)."""
    from autotune.tuning.config_io import save_config
    from autotune.compiler.emission import emit_fused_text

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    chosen = result.measured_best_config or result.best
    report = _result_report(meta, result)
    report.update({
        "kernels_default": len(space.state(space.default()).refs()),
        "kernels_best": len(space.state(chosen).refs()),
        "fused_edges_default": space.default().count(),
        "fused_edges_best": chosen.count(),
        "fusible_edges": space.n_edges,
        "verified": result.verified,
        "warnings": list(space.program.flags) + list(result.warnings),
    })
    # the written program is not `chosen`: the original (kept, or compiled with compiler options)
    from autotune.tuning.result import ORIGINAL_WITH_OPTIONS
    keep_original = bool(result.keep_original) or result.verification.get("winner") == ORIGINAL_WITH_OPTIONS
    save_config(space, chosen, out / "best_config.json",
                {"predicted_cost_s": result.best_cost if chosen is result.best else result.measured_best_predicted,
                 "measured_cost_s": None if keep_original else result.measured_best,
                 **({"keep_original": True} if keep_original else {})})
    fused = result.fused_text if result.fused_text is not None else emit_fused_text(space, chosen, header=True)
    (out / "fused.hlo").write_text(fused)
    return _write_report_and_plot(out, report, result, meta)


def write_layout_outputs(out_dir: "str | Path", space: Any, result: TuningResult, meta: dict) -> dict:
    """Everything a layout run leaves behind (report.json, best_config.json, layouts.hlo: the program
    rewritten with the chosen layouts and their copies, search.png); returns the report dictionary."""
    from autotune.compiler.layouts import XLA_CPU_DROPS_LAYOUTS
    from autotune.tuning.config_io import save_config

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    chosen = result.measured_best_config if result.measured_best_config is not None else result.best
    default = space.default()
    changed = sum(a != b for a, b in zip(chosen.key(), default.key()))
    report = _result_report(meta, result)
    report.update({
        "configurable_nodes": len(space.nodes),
        "configurable_opcodes": dict(sorted(Counter(n.opcode for n in space.nodes).items())),
        "tensors": space.n_slots,
        "free_tensors": len(space.free_slots),
        "space_size": space.size(),
        "tensors_changed_from_default": changed,
        "copies_default": space.copies(default),
        "copies_best": space.copies(chosen),
        "config_hash_best": space.config_hash(chosen),
        "xla_cpu_honours_layouts": False,
        "xla_cpu_layouts_note": XLA_CPU_DROPS_LAYOUTS,
        "verified": result.verified,
        "warnings": list(space.program.flags) + list(result.warnings),
    })
    save_config(space, chosen, out / "best_config.json",
                {"predicted_cost_s": result.best_cost if chosen is result.best else result.measured_best_predicted,
                 "measured_cost_s": result.measured_best})
    (out / "layouts.hlo").write_text(space.emit_text(chosen))
    return _write_report_and_plot(out, report, result, meta)
