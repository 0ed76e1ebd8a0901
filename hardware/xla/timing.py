"""End-to-end timing of a compiled program: AutoTVM-style repeats (:class:`TimingOptions`,
:func:`time_compiled`; programs that donate buffers are timed as given, with fresh copies per
execution) and paired timing (:func:`time_paired`, :func:`time_paired_for`: a program's time as a
ratio to a reference timed in alternating blocks beside it, :class:`PreparedRun`/:func:`paired_ratios`,
so that the VM's drift cancels)."""
from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

import numpy as np

from hardware.xla.compile import CompiledHlo


@dataclass(frozen=True)
class TimingOptions:
    """AutoTVM-style timing: ``repeat`` measurements, each the mean of ``number`` runs.

    ``number`` grows (x1.6 at least, or straight to the estimate) until one repeat lasts at least
    ``min_repeat_ms``; ``warmup`` untimed executions come first. The result is the minimum over
    repeats (the noise on these machines is one-sided: interference only makes runs slower).
    """

    number: int = 1
    repeat: int = 5
    min_repeat_ms: float = 20.0
    warmup: int = 2
    max_number: int = 100_000


@dataclass
class TimingResult:
    """Seconds per execution (min over repeats) and every repeat's mean."""

    seconds: float
    repeats: list[float]
    number: int

    @property
    def cv(self) -> float:
        """Coefficient of variation of the repeat means (0 for fewer than two repeats)."""
        if len(self.repeats) < 2:
            return 0.0
        m = statistics.fmean(self.repeats)
        return statistics.stdev(self.repeats) / m if m > 0 else 0.0


def _argument_source(compiled: CompiledHlo, inputs: Sequence[np.ndarray]) -> tuple[Any, list[int]]:
    """(fresh_args, donated): a function giving the device arguments of one execution (the same
    device arrays each time, except fresh copies of the donated parameters, which an execution
    consumes), and the donated parameter numbers."""
    args = compiled.put(inputs)
    donated = sorted(i for i in compiled.donated if i < len(args))

    def fresh_args() -> list[Any]:
        if not donated:
            return args
        new = list(args)
        for i, a in zip(donated, compiled.put([inputs[i] for i in donated])):
            a.block_until_ready()
            new[i] = a
        return new

    return fresh_args, donated


def time_compiled(compiled: CompiledHlo, inputs: Sequence[np.ndarray],
                  options: TimingOptions = TimingOptions(),
                  after_repeat: Optional[Callable[[int], None]] = None) -> TimingResult:
    """Time a compiled module on fixed device-resident inputs (each execution is waited for).

    A module that donates parameters (``input_output_alias``/``buffer_donor``: jax's
    ``donate_argnums``) consumes those buffers at each execution; it runs exactly as given, with
    fresh device copies of the donated inputs made before each execution, outside the timed region
    (each execution is then timed on its own and the times summed). ``after_repeat(i)`` runs,
    untimed, after repeat i (work interleaved with the repeats sees the same machine states).
    """
    execute = compiled.execute
    fresh_args, donated = _argument_source(compiled, inputs)
    args = fresh_args() if not donated else []

    for _ in range(max(0, options.warmup)):
        execute(fresh_args())

    def one_repeat(n: int) -> float:
        if donated:
            total = 0.0
            for _ in range(n):
                run_args = fresh_args()
                t0 = time.perf_counter()
                execute(run_args)
                total += time.perf_counter() - t0
            return total
        t0 = time.perf_counter()
        for _ in range(n):
            execute(args)
        return time.perf_counter() - t0

    number = max(1, int(options.number))
    min_s = max(0.0, options.min_repeat_ms) / 1e3
    # Calibrate `number` (these runs also warm caches further; they are not reported).
    while min_s > 0 and number < options.max_number:
        elapsed = one_repeat(number)
        if elapsed >= min_s:
            break
        per_run = max(elapsed / number, 1e-9)
        number = min(options.max_number,
                     max(math.ceil(number * 1.6), math.ceil(min_s / per_run * 1.05)))
    repeats = []
    for i in range(max(1, options.repeat)):
        repeats.append(one_repeat(number) / number)
        if after_repeat is not None:
            after_repeat(i)
    return TimingResult(min(repeats), repeats, number)


# ---- paired (drift-cancelling) end-to-end timing ------------------------------------------------
#
# On a shared VM the machine's speed drifts over seconds (whole rounds of an interleaved benchmark
# ran 0.7x to 1.46x of their usual speed, with no job on the machine), so two programs' absolute
# times taken seconds apart do not rank them reproducibly. A *paired* timing alternates short blocks
# of a reference program R and a candidate C within milliseconds, R C R C ... R, and takes each
# candidate block's time over the mean of the two reference blocks around it: the drift, slow
# against a pair's few milliseconds, cancels in the ratio.


class PreparedRun:
    """A compiled program bound to device-resident inputs, timed in short blocks of ``number``
    executions (each waited for; donated parameters get fresh copies outside the timed region, as in
    :func:`time_compiled`)."""

    def __init__(self, compiled: CompiledHlo, inputs: Sequence[np.ndarray]):
        self.compiled = compiled
        self._fresh, self._donated = _argument_source(compiled, inputs)
        self._args = self._fresh() if not self._donated else None
        self.number = 1

    def block(self, n: Optional[int] = None, warmup: int = 0) -> float:
        """Seconds per execution over ``n`` (default ``number``) timed executions, after ``warmup``
        untimed ones."""
        execute = self.compiled.execute
        n = max(1, int(self.number if n is None else n))
        for _ in range(max(0, warmup)):
            execute(self._fresh() if self._donated else self._args)
        if self._donated:
            total = 0.0
            for _ in range(n):
                run_args = self._fresh()
                t0 = time.perf_counter()
                execute(run_args)
                total += time.perf_counter() - t0
            return total / n
        args = self._args
        t0 = time.perf_counter()
        for _ in range(n):
            execute(args)
        return (time.perf_counter() - t0) / n

    def calibrate(self, min_block_ms: float, max_number: int = 100_000) -> int:
        """Set (and return) ``number`` so that a block lasts at least ``min_block_ms`` (the smallest
        of three estimates, so that one slow execution does not inflate it)."""
        if min_block_ms <= 0:
            raise ValueError(f"min_block_ms must be > 0, got {min_block_ms}")
        self.block(1, warmup=1)
        per_run = min(self.block(1) for _ in range(3))
        self.number = int(min(max_number, max(1, math.ceil(min_block_ms / 1e3 / max(per_run, 1e-9)))))
        return self.number


@dataclass
class PairedTiming:
    """A candidate's end-to-end time as a ratio to a reference timed beside it (:func:`paired_ratios`)."""

    ratio: float                  # median of the per-pair ratios (candidate / reference)
    ratios: list[float]           # one per candidate block
    seconds: list[float]          # the candidate blocks' seconds per execution
    reference_seconds: list[float]  # the reference blocks' (one more than candidate blocks)


def paired_ratios(reference: PreparedRun, candidate: PreparedRun, pairs: int = 4,
                  warmup: int = 1) -> PairedTiming:
    """Time ``reference`` and ``candidate`` in alternating blocks, R C R C ... R (``pairs`` candidate
    blocks, ``pairs + 1`` reference blocks, each of its run's ``number`` executions after ``warmup``
    untimed ones, so that neither block pays for the other's cache state); each candidate block's
    time over the mean of the reference blocks just before and after it is one ratio. Calibrate both
    runs first (:meth:`PreparedRun.calibrate`): a block of about a millisecond keeps a pair within a
    few milliseconds, where the machine's drift cancels.

    The median of these ratios is biased low on a loaded machine (a block over the mean of two
    catches fewer interruptions than a block over a block: a program against itself measured 0.95
    to 0.97, docs/lab-notes/2026-11-27-paired-verification.md); :func:`neighbour_ratios` of the same blocks is not."""
    if pairs < 1:
        raise ValueError(f"pairs must be >= 1, got {pairs}")
    ref = [reference.block(warmup=warmup)]
    cand: list[float] = []
    for _ in range(pairs):
        cand.append(candidate.block(warmup=warmup))
        ref.append(reference.block(warmup=warmup))
    ratios = [c / ((ref[k] + ref[k + 1]) / 2) for k, c in enumerate(cand)]
    return PairedTiming(float(statistics.median(ratios)), ratios, cand, ref)


def time_paired(reference: CompiledHlo, candidate: CompiledHlo, inputs: Sequence[np.ndarray], *,
                pairs: int = 20, min_block_ms: float = 1.0, warmup: int = 1) -> PairedTiming:
    """A candidate program's end-to-end time relative to a reference program taking the same inputs
    (:func:`paired_ratios` after calibrating both to blocks of ``min_block_ms``)."""
    ref, cand = PreparedRun(reference, inputs), PreparedRun(candidate, inputs)
    ref.calibrate(min_block_ms)
    cand.calibrate(min_block_ms)
    return paired_ratios(ref, cand, pairs, warmup)



def neighbour_ratios(p: PairedTiming) -> list[float]:
    """Two single-block ratios per candidate block of one :func:`paired_ratios` round: over the
    reference block before it, and over the one after it (in order; see :func:`time_paired_for`)."""
    return [c / r for k, c in enumerate(p.seconds) for r in p.reference_seconds[k:k + 2]]


def time_paired_for(reference: CompiledHlo, candidate: CompiledHlo, inputs: Sequence[np.ndarray],
                    seconds: float, *, pairs: int = 4, min_block_ms: float = 1.0, warmup: int = 1,
                    clock: Callable[[], float] = time.perf_counter) -> PairedTiming:
    """:func:`time_paired` for about ``seconds`` of wall time (calibration excluded): rounds of
    :func:`paired_ratios` (``pairs`` candidate blocks each, R C R C ... R) until ``seconds`` are
    spent, at least one round; ``reference_seconds`` holds each round's ``pairs + 1`` reference
    blocks one round after the other. Both programs run on the same input buffers (unless one
    donates them) and the same number of executions per block.

    ``ratios`` here are *single-block* ratios, two per candidate block: over the reference block
    before it and over the one after it (in order). A block over the mean of two is biased low on a
    loaded machine, whose noise is a few long interruptions: the mean of two blocks catches one more
    often than a single block does, so a program paired with itself measured 0.98 (load 10) to
    0.73 (load 14) that way (docs/lab-notes/2026-11-27-paired-verification.md); a single block over a single block has median
    1 for identical programs whatever the noise, and a linear drift still cancels (the two ratios
    err by as much in opposite directions)."""
    if seconds is None or not seconds >= 0:
        raise ValueError(f"seconds must be >= 0, got {seconds}")
    ref, cand = PreparedRun(reference, inputs), PreparedRun(candidate, inputs)
    if not ref._donated and not cand._donated:
        cand._args = ref._args  # the same input buffers: no difference of placement between the two
    # the same executions per block for both (calibrated on the slower): blocks of different lengths
    # catch interruptions differently, which biases the median of their ratios
    cand.number = ref.number = max(ref.calibrate(min_block_ms), cand.calibrate(min_block_ms))
    start = clock()
    ratios: list[float] = []
    secs: list[float] = []
    refs: list[float] = []
    while True:
        p = paired_ratios(ref, cand, pairs, warmup)
        ratios += neighbour_ratios(p)
        secs += p.seconds
        refs += p.reference_seconds
        if clock() - start >= seconds:
            break
    return PairedTiming(float(statistics.median(ratios)), ratios, secs, refs)
