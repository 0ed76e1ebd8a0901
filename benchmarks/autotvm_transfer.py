"""AutoTVM's learning loop (issue 19): hardware trials needed to come within 2% of the best
configuration known, for random, genetic, model-based, model-based + diversity and model-based +
transfer from the other families' history (leave-family-out), on the simulator (fusion and tile).

Every arm runs through the Tuner (autotune/tuning/tuner.py) with the evaluator's measurements as the
costs, exactly as `autotune fusion --cost-model hardware` and `autotune tile --strategy ...` do: the
"hardware" is the TPU simulator with 1.5% seeded noise (one machine: hardware seed 0 for every run);
the strategy seeds vary. A trial is one configuration measured (the compiler's default, measured first
by every arm, is trial 1). A run has found a configuration within 2% when one it measured has a
noise-free time <= 1.02 x the best known: for tiles the exhaustive optimum of the kernel, for fusion
the best configuration any run of any arm measured (the fusion spaces are far too large to enumerate).

Phase 1 runs the four arms without history; every measured kernel is recorded in one store with its
features (autotune/tuning/history.py), as the CLI does. Phase 2 runs model-based + transfer: for each
family, the global model is trained on the store's measurements of the *other* families only.

    python -m benchmarks.autotvm_transfer [--seeds 5] [--spaces fusion tile] [--fusion-trials 160]
        [--tile-trials 48] [--json OUT] [--plot docs/autotvm_transfer.png] [--quick]
    python -m benchmarks.autotvm_transfer --load tile.json fusion.json --plot docs/autotvm_transfer.png
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from typing import Any, Callable, Optional

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

NEAR = 1.02
NOISE = 0.015
HW_SEED = 0
ARMS = ("random", "genetic", "model-based", "model-based + diversity", "model-based + transfer")
ARM_STRATEGY = {"random": ("random", {}), "genetic": ("genetic", {}), "model-based": ("model-based", {}),
                "model-based + diversity": ("model-based", {"diversity": 1.0}),
                "model-based + transfer": ("model-based", {}),
                "model-based, batch 4 + transfer": ("model-based", {}),
                "model-based (gnn)": ("model-based", {"model": "gnn"}),
                "model-based (gnn) + transfer": ("model-based", {"model": "gnn"}),
                "model-based (gnn), batch 4 + transfer": ("model-based", {"model": "gnn"})}
# Extra arms (--extra-arms): the local model the shipped GNN fine-tuned on the measurements (issue 19's
# "GNN fine-tuning as an option"; a kernel-level model), and transfer with batches of 4 (fusion).
EXTRA_ARMS = ("model-based (gnn)", "model-based (gnn) + transfer", "model-based, batch 4 + transfer")
BATCH = {"model-based, batch 4 + transfer": 4, "model-based (gnn), batch 4 + transfer": 4}
# One program per family (fusion); the tile kernels come from paper_tile_online's scan of the whole
# corpus (dot/convolution kernels with >= 30 valid tiles, 2 per family); --quick scans TILE_QUICK.
FUSION_PROGRAMS = ("bert_small_infer", "gnn_small_infer", "lstm_small_infer", "mlp_mixer_small_infer",
                   "nmt_small_infer", "inception_small_infer")
TILE_QUICK = ("resnet_small_infer", "inception_medium_infer", "segmentation_medium_train", "autoencoder_medium_infer")
XLA_PROGRAMS = ("vae_small_infer", "autoencoder_small_infer", "gnn_small_infer")
XLA_ARMS = ("random", "model-based", "model-based + transfer")
FUSION_SA: dict = {}  # the strategy's own annealing on the model (32 chains x 40 steps per round)


def family(program: str) -> str:
    return program.split("_")[0] if not program.startswith("mlp_mixer") else "mlp_mixer"


class Problem:
    """One space to tune: a program's fusion space or one kernel's tile space, with its truth."""

    def __init__(self, kind: str, name: str, program: str, space: Any, true_cost: Callable, sha: str,
                 optimum: Optional[float] = None):
        self.kind, self.name, self.program, self.space = kind, name, program, space
        self.true_cost, self.sha, self.optimum = true_cost, sha, optimum
        self.family = family(program)


def fusion_problems(programs, target: str = "tpu", truth: Any = None) -> list:
    """Fusion spaces of `programs` on `target`; a configuration's true cost is the noise-free simulator's
    program time, or with `truth` (a cost model, e.g. the evaluator's measurements through its store)
    that model's."""
    from autotune.compiler.fusion import FusionSpace
    from autotune.compiler.program import Program
    from autotune.tuning.checkpoint import program_fingerprint
    from autotune.tuning.pricing import ProgramCost
    from hardware.simulator import TpuSimulator
    out = []
    for p in programs:
        space = FusionSpace(Program.from_file(os.path.join(ROOT, "examples", "hlo", p + ".hlo")), target)
        sim0 = TpuSimulator(noise=0.0)
        cost = ProgramCost(space, truth if truth is not None else (lambda ks, s=sim0: s.simulate(ks)))
        out.append(Problem("fusion", p, p, space, cost, program_fingerprint(space)))
    return out


def tile_problems(programs, per_family: int, max_kernels: int, min_tiles: int) -> list:
    from benchmarks import paper_tile_online as P
    from autotune.compiler.fusion import FusionSpace
    from autotune.compiler.program import Program
    from autotune.tuning.checkpoint import program_fingerprint
    cases = P.find_cases(programs, min_tiles=min_tiles, per_family=per_family, max_kernels=max_kernels,
                         log=lambda m: None)
    shas = {}
    out = []
    for c in cases:
        if c.program not in shas:
            fs = FusionSpace(Program.from_file(os.path.join(ROOT, "examples", "hlo", c.program + ".hlo")), "tpu")
            shas[c.program] = program_fingerprint(fs)
        truth = {t.key(): float(v) for t, v in zip(c.tiles, c.true)}
        out.append(Problem("tile", c.name, c.program, c.space,
                           lambda tiles, tr=truth: np.array([tr[t.key()] for t in tiles]), shas[c.program],
                           float(np.min(c.true))))
    return out


def run_arm(problem: Problem, arm: str, seed: int, trials: int, store: Any, prior_model: Any = None,
            hw: Any = None) -> list:
    """One tuning run through the Tuner; returns the noise-free cost of each configuration measured,
    in order (the default first). `hw`: the evaluator (default: the noisy simulator on `store`)."""
    from autotune.tuning.history import HistoryRecorder, RecordingCostModel, transfer_prior
    from autotune.tuning.callbacks import FunctionCallback
    from autotune.tuning.options import TunerOptions
    from autotune.tuning.tuner import Tuner
    from costmodels.base import EvaluatorCostModel
    from hardware.simulator import TpuSimulator
    from search.base import get_strategy
    name, params = ARM_STRATEGY[arm]
    params = dict(params)
    if name == "model-based" and problem.kind == "fusion":
        params.update(FUSION_SA)
    if prior_model is not None:
        params["prior"] = transfer_prior(problem.space, prior_model)
    strat = get_strategy(name)(problem.space, seed=seed, **params)
    hw = hw if hw is not None else TpuSimulator(noise=NOISE, seed=HW_SEED, store=store)
    target = str(problem.space.target) if problem.kind == "fusion" else "tpu"
    model = RecordingCostModel(EvaluatorCostModel(hw), HistoryRecorder(store, target, problem.sha, problem.program))
    measured: list = [problem.space.default()]
    batch = BATCH.get(arm, 8 if problem.kind == "fusion" else 4)
    tuner = Tuner(problem.space, model, strat, budget=None,
                  options=TunerOptions(max_evaluations=trials - 1, batch_size=batch, progress=False),
                  callbacks=[FunctionCallback(on_config=lambda c, v: measured.append(c))])
    tuner.run()
    return [float(v) for v in problem.true_cost(measured)]


def trials_to_near(curve: list, best: float) -> Optional[int]:
    """1-based trial at which a configuration within NEAR of `best` was first measured (None: never)."""
    for i, v in enumerate(curve):
        if v <= NEAR * best:
            return i + 1
    return None


def median_trials(values: list, cap: int) -> float:
    """Median with runs that never got there counted as infinitely many trials (inf: > cap)."""
    return float(statistics.median([v if v is not None else math.inf for v in values]))


def run_space(kind: str, problems: list, seeds: int, trials: int, log: Callable, arms: tuple = ARMS,
              hw: Any = None, store: Any = None, slow_arms: tuple = (), slow_problems: Optional[set] = None,
              best_known: Optional[dict] = None) -> dict:
    """Every arm on every problem and seed (`slow_arms` only on `slow_problems` when given); the transfer
    arms ("... + transfer") leave-family-out on the store the other arms filled (the history is the same
    for every transfer arm: it is loaded once per family, before the first transfer arm runs).
    `hw`/`store`: the evaluator and its store (default: the noisy simulator on a fresh MemoryStore)."""
    from autotune.tuning.history import fit_global_model, load_history
    from autotune.tuning.store import MemoryStore
    from hardware.simulator import TpuSimulator
    store = store if store is not None else MemoryStore()
    namespace_hw = hw if hw is not None else TpuSimulator(noise=NOISE, seed=HW_SEED)
    target = str(problems[0].space.target) if kind == "fusion" else "tpu"
    curves: dict = {arm: {} for arm in arms}
    t0 = time.time()

    def runs_of(arm: str) -> list:
        return [p for p in problems if arm not in slow_arms or slow_problems is None or p.name in slow_problems]

    # `best_known`: {problem: cost} of an earlier run, so that arms run apart share its reference
    for arm in [a for a in arms if not a.endswith("+ transfer")]:
        for p in runs_of(arm):
            for s in range(seeds):
                curves[arm][(p.name, s)] = run_arm(p, arm, s, trials, store, hw=hw)
        log(f"{kind}: {arm} done ({time.time() - t0:.0f} s)")
    models: dict = {}
    history_info: dict = {}
    for arm in [a for a in arms if a.endswith("+ transfer")]:  # phase 2: history of the other families
        for p in runs_of(arm):
            if p.family not in models:
                excluded = {q.sha for q in problems if q.family == p.family}
                hist = load_history(store, kind, target, namespace_hw.store_namespace, namespace_hw.machine, excluded)
                models[p.family] = fit_global_model(hist, seed=0)
                history_info[p.family] = hist.describe()
            for s in range(seeds):
                curves[arm][(p.name, s)] = run_arm(p, arm, s, trials, store, models[p.family], hw=hw)
        log(f"{kind}: {arm} done ({time.time() - t0:.0f} s)")
    best = {}
    p_default = {p.name: float(p.true_cost([p.space.default()])[0]) for p in problems}
    for p in problems:
        found = min(min(c) for arm in arms for (name, _), c in curves[arm].items() if name == p.name)
        best[p.name] = p.optimum if p.optimum is not None else min(found, (best_known or {}).get(p.name, math.inf))
    # "open" problems: the default is not already within NEAR of the best known (else every arm
    # gets there at trial 1 and the problem says nothing about search)
    open_problems = [p.name for p in problems if p_default[p.name] > NEAR * best[p.name]]
    result: dict = {"kind": kind, "trials": trials, "seeds": seeds, "problems": [p.name for p in problems],
                    "families": sorted({p.family for p in problems}), "history": history_info,
                    "best_known": best, "default": p_default, "open_problems": open_problems, "arms": {}}
    for arm in arms:
        runs = [{"problem": name, "seed": seed, "trials_to_near": trials_to_near(c, best[name]),
                 "speedup_at_cap": p_default[name] / min(c)} for (name, seed), c in curves[arm].items()]
        ratio = {key: np.minimum.accumulate(c)[:trials] / best[key[0]] for key, c in curves[arm].items()
                 if len(c) >= trials}
        names = [p.name for p in problems if any(r["problem"] == p.name for r in runs)]
        result["arms"][arm] = arm_summary(runs, ratio, open_problems, names, trials)
    return result


def arm_summary(runs: list, ratio_curves: dict, open_problems: list, problem_names: list, trials: int) -> dict:
    """One arm's row of the results: trials to within NEAR of the best known (all problems and the open
    ones), speedups, median best-so-far curves, per problem (`problem_names`) and per run."""
    all_ratio = np.array(list(ratio_curves.values()))
    open_ratio = np.array([c for (name, _), c in ratio_curves.items() if name in open_problems])
    hits = [r["trials_to_near"] for r in runs]
    open_hits = [r["trials_to_near"] for r in runs if r["problem"] in open_problems]
    return {"median_trials": median_trials(hits, trials),
            "median_speedup_over_default": float(np.median([r["speedup_at_cap"] for r in runs])),
            "reached": float(np.mean([h is not None for h in hits])), "runs": len(hits),
            "open_median_trials": median_trials(open_hits, trials) if open_hits else None,
            "open_reached": float(np.mean([h is not None for h in open_hits])) if open_hits else None,
            "open_runs": len(open_hits),
            "median_best_over_known_at_cap": float(np.median(all_ratio[:, -1])) if len(all_ratio) else None,
            "median_curve": np.median(all_ratio, axis=0).tolist() if len(all_ratio) else [],
            "open_median_curve": np.median(open_ratio, axis=0).tolist() if len(open_ratio) else [],
            "per_problem_median_trials": {name: median_trials([r["trials_to_near"] for r in runs
                                                               if r["problem"] == name], trials)
                                          for name in problem_names},
            "per_run": runs}


def load_average() -> "list | None":
    """The machine's 1/5/15-minute load averages (None where the platform has none)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def run_xla(programs, seeds: int, trials: int, log: Callable) -> dict:
    """The fusion comparison on real XLA:CPU: one local measuring worker, one store for every run, so
    every kernel is measured once and a configuration's cost (the sum of its kernels' measurements, as
    the tuner sees it) is the same in every run that meets it."""
    from autotune.tuning.store import MemoryStore
    from costmodels.base import EvaluatorCostModel
    from hardware.base import create_evaluator
    store = MemoryStore()
    ev = create_evaluator("xla", "cpu", store=store, seed=0)
    load_before, t0 = load_average(), time.time()
    try:
        probs = fusion_problems(programs, "cpu", truth=EvaluatorCostModel(ev))
        res = run_space("fusion", probs, seeds, trials, log, arms=XLA_ARMS, hw=ev, store=store)
    finally:
        ev.close()
    res.update(evaluator="xla", target="cpu", machine=ev.machine, wall_s=time.time() - t0,
               load_before=load_before, load_after=load_average(), measurements=len(store))
    return res


# ---- real XLA:CPU with paired end-to-end trials (--xla-paired) -------------------------------------
#
# A trial's cost is the configuration's whole emitted program timed beside the default's
# (autotune/tuning/paired_cost.py, `PairedProgramCost`): the paired median ratio, in about
# PAIRED_TRIAL_S of alternating blocks plus the program's compilation. The best known and "within 2%"
# follow a rule fixed before the run (`best_known_paired`):
#   1. the candidates: the BEST_CANDIDATES configurations with the lowest trial ratios per program (any
#      arm, any seed), and every other one whose trial ratio is within NEAR x NEAR of the lowest;
#   2. each candidate's outputs are checked against the original program's, and it is re-timed beside
#      the default for REMEASURE_S (its ratio: the median of the block ratios; a 95% block-bootstrap
#      interval, `median_interval`);
#   3. the best known r* is the lowest re-measured ratio of a candidate whose outputs match;
#   4. a configuration is within 2% when its ratio (the re-measured one if it was re-measured, else its
#      trial ratio) is <= NEAR x r*; a run gets there at its first such trial;
#   5. a program is open (it separates the strategies) only when the default is not within 2%: the
#      upper end of r*'s interval is below 1 / NEAR.
# The noise of one trial is measured on the default against itself (SELF_TRIALS trials).
PAIRED_TRIAL_S = 0.3
REMEASURE_S = 3.0
BEST_CANDIDATES = 8
SELF_TRIALS = 8
XLA_PAIRED_PROGRAMS = ("mlp_mixer_small_infer", "bert_small_infer", "gnn_small_infer")
XLA_PAIRED_BATCH = 4


def run_arm_paired(problem: Problem, arm: str, seed: int, trials: int, ev: Any, cache: dict,
                   prior_model: Any = None, batch: int = XLA_PAIRED_BATCH, reference: Optional[str] = None) -> list:
    """One tuning run through the Tuner whose trials are paired end-to-end timings (`PairedProgramCost`
    sharing `cache` with the other runs of the problem); returns the configurations measured, in order
    (the default first) and the pricer."""
    from autotune.tuning.history import transfer_prior
    from autotune.tuning.paired_cost import PairedProgramCost
    from autotune.tuning.callbacks import FunctionCallback
    from autotune.tuning.options import TunerOptions
    from autotune.tuning.tuner import Tuner
    from search.base import get_strategy
    name, params = ARM_STRATEGY[arm]
    params = dict(params)
    if name == "model-based":
        params.update(FUSION_SA)
    if name == "genetic":
        params.update(XLA_PAIRED_GENETIC)
    if prior_model is not None:  # a kernel-sum model against end-to-end trials: not the same units
        params["prior"] = transfer_prior(problem.space, prior_model, same_units=False)
    strat = get_strategy(name)(problem.space, seed=seed, **params)
    pricer = PairedProgramCost(problem.space, ev, PAIRED_TRIAL_S, reference_text=reference, cache=cache)
    measured: list = [problem.space.default()]
    tuner = Tuner(problem.space, pricer, strat, budget=None,
                  options=TunerOptions(max_evaluations=trials - 1, batch_size=batch, progress=False),
                  callbacks=[FunctionCallback(on_config=lambda c, v: measured.append(c))])
    tuner.run()
    return measured, pricer, getattr(strat, "prior_weight", None)


def kernel_history(problem: Problem, configs: list, kev: Any, store: Any, seconds: float) -> int:
    """Standalone kernel measurements of `configs` (in order, for about `seconds`) recorded as the
    problem's history in `store` (what a kernel-sum run leaves there); returns the kernels measured."""
    from autotune.tuning.history import HistoryRecorder, RecordingCostModel
    from autotune.tuning.pricing import ProgramCost
    from costmodels.base import EvaluatorCostModel
    model = RecordingCostModel(EvaluatorCostModel(kev), HistoryRecorder(store, "cpu", problem.sha, problem.program))
    cost = ProgramCost(problem.space, model.predict)
    t0 = time.time()
    for c in configs:
        if time.time() - t0 > seconds:
            break
        cost([c])
    return cost.kernels_priced


def remeasure_candidates(space: Any, ev: Any, configs: dict, cands: list, ratio_of: dict, reference: str) -> dict:
    """Steps 2-3 of the rules (here and experiments/2026-11-27-autotvm-xla-cpu-rule-v2/autotvm_rule_v2.py): each
    candidate's outputs checked against the original program's, then re-timed beside the default for REMEASURE_S
    (median block ratio, 95% interval)."""
    from autotune.compiler.emission import EMITTED_CPU_COMPILE_OPTIONS, emit_fused_text
    from autotune.tuning.verification import median_interval
    default_text = emit_fused_text(space, space.default(), header=True)
    remeasured: dict = {}
    for k in cands:
        text = emit_fused_text(space, configs[k], header=True)
        chk = ev.measure_program(text, reference=reference, **EMITTED_CPU_COMPILE_OPTIONS)
        if not chk.ok:
            remeasured[k] = {"status": chk.status, "trial_ratio": ratio_of[k]}
            continue
        m = ev.measure_paired(default_text, text, REMEASURE_S, **EMITTED_CPU_COMPILE_OPTIONS)
        if not m.ok:
            remeasured[k] = {"status": m.status, "trial_ratio": ratio_of[k]}
            continue
        lo, hi = median_interval(m.extra["ratios"])
        remeasured[k] = {"status": "ok", "trial_ratio": ratio_of[k], "ratio": float(m.seconds), "low": lo, "high": hi,
                         "ratios": len(m.extra["ratios"])}
    return remeasured


def best_known_paired(problem: Problem, ev: Any, cache: dict, reference: str, log: Callable) -> dict:
    """The rule of the comment above: re-measure the candidates, the best known and its interval."""
    space = problem.space
    trial = {k: v for k, v in cache.items() if k not in ("default_s", "configs") and math.isfinite(v[0])
             and v[1].get("ratio")}
    ratio_of = {k: v[1]["ratio"] for k, v in trial.items()}
    order = sorted(ratio_of, key=ratio_of.get)
    lowest = ratio_of[order[0]] if order else 1.0
    cands = [k for i, k in enumerate(order) if i < BEST_CANDIDATES or ratio_of[k] <= NEAR * NEAR * lowest]
    remeasured = remeasure_candidates(space, ev, cache.get("configs", {}), cands, ratio_of, reference)
    ok = {k: v for k, v in remeasured.items() if v["status"] == "ok"}
    best_key = min(ok, key=lambda k: ok[k]["ratio"]) if ok else None
    best = ok[best_key] if best_key is not None else {"ratio": 1.0, "low": None, "high": None}
    final = dict(ratio_of)
    final.update({k: v["ratio"] for k, v in ok.items()})
    final.update({k: math.inf for k, v in remeasured.items() if v["status"].startswith("output_mismatch")})
    final[space.config_digest(space.default())] = 1.0
    log(f"{problem.name}: best known ratio {best['ratio']:.4f} [{best['low']}, {best['high']}] "
        f"(x{1 / best['ratio']:.3f} over the default), {len(cands)} candidates re-measured")
    return {"best_ratio": best["ratio"], "best_interval": [best["low"], best["high"]], "final": final,
            "remeasured": [{"trial_ratio": v["trial_ratio"], **{x: v.get(x) for x in ("status", "ratio", "low", "high", "ratios")}}
                           for v in remeasured.values()],
            "open": bool(best["high"] is not None and best["high"] < 1 / NEAR)}


class TrialJournal:
    """`--cache FILE` of --xla-paired: what a run has measured, one JSON line per fact as it completes, so
    that a run killed part way restarts from it without timing anything again. Lines: the run's "meta"
    (first; a file of other programs, trial seconds or batch is refused), "self" (a program's default
    against itself), "trial" (a configuration's digest -> (cost, record), and "default_s"), "config"
    (a configuration first measured, in the order phase 1 measured them: the history's order),
    "run" (a finished run of an arm: its digests in order), "history" (the transfer history measured:
    it is in the sqlite store beside the file, FILE.store.sqlite) and "best" (a program's best known).
    A run with another number of trials than the file's is not taken as finished: it is run again, and
    its trials come from the cache. A last line cut short by a kill is ignored."""

    def __init__(self, path: str, meta: dict):
        self.path, self.entries = path, []
        if os.path.exists(path):
            with open(path) as f:
                lines = f.read().split("\n")
            cut = False
            for i, line in enumerate(lines):
                if not line.strip():
                    continue
                try:
                    self.entries.append(json.loads(line))
                except json.JSONDecodeError:
                    if i != len(lines) - 1:  # only the last line, unterminated, may have been cut by a kill
                        raise ValueError(f"{path}: line {i + 1} is not JSON: not a trial cache of this benchmark")
                    cut = True
            old = self.entries[0].get("meta") if self.entries else None
            if self.entries and old != meta:
                raise ValueError(f"{path}: a trial cache of another run ({old}), not of this one ({meta})")
            if cut:  # rewritten without the cut line, so that what comes next starts a line
                with open(path, "w") as f:
                    f.writelines(json.dumps(e) + "\n" for e in self.entries)
        if not self.entries:
            self.entries = [{"t": "meta", "meta": meta}]
            with open(path, "w") as f:
                f.write(json.dumps(self.entries[0]) + "\n")
        self._file = open(path, "a")

    def add(self, t: str, **fields) -> None:
        entry = {"t": t, **fields}
        self.entries.append(entry)
        self._file.write(json.dumps(entry) + "\n")
        self._file.flush()

    def of(self, t: str) -> list:
        return [e for e in self.entries if e["t"] == t]

    def close(self) -> None:
        self._file.close()


class JournaledCache(dict):
    """A program's trial cache (`PairedProgramCost`'s `cache`: digest -> (cost, record), "default_s",
    and "configs": digest -> configuration) that writes every trial to a TrialJournal as it is set,
    filled from the journal's earlier trials and configurations."""

    def __init__(self, journal: "TrialJournal | None", program: str, space: Any):
        super().__init__(configs={})
        self.journal, self.program, self.space = journal, program, space
        for e in journal.entries if journal else ():
            if e.get("p") != program:
                continue
            if e["t"] == "trial":
                dict.__setitem__(self, e["k"], (e["cost"], e["record"]))
            elif e["t"] == "default_s":
                dict.__setitem__(self, "default_s", e["v"])
            elif e["t"] == "config":
                self["configs"][e["k"]] = space.decode(bytes.fromhex(e["c"]))

    def __setitem__(self, key, value) -> None:
        super().__setitem__(key, value)
        if self.journal is None:
            return
        if key == "default_s":
            self.journal.add("default_s", p=self.program, v=value)
        elif key != "configs":
            self.journal.add("trial", p=self.program, k=key, cost=value[0], record=value[1])

    def add_config(self, key: int, cfg: Any) -> None:
        self["configs"][key] = self.space.decode(self.space.encode(cfg))
        if self.journal is not None:
            self.journal.add("config", p=self.program, k=key, c=self.space.encode(cfg).hex())


XLA_PAIRED_ORDER = ("model-based", "model-based + diversity", "model-based + transfer", "random", "genetic")
# with 20 trials, genetic search's first generation of 32 (its default) would be all it does: uniformly
# random configurations, the random arm again; a population of 8 evolves within the cap
XLA_PAIRED_GENETIC = {"population": 8, "elite": 2}


def run_xla_paired(programs, seeds: int, trials: int, log: Callable, arms: tuple = ARMS,
                   history_s: float = 60.0, deadline_s: Optional[float] = None, cache_path: Optional[str] = None) -> dict:
    """The fusion comparison on real XLA:CPU with paired end-to-end trials (comment above): phase 1, the
    arms without history; the history, standalone kernel measurements of each program's configurations
    that phase 1 measured (in the order measured, `history_s` per program), recorded in one store; phase
    2, model-based + transfer with a global kernel model of the other families' history; then the best
    known of each program (`best_known_paired`). Seed after seed, every arm (XLA_PAIRED_ORDER, transfer
    last) on every program; the history is built before the first transfer run, from what the arms of
    seed 0 measured; after `deadline_s` of wall time no further seed starts (every arm then has the same
    fewer runs, and the result says so), and the best known is still measured. `cache_path`: a
    TrialJournal, read first (what it holds is not measured again) and written as the run goes."""
    from autotune.tuning.history import fit_global_model, load_history
    from autotune.tuning.store import MeasurementStore, MemoryStore
    from hardware.xla import TimingOptions, XlaEvaluator
    from autotune.compiler.emission import EMITTED_CPU_COMPILE_OPTIONS, emit_fused_text
    journal = None
    if cache_path:
        journal = TrialJournal(cache_path, {"programs": list(programs), "paired_trial_s": PAIRED_TRIAL_S,
                                            "batch": XLA_PAIRED_BATCH, "remeasure_s": REMEASURE_S})
    ev = XlaEvaluator("cpu", seed=0)
    store = MeasurementStore(cache_path + ".store.sqlite") if journal else MemoryStore()
    kev = XlaEvaluator("cpu", store=store, seed=0, timing=TimingOptions(repeat=3, min_repeat_ms=5.0, warmup=1))
    load_before, t0 = load_average(), time.time()
    loads = [load_before]
    try:
        probs = fusion_problems(programs, "cpu")
        refs = {p.name: open(os.path.join(ROOT, "examples", "hlo", p.name + ".hlo")).read() for p in probs}
        caches: dict = {p.name: JournaledCache(journal, p.name, p.space) for p in probs}
        runs: dict = {arm: {} for arm in arms}
        # configurations in the order phase 1 measured them
        order: dict = {p.name: list(caches[p.name]["configs"].values()) for p in probs}
        resumed = 0
        for e in journal.of("run") if journal else ():
            if e["arm"] in runs and e["trials"] == trials and e["p"] in caches:
                runs[e["arm"]][(e["p"], e["seed"])] = {"keys": e["keys"], "prior_weight": e["prior_weight"]}
                resumed += 1
        # the noise of one trial: the default against itself
        self_ratios = {e["p"]: e["v"] for e in journal.of("self")} if journal else {}
        if journal:
            log(f"xla paired: resumed from {cache_path}: {resumed} runs, "
                + ", ".join(f"{k} {sum(isinstance(d, int) for d in c)} trials" for k, c in caches.items()))
        for p in probs:
            if p.name in self_ratios:
                continue
            dt = emit_fused_text(p.space, p.space.default(), header=True)
            self_ratios[p.name] = [float(ev.measure_paired(dt, dt, PAIRED_TRIAL_S, **EMITTED_CPU_COMPILE_OPTIONS).seconds)
                                   for _ in range(SELF_TRIALS)]
            if journal:
                journal.add("self", p=p.name, v=self_ratios[p.name])
            log(f"{p.name}: default against itself, {SELF_TRIALS} trials: "
                + " ".join(f"{r:.3f}" for r in self_ratios[p.name]))

        def one(p, arm, s, prior=None):
            cache = caches[p.name]
            if (p.name, s) in runs[arm]:  # finished before a restart (the cache)
                return
            measured, pricer, weight = run_arm_paired(p, arm, s, trials, ev, cache, prior, reference=refs[p.name])
            keys = [p.space.config_digest(c) for c in measured]
            for k, c in zip(keys, measured):
                if k not in cache["configs"]:
                    cache.add_config(k, c)
                    order[p.name].append(cache["configs"][k])
            runs[arm][(p.name, s)] = {"keys": keys, "prior_weight": weight}
            if journal:
                journal.add("run", arm=arm, p=p.name, seed=s, trials=trials, keys=keys, prior_weight=weight)

        history_info: dict = {}
        models: dict = {}
        skipped: dict = {}
        ordered = [a for a in XLA_PAIRED_ORDER if a in arms] + [a for a in arms if a not in XLA_PAIRED_ORDER]
        ordered = [a for a in ordered if not a.endswith("+ transfer")] + [a for a in ordered if a.endswith("+ transfer")]
        for s in range(seeds):
            if deadline_s is not None and time.time() - t0 > deadline_s:
                skipped = {arm: list(range(s, seeds)) for arm in ordered}
                log(f"xla paired: seeds {s}..{seeds - 1} skipped: past the deadline")
                break
            for arm in ordered:
                if arm.endswith("+ transfer") and not models:  # the history: what the arms before measured
                    done = {e["p"]: e["kernels"] for e in journal.of("history")} if journal else {}
                    for p in probs:
                        if p.name in done:  # in the store beside the cache
                            continue
                        n = kernel_history(p, order[p.name], kev, store, history_s)
                        log(f"history: {p.name}: {n} kernels measured standalone ({time.time() - t0:.0f} s)")
                        if journal:
                            journal.add("history", p=p.name, kernels=n)
                    for p in probs:
                        excluded = {q.sha for q in probs if q.family == p.family}
                        hist = load_history(store, "fusion", "cpu", kev.store_namespace, kev.machine, excluded)
                        models[p.family] = fit_global_model(hist, seed=0)
                        history_info[p.family] = hist.describe()
                for p in probs:
                    one(p, arm, s, models[p.family] if arm.endswith("+ transfer") else None)
                loads.append(load_average())
                log(f"xla paired: seed {s} {arm} done ({time.time() - t0:.0f} s, load {loads[-1]})")
        best = {e["p"]: dict(e["best"], final={int(k): v for k, v in e["best"]["final"].items()})  # JSON: str keys
                for e in journal.of("best")} if journal else {}
        for p in probs:
            if p.name not in best:
                best[p.name] = best_known_paired(p, ev, caches[p.name], refs[p.name], log)
                if journal:
                    journal.add("best", p=p.name, best=best[p.name])
        loads.append(load_average())
        trial_walls = [v[1].get("wall_s") for c in caches.values() for k, v in c.items()
                       if k not in ("default_s", "configs") and v[1].get("wall_s")]
        failures = [v[1]["status"] for c in caches.values() for k, v in c.items()
                    if k not in ("default_s", "configs") and v[1].get("status") != "ok"]
    finally:
        ev.close()
        kev.close()
        if journal:
            journal.close()
    open_problems = [p.name for p in probs if best[p.name]["open"]]
    result: dict = {"kind": "fusion", "evaluator": "xla", "target": "cpu", "trial_cost": "paired",
                    "arm_order": ordered, "skipped_seeds": skipped, "cache": cache_path, "resumed_runs": resumed, "genetic_params": XLA_PAIRED_GENETIC,
                    "paired_trial_s": PAIRED_TRIAL_S, "remeasure_s": REMEASURE_S, "trials": trials, "seeds": seeds,
                    "batch": XLA_PAIRED_BATCH, "problems": [p.name for p in probs],
                    "families": sorted({p.family for p in probs}), "history": history_info,
                    "best_known": {k: v["best_ratio"] for k, v in best.items()},
                    "best_known_detail": {k: {x: v[x] for x in ("best_ratio", "best_interval", "remeasured", "open")}
                                          for k, v in best.items()},
                    "default": {p.name: 1.0 for p in probs}, "default_s": {k: c.get("default_s") for k, c in caches.items()},
                    "self_ratios": self_ratios, "open_problems": open_problems, "arms": {},
                    "distinct_configurations": {k: len(c["configs"]) for k, c in caches.items()},
                    "trial_wall_s_median": float(np.median(trial_walls)) if trial_walls else None,
                    "trial_failures": failures[:20], "n_trial_failures": len(failures),
                    "machine": ev.machine, "wall_s": time.time() - t0, "loads": loads,
                    "load_before": load_before, "load_after": loads[-1]}
    for arm in arms:
        per_run, ratio_curves = [], {}
        if not runs[arm]:
            continue
        for (name, seed), r in runs[arm].items():
            final = best[name]["final"]
            curve = [final.get(k, math.inf) for k in r["keys"]]
            per_run.append({"problem": name, "seed": seed, "trials_to_near": trials_to_near(curve, best[name]["best_ratio"]),
                            "speedup_at_cap": 1.0 / min(curve), "prior_weight": r["prior_weight"], "ratios": curve})
            if len(curve) >= trials:
                ratio_curves[(name, seed)] = np.minimum.accumulate(curve)[:trials] / best[name]["best_ratio"]
        result["arms"][arm] = arm_summary(per_run, ratio_curves, open_problems, [p.name for p in probs], trials)
    return result


def fmt_trials(v: float, cap: int) -> str:
    return f"> {cap}" if not math.isfinite(v) else f"{v:g}"


def table(res: dict) -> str:
    cap = res["trials"]
    lines = [f"| arm | median trials to within 2% | runs that got there | median best / best known after {cap} "
             f"| median speedup over the default after {cap} |", "|---|---:|---:|---:|---:|"]
    for arm, v in res["arms"].items():
        lines.append(f"| {arm} | {fmt_trials(v['median_trials'], cap)} | {100 * v['reached']:.0f}% of {v['runs']} | "
                     f"{v['median_best_over_known_at_cap']:.4f} | {v['median_speedup_over_default']:.3f}x |")
    n_open = len(res.get("open_problems", res["problems"]))
    if n_open < len(res["problems"]):
        lines += ["", f"Only the {n_open} problems whose default is not within 2% of the best known "
                      f"({', '.join(res['open_problems'])}):", "",
                  "| arm | median trials to within 2% | runs that got there |", "|---|---:|---:|"]
        for arm, v in res["arms"].items():
            if v.get("open_runs"):
                lines.append(f"| {arm} | {fmt_trials(v['open_median_trials'], cap)} | "
                             f"{100 * v['open_reached']:.0f}% of {v['open_runs']} |")
    return "\n".join(lines)


def goals(res: dict) -> str:
    a = res["arms"]
    key = "open_median_trials" if a["random"].get("open_runs") else "median_trials"
    if not all(k in a for k in ("model-based + transfer", "random", "model-based")):
        return "goals: n/a (needs the random, model-based and model-based + transfer arms)"
    t, r, m = (a[k][key] for k in ("model-based + transfer", "random", "model-based"))
    def ratio(x: float, y: float) -> str:
        if math.isinf(y) and math.isinf(x):
            return "n/a (neither got there in half the runs)"
        if math.isinf(y):
            return f"< {x:g}/{res['trials']} (the baseline did not get there in half the runs)"
        return f"{x / y:.2f}"
    scope = "on the open problems" if key.startswith("open") else "on all problems"
    return (f"{scope}: transfer / random = {ratio(t, r)} (goal <= 1/3); transfer / model-based = {ratio(t, m)} "
            f"(goal <= 1/2)")


def plot(results: list, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(results), figsize=(5.5 * len(results), 4.0), squeeze=False)
    for ax, res in zip(axes[0], results):
        for arm, v in res["arms"].items():
            y = np.asarray(v.get("open_median_curve") or v["median_curve"])
            ax.plot(np.arange(1, len(y) + 1), y, label=arm, lw=1.8 if "transfer" in arm else 1.2)
        ax.axhline(NEAR, color="grey", ls=":", lw=1)
        ax.set_xlabel("hardware trials")
        ax.set_ylabel("best so far / best known (median over runs)")
        n = len(res.get("open_problems") or res["problems"])
        subset = f" of {len(res['problems'])} (default not within 2%)" if n < len(res["problems"]) else ""
        kind = "XLA:CPU fusion, paired end-to-end trials" if res.get("trial_cost") == "paired" else res["kind"]
        ax.set_title(f"{kind}: {n}{subset} {'programs' if res['kind'] == 'fusion' else 'kernels'}, "
                     f"{res['seeds']} seeds", fontsize=10)
        ax.set_xscale("log")
        top = max(max((v.get("open_median_curve") or v["median_curve"])[:3] or [1.1]) for v in res["arms"].values())
        ax.set_ylim(0.99, min(top, 1.6) + 0.01)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: "list | None" = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--spaces", nargs="+", default=["tile", "fusion"], choices=["tile", "fusion"])
    ap.add_argument("--fusion-trials", type=int, default=160)
    ap.add_argument("--tile-trials", type=int, default=48)
    ap.add_argument("--tiles-per-family", type=int, default=2)
    ap.add_argument("--tile-min-tiles", type=int, default=30)
    ap.add_argument("--xla", action="store_true",
                    help="fusion on real XLA:CPU (--evaluator xla --target cpu): XLA_PROGRAMS, arms XLA_ARMS; "
                         "a configuration's cost is its kernels' measurements (each measured once, through the store)")
    ap.add_argument("--xla-trials", type=int, default=32)
    ap.add_argument("--xla-paired", action="store_true",
                    help="fusion on real XLA:CPU with paired end-to-end trials (PairedProgramCost): programs "
                         "XLA_PAIRED_PROGRAMS, the five arms, the best known by the rule of best_known_paired")
    ap.add_argument("--deadline-seconds", type=float, default=None,
                    help="--xla-paired: no further seed starts after this much wall time (the best known is still "
                         "measured)")
    ap.add_argument("--cache", default=None, metavar="JSONL",
                    help="--xla-paired: the trial cache (trials, finished runs, history, best known), read first and "
                         "appended to as the run goes, so that a killed run restarts without timing anything again "
                         "(the transfer history's kernels: JSONL.store.sqlite beside it)")
    ap.add_argument("--history-seconds", type=float, default=60.0,
                    help="--xla-paired: standalone kernel measurements per program for the transfer history")
    ap.add_argument("--programs", nargs="+", default=None,
                    help="fusion programs of examples/hlo (default FUSION_PROGRAMS; with --xla XLA_PROGRAMS)")
    ap.add_argument("--extra-arms", action="store_true",
                    help="also EXTRA_ARMS: the fine-tuned GNN as local model, with and without transfer; transfer "
                         "with batches of 4 (fusion)")
    ap.add_argument("--arms", nargs="+", default=None, metavar="ARM",
                    help=f"fusion/tile: run only these arms (of {', '.join(ARM_STRATEGY)}; overrides --extra-arms)")
    ap.add_argument("--best-known", default=None, metavar="JSON",
                    help="fusion: the best known is also the best of this earlier run (--json file), so that "
                         "arms run apart are measured against one reference")
    ap.add_argument("--gnn-programs", nargs="+", default=None, metavar="NAME",
                    help="run the GNN arms only on these fusion programs (they are ~8x slower than XGBoost's)")
    ap.add_argument("--quick", action="store_true", help="2 seeds, 3 programs / 6 kernels, fewer trials (smoke run)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--plot", default=None)
    ap.add_argument("--load", nargs="+", default=None, metavar="JSON",
                    help="plot and tabulate the results of earlier runs (--json files) instead of running")
    args = ap.parse_args(argv)
    if args.load:
        results = [r for path in args.load for r in json.load(open(path))]
        for res in results:
            print(f"\n### {res['kind']}\n\n{table(res)}\n\n{goals(res)}")
        if args.plot:
            plot(results, args.plot)
        return {r["kind"]: r for r in results}
    os.environ.setdefault("AUTOTUNE_NO_MICROBENCH", "1")
    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    seeds = 2 if args.quick else args.seeds
    results = []
    t0 = time.time()
    for kind in (["xla-paired"] if args.xla_paired else ["xla"] if args.xla else args.spaces):
        if kind == "xla-paired":
            res = run_xla_paired(args.programs or XLA_PAIRED_PROGRAMS, seeds, args.xla_trials, log,
                                 arms=tuple(args.arms) if args.arms else ARMS, history_s=args.history_seconds,
                                 deadline_s=args.deadline_seconds, cache_path=args.cache)
            kind = "fusion"
        elif kind == "xla":
            res = run_xla(args.programs or XLA_PROGRAMS, seeds, args.xla_trials, log)
            kind = "fusion"
        elif kind == "fusion":
            probs = fusion_problems(args.programs or (FUSION_PROGRAMS[:3] if args.quick else FUSION_PROGRAMS))
            arms = tuple(args.arms) if args.arms else ARMS + (EXTRA_ARMS if args.extra_arms else ())
            known = None
            if args.best_known:
                earlier = next(r for r in json.load(open(args.best_known)) if r["kind"] == "fusion")
                known = earlier["best_known"]
            res = run_space("fusion", probs, seeds, 40 if args.quick else args.fusion_trials, log, arms=arms,
                            slow_arms=tuple(a for a in arms if "gnn" in a),
                            slow_problems=set(args.gnn_programs) if args.gnn_programs else None, best_known=known)
        else:
            probs = tile_problems(TILE_QUICK if args.quick else None, 1 if args.quick else args.tiles_per_family,
                                  6 if args.quick else 30, 50 if args.quick else args.tile_min_tiles)
            arms = ARMS + (tuple(a for a in EXTRA_ARMS if a not in BATCH) if args.extra_arms else ())
            res = run_space("tile", probs, seeds, 24 if args.quick else args.tile_trials, log, arms=arms)
        results.append(res)
        if args.json:  # on disk before anything is printed
            with open(args.json, "w") as f:
                json.dump(results, f, indent=1)
        print(f"\n### {kind}: {len(res['problems'])} {'programs' if kind == 'fusion' else 'kernels'} "
              f"({', '.join(res['problems'])}), families {', '.join(res['families'])}, seeds 0..{seeds - 1}, "
              f"up to {res['trials']} trials\n")
        print(table(res))
        print("\n" + goals(res))
        print("per problem (median trials):")
        for arm, v in res["arms"].items():
            print(f"  {arm}: " + ", ".join(f"{k} {fmt_trials(x, res['trials'])}"
                                            for k, x in v["per_problem_median_trials"].items()))
        if res.get("trial_cost") == "paired":
            print(f"XLA:CPU on {res['machine']}, paired end-to-end trials of {res['paired_trial_s']} s "
                  f"(median wall per trial {res['trial_wall_s_median']:.2f} s, compilation included), "
                  f"{res['distinct_configurations']} distinct configurations, {res['n_trial_failures']} failed; "
                  f"{res['wall_s']:.0f} s; load averages {res['loads']}")
            for name, d in res["best_known_detail"].items():
                lo, hi = d["best_interval"]
                sr = res["self_ratios"][name]
                print(f"  {name}: default {res['default_s'][name] * 1e3:.3f} ms; best known ratio {d['best_ratio']:.4f} "
                      f"(x{1 / d['best_ratio']:.3f}; 95% {lo} - {hi}); {'open' if d['open'] else 'NOT open'}; "
                      f"default vs itself per trial: median {statistics.median(sr):.4f}, "
                      f"range {min(sr):.4f}-{max(sr):.4f}")
        elif res.get("evaluator") == "xla":
            print(f"XLA:CPU on {res['machine']}: {res['measurements']} kernel measurements, {res['wall_s']:.0f} s; "
                  f"load average before {res['load_before']}, after {res['load_after']}")
        hist = next(iter(res["history"].values()), None)  # None: no transfer arm ran
        if hist is not None:
            print(f"history per left-out family: e.g. {hist['rows']} rows, {hist['kernels']} kernels, "
                  f"{hist['programs']} programs, machines {hist['machines']}")
    print(f"\n{time.time() - t0:.0f} s total")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    if args.plot:
        plot(results, args.plot)
    return {r["kind"]: r for r in results}


if __name__ == "__main__":
    main()
