"""The learned-cost-model paper's section 7 experiment, written once: hardware-only search with a
hardware budget B against search guided by a cost model followed by B/10 of hardware verification.

Two kinds of hardware run the same two arms:
- `run_sim_job`: the TPU simulator with its measurement noise (1.5%); hardware time is simulated (every
  measured configuration costs `compile_s` plus `repeats` runs of the program); a configuration's
  quality is its noise-free simulated program time.
- `run_xla_job`: real XLA:CPU; B is wall clock; the hardware-only arm prices kernels measured by XLA,
  the guided arm races whole fused programs end to end (autotune.tuning.verification.race_programs);
  quality is the minimum of `rounds` interleaved end-to-end timings.

Both return one row: {"program", "seed", "start", "hw_only_speedup", "guided_speedup", ...} (speedup
over the default configuration); `summary_table(rows)` is the markdown table of paper.py and
paper_claim.py. Everything goes through the public API (autotune.api, autotune.tuning).
"""
from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from benchmarks.tables import md_table

ROOT = Path(__file__).resolve().parents[1]

__all__ = ["HardwareClock", "search_model", "hardware_only_search", "guided_candidates", "run_sim_job",
           "run_xla_job", "summary_table"]


class HardwareClock:
    """Simulated hardware time: advanced by each measured configuration (a compile and `repeats` runs)."""

    def __init__(self, compile_s: float, repeats: int):
        self.t = 0.0
        self.compile_s = compile_s
        self.repeats = repeats
        self.measured = 0

    def now(self) -> float:
        return self.t

    def charge(self, program_s: float) -> None:
        self.measured += 1
        self.t += self.compile_s + self.repeats * (program_s if math.isfinite(program_s) else 0.0)


def search_model(spec: str, target: str) -> Any:
    """The fusion cost model that guides the search: a cost-model spec as `autotune fusion --cost-model`
    takes it (analytical, gnn = the shipped one, a model file)."""
    from autotune import api
    return api.make_cost_model(spec, "fusion", target)


def hardware_only_search(space: Any, cost: Any, seed: int, start: str, budget: Any,
                         n_chains: Optional[int] = None, on_config: Optional[Callable] = None) -> Any:
    """Simulated annealing whose cost is the hardware itself, within `budget`; returns the tuner's result."""
    from autotune import api
    from autotune.tuning.callbacks import FunctionCallback
    from autotune.tuning.options import TunerOptions
    from autotune.tuning.tuner import Tuner
    params = {"start": start} if n_chains is None else {"start": start, "n_chains": n_chains}
    strategy = api.make_strategy("annealing", space, seed=seed, **params)
    callbacks = [] if on_config is None else [FunctionCallback(on_config=on_config)]
    return Tuner(space, cost, strategy, budget=budget,
                 options=TunerOptions(progress=False, include_default=start == "default"), callbacks=callbacks).run()


def guided_candidates(space: Any, model: Any, seed: int, start: str, seconds: float, top_k: int) -> list:
    """Annealing on the cost model for `seconds`; the best `top_k` configurations in predicted order,
    after the default configuration when the search starts from it."""
    from autotune import api
    from autotune.tuning.options import TunerOptions, VerifyOptions
    from autotune.tuning.tuner import Tuner
    t = Tuner(space, model.predict, api.make_strategy("annealing", space, seed=seed, start=start), budget=seconds,
              options=TunerOptions(progress=False, include_default=start == "default"),
              verify=VerifyOptions(top_k=top_k))
    t.run()
    return ([space.default()] if start == "default" else []) + [c for _, c in t.top_predicted()]


def _space(program: str, target: str) -> Any:
    from autotune import api
    from autotune.compiler.fusion import FusionSpace
    return FusionSpace(api.load_program(program), target)


def run_sim_job(job: dict) -> dict:
    """One (program, seed, start) of the experiment on the simulator. job: program, seed, start, hw_budget (B,
    simulated seconds), model_seconds, compile_s, repeats, cost_model."""
    from hardware.base import Budget
    from hardware.simulator import TpuSimulator

    space = _space(job["program"], "tpu")
    hw = TpuSimulator(noise=0.015, seed=job["seed"])       # what a measurement returns
    truth = TpuSimulator(noise=0.0)                          # how good a configuration really is

    def true_cost(cfg: Any) -> float:
        return float(truth.simulate(space.kernels(cfg)).sum())

    def measured(cfg: Any) -> float:
        return float(hw.simulate(space.kernels(cfg)).sum())

    default_true = true_cost(space.default())
    B = job["hw_budget"]
    start = job.get("start", "default")   # "random": the search knows nothing of the default
    # 1. hardware-only search with the full budget
    clock = HardwareClock(job["compile_s"], job["repeats"])
    r_hw = hardware_only_search(space, hw.simulate, job["seed"], start, Budget(B, clock=clock.now),
                                on_config=lambda c, v: clock.charge(v))
    hw_only = true_cost(r_hw.best)
    # 2. cost-model search (wall clock), then B/10 of hardware verification in predicted order
    cands = guided_candidates(space, search_model(job["cost_model"], "tpu"), job["seed"], start,
                              job["model_seconds"], 1000)
    clock2 = HardwareClock(job["compile_s"], job["repeats"])
    best_cfg, best_m = None, math.inf
    for cfg in cands:
        if clock2.t >= B / 10:
            break
        m = measured(cfg)
        clock2.charge(m)
        if m < best_m:
            best_cfg, best_m = cfg, m
    guided = true_cost(best_cfg)
    return {"program": Path(job["program"]).stem, "seed": job["seed"], "start": start,
            "default_s": default_true,
            "hw_only_s": hw_only, "hw_only_configs": clock.measured, "guided_s": guided,
            "guided_configs": clock2.measured, "hw_only_speedup": default_true / hw_only,
            "guided_speedup": default_true / guided}


def run_xla_job(job: dict) -> dict:
    """One (program, seed, start) on real XLA:CPU. job: program, seed, start, hw_budget (B, wall seconds),
    hw_chains, model_seconds, cost_model, rounds. Both arms are judged by interleaved end-to-end timing."""
    from autotune.compiler.emission import emit_fused_text
    from autotune.tuning.verification import race_programs
    from costmodels.base import EvaluatorCostModel
    from hardware.base import Budget, create_evaluator

    space = _space(job["program"], "cpu")
    start, seed, B = job["start"], job["seed"], job["hw_budget"]
    from_default = start == "default"
    ev = create_evaluator("xla", "cpu", timeout_s=120, budget=Budget(B))  # kernels past B fail as budget_exhausted
    try:
        r_hw = hardware_only_search(space, EvaluatorCostModel(ev), seed, start, Budget(B), n_chains=job["hw_chains"])
        ev.budget = Budget(None)
        cands = guided_candidates(space, search_model(job["cost_model"], "cpu"), seed, start,
                                  job["model_seconds"], 200)
        default_text = emit_fused_text(space, space.default(), metadata=False)
        # the tuner's end-to-end race (autotune.tuning.verification): screen in predicted order for 2/3 of B/10,
        # then race the two fastest and the default, the lowest median kept (the winner's curse on ~12% noise)
        race = race_programs(lambda text, first: ev.measure_program(text),
                             (emit_fused_text(space, c, metadata=False) for c in cands), B / 10,
                             default_text if from_default else None)
        texts = {"default": default_text,
                 # None: hardware-only search measured no whole configuration within B (timed as a failure)
                 "hw_only": emit_fused_text(space, r_hw.best, metadata=False) if r_hw.best is not None else None,
                 "guided": race.winner}
        times: dict = {k: [] for k in texts}
        for _ in range(job["rounds"]):
            for k, text in texts.items():
                m = ev.measure_program(text) if text is not None else None
                times[k].append(m.seconds if m is not None and m.ok else math.inf)
        tb = {k: min(v) for k, v in times.items()}
    finally:
        ev.close()
    return {"program": Path(job["program"]).stem, "seed": seed, "start": start, "times_s": tb,
            "hw_only_configs": r_hw.evaluations, "guided_verified": race.timings,
            "hw_only_speedup": tb["default"] / tb["hw_only"], "guided_speedup": tb["default"] / tb["guided"]}


# ------------------------------------------------------------------------------------------- tables
def summary_table(rows: Sequence[dict]) -> tuple:
    """(markdown, wins, cases): per program and start, median (min-max) speedup of each arm over seeds,
    whether the guided arm matches or beats hardware only, and a median row."""
    out, wins, n = [], 0, 0
    starts = [s for s in ("default", "random") if any(r["start"] == s for r in rows)]
    meds: dict = {}
    for p in sorted({r["program"] for r in rows}):
        line = [p]
        for s in starts:
            rs = [r for r in rows if r["program"] == p and r["start"] == s]
            if not rs:
                line += ["-", "-", "-"]
                continue
            hw = statistics.median(r["hw_only_speedup"] for r in rs)
            gd = statistics.median(r["guided_speedup"] for r in rs)
            meds.setdefault(s, []).append((hw, gd))
            ok = gd >= hw * (1 - 1e-9)
            wins += ok
            n += 1
            line += [f"{hw:.3f}x ({min(r['hw_only_speedup'] for r in rs):.3f}-{max(r['hw_only_speedup'] for r in rs):.3f})",
                     f"{gd:.3f}x ({min(r['guided_speedup'] for r in rs):.3f}-{max(r['guided_speedup'] for r in rs):.3f})",
                     "yes" if ok else "no"]
        out.append(line)
    out.append(["**median**"] + sum(([f"**{statistics.median(h for h, _ in meds[s]):.3f}x**",
                                      f"**{statistics.median(g for _, g in meds[s]):.3f}x**", ""] for s in starts), []))
    header = ["program"] + sum(([f"hardware only, B (from {s})", f"model + B/10 (from {s})", "model >= hw"]
                                for s in starts), [])
    return md_table(header, out, ["---"] + ["---:", "---:", ":-:"] * len(starts)), wins, n
