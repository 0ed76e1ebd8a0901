"""Hardware verification of tuned programs: a race of whole programs timed end to end.

XLA:CPU timings on a shared 2-core machine vary about 12% run to run (docs/lab-notes/2026-11-22-xla-evaluator-noise.md), more than
most fusion gains, so timing each candidate once keeps whichever got a lucky run (the winner's
curse). :func:`race_programs` spends a verification budget by this rule:

1. the baseline (when given) is timed first: without it there is no speedup to report;
2. screening: the candidates, in the order given (best predicted first), are timed once each while
   less than ``screen_share`` of the budget is spent; the first candidate is always timed (the
   budget is checked after it, so a budget smaller than two timings still verifies something);
3. the race: the ``finalists`` fastest screened candidates and the baseline are timed again,
   interleaved round robin (the order rotates each round, so that no program always runs right
   after the same one), until the budget is spent or ``max_rounds`` rounds are done, and for at
   least ``min_rounds`` rounds whatever the budget (one timing each keeps a lucky run);
4. a program's estimate is the median of its timings (each timing is itself the minimum over an
   evaluator's repeats, which filters interference within a timing); across interleaved rounds the
   median is robust to one lucky round and one unlucky round alike, where a minimum would keep
   whichever program got the one fast round. The winner is the raced program with the lowest median.
   Fusion and tile verification use the same rule.

The "programs" are any hashable keys that ``time_program`` knows how to time: program texts for
end-to-end fusion verification, encoded tiles for tile verification.

A timing that fails (compile or run error, outputs that differ from the original program's, a
crash) drops that program from the race with its reason; it is never the winner.

Absolute times of interleaved rounds still drift with the machine between the rounds (a 1.25x race
speedup re-measured at 1.00x, docs/lab-notes/2026-11-25-xla-cpu-quiet-machine.md), so where the evaluator can time two programs side by
side (XLA:CPU: ``measure_paired``), the race's winner is confirmed by :func:`confirm_paired`: the
winner and the baseline timed in short alternating blocks, R C R C ... R, each winner block over the
baseline block before it and over the one after it (the drift cancels), for a share of the budget; the speedup is
the median of those ratios with a block-bootstrap confidence interval (:func:`median_interval`), and
the winner is kept only if the whole interval says faster (:attr:`PairedCheck.faster`).
"""
from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Optional

__all__ = ["RaceEntry", "Race", "race_programs", "race_tiles", "PairedCheck", "median_interval", "confirm_paired"]

# time_program(text, first) -> a hardware.base.Measurement; `first` is True for a program's first
# timing (where the caller checks its outputs against the original program's).
TimeProgram = Callable[[str, bool], Any]


@dataclass
class RaceEntry:
    """One program of a race: its successful timings, and the reason it was dropped, if it was."""

    text: str
    timings: list = field(default_factory=list)   # seconds per execution, one per timing
    status: str = "ok"
    extra: dict = field(default_factory=dict)     # the first measurement's extra (e.g. output_error)

    @property
    def ok(self) -> bool:
        return self.status == "ok" and bool(self.timings)

    @property
    def best(self) -> float:
        """The estimate: the median of the timings (inf when dropped or never timed)."""
        return statistics.median(self.timings) if self.ok else math.inf


@dataclass
class Race:
    """What a race measured: every timed program (in first-timing order) and the winner's text."""

    entries: dict                      # text -> RaceEntry
    winner: Optional[str]
    baseline: Optional[str]
    timings: int                       # timings attempted (failed ones included)
    rounds: int                        # race rounds after screening

    def entry(self, text: Optional[str]) -> Optional[RaceEntry]:
        return self.entries.get(text) if text is not None else None


def race_programs(time_program: TimeProgram, texts: Iterable[str], seconds: Optional[float],
                  baseline: Optional[str] = None, *, screen_share: float = 2 / 3, finalists: int = 2,
                  max_rounds: Optional[int] = None, min_rounds: int = 0,
                  clock: Callable[[], float] = time.monotonic) -> Race:
    """Screen `texts` once each, then race the fastest against the baseline (module docstring).

    `texts` may be lazy (a generator): a candidate is produced only when it is about to be timed.
    `seconds=None` is no time limit (then give `max_rounds`).
    """
    start = clock()
    limit = math.inf if seconds is None else float(seconds)

    def elapsed() -> float:
        return clock() - start

    entries: dict = {}
    n = 0

    def time_once(text: str) -> None:
        nonlocal n
        entry = entries.get(text)
        first = entry is None
        if first:
            entry = entries[text] = RaceEntry(text)
        n += 1
        m = time_program(text, first)
        if first:
            entry.extra = dict(getattr(m, "extra", {}) or {})
        if m.ok:
            entry.timings.append(float(m.seconds))
        else:
            entry.status = m.status

    if baseline is not None:
        time_once(baseline)
    screened = 0
    for text in texts:
        if screened and elapsed() >= limit * screen_share:
            break
        if text not in entries:
            time_once(text)
            screened += 1
    ok = [t for t, e in entries.items() if e.ok]
    race = sorted((t for t in ok if t != baseline), key=lambda t: entries[t].best)[:max(1, finalists)]
    if baseline in ok:
        race.append(baseline)
    rounds = 0
    while len(race) > 1 and (rounds < min_rounds or elapsed() < limit) and (max_rounds is None or rounds < max_rounds):
        shift = rounds % len(race)
        for text in race[shift:] + race[:shift]:
            if rounds >= min_rounds and elapsed() >= limit:
                break
            time_once(text)
            if not entries[text].ok:
                race.remove(text)
        rounds += 1
    winner = min(race, key=lambda t: entries[t].best) if race else None
    return Race(entries, winner, baseline, n, rounds)


def race_tiles(kernel: Any, space: Any, tiles: Iterable[Any], evaluator: Any, seconds: Optional[float] = None,
               baseline: Any = None, *, finalists: int = 2, repeats: int = 3) -> Race:
    """Race tiles of one kernel on an evaluator: `race_programs` over encoded tiles (`space.encode`),
    each timed by `evaluator.measure([kernel], [tile])`, finalists and baseline timed `repeats`
    more times, the lowest median wins (`Race.winner` is an encoded tile; `space.decode` it).

    The evaluator's measurement store is bypassed for the race: a stored value repeated is no new
    timing."""
    store = getattr(evaluator, "store", None)
    evaluator.store = None
    try:
        return race_programs(lambda key, first: evaluator.measure([kernel], [space.decode(key)])[0],
                             (space.encode(t) for t in tiles), seconds,
                             baseline=None if baseline is None else space.encode(baseline),
                             finalists=finalists, max_rounds=repeats, min_rounds=repeats)
    finally:
        evaluator.store = store


# ---- paired confirmation of a race's winner --------------------------------------------------

def median_interval(values: "list[float]", confidence: float = 0.95, *, block: Optional[int] = None,
                    resamples: int = 2000, seed: int = 0, min_values: int = 8) -> tuple:
    """A bootstrap confidence interval of the median of ``values``: consecutive runs of ``block``
    values are resampled together (the ratios of one paired round share reference blocks and the
    machine state, and a load phase lasts longer than a round, so single values are not
    independent; default: 8, one round of 4 pairs, or a twentieth of the values if that is more),
    ``resamples`` times, and the interval is the central ``confidence`` of the resampled medians.
    Fewer than ``min_values`` values: (None, None), no interval (nothing can be shown from them)."""
    import numpy as np
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    vals = np.asarray([float(v) for v in values], dtype=float)
    if len(vals) < max(2, min_values) or not np.all(np.isfinite(vals)):
        return None, None
    block = max(8, len(vals) // 20) if block is None else int(block)
    block = max(1, min(block, len(vals) // 2))
    starts = np.arange(0, len(vals), block)
    chunks = [vals[i:i + block] for i in starts]
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(chunks), size=(resamples, len(chunks)))
    meds = np.array([np.median(np.concatenate([chunks[j] for j in row])) for row in picks])
    tail = (1 - confidence) / 2 * 100
    return float(np.percentile(meds, tail)), float(np.percentile(meds, 100 - tail))


@dataclass
class PairedCheck:
    """A candidate timed beside the baseline (:func:`confirm_paired`): ratios candidate / baseline
    (block over neighbouring block); ``ratio`` their median, ``low``/``high`` its confidence interval (None: too few
    pairs, or none); ``status`` "ok" or why the timing failed or did not run."""

    status: str
    ratios: list
    confidence: float
    seconds: float                     # wall seconds the check took
    requests: int                      # paired timings asked of the evaluator
    ratio: Optional[float] = None
    low: Optional[float] = None
    high: Optional[float] = None

    @property
    def faster(self) -> bool:
        """The whole interval below 1: the candidate is faster than the baseline beyond the noise."""
        return self.status == "ok" and self.high is not None and self.high < 1.0

    @property
    def skipped(self) -> bool:
        """Not run at all ("skipped: <why>", e.g. no hardware budget left): nothing was timed beside the baseline."""
        return self.status.startswith("skipped")

    @property
    def speedup(self) -> Optional[float]:
        return 1.0 / self.ratio if self.ratio else None

    @property
    def speedup_interval(self) -> Optional[list]:
        return [1.0 / self.high, 1.0 / self.low] if self.low and self.high else None

    def as_dict(self) -> dict:
        return {"status": self.status, "ratios": len(self.ratios), "ratio": self.ratio,
                "ratio_interval": [self.low, self.high] if self.low is not None else None,
                "speedup": self.speedup, "speedup_interval": self.speedup_interval,
                "confidence": self.confidence, "faster": self.faster, "seconds": round(self.seconds, 3),
                "requests": self.requests}


def confirm_paired(measure_paired: Callable[[float], Any], seconds: Optional[float], *, confidence: float = 0.95,
                   default_seconds: float = 2.0, min_request_s: float = 0.05, block: Optional[int] = None,
                   clock: Callable[[], float] = time.monotonic) -> PairedCheck:
    """Time a candidate beside the baseline for ``seconds`` (None: ``default_seconds``).

    ``measure_paired(s)`` times for about ``s`` seconds and answers a Measurement whose
    ``extra["ratios"]`` are ratios candidate / baseline of neighbouring blocks (``XlaEvaluator.measure_paired``);
    it is called again while more than ``min_request_s`` of the budget is left (an evaluator may
    cap one request's length), at least once if any budget is left. A failed request ends the check
    with its status (the ratios so far are kept in ``ratios`` but not used); no budget left at all:
    status "skipped: no hardware budget left"."""
    start = clock()
    limit = default_seconds if seconds is None else float(seconds)
    ratios: list = []
    status = "ok"
    n = 0
    while True:
        left = limit - (clock() - start)
        if n == 0 and left <= 0:
            status = "skipped: no hardware budget left for the paired timing"
            break
        if n and left <= min_request_s:
            break
        m = measure_paired(left)
        n += 1
        if not m.ok:
            status = m.status
            break
        got = list((getattr(m, "extra", {}) or {}).get("ratios") or [])
        if not got:
            status = "failed: the paired timing returned no ratios"
            break
        ratios += [float(r) for r in got]
    check = PairedCheck(status, ratios, confidence, clock() - start, n)
    if status == "ok" and ratios:
        check.ratio = float(statistics.median(ratios))
        check.low, check.high = median_interval(ratios, confidence, block=block)
    return check
