"""Tuner callbacks: progress bar, jsonl log, checkpoints and early stopping as objects users pass; the
one way to hook into a search.

The Tuner (autotune/tuning/tuner.py) calls, in order: `on_start(tuner)` once before the first batch;
for every batch, `on_config(tuner, cfg, cost)` for each configuration priced for the first time (e.g.
to charge a simulated hardware trial, or to record what was measured), then `on_batch(tuner, info)`
with a `BatchInfo`; `on_end(tuner, result)` once when the search stops (before hardware verification).
A callback stops the search with `tuner.stop(reason)`; the reason becomes `TuningResult.stopped_by`.
The Tuner adds ProgressBar, JsonlLogger and Checkpointer itself from its options (`progress`,
`out_dir`: autotune/tuning/options.py); anything else (EarlyStopping, FunctionCallback, a class of
your own) goes in `Tuner(..., callbacks=[...])`.
"""
from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

__all__ = ["BatchInfo", "Callback", "ProgressBar", "JsonlLogger", "Checkpointer", "EarlyStopping",
           "FunctionCallback"]


@dataclass(frozen=True)
class BatchInfo:
    """Where the search stands after a priced batch (`Callback.on_batch`; one line of log.jsonl, in this order)."""

    t: float              # seconds searched, resumed sessions included
    evaluations: int      # configurations priced so far (each once)
    batch: int            # configurations in this batch
    new: int              # of them, configurations not priced before
    batch_best_s: float   # the batch's lowest cost
    best_s: float         # the lowest cost so far
    kernels_priced: int   # kernels (tiles, layout configurations) the cost model priced so far

    def as_dict(self) -> dict:
        """The fields in order (log.jsonl's keys)."""
        return dataclasses.asdict(self)


class Callback:
    """Base class: every hook does nothing; override the ones you need."""

    def on_start(self, tuner: Any) -> None:
        """Before the first batch (after resuming, when the run resumes)."""

    def on_config(self, tuner: Any, cfg: Any, cost: float) -> None:
        """For each configuration priced for the first time, after its batch is priced (before on_batch)."""

    def on_batch(self, tuner: Any, info: BatchInfo) -> None:
        """After every priced batch."""

    def on_end(self, tuner: Any, result: Any) -> None:
        """When the search stops, interrupted or not (before hardware verification)."""


class FunctionCallback(Callback):
    """Plain functions as a callback: `on_batch(info)` after every batch, `on_config(cfg, cost)` for
    each configuration priced for the first time (either may be None)."""

    def __init__(self, on_batch: Optional[Callable[[BatchInfo], None]] = None,
                 on_config: Optional[Callable[[Any, float], None]] = None):
        self.batch_fn = on_batch
        self.config_fn = on_config

    def on_config(self, tuner: Any, cfg: Any, cost: float) -> None:
        if self.config_fn is not None:
            self.config_fn(cfg, cost)

    def on_batch(self, tuner: Any, info: BatchInfo) -> None:
        if self.batch_fn is not None:
            self.batch_fn(info)


class JsonlLogger(Callback):
    """One JSON line per batch, appended to `path` (log.jsonl of the run folder)."""

    def __init__(self, path: "str | Path"):
        self.path = Path(path)
        self._file: Any = None

    def on_start(self, tuner: Any) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "a")

    def on_batch(self, tuner: Any, info: BatchInfo) -> None:
        if self._file is not None:
            self._file.write(json.dumps({**info.as_dict(), "t": round(info.t, 4)}) + "\n")

    def flush(self) -> None:
        if self._file is not None:
            self._file.flush()

    def on_end(self, tuner: Any, result: Any) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class Checkpointer(Callback):
    """`tuner.save_checkpoint()` at the start, every `every_s` seconds, and at the end (Ctrl-C too)."""

    def __init__(self, every_s: float = 5.0, flush: Optional[Callable[[], None]] = None,
                 clock: Callable[[], float] = time.monotonic):
        self.every_s = float(every_s)
        self.flush = flush   # e.g. the jsonl logger's: the log on disk matches the checkpoint
        self.clock = clock
        self._last = 0.0

    def on_start(self, tuner: Any) -> None:
        tuner.save_checkpoint()
        self._last = self.clock()

    def on_batch(self, tuner: Any, info: BatchInfo) -> None:
        if self.clock() - self._last > self.every_s:
            tuner.save_checkpoint()
            if self.flush is not None:
                self.flush()
            self._last = self.clock()

    def on_end(self, tuner: Any, result: Any) -> None:
        tuner.save_checkpoint()


class EarlyStopping(Callback):
    """Stop when the best cost has not improved by more than `min_delta` (relative) for `patience`
    evaluations (configurations priced), as AutoTVM's early_stopping and Keras' EarlyStopping."""

    def __init__(self, patience: int, min_delta: float = 0.0):
        if patience < 1:
            raise ValueError("patience must be >= 1 evaluation")
        self.patience = int(patience)
        self.min_delta = float(min_delta)
        self._best = float("inf")
        self._at = 0

    def on_start(self, tuner: Any) -> None:
        self._best, self._at = tuner.best_cost, tuner.evaluations

    def on_batch(self, tuner: Any, info: BatchInfo) -> None:
        best = info.best_s
        if best < self._best * (1.0 - self.min_delta):
            self._best, self._at = best, info.evaluations
        elif info.evaluations - self._at >= self.patience:
            tuner.stop("early_stopping")


class ProgressBar(Callback):
    """A tqdm bar over the search budget (none when stderr is not a terminal, or without tqdm)."""

    def __init__(self) -> None:
        self._bar: Any = None

    def on_start(self, tuner: Any) -> None:
        try:
            from tqdm.auto import tqdm
        except ImportError:  # pragma: no cover
            return
        total = tuner.budget.seconds
        # disable=None: no bar when stderr is not a terminal (logs, CI)
        self._bar = tqdm(total=round(total, 1) if total else None, unit="s", leave=False, dynamic_ncols=True,
                         disable=None, mininterval=0.25,
                         bar_format="{l_bar}{bar}| {n:.0f}/{total:.0f}s [{remaining} left{postfix}]")

    def on_batch(self, tuner: Any, info: BatchInfo) -> None:
        bar = self._bar
        if bar is None:
            return
        el = tuner.budget.elapsed
        bar.n = round(min(el, bar.total or el), 1)
        rate = info.evaluations / max(info.t, 1e-9)
        bar.set_postfix_str(f"best {info.best_s * 1e3:.4g} ms, x{tuner.default_cost / info.best_s:.3f} vs "
                            f"default, {rate:,.0f} evals/s", refresh=False)
        bar.refresh()

    def on_end(self, tuner: Any, result: Any) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
