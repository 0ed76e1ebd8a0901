"""The budget model: how a command's wall-clock budget splits into start-up, search, verification
and writing the outputs, with the machine facts it needs measured once per machine and cached.

A budget is the whole command's wall clock, so the search gets what start-up, hardware verification
and writing the outputs do not; a budget that leaves the search nothing cannot be held and is refused
with `BudgetTooShort`, which names the budget this program needs on this machine. The outputs'
reserve comes from the program's parse time and the cost of drawing a search plot here (the first
drawing, which imports and warms up matplotlib, and a timed second one), measured at first use and
cached under ``~/.cache/autotune/`` (re-measured when the machine or matplotlib changes), so that
start-up does not pay for it.
"""
from __future__ import annotations

import hashlib
import io
import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

__all__ = ["MIN_SEARCH_SECONDS", "NEEDED_BUDGET_MARGIN", "OUTPUT_FIXED_SECONDS", "OUTPUT_PLOTS",
           "OUTPUT_SECONDS_PER_LOAD_SECOND", "BudgetTooShort", "PlotCost", "plot_cost", "process_age",
           "verification_seconds", "needed_budget", "check_after_parse", "split_budget", "StartupClock"]

MIN_SEARCH_SECONDS = 1.0            # the least search a budget must leave
NEEDED_BUDGET_MARGIN = 1.2          # the budget named when refusing: what start-up needed, with room for load
# Writing the outputs but the plot (fused.hlo emission, best_config.json, the report) per second of parsing
# the program: measured 0.55-0.86 s on the 12/48/200-layer transformers of examples/scale on a quiet 2-core
# machine, up to 1.21 under a load average of 13-16 (report.json budget_split outputs_s), plus a fixed part.
OUTPUT_SECONDS_PER_LOAD_SECOND = 1.25
OUTPUT_FIXED_SECONDS = 0.2
OUTPUT_PLOTS = 2.0                  # search.png, in drawings of the small timed plot
_PLOT_CACHE_FORMAT = 1


class BudgetTooShort(ValueError):
    """A budget that leaves the search nothing; `needed` is the budget (seconds) this program needs."""

    def __init__(self, message: str, needed: int):
        super().__init__(message)
        self.needed = needed


@dataclass(frozen=True)
class PlotCost:
    """Seconds of the first search plot of a process (imports and warm-up) and of one more."""

    first_s: float
    draw_s: float


_PLOT_COST: list = []  # once per process


def _plot_cache_path() -> Path:
    from autotune.compiler.targets.host import host_cache_dir, host_machine
    try:
        from importlib.metadata import version
        mpl = version("matplotlib")
    except Exception:  # noqa: BLE001 - no matplotlib: the key says so
        mpl = "none"
    digest = hashlib.sha1(f"{host_machine()}|{mpl}".encode()).hexdigest()[:16]
    return host_cache_dir() / f"plot-cost-{digest}.json"


def _measure_plot_cost() -> PlotCost:
    from autotune.tuning.report import plot_search
    history = [(0.0, 0, 1e-3), (1.0, 10, 9e-4)]
    try:
        t0 = time.monotonic()
        plot_search(history, io.BytesIO(), "warm-up", 1e-3)
        t1 = time.monotonic()
        plot_search(history, io.BytesIO(), "timed", 1e-3)
        return PlotCost(t1 - t0, time.monotonic() - t1)
    except Exception:  # noqa: BLE001 - no plotting library: writing the outputs records the error
        return PlotCost(0.0, 0.0)


def plot_cost(refresh: bool = False) -> PlotCost:
    """The cost of drawing search plots on this machine: cached on disk, measured when missing."""
    if _PLOT_COST and not refresh:
        return _PLOT_COST[0]
    path = _plot_cache_path()
    cost = None
    if not refresh:
        try:
            data = json.loads(path.read_text())
            if data.get("format") == _PLOT_CACHE_FORMAT:
                cost = PlotCost(float(data["first_s"]), float(data["draw_s"]))
        except (OSError, ValueError, KeyError, TypeError):
            cost = None
    if cost is None:
        cost = _measure_plot_cost()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps({"format": _PLOT_CACHE_FORMAT, "first_s": cost.first_s, "draw_s": cost.draw_s,
                                       "measured_at": time.time()}))
            os.replace(tmp, path)
        except OSError:
            pass  # an unwritable cache only costs a re-measurement next time
    _PLOT_COST[:] = [cost]
    return cost


def process_age() -> float:
    """Seconds since this process started (Linux /proc; 0 elsewhere): the interpreter's start-up and
    imports before a command began."""
    try:
        with open("/proc/self/stat") as f:
            start_ticks = float(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return max(uptime - start_ticks / os.sysconf("SC_CLK_TCK"), 0.0)
    except (OSError, ValueError, IndexError):
        return 0.0


def verification_seconds(hw: float, model_name: Optional[str]) -> float:
    """The part of the budget kept for verifying the best on hardware (none when the search itself measures)."""
    return hw if hw > 0 and model_name != "hardware" else 0.0


def needed_budget(used_s: float, reserve_s: float, hw: float, total: float, model_name: Optional[str]) -> int:
    """Whole seconds of budget this program needs on this machine now: start-up (`used_s`), writing the
    outputs, the least search and verification (a tenth of the budget when the hardware budget is the default)."""
    need = used_s + reserve_s + MIN_SEARCH_SECONDS
    if verification_seconds(hw, model_name) > 0:
        need = need / 0.9 if hw == total / 10 else need + hw
    return int(math.ceil(need * NEEDED_BUDGET_MARGIN))


def _too_short(budget_text: str, need: int, startup_s: float, load_s: float, reserve_s: float,
               verify_s: float, early: bool) -> BudgetTooShort:
    verify = f", verification {verify_s:.1f}s" if verify_s > 0 else ""
    return BudgetTooShort(
        f"--budget {budget_text} is too short for this program: start-up {'alone ' if early else ''}took "
        f"{startup_s:.1f}s (parsing {load_s:.1f}s), writing the outputs needs about {reserve_s:.1f}s"
        f"{verify}, leaving nothing for the search; give it --budget "
        f"{need}s or more" + (" (at least: the fusion space and the cost model are not built yet)" if early else ""),
        need)


def check_after_parse(total: Optional[float], hw: float, model_name: str, used_s: float, load_s: float,
                      budget_text: str) -> None:
    """Refuse a budget that parsing the program alone (with the outputs' reserve) used up, before the
    fusion space, the cost model and the search are built (the rest of start-up only adds to it)."""
    if total is None:
        return
    verify_s = verification_seconds(hw, model_name)
    reserve_s = OUTPUT_FIXED_SECONDS + OUTPUT_SECONDS_PER_LOAD_SECOND * load_s
    if total - used_s - reserve_s - verify_s <= 0:
        need = needed_budget(used_s, reserve_s, hw, total, model_name)
        raise _too_short(budget_text, need, used_s, load_s, reserve_s, verify_s, early=True)


def split_budget(total: Optional[float], hw: float, model_name: str, startup_s: float, load_s: float,
                 budget_text: str) -> tuple:
    """(search seconds, the report's budget_split): the search gets what start-up so far, hardware
    verification and writing the outputs (this program's parse time and the machine's plot cost) do
    not; raises BudgetTooShort when that is nothing."""
    if total is None:
        return None, None
    plot = plot_cost()
    verify_s = verification_seconds(hw, model_name)
    reserve_s = (OUTPUT_FIXED_SECONDS + plot.first_s + (OUTPUT_PLOTS - 1) * plot.draw_s
                 + OUTPUT_SECONDS_PER_LOAD_SECOND * load_s)
    search_budget = total - startup_s - reserve_s - verify_s
    if search_budget <= 0:
        need = needed_budget(startup_s, reserve_s, hw, total, model_name)
        raise _too_short(budget_text, need, startup_s, load_s, reserve_s, verify_s, early=False)
    note = {"startup_s": round(startup_s, 3), "parse_s": round(load_s, 3), "output_reserve_s": round(reserve_s, 3),
            "search_budget_s": round(search_budget, 3)}
    return search_budget, note


class StartupClock:
    """Where start-up went: `mark(step)` charges the time since the previous mark (or since the
    command's start) to `step`; `breakdown(startup_s)` adds what is left of start-up as "other"."""

    def __init__(self, started: float, before_command_s: float = 0.0):
        self.last = started + before_command_s
        self.steps = {"interpreter_and_imports": round(before_command_s, 3)} if before_command_s else {}

    def mark(self, step: str) -> None:
        now = time.monotonic()
        self.steps[step] = round(self.steps.get(step, 0.0) + now - self.last, 3)
        self.last = now

    def breakdown(self, startup_s: float) -> dict:
        out = dict(self.steps)
        out["other"] = round(max(startup_s - sum(out.values()), 0.0), 3)
        return out
