"""What a tuning run found: `TuningResult` (predicted and measured costs, the verification record),
`TuningError`, and the end-to-end baseline's constants; the result type every tuning module shares
without depending on the loop that fills it (autotune/tuning/tuner.py)."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Optional

NOT_VERIFIED = {"status": "skipped", "reason": "no hardware evaluator"}

# XLA's own compile of the original program: what a user runs today, the end-to-end baseline.
ORIGINAL_COMPILE_OPTIONS = {"disable_fusion": False, "xla_flags": {}}
# verification["winner"] when the written program is the original compiled with compiler options found
ORIGINAL_WITH_OPTIONS = "original with compiler options"


def text_sha256(text: str) -> str:
    """SHA-256 of a program's text (UTF-8), as records name what was verified and written."""
    return hashlib.sha256(text.encode()).hexdigest()


def keep_original_text(original: str, why: str) -> str:
    """fused.hlo when nothing tuned beats XLA's own compile: the original program, unchanged, after
    comment lines (which XLA's parser skips) telling the user to keep it."""
    return ("// autotune: keep the original program. No tuned program was shown faster than XLA's own\n"
            "// compile of it (default options): " + " ".join(why.split()) + "\n"
            "// Below is the original program, unchanged.\n" + original)


class TuningError(RuntimeError):
    """A tuning run that cannot start or go on (one line, for the CLI)."""


@dataclass
class TuningResult:
    """What a run found: predicted costs, measured costs (when verified) and bookkeeping."""

    best: Any                                           # FusionConfig, or TileConfig for a tile space
    best_cost: float
    default_cost: float
    evaluations: int
    elapsed_s: float
    history: list = field(default_factory=list)         # (elapsed_s, evaluations, best_cost)
    measured_default: Optional[float] = None
    measured_best: Optional[float] = None
    measured_best_config: Any = None
    measured_best_predicted: Optional[float] = None     # the cost model's price of measured_best_config
    verified: list = field(default_factory=list)        # [{rank, predicted_s, measured_s, status, ...}]
    stopped_by: str = "budget"
    kernel_evaluations: int = 0
    verification: dict = field(default_factory=lambda: dict(NOT_VERIFIED))  # what was verified and how
    warnings: list = field(default_factory=list)        # one line each: every failed or skipped step
    fused_text: Optional[str] = None                    # the exact program verified end to end
    # the race's winner timed beside the baseline (end to end, where the evaluator can): verification["paired"]
    paired: Optional[dict] = None
    # end-to-end fusion verification: XLA's own compile of the original program (default options), the
    # baseline the measured speedup is over; keep_original when no emitted program was shown faster
    measured_original: Optional[float] = None
    keep_original: bool = False
    # how the written program compiles, as verified (None: as the verification's path compiles it); the
    # compiler-options stage (autotune/tuning/compiler_options.py) sets it with the XLA_FLAGS text it needs
    compile_options: Optional[dict] = None
    xla_flags_text: Optional[str] = None

    @property
    def verification_failed(self) -> bool:
        """Verification ran and nothing could be verified (the CLI exits with status 3)."""
        return self.verification.get("status") == "failed"

    @property
    def speedup(self) -> float:
        return self.default_cost / self.best_cost if self.best_cost > 0 else float("nan")

    @property
    def measured_baseline(self) -> Optional[float]:
        """What the measured speedup is over: XLA's own compile of the original program where the
        verification timed it (end to end), else the default configuration's measurement."""
        return self.measured_original if self.measured_original is not None else self.measured_default

    @property
    def measured_speedup(self) -> Optional[float]:
        """The verified speedup over the baseline (`measured_baseline`): the paired one where the
        winner was timed beside it and kept (1.0 where the baseline was kept instead), else the
        race's baseline / best."""
        if self.paired is not None and self.paired.get("faster"):
            return self.paired["speedup"]
        if self.measured_baseline and self.measured_best:
            return self.measured_baseline / self.measured_best
        return None

    @property
    def measured_speedup_interval(self) -> Optional[list]:
        """The paired speedup's confidence interval, where the kept winner has one."""
        if self.paired is not None and self.paired.get("faster"):
            return self.paired["speedup_interval"]
        return None

