"""Markdown tables of the benchmark reports (one helper for every benchmark)."""
from __future__ import annotations

from typing import Optional, Sequence

__all__ = ["md_table", "emit_results", "git_commit"]


def md_table(header: Sequence[str], rows: Sequence[Sequence[object]], align: Optional[Sequence[str]] = None) -> str:
    """A markdown table; align: ---, ---: or :-: per column (default: the first left, the rest right)."""
    align = list(align or ["---"] + ["---:"] * (len(header) - 1))
    lines = ["| " + " | ".join(str(h) for h in header) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def emit_results(md: str, res: dict, md_path: Optional[str], json_path: Optional[str]) -> None:
    """Print a benchmark's markdown, and write it and its raw results where asked."""
    import json
    from pathlib import Path
    print(md)
    if md_path:
        Path(md_path).write_text(md + "\n")
    if json_path:
        Path(json_path).write_text(json.dumps(res, indent=2))


def machine_info() -> dict:
    """The machine a raw result was measured on: host name (CPU model), architecture, Python and jaxlib."""
    import platform
    from autotune.compiler.targets.host import host_machine
    try:
        import jaxlib
        jl = jaxlib.__version__
    except Exception:  # noqa: BLE001 - no jaxlib: recorded as unknown
        jl = "unknown"
    return {"machine": host_machine(), "arch": platform.machine(), "python": platform.python_version(),
            "jaxlib": jl}


def git_commit() -> str:
    """The short commit of the repository's HEAD, with "+uncommitted" when tracked files have changes
    (what a raw result records as the code that measured it); "unknown" outside a git checkout."""
    import subprocess
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=root, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                               text=True, cwd=root, check=True).stdout.strip()
        return head + ("+uncommitted" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def bootstrap_median(values: Sequence[float], confidence: float = 0.95, resamples: int = 4000,
                     seed: int = 0) -> tuple:
    """A percentile-bootstrap interval of the median of `values` (e.g. per-program speedups, programs
    resampled); (None, None) for fewer than 3 finite values."""
    import math

    import numpy as np
    v = np.asarray([x for x in values if x is not None and math.isfinite(x)], dtype=float)
    if len(v) < 3:
        return None, None
    rng = np.random.default_rng(seed)
    meds = np.median(v[rng.integers(0, len(v), size=(resamples, len(v)))], axis=1)
    tail = (1 - confidence) / 2 * 100
    return float(np.percentile(meds, tail)), float(np.percentile(meds, 100 - tail))
