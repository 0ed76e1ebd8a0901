"""A search over a target's own compiler options (``Target.compiler_options``) for one program.

:func:`search_options` enumerates candidate settings - each option's non-default values alone (with what
the option ``requires``), then, while the hardware budget allows, every pair of the best singles that
were faster - and for each one:

1. checks its outputs against XLA's default compile of the same program on the same inputs
   (``ProgramEvaluator.check_compile_options``: the reference is compiled with XLA's defaults, never
   with the candidate's options; an option that changes numerics must stay as accurate as the default,
   :func:`hardware.xla.accuracy.option_output_check`); a mismatch, a compile or runtime failure ends it;
2. times the survivors paired against the default compile (``measure_paired`` of the program against
   itself, the candidate with its flags, the reference with ``reference_options`` = XLA's defaults): one
   first timing each;
3. races the best two (by first timing, faster than the default) again, and keeps the best of those
   second timings only if its speedup's 95% interval lies above 1 (:func:`confirm_paired`, a block
   bootstrap of the paired ratios); the first timings choose, the second ones judge, so that the luck
   of the first round does not crown an option. Else XLA's defaults are kept, said in one line.

The result (:class:`OptionsSearchResult`) carries the chosen flags, the ``XLA_FLAGS`` value that
reproduces them (:func:`xla_flags_line`), the speedup and its interval, and every candidate.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

from autotune.compiler.targets.base import CompilerOption, Target
from autotune.tuning.verification import PairedCheck, confirm_paired
from hardware.base import ProgramEvaluator

__all__ = ["OptionCandidate", "OptionsSearchResult", "OptionsPrior", "search_options", "candidate_settings",
           "xla_flags_line", "parse_xla_flags", "DEFAULT_REFERENCE_OPTIONS", "record_options", "options_prior",
           "options_namespace", "trials_to_reach", "FAILED_LOG_SPEEDUP"]

# The reference of every paired timing: XLA's own compile of the program (its fusion on, no options).
DEFAULT_REFERENCE_OPTIONS: dict = {"disable_fusion": False, "xla_flags": {}}
RACE_SHARE = 0.3          # of the budget kept for the race of the best two (their second timings)
MAX_FIRST_S = 2.0         # the longest first timing of one candidate
MIN_TIMING_S = 0.1        # no paired timing shorter than this is started
PAIRED_FROM = 3           # pairs are formed from at most this many of the best faster singles


@dataclass
class OptionCandidate:
    """One setting tried: ``name`` (``option=value`` joined by ``+``), the compile options it sets
    (``flags``: the options and what they require), and what became of it."""

    name: str
    flags: dict
    phase: str = "single"                        # "single" or "pair"
    status: str = "not run"                      # "ok" (timed), a failure, "output_mismatch: ...", "skipped: ..."
    output_error: Optional[float] = None         # max error against the default compile's outputs
    identical: Optional[bool] = None             # outputs equal to the default's bit for bit
    speedup: Optional[float] = None              # first timing: default time / candidate time
    speedup_interval: Optional[tuple] = None     # its 95% interval
    confirmed_speedup: Optional[float] = None    # the race's second timing (best two only)
    confirmed_interval: Optional[tuple] = None
    confirmed_check: Optional[dict] = None       # that second timing's PairedCheck, as a dict
    timed_s: float = 0.0                         # seconds of paired timing spent on it
    chosen: bool = False

    def as_dict(self) -> dict:
        iv = self.speedup_interval
        civ = self.confirmed_interval
        return {"name": self.name, "flags": dict(self.flags), "xla_flags": xla_flags_line(self.flags),
                "phase": self.phase, "status": self.status, "output_error": self.output_error,
                "identical_outputs": self.identical, "speedup": _r(self.speedup),
                "speedup_interval": [_r(iv[0]), _r(iv[1])] if iv else None,
                "confirmed_speedup": _r(self.confirmed_speedup),
                "confirmed_interval": [_r(civ[0]), _r(civ[1])] if civ else None,
                "timed_s": round(self.timed_s, 3), "chosen": self.chosen}


@dataclass
class OptionsSearchResult:
    """What :func:`search_options` found: ``flags`` (empty: keep XLA's defaults), the ``XLA_FLAGS`` value
    that reproduces them, the confirmed speedup over the default compile and its interval, every
    candidate, and the one-line ``message``."""

    target: str
    flags: dict
    xla_flags: str
    speedup: Optional[float]
    speedup_interval: Optional[tuple]
    candidates: list[OptionCandidate] = field(default_factory=list)
    budget_s: Optional[float] = None
    elapsed_s: float = 0.0
    message: str = ""
    trace: list = field(default_factory=list)    # (trial, best first-timing speedup so far), one per trial
    prior_programs: int = 0                      # programs the prior had learned from (0: no prior)

    @property
    def keep_defaults(self) -> bool:
        return not self.flags

    def as_dict(self) -> dict:
        iv = self.speedup_interval
        return {"target": self.target, "keep_defaults": self.keep_defaults, "flags": dict(self.flags),
                "xla_flags": self.xla_flags, "XLA_FLAGS": f"XLA_FLAGS='{self.xla_flags}'" if self.flags else None,
                "speedup": _r(self.speedup), "speedup_interval": [_r(iv[0]), _r(iv[1])] if iv else None,
                "budget_s": self.budget_s, "elapsed_s": round(self.elapsed_s, 2), "message": self.message,
                "prior_programs": self.prior_programs, "trace": [[t, _r(b)] for t, b in self.trace],
                "candidates": [c.as_dict() for c in self.candidates]}


@dataclass(frozen=True)
class OptionsPrior:
    """What earlier options searches on this machine found, per setting (``name`` as
    :class:`OptionCandidate` names it): ``scores[name] = (mean log speedup, programs timed)`` over the
    programs it was timed on (a failed check counts as a loss of :data:`FAILED_LOG_SPEEDUP`), and how many
    programs there were. Settings are ordered by their mean shrunk toward 0 by ``n / (n + 1)``, so that one
    lucky program does not put a setting first."""

    scores: dict
    programs: int

    @classmethod
    def from_values(cls, values: dict, programs: int) -> "OptionsPrior":
        """The prior of ``values[name]``: the log speedups of a setting over the programs it was timed on."""
        return cls({k: (sum(v) / len(v), len(v)) for k, v in values.items()}, programs)

    def score(self, name: str) -> float:
        mean, n = self.scores.get(name, (0.0, 0))
        return mean * n / (n + 1)

    def order(self, candidates: Sequence[OptionCandidate]) -> list[OptionCandidate]:
        """Best-known first; unknown settings (score 0) between those that won and those that lost; ties
        keep the declared order."""
        return sorted(candidates, key=lambda c: -self.score(c.name))

    def winning_pairs(self) -> list[str]:
        """Pairs (``a+b``) faster on average where they were timed, best first."""
        return [n for n in sorted(self.scores, key=lambda n: -self.score(n)) if "+" in n and self.score(n) > 0]


FAILED_LOG_SPEEDUP = -0.1   # a setting whose outputs or compile failed, in the prior: as if 10% slower
OPTIONS_NAMESPACE = "options"


def options_namespace(evaluator: ProgramEvaluator) -> str:
    """The store namespace of options-search results: ``options/<evaluator>/<version>``."""
    return f"{OPTIONS_NAMESPACE}/{evaluator.name}/{evaluator.version}"


def record_options(store: Any, evaluator: ProgramEvaluator, target: str, program_sha: str,
                   result: OptionsSearchResult) -> int:
    """Commit what the search found on this program to the machine-keyed store (autotune/tuning/store.py),
    one row per setting tried: ``seconds`` is the setting's time relative to the program without it
    (1 / speedup, first timing), ``extra`` its speedup, interval and status; a failed check is a failed row.
    Returns the rows written."""
    from hardware.base import Measurement
    items = []
    for c in result.candidates:
        if c.status.startswith("skipped"):
            continue
        if c.status == "ok" and c.speedup:
            m = Measurement(1.0 / c.speedup, extra={"speedup": c.speedup, "interval": c.speedup_interval,
                                                    "confirmed_speedup": c.confirmed_speedup})
        else:
            m = Measurement.failure(c.status)
        items.append((target, options_namespace(evaluator), program_sha, c.name, m))
    return store.put_many(items, machine=evaluator.machine) if items else 0


def options_prior(store: Any, evaluator: ProgramEvaluator, target: str,
                  exclude_program: Optional[str] = None) -> Optional[OptionsPrior]:
    """The :class:`OptionsPrior` of every program searched on this evaluator's machine (but
    ``exclude_program``), or None when there is none."""
    import math
    per: dict = {}
    programs = set()
    for row in store.iter_rows(target=target, namespace=options_namespace(evaluator), machine=evaluator.machine):
        if row.kernel_hash == exclude_program:
            continue
        programs.add(row.kernel_hash)
        value = math.log(1.0 / row.seconds) if row.ok and row.seconds and row.seconds > 0 else FAILED_LOG_SPEEDUP
        per.setdefault(row.tile, []).append(value)
    if not programs:
        return None
    return OptionsPrior.from_values(per, len(programs))


def trials_to_reach(trace: Sequence, final: Optional[float], share: float = 0.95) -> Optional[int]:
    """The first trial of a search's ``trace`` whose best speedup so far holds ``share`` of the gain of
    ``final`` (the speedup the search kept: ``best - 1 >= share * (final - 1)``); None where the search
    kept nothing faster or never got there."""
    if final is None or final <= 1:
        return None
    return next((int(t) for t, b in trace if b - 1 >= share * (final - 1)), None)


def _r(x: Optional[float]) -> Optional[float]:
    return None if x is None else round(float(x), 4)


def _flag_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def xla_flags_line(flags: dict) -> str:
    """The ``XLA_FLAGS`` value that sets these DebugOptions: ``--name=value`` pairs separated by spaces;
    booleans ``true``/``false``, enums by their full names (``CPU_OPT_PRESET_FAST_COMPILE``), repeated
    enums as a comma-separated list of names (no spaces), as XLA's flag parser reads them."""
    for k, v in flags.items():
        if " " in _flag_text(v):
            raise ValueError(f"{k}={v!r}: an XLA_FLAGS value cannot hold a space")
    return " ".join(f"--{k}={_flag_text(v)}" for k, v in flags.items())


def parse_xla_flags(line: str) -> dict:
    """The DebugOptions of an ``XLA_FLAGS`` value written by :func:`xla_flags_line` (for ``compile_hlo``)."""
    out: dict = {}
    for part in line.split():
        if not part.startswith("--") or "=" not in part:
            raise ValueError(f"{part!r} is not --name=value")
        k, v = part[2:].split("=", 1)
        value: Any = v
        if v in ("true", "false"):
            value = v == "true"
        else:
            try:
                value = int(v)
            except ValueError:
                pass
        out[k] = value
    return out


def _value_name(value: Any) -> str:
    return _flag_text(value)


def candidate_settings(options: Sequence[CompilerOption]) -> list[OptionCandidate]:
    """Each option's non-default values alone, in the declared order, with what they require."""
    return [OptionCandidate(f"{o.name}={_value_name(v)}", o.flags(v))
            for o in options for v in o.values[1:]]


def _joined(a: OptionCandidate, b: OptionCandidate) -> Optional[OptionCandidate]:
    """Two settings together, or None where they set one option two ways (or are one option's values)."""
    flags = dict(a.flags)
    for k, v in b.flags.items():
        if k in flags and (flags[k] != v or type(flags[k]) is not type(v)):
            return None
        flags[k] = v
    if flags == a.flags or flags == b.flags:
        return None
    return OptionCandidate(f"{a.name}+{b.name}", flags, phase="pair")


def _speedup_of(check: PairedCheck) -> tuple:
    """(speedup, its interval as a tuple) of a paired check (`PairedCheck.speedup`, `.speedup_interval`)."""
    iv = check.speedup_interval
    return check.speedup, tuple(iv) if iv else None


class _Run:
    """The state of one search: the budget's clock, the evaluator, the program."""

    def __init__(self, text: str, evaluator: ProgramEvaluator, budget_s: float, clock: Callable[[], float],
                 log: Callable[[str], None], base: dict, reference_text: Optional[str]):
        self.text, self.ev, self.budget_s, self.clock, self.log = text, evaluator, float(budget_s), clock, log
        self.base, self.reference_text = base, reference_text
        self.start = clock()
        self.check_s = 0.0  # the longest output check so far (a compile and two runs)
        self.trace: list = []  # (trial, best first-timing speedup so far) after each timed candidate

    def compile_options(self, cand: OptionCandidate) -> dict:
        """How the candidate compiles: the program's base options with the candidate's flags on top."""
        return {"disable_fusion": bool(self.base.get("disable_fusion", False)),
                "xla_flags": {**dict(self.base.get("xla_flags") or {}), **cand.flags}}

    def left(self) -> float:
        return self.budget_s - (self.clock() - self.start)

    def time_paired(self, cand: OptionCandidate, seconds: float) -> PairedCheck:
        opts = self.compile_options(cand)

        def one(s: float) -> Any:
            return self.ev.measure_paired(self.text, self.text, s, disable_fusion=opts["disable_fusion"],
                                          xla_flags=opts["xla_flags"], reference_options=dict(self.base))
        t0 = self.clock()
        check = confirm_paired(one, seconds, clock=self.clock)
        cand.timed_s += self.clock() - t0
        return check

    def first(self, cand: OptionCandidate, seconds: float, reserve: float) -> None:
        """Check a candidate's outputs, then time it once (if the budget beyond ``reserve`` allows); a
        candidate checked is one trial (``trace``), timed or not."""
        if self.left() - reserve < self.check_s + MIN_TIMING_S:
            cand.status = "skipped: no hardware budget left"
            return
        t0 = self.clock()
        m = self.ev.check_compile_options(self.text, dict(cand.flags), base_options=dict(self.base),
                                          reference_text=self.reference_text)
        self.check_s = max(self.check_s, self.clock() - t0)
        extra = m.extra or {}
        err = extra.get("error")
        cand.output_error = float(err) if isinstance(err, (int, float)) else None
        cand.identical = extra.get("identical")
        s = min(seconds, self.left() - reserve)
        if not m.ok:
            cand.status = m.status
        elif s < MIN_TIMING_S:
            cand.status = "skipped: no hardware budget left for its timing (outputs checked)"
        else:
            check = self.time_paired(cand, s)
            cand.status = check.status
            if check.status == "ok":
                cand.speedup, cand.speedup_interval = _speedup_of(check)
                if cand.speedup is None:
                    cand.status = "failed: no paired ratio"
        best = self.trace[-1][1] if self.trace else 1.0
        self.trace.append((len(self.trace) + 1, max(best, cand.speedup or 0.0)))
        self.log(f"{cand.name}: {cand.status}" + (f", {cand.speedup:.3f}x" if cand.speedup else ""))


def search_options(hlo_text: str, target: Target, evaluator: ProgramEvaluator, budget_s: float, *,
                   first_seconds: Optional[float] = None, clock: Callable[[], float] = time.monotonic,
                   log: Optional[Callable[[str], None]] = None, base_options: Optional[dict] = None,
                   reference_text: Optional[str] = None,
                   prior: Optional[OptionsPrior] = None) -> OptionsSearchResult:
    """Search ``target``'s compiler options for the program ``hlo_text`` within ``budget_s`` seconds of
    hardware time (see the module doc). ``first_seconds``: each candidate's first paired timing (default:
    the budget shared among the singles, at most :data:`MAX_FIRST_S`). ``base_options``
    (``disable_fusion``, ``xla_flags``; default XLA's defaults): how the program compiles without the
    search's options (a tuned fusion configuration's emission compiles with fusion off); candidates add
    their flags to it, and each is timed beside the program compiled with it. ``reference_text``: the
    program whose outputs (XLA's default compile) candidates must match (default: ``hlo_text``).
    ``prior`` (:func:`options_prior`): what searches of other programs on this machine found; the
    settings are tried best-known first, with the pairs that won elsewhere among them. Raises ValueError
    for a target that declares no compiler options, or a budget that is not positive."""
    options = tuple(target.compiler_options)
    if not options:
        raise ValueError(f"target {target.name!r} declares no compiler options to search")
    if not budget_s or budget_s <= 0:
        raise ValueError(f"the options search needs a positive hardware budget, got {budget_s}")
    say = log or (lambda s: None)
    base = dict(DEFAULT_REFERENCE_OPTIONS if base_options is None else base_options)
    base.setdefault("disable_fusion", False)
    base["xla_flags"] = dict(base.get("xla_flags") or {})
    run = _Run(hlo_text, evaluator, budget_s, clock, say, base, reference_text)
    singles = candidate_settings(options)
    reserve = RACE_SHARE * budget_s
    first_s = first_seconds if first_seconds is not None else \
        max(MIN_TIMING_S, min(MAX_FIRST_S, (budget_s - reserve) / (2 * (len(singles) + 1))))
    known_pairs: list[OptionCandidate] = []
    if prior is not None:
        by_name = {c.name: c for c in singles}
        for name in prior.winning_pairs():
            parts = name.split("+")
            if len(parts) == 2 and all(p in by_name for p in parts):
                joined = _joined(by_name[parts[0]], by_name[parts[1]])
                if joined is not None:
                    known_pairs.append(joined)
        singles = prior.order(singles)
    for cand in prior.order(singles + known_pairs) if prior is not None else singles:
        run.first(cand, first_s, reserve)
    candidates = list(singles) + known_pairs
    tried_pairs = {c.name for c in known_pairs}

    faster = sorted((c for c in singles if c.status == "ok" and c.speedup and c.speedup > 1),
                    key=lambda c: -(c.speedup or 0))[:PAIRED_FROM]
    pairs = [p for i, a in enumerate(faster) for b in faster[i + 1:]
             if (p := _joined(a, b)) is not None and p.name not in tried_pairs]
    for cand in pairs:
        run.first(cand, first_s, reserve)
    candidates += pairs

    timed = sorted((c for c in candidates if c.status == "ok" and c.speedup and c.speedup > 1),
                   key=lambda c: -(c.speedup or 0))
    finalists = timed[:2]
    for i, cand in enumerate(finalists):
        share = run.left() / (len(finalists) - i)
        if share < MIN_TIMING_S:
            break
        check = run.time_paired(cand, share)
        cand.confirmed_check = check.as_dict()
        if check.status == "ok":
            cand.confirmed_speedup, cand.confirmed_interval = _speedup_of(check)
        say(f"{cand.name}: second timing {check.status}"
            + (f", {cand.confirmed_speedup:.3f}x" if cand.confirmed_speedup else ""))

    shown = [c for c in finalists if c.confirmed_interval and c.confirmed_interval[0] > 1.0]
    elapsed = clock() - run.start
    n = len([c for c in candidates if not c.status.startswith("skipped")])
    if shown:
        best = max(shown, key=lambda c: c.confirmed_speedup or 0.0)
        best.chosen = True
        iv = best.confirmed_interval
        assert iv is not None and best.confirmed_speedup is not None
        line = xla_flags_line(best.flags)
        msg = (f"use XLA_FLAGS='{line}': {best.confirmed_speedup:.3f}x the speed of XLA's defaults "
               f"(95% [{iv[0]:.3f}, {iv[1]:.3f}]; {n} of {len(candidates)} settings tried)")
        return OptionsSearchResult(target.name, dict(best.flags), line, best.confirmed_speedup, iv, candidates,
                                   budget_s, elapsed, msg, list(run.trace), prior.programs if prior else 0)
    msg = "keep XLA's defaults: " + _why_not(finalists, candidates, n)
    return OptionsSearchResult(target.name, {}, "", None, None, candidates, budget_s, elapsed, msg, list(run.trace),
                               prior.programs if prior else 0)


def _why_not(finalists: list[OptionCandidate], candidates: list[OptionCandidate], n: int) -> str:
    if not finalists:
        return f"no option was faster than the default compile ({n} of {len(candidates)} settings tried)"
    best = max(finalists, key=lambda c: c.confirmed_speedup or c.speedup or 0.0)
    sp = best.confirmed_speedup or best.speedup or 0.0
    iv = best.confirmed_interval
    where = f" (95% [{iv[0]:.3f}, {iv[1]:.3f}])" if iv else " (its second timing gave no interval)"
    return (f"no option shown faster beyond the timing noise; best {best.name} at {sp:.3f}x{where}; "
            f"{n} of {len(candidates)} settings tried")
