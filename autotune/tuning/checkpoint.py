"""A tuning run's checkpoint: what identifies the run (fingerprints of the program and the options
that matter), and best_config.json and checkpoint.pkl written atomically, read back and checked
before a run resumes. The Tuner (autotune/tuning/tuner.py) decides when to save and what to restore."""
from __future__ import annotations

import os
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from autotune.compiler.fusion import FusionSpace
from autotune.compiler.layouts import LayoutSpace
from autotune.tuning.result import TuningError, text_sha256

if TYPE_CHECKING:
    from search.base import Strategy

CHECKPOINT = "checkpoint.pkl"
# Options whose change makes a checkpoint another run (Tuner.resume compares them).
FINGERPRINT_LABELS = {"program": "program", "target": "--target", "cost_model": "--cost-model",
                      "strategy": "--strategy", "evaluator": "--evaluator", "seed": "--seed",
                      "strategy_params": "--strategy-param", "transfer": "--transfer"}
# What a checkpoint made before an option entered the fingerprint ran with (the option's neutral value).
FINGERPRINT_DEFAULTS = {"strategy_params": "none", "transfer": "none"}


def program_fingerprint(space: FusionSpace) -> str:
    """sha256 of the normalized program text (as parsed and printed back, without metadata)."""
    return text_sha256(space.program.module.to_text(metadata=False))


def space_fingerprint(space: Any) -> str:
    """What a checkpoint's "program" entry holds: the program's sha256, or a tile space's kernel hash."""
    if isinstance(space, (FusionSpace, LayoutSpace)):
        return program_fingerprint(space)
    return f"kernel:{space.kernel.hash}"


def edge_count(space: Any) -> Optional[int]:
    """A fusion space's edge count, which a checkpoint records and checks (None for other spaces)."""
    return space.n_edges if isinstance(space, FusionSpace) else None


def save_best_config(out_dir: Path, space: Any, best: Any, best_cost: float, evaluations: int) -> None:
    """best_config.json of a fusion or layout space (a tile space has none)."""
    if isinstance(space, (FusionSpace, LayoutSpace)):
        from autotune.tuning.config_io import save_config
        save_config(space, best, out_dir / "best_config.json",
                    {"predicted_cost_s": best_cost, "evaluations": evaluations})


@dataclass(frozen=True)
class SearchProgress:
    """What a search has found and spent so far: the part of a checkpoint that is the Tuner's."""

    best: Any             # the best configuration (decoded)
    best_cost: float
    default_cost: float
    evaluations: int      # configurations priced
    history: list         # [(seconds, evaluations, best cost)]
    memo: dict            # the pricer's memoized costs
    elapsed: float        # seconds searched, earlier sessions included
    top: list             # the Tuner's heap of the best distinct predictions
    overhead: float       # seconds of the budget spent outside the search, earlier sessions included


def checkpoint_state(space: Any, strategy: "Strategy", fingerprint: dict, progress: SearchProgress) -> dict:
    """What checkpoint.pkl holds (version 2): the run's fingerprint, the strategy's state, the best
    configuration (encoded), the memoized costs, the top predictions and the budget spent."""
    p = progress
    return {
        "version": 2, "n_edges": edge_count(space), "fingerprint": fingerprint,
        "strategy": strategy.state_dict(),
        "strategy_name": strategy.name,
        "best": space.encode(p.best), "best_cost": p.best_cost, "default_cost": p.default_cost,
        "evaluations": p.evaluations, "history": p.history, "memo": p.memo,
        "elapsed": p.elapsed, "top": p.top, "overhead": p.overhead,
    }


def write_checkpoint(out_dir: Path, state: dict) -> None:
    """checkpoint.pkl into out_dir, atomically (written aside, then renamed over the old one)."""
    tmp = out_dir / (CHECKPOINT + ".tmp")
    with open(tmp, "wb") as f:
        pickle.dump(state, f, protocol=pickle.HIGHEST_PROTOCOL)
    os.replace(tmp, out_dir / CHECKPOINT)


def read_checkpoint(directory: "str | Path") -> dict:
    """The checkpoint of a run folder (TuningError when missing or unreadable)."""
    path = Path(directory) / CHECKPOINT
    try:
        with open(path, "rb") as f:
            state = pickle.load(f)
    except FileNotFoundError:
        raise TuningError(f"{path}: no checkpoint to resume from") from None
    except Exception as e:  # corrupt pickle
        raise TuningError(f"{path}: unreadable checkpoint ({type(e).__name__})") from None
    if not isinstance(state, dict) or "strategy" not in state:
        raise TuningError(f"{path}: unreadable checkpoint (not an autotune checkpoint)")
    return state


def check_fingerprint(path: Path, state: dict, fingerprint: dict, n_edges: Optional[int]) -> None:
    """A checkpoint of another program, target or search: one line naming what differs."""
    have = state.get("fingerprint")
    if have is None:  # a version-1 checkpoint: only its edge count is known, which proves nothing
        raise TuningError(f"{path}: checkpoint of an older autotune without a fingerprint of its program "
                          "and options; it cannot be checked against this run (start a new one)")
    for key, want in fingerprint.items():
        got = have.get(key, FINGERPRINT_DEFAULTS.get(key))
        if got == want:
            continue
        label = FINGERPRINT_LABELS.get(key, key)
        if key == "program":
            raise TuningError(f"{path}: checkpoint is for another program (sha256 {str(got)[:12]}..., "
                              f"this one {str(want)[:12]}...)")
        raise TuningError(f"{path}: checkpoint was made with {label} {got}, not {want}")
    if state.get("n_edges") != n_edges:
        raise TuningError(f"{path}: checkpoint is for another program or target "
                          f"({state.get('n_edges')} edges, this one has {n_edges})")


def remaining_search_seconds(path: Path, used: float, total: float, overhead_s: float) -> float:
    """The search budget of a resumed session: what the earlier sessions (`used`, their overheads
    included) left of `total` search seconds plus this session's own overhead, less that overhead
    (TuningError when nothing is left)."""
    left = total + overhead_s - used      # of this session's budget, its own overhead included
    if left - overhead_s <= 0:
        raise TuningError(f"{path}: the run already used {used:.1f}s of its {total + overhead_s:g}s "
                          f"budget" + (f" (this session needs {overhead_s:.1f}s outside the search)"
                                       if overhead_s else "")
                          + "; pass a larger --budget to continue it")
    return left - overhead_s
