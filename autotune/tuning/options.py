"""The Tuner's options as two dataclasses, one for the search and one for hardware verification, so that
the Python API and the command line (autotune/cli/app.py builds them from its flags) say the same thing
in the same words. Invalid values fail when an options object is made, with one line saying which."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from autotune.tuning.result import TuningError

__all__ = ["TunerOptions", "VerifyOptions"]


@dataclass(frozen=True)
class TunerOptions:
    """How the Tuner searches (autotune/tuning/tuner.py); every field has the default a bare Tuner uses."""

    batch_size: int = 64                       # configurations asked of the strategy per batch (fewer near the budget)
    max_evaluations: Optional[int] = None      # stop after this many configurations priced (None: the budget only)
    include_default: bool = True               # False: the default is priced (the speedup's baseline) but no candidate
    out_dir: "str | Path | None" = None        # run folder: log.jsonl, checkpoint.pkl, best_config.json (None: none)
    checkpoint_every_s: float = 5.0            # seconds between checkpoints into out_dir
    progress: bool = True                      # a progress bar on a terminal
    fingerprint: Optional[dict] = None         # what a checkpoint must match to resume (None: program and target)
    overhead_s: float = 0.0                    # seconds of the same budget spent outside the search (start-up,
                                               # verification, outputs): a resumed run continues with what is left


@dataclass(frozen=True)
class VerifyOptions:
    """How the Tuner verifies its top predictions on hardware after the search (autotune/tuning/verifier.py)."""

    hw_budget: Any = None                      # wall clock for verification: seconds, "30s", a Budget (None: no limit)
    top_k: int = 10                            # distinct best predictions kept and verified
    rounds: int = 5                            # race rounds after screening (end to end); a tile race's repeats
    finalists: int = 2                         # candidates raced against the default after screening
    paired_share: float = 0.4                  # share of the hardware budget that times the race's winner beside
                                               # the baseline (evaluators that time two programs side by side)
    paired_confidence: float = 0.95            # level of the paired speedup's interval
    reference_text: Optional[str] = None       # the original program (outputs are checked against it; None: as parsed)

    def __post_init__(self) -> None:
        if not 0 < self.paired_share < 1:
            raise TuningError(f"paired_share must be in (0, 1), got {self.paired_share}")
        if not 0 < self.paired_confidence < 1:
            raise TuningError(f"paired_confidence must be in (0, 1), got {self.paired_confidence}")
        object.__setattr__(self, "paired_share", float(self.paired_share))
        object.__setattr__(self, "paired_confidence", float(self.paired_confidence))
