"""The search loop: a Strategy proposes configurations of a space, the Tuner prices them.

One Tuner for both search spaces: a program's fusion space (`FusionSpace`, priced by `ProgramCost`)
and a kernel's tile space (`TileSpace`, priced by `TileCost`). As an Optuna study does, the Tuner
owns what strategies should not: the budgets (wall clock, `max_evaluations`), cost-model calls
batched and memoized (for fusion by kernel hash: a neighbor evaluation only prices the kernels it
changes), de-duplication of configurations, checkpoints (best configuration and strategy state)
and resuming (checked against a fingerprint of the program and the options that matter, continuing
with the remaining budget). The wall-clock budget holds on programs of any size: batch sizes follow
the measured pricing time of a configuration (a cold learned model prices a from-scratch
configuration of a 50k-instruction program in seconds), the search stops when one more
configuration and the final checkpoint would not fit, and on the simulator the hardware seconds
that kernel-sum verification will not need are lent to the search (`overhead_s`: what the caller
spends of the same budget outside the search, e.g. the CLI's start-up and outputs).
What happens around the loop is callbacks (autotune/tuning/callbacks.py):
the progress bar, the jsonl log and periodic checkpoints are added from the Tuner's arguments,
early stopping and anything else is passed in `callbacks=`.

Hardware verification of the top predicted configurations is its own step, `Tuner.verify`, run
after the search (paper section 7):

* an evaluator that runs whole programs and compiles hand-made fusions (XLA:CPU: `measure_program`,
  `hand_fusions`): each candidate is emitted exactly as fused.hlo is written
  (`autotune.compiler.kernel.emit_fused_text`), compiled with `EMITTED_CPU_COMPILE_OPTIONS` and run end to
  end; its outputs must match the original program's on the same random inputs
  (`hardware.xla.output_error`), and the candidates race the default configuration's program
  (`autotune.tuning.verification.race_programs`). Where the evaluator times two programs side by side
  (`measure_paired`), the race has `1 - paired_share` of the hardware budget and its winner is then
  timed beside the default for the rest (`confirm_paired`: drift-cancelling pairs); the reported speedup
  is that paired one with its interval, and the winner is kept only if the interval is above 1 (else the
  default, with one warning). The kept program's text is what fused.hlo holds, byte for byte.
* any other evaluator (the TPU simulator): every kernel of the candidate configuration - exactly
  the kernels of its fused.hlo - is measured, times its multiplicity, summed.
* a tile space: the default tile and the top predicted tiles race on the evaluator
  (`race_programs`, as end-to-end verification): each is timed once, then the `finalists` fastest and
  the default are timed again, interleaved, `verify_rounds` more times; the lowest median wins and
  the number of timings of each is in the report, so that one lucky run cannot win.

What was verified and how, and every failure, is in `TuningResult.verification`/`warnings`.
"""
from __future__ import annotations

import hashlib
import heapq
import math
import os
import pickle
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import numpy as np

from autotune.compiler.fusion import FusionConfig, FusionSpace
from autotune.compiler.layouts import KERNEL_CLASSES, XLA_CPU_DROPS_LAYOUTS, LayoutSpace, kernel_class
from autotune.tuning.callbacks import Callback, Checkpointer, FunctionCallback, JsonlLogger, ProgressBar

CHECKPOINT = "checkpoint.pkl"
NOT_VERIFIED = {"status": "skipped", "reason": "no hardware evaluator"}
# Options whose change makes a checkpoint another run (Tuner.resume compares them).
FINGERPRINT_LABELS = {"program": "program", "target": "--target", "cost_model": "--cost-model",
                      "strategy": "--strategy", "evaluator": "--evaluator", "seed": "--seed",
                      "strategy_params": "--strategy-param", "transfer": "--transfer"}
# What a checkpoint made before an option entered the fingerprint ran with (the option's neutral value).
FINGERPRINT_DEFAULTS = {"strategy_params": "none", "transfer": "none"}


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def program_fingerprint(space: FusionSpace) -> str:
    """sha256 of the normalized program text (as parsed and printed back, without metadata)."""
    return _sha256(space.program.module.to_text(metadata=False))


def is_fusion_space(space: Any) -> bool:
    """A program's fusion space (else: a kernel's tile space, or another space with `.kernel`)."""
    return hasattr(space, "n_edges") and hasattr(space, "state")


def is_layout_space(space: Any) -> bool:
    """A program's layout space (autotune.compiler.layouts)."""
    return isinstance(space, LayoutSpace)


def space_fingerprint(space: Any) -> str:
    """What a checkpoint's "program" entry holds: the program's sha256, or a tile space's kernel hash."""
    if is_fusion_space(space) or is_layout_space(space):
        return program_fingerprint(space)
    return f"kernel:{space.kernel.hash}"


# XLA's own compile of the original program: what a user runs today, the end-to-end baseline.
ORIGINAL_COMPILE_OPTIONS = {"disable_fusion": False, "xla_flags": {}}


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


def _memoize_costs(pricer: Any, memo: dict, keys: Sequence, costs: Any, what: str) -> None:
    """Check a cost model's answer (one cost per item), count the call on `pricer`, store the costs
    (non-finite ones as inf) in `memo` under `keys`."""
    arr = np.asarray(costs, dtype=float).reshape(-1)
    if arr.shape != (len(keys),):
        raise TuningError(f"cost model returned {np.shape(costs)} costs for {len(keys)} {what}")
    pricer.kernel_calls += 1
    pricer.kernels_priced += len(keys)
    for k, c in zip(keys, arr):
        memo[k] = float(c) if np.isfinite(c) else math.inf


class ProgramCost:
    """Program cost of fusion configurations from a kernel cost function, memoized per kernel.

    `kernel_cost(kernels) -> array of seconds` is any CostModel's predict (or an evaluator's
    measurements). A configuration derived by `space.neighbor` is priced incrementally from its
    parent: only the kernels the move changed are looked up.

    The memo is keyed by canonical kernel hash (`dedup=True`, the default: equal kernels at
    different places in the program are priced once, which pays for learned models and hardware),
    or by the kernel's place, (computation, members), when pricing a kernel costs less than hashing
    it (`dedup=False`, the analytical model: CostModel.dedup_by_hash).
    """

    def __init__(self, space: FusionSpace, kernel_cost: Callable[[list], np.ndarray], dedup: bool = True):
        self.space = space
        self.kernel_cost = kernel_cost
        self.dedup = dedup
        self.memo: dict = {}
        self.config_cost: dict[int, float] = {}  # configuration digest (`config_key`) -> seconds
        self.kernel_calls = 0
        self.kernels_priced = 0

    def _key(self, r: Any) -> Any:
        return r.hash if self.dedup else (r.comp, r.members)

    def config_key(self, c: FusionConfig) -> int:
        """What `config_cost` is keyed by: the configuration's 128-bit digest (`config_digest`; the bits
        of a 34k-edge program are 34 kB: a search of 100k configurations would keep gigabytes of keys)."""
        return self.space.config_digest(c)

    def is_priced(self, c: FusionConfig) -> bool:
        return self.config_key(c) in self.config_cost

    def _price(self, refs: Sequence) -> None:
        from autotune.compiler.kernel import Kernel
        todo: dict = {}
        memo = self.memo
        for r in refs:
            k = self._key(r)
            if k not in memo and k not in todo:
                todo[k] = r
        if not todo:
            return
        kernels = [Kernel.from_ref(self.space, r) for r in todo.values()]
        _memoize_costs(self, memo, list(todo), self.kernel_cost(kernels), "kernels")

    def kernel_costs(self, refs: Sequence) -> list:
        """Memoized costs of kernel refs (pricing the ones not seen yet)."""
        self._price(refs)
        return [self.memo[self._key(r)] for r in refs]

    # A configuration reached by a short walk of neighbor moves (e.g. a chain restart) is priced
    # through its unpriced ancestors, each by its move's delta, up to this many steps back.
    MAX_CHAIN = 64

    def _chain(self, c: FusionConfig) -> Optional[list]:
        """[c, parent, ...] up to a priced ancestor (excluded) whose state is cached, each with a
        move delta; None when there is none within MAX_CHAIN steps (price c from scratch)."""
        space = self.space
        chain = []
        node = c
        while len(chain) < self.MAX_CHAIN:
            parent = node.parent
            if node.delta is None or parent is None:
                return None
            if parent.key() not in space._state_cache:
                return None
            chain.append(node)
            if self.config_key(parent) in self.config_cost:
                return chain
            node = parent
        return None

    def __call__(self, cfgs: Sequence[FusionConfig]) -> np.ndarray:
        """Costs of configurations (one batched kernel-cost call for all new kernels)."""
        space = self.space
        states = [space.state(c) for c in cfgs]
        ckeys = [self.config_key(c) for c in cfgs]
        chains: list = []
        new_refs = []
        for c, st, ck in zip(cfgs, states, ckeys):
            ch = None if ck in self.config_cost else self._chain(c)
            chains.append(ch)
            if ch is None:
                if ck not in self.config_cost:
                    new_refs.extend(st.refs())
                continue
            for node in ch:
                nst = st if node is c else space._state_cache.get(node.key())
                if nst is None:  # an intermediate state was evicted: price c from scratch
                    chains[-1] = None
                    new_refs.extend(st.refs())
                    break
                new_refs.extend(nst.kernels[k] for k, m in node.delta.items() if m is not None)
        self._price(new_refs)
        out = np.empty(len(cfgs))
        mult = space.multiplicity
        memo = self.memo
        key = self._key
        cache = space._state_cache
        for i, (c, st, ch, ck) in enumerate(zip(cfgs, states, chains, ckeys)):
            if ck in self.config_cost:
                out[i] = self.config_cost[ck]
                continue
            if ch is not None:
                cost = self.config_cost[self.config_key(ch[-1].parent)]
                for node in reversed(ch):
                    pst = cache[node.parent.key()]
                    nst = st if node is c else cache[node.key()]
                    for k, m in node.delta.items():
                        old = pst.kernels.get(k)
                        if old is not None:
                            cost -= memo[key(old)] * mult[k[0]]
                        if m is not None:
                            cost += memo[key(nst.kernels[k])] * mult[k[0]]
            else:
                cost = sum(memo[key(r)] * mult[r.comp] for r in st.refs())
            self.config_cost[ck] = cost
            out[i] = cost
        for c in cfgs:  # priced, state cached: the derivation history is no longer needed (it would
            if c.parent is not None:  # keep every configuration of a chain alive)
                c.parent.detach()
        if len(self.config_cost) > 2_000_000:
            self.config_cost.clear()
        if len(memo) > 2_000_000:
            memo.clear()
        return out


class TileCost:
    """Cost of tiles of one kernel's tile space from `kernel_cost(kernels, tiles) -> seconds`,
    memoized by tile (one batched call per batch for the tiles not priced before)."""

    def __init__(self, space: Any, kernel_cost: Callable[..., np.ndarray]):
        self.space = space
        self.kernel_cost = kernel_cost
        self.config_cost: dict = {}   # encoded tile -> seconds (the Tuner's de-duplication)
        self.memo = self.config_cost  # checkpointed as the memo
        self.kernel_calls = 0
        self.kernels_priced = 0

    def __call__(self, tiles: Sequence[Any]) -> np.ndarray:
        keys = [self.space.encode(t) for t in tiles]
        todo = {k: t for k, t in zip(keys, tiles) if k not in self.config_cost}
        if todo:
            new = list(todo.values())
            _memoize_costs(self, self.config_cost, list(todo), self.kernel_cost([self.space.kernel] * len(new), new),
                           "tiles")
        return np.array([self.config_cost[k] for k in keys], dtype=float)

    def is_priced(self, tile: Any) -> bool:
        return self.space.encode(tile) in self.config_cost


class LayoutCost:
    """Program cost of layout configurations: the kernels of the program rewritten with the layouts
    (`LayoutSpace.kernels`: copies included, shapes carrying the layouts) priced by `kernel_cost`,
    memoized by canonical kernel hash, times their multiplicity, summed.

    A configuration one move from a priced parent (`space.neighbor`: `parent` and `flips` set, as
    ProgramCost's fusion moves) is priced incrementally, as ProgramCost prices a fusion move: the
    parent's cost minus the kernels the move removes plus those it adds (`LayoutSpace.move_delta`,
    which rewrites a window around the moved node rather than the whole program); the rest of the
    program's price is reused. `incremental=False` prices every configuration from scratch."""

    MAX_CHAIN = 64  # moves back to a priced configuration (a walk from one)

    def __init__(self, space: LayoutSpace, kernel_cost: Callable[[list], np.ndarray], incremental: bool = True):
        self.space = space
        self.kernel_cost = kernel_cost
        self.incremental = incremental
        self.memo: dict = {}                          # kernel hash -> seconds
        self.config_cost: dict[bytes, float] = {}
        self.config_terms: dict[bytes, np.ndarray] = {}  # the cost split by `KERNEL_CLASSES`
        self.kernel_calls = 0
        self.kernels_priced = 0
        self.moves_incremental = 0                    # configurations priced by a move's delta
        self.moves_from_scratch = 0

    def __call__(self, cfgs: Sequence[Any]) -> np.ndarray:
        keys = [self.space.encode(c) for c in cfgs]
        fresh = {k: c for k, c in zip(keys, cfgs) if k not in self.config_cost}
        kernel_sets: dict = {}
        deltas: dict = {}
        for k, c in fresh.items():
            # a configuration a move (or a short walk of moves) from a priced one: from that one
            parent, slots, node = None, [], c
            while self.incremental and getattr(node, "parent", None) is not None and len(slots) < self.MAX_CHAIN:
                slots.extend(node.flips)
                node = node.parent
                if node.key() in self.config_cost:
                    parent = node
                    break
            d = None
            if parent is not None and math.isfinite(self.config_cost[parent.key()]):
                d = self.space.move_delta(parent, c, slots)
            if d is None:
                kernel_sets[k] = self.space.kernels(c)
            else:
                deltas[k] = (parent.key(), d)
        todo: dict = {}
        for ks in list(kernel_sets.values()) + [r + a for _, (r, a) in deltas.values()]:
            for kern in ks:
                if kern.hash not in self.memo:
                    todo.setdefault(kern.hash, kern)
        if todo:
            _memoize_costs(self, self.memo, list(todo), self.kernel_cost(list(todo.values())), "kernels")
        for k, ks in kernel_sets.items():
            terms = np.zeros(len(KERNEL_CLASSES))
            for kern in ks:
                terms[kernel_class(kern)] += self.memo[kern.hash] * kern.multiplicity
            self.config_terms[k] = terms
            self.config_cost[k] = float(sum(self.memo[kern.hash] * kern.multiplicity for kern in ks))
            self.moves_from_scratch += 1
        for k, (pk, (removed, added)) in deltas.items():
            terms = self.config_terms[pk].copy()
            cost = self.config_cost[pk]
            for sign, ks in ((-1.0, removed), (1.0, added)):
                for kern in ks:
                    v = self.memo[kern.hash] * kern.multiplicity
                    terms[kernel_class(kern)] += sign * v
                    cost += sign * v
            self.config_terms[k] = terms
            self.config_cost[k] = float(cost)
            self.moves_incremental += 1
        for c in fresh.values():  # priced: the derivation history is no longer needed
            if getattr(c, "parent", None) is not None:
                c.parent.detach()
        return np.array([self.config_cost[k] for k in keys], dtype=float)

    def terms(self, cfgs: Sequence[Any]) -> np.ndarray:
        """[configs, len(KERNEL_CLASSES)]: each configuration's cost split by kernel class (summing to it)."""
        self(cfgs)
        return np.stack([self.config_terms[self.space.encode(c)] for c in cfgs]) if len(cfgs) else \
            np.zeros((0, len(KERNEL_CLASSES)))

    def is_priced(self, cfg: Any) -> bool:
        return self.space.encode(cfg) in self.config_cost


class LearnedLayoutCost:
    """Program cost of layout configurations by a learned layout model (`predict_layouts`:
    costmodels.gnn.layout, costmodels.xgb_layout) over the program's TpuGraphs layout graph. The model
    ranks; its score differences from the default configuration's, over the model's `score_scale`
    (score units per unit of log runtime), are taken as log runtime ratios to the analytical price of
    the default: cost = analytical(default) * exp((score - score(default)) / score_scale). For the
    residual GNN that is the analytical price of the configuration times the network's learned
    correction relative to the default's. Memoized per configuration."""

    def __init__(self, space: LayoutSpace, model: Any):
        from costmodels.analytical import AnalyticalCostModel
        from autotune.tuning.tpugraphs import tpugraphs_layout_arrays, layout_config_features
        self.space, self.model = space, model
        self._config_features = layout_config_features
        self.analytical = LayoutCost(space, AnalyticalCostModel(space.target).predict)
        default = space.default()
        self.reference_s = float(self.analytical([default])[0])
        names = [(nd.computation, nd.instruction) for nd in space.nodes]
        arrays = tpugraphs_layout_arrays(space.program.module, names, layout_config_features(space, default)[None],
                                         [self.reference_s])
        arrays["config_analytical"] = np.array([self.reference_s])
        arrays["config_analytical_terms"] = self.analytical.terms([default])
        self.graph = model.prepare("program", "search", arrays, self.reference_s)
        self.scale = float(getattr(model, "score_scale", 1.0)) or 1.0
        self.default_score = float(model.scores(self.graph)[0])
        self.memo: dict = {}                          # encoded configuration -> seconds
        self.kernel_calls = 0
        self.kernels_priced = 0

    @property
    def config_cost(self) -> dict:
        return self.memo

    def __call__(self, cfgs: Sequence[Any]) -> np.ndarray:
        keys = [self.space.encode(c) for c in cfgs]
        fresh = list({k: c for k, c in zip(keys, cfgs) if k not in self.memo}.items())
        if fresh:
            todo = [c for _, c in fresh]
            a = self.analytical(todo)
            self.graph.set_configs({"node_config_feat": np.stack([self._config_features(self.space, c) for c in todo]),
                                    "config_runtime": np.ones(len(todo)), "config_analytical": a,
                                    "config_analytical_terms": self.analytical.terms(todo)}, self.reference_s)
            s = np.asarray(self.model.scores(self.graph), float)
            cost = self.reference_s * np.exp(np.clip((s - self.default_score) / self.scale, -50, 50))
            _memoize_costs(self, self.memo, [k for k, _ in fresh], cost, "layout configurations")
        return np.array([self.memo[k] for k in keys], dtype=float)

    def is_priced(self, cfg: Any) -> bool:
        return self.space.encode(cfg) in self.memo


def space_cost(space: Any, cost_model: Any) -> "ProgramCost | TileCost | LayoutCost | LearnedLayoutCost":
    """The memoized pricing of a space's configurations with a cost model (or a bare function); a
    configuration-level pricer (`prices_configurations`, e.g. paired end-to-end trials,
    autotune/tuning/paired_cost.py) is used as it is."""
    if getattr(cost_model, "prices_configurations", False):
        return cost_model
    if is_layout_space(space) and hasattr(cost_model, "predict_layouts"):
        return LearnedLayoutCost(space, cost_model)
    fn = cost_model.predict if hasattr(cost_model, "predict") else cost_model
    if is_fusion_space(space):
        return ProgramCost(space, fn, dedup=getattr(cost_model, "dedup_by_hash", True))
    if is_layout_space(space):
        return LayoutCost(space, fn)
    return TileCost(space, fn)


class Tuner:
    """Runs a Strategy over a fusion or tile space against a cost model within budgets (module
    docstring); `callbacks` are Callback objects (autotune/tuning/callbacks.py)."""

    def __init__(self, space: FusionSpace, cost_model: Any, strategy: Any, budget: Any = "60s", *,
                 evaluator: Any = None, hw_budget: Any = None, top_k_verify: int = 10,
                 out_dir: "str | Path | None" = None, batch_size: int = 64, checkpoint_every_s: float = 5.0,
                 progress: bool = True, on_batch: Optional[Callable[[dict], None]] = None,
                 max_evaluations: Optional[int] = None,
                 on_config: Optional[Callable[[FusionConfig, float], None]] = None,
                 include_default: bool = True, fingerprint: Optional[dict] = None,
                 reference_text: Optional[str] = None, verify_rounds: int = 5,
                 callbacks: Sequence[Callback] = (), finalists: int = 2, overhead_s: float = 0.0,
                 paired_share: float = 0.4, paired_confidence: float = 0.95):
        from hardware.base import Budget

        if not 0 < paired_share < 1:
            raise TuningError(f"paired_share must be in (0, 1), got {paired_share}")
        if not 0 < paired_confidence < 1:
            raise TuningError(f"paired_confidence must be in (0, 1), got {paired_confidence}")

        self.space = space
        self.cost_model = cost_model
        self.strategy = strategy
        self.budget = budget if isinstance(budget, Budget) else Budget(budget)
        if self.budget.seconds is not None and self.budget.seconds <= 0:
            raise TuningError(f"budget {self.budget.seconds:g}s is too small to evaluate anything")
        self.evaluator = evaluator
        self.hw_budget = hw_budget
        self.top_k_verify = top_k_verify
        self.out_dir = Path(out_dir) if out_dir else None
        self.batch_size = batch_size
        self.checkpoint_every_s = checkpoint_every_s
        self.progress = progress
        self.on_batch = on_batch
        self.max_evaluations = max_evaluations
        self.on_config = on_config  # called once per fresh configuration (e.g. to charge hardware time)
        # False: the default is priced (for the speedup) but is no candidate: a search from scratch.
        self.include_default = include_default
        # What makes a checkpoint this run: {"program": sha256, "target", "cost_model", ...}.
        self.fingerprint = dict(fingerprint) if fingerprint is not None else {"program": space_fingerprint(space),
                                                                               "target": str(space.target)}
        # The original program (end-to-end verification compares outputs with it); default: as parsed.
        self.reference_text = reference_text
        self.verify_rounds = verify_rounds  # race rounds after screening (end to end; tile repeats)
        self.finalists = finalists          # candidates raced against the default after screening
        # End to end on an evaluator that times two programs side by side (measure_paired): the share of
        # the hardware budget kept for timing the race's winner beside the default, and the interval's level.
        self.paired_share = float(paired_share)
        self.paired_confidence = float(paired_confidence)
        self.resumed_from: Optional[dict] = None
        self.cost = space_cost(space, cost_model)
        self.callbacks = self._default_callbacks() + list(callbacks)
        self.evaluations = 0
        self.history: list = []
        self.best: Optional[FusionConfig] = None
        self.best_cost = math.inf
        self.default_cost = math.nan
        self._top: list = []   # max-heap (negated) of the best distinct predicted configurations
        self._stop: Optional[str] = None
        self._elapsed_before = 0.0
        # Wall clock of this session outside the search that its budget covers (the CLI's start-up,
        # hardware verification and writing the outputs): a resumed run continues with what the
        # sessions before, overheads included, left of it.
        self.overhead_s = max(float(overhead_s), 0.0)
        self._overhead_before = 0.0
        self._default_measurement: Optional[tuple] = None  # (seconds, status) of the default, measured early
        self._hw_slack = 0.0  # hardware seconds the verification will not need, lent to the search
        self._sec_per_config: Optional[float] = None  # measured pricing time of one configuration (batches)
        self._last_sec_per_config = 0.0               # the same, of the last batch alone
        self._scratch_s: Optional[float] = None       # measured pricing time of the default, from scratch
        self._checkpoint_s = 0.0                      # measured time of the last checkpoint

    def _default_callbacks(self) -> list:
        """Progress bar, log.jsonl and checkpoints from the constructor's arguments."""
        out: list = [ProgressBar()] if self.progress else []
        if self.out_dir is not None:
            log = JsonlLogger(self.out_dir / "log.jsonl")
            out += [log, Checkpointer(self.checkpoint_every_s, flush=log.flush)]
        if self.on_batch is not None:
            out.append(FunctionCallback(self.on_batch))
        return out

    def stop(self, reason: str) -> None:
        """End the search after the current batch; `reason` becomes TuningResult.stopped_by."""
        if self._stop is None:
            self._stop = reason

    # ------------------------------------------------------------------ bookkeeping
    def _note(self, cfgs: Sequence[Any], costs: np.ndarray) -> None:
        for c, v in zip(cfgs, costs):
            if v < self.best_cost:
                self.best_cost = float(v)
                self.best = self.space.decode(self.space.encode(c))  # detached from its derivation
            if len(self._top) < self.top_k_verify or v < -self._top[0][0]:
                key = self.space.encode(c)
                if all(k != key for _, _, k in self._top):
                    heapq.heappush(self._top, (-float(v), self.evaluations, key))
                    if len(self._top) > self.top_k_verify:
                        heapq.heappop(self._top)

    def top_predicted(self) -> list:
        """The best distinct configurations seen, in predicted order: [(cost, configuration)]."""
        return [(-c, self.space.decode(k)) for c, _, k in sorted(self._top, key=lambda t: -t[0])]

    def _elapsed(self) -> float:
        return self._elapsed_before + self.budget.elapsed

    def save_checkpoint(self) -> None:
        """Write best_config.json (fusion) and checkpoint.pkl into out_dir (atomically)."""
        if self.out_dir is None or self.best is None:
            return
        t0 = self.budget.now()
        self._write_checkpoint()
        self._checkpoint_s = self.budget.now() - t0

    def _write_checkpoint(self) -> None:
        if is_fusion_space(self.space) or is_layout_space(self.space):
            from autotune.tuning.config_io import save_config
            save_config(self.space, self.best, self.out_dir / "best_config.json",
                        {"predicted_cost_s": self.best_cost, "evaluations": self.evaluations})
        state = {
            "version": 2, "n_edges": getattr(self.space, "n_edges", None), "fingerprint": self.fingerprint,
            "strategy": self.strategy.state_dict(),
            "strategy_name": getattr(self.strategy, "name", type(self.strategy).__name__),
            "best": self.space.encode(self.best), "best_cost": self.best_cost, "default_cost": self.default_cost,
            "evaluations": self.evaluations, "history": self.history, "memo": self.cost.memo,
            "elapsed": self._elapsed(), "top": self._top, "overhead": self._overhead_before + self.overhead_s,
        }
        tmp = self.out_dir / (CHECKPOINT + ".tmp")
        with open(tmp, "wb") as f:
            pickle.dump(state, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, self.out_dir / CHECKPOINT)

    @staticmethod
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

    def _check_fingerprint(self, path: Path, state: dict) -> None:
        """A checkpoint of another program, target or search: one line naming what differs."""
        have = state.get("fingerprint")
        if have is None:  # a version-1 checkpoint: only its edge count is known, which proves nothing
            raise TuningError(f"{path}: checkpoint of an older autotune without a fingerprint of its program "
                              "and options; it cannot be checked against this run (start a new one)")
        for key, want in self.fingerprint.items():
            got = have.get(key, FINGERPRINT_DEFAULTS.get(key))
            if got == want:
                continue
            label = FINGERPRINT_LABELS.get(key, key)
            if key == "program":
                raise TuningError(f"{path}: checkpoint is for another program (sha256 {str(got)[:12]}..., "
                                  f"this one {str(want)[:12]}...)")
            raise TuningError(f"{path}: checkpoint was made with {label} {got}, not {want}")
        n_edges = getattr(self.space, "n_edges", None)
        if state.get("n_edges") != n_edges:
            raise TuningError(f"{path}: checkpoint is for another program or target "
                              f"({state.get('n_edges')} edges, this one has {n_edges})")

    def resume(self, directory: "str | Path") -> None:
        """Restore strategy state, memoized kernel costs and the best configuration of a run.

        The checkpoint must have this run's fingerprint (program, target, cost model, strategy,
        evaluator, seed; the CLI adds strategy parameters and the transfer history: TuningError naming
        what differs). The search budget becomes what the earlier run(s) left of it: `budget - elapsed` (TuningError when nothing is left)."""
        from hardware.base import Budget
        path = Path(directory) / CHECKPOINT
        state = self.read_checkpoint(directory)
        self._check_fingerprint(path, state)
        elapsed = float(state.get("elapsed", 0.0))
        overhead_before = float(state.get("overhead", 0.0))
        total = self.budget.seconds
        if total is not None:
            used = elapsed + overhead_before           # what the earlier sessions spent of the budget
            left = total + self.overhead_s - used      # of this session's budget, its own overhead included
            if left - self.overhead_s <= 0:
                raise TuningError(f"{path}: the run already used {used:.1f}s of its {total + self.overhead_s:g}s "
                                  f"budget" + (f" (this session needs {self.overhead_s:.1f}s outside the search)"
                                               if self.overhead_s else "")
                                  + "; pass a larger --budget to continue it")
            self.budget = Budget(left - self.overhead_s)
        try:
            self.strategy.load_state_dict(state["strategy"])
        except Exception as e:  # another strategy's state or options (e.g. a different chain count)
            raise TuningError(f"{path}: checkpoint does not fit this strategy ({type(e).__name__}: "
                              f"{str(e).splitlines()[0] if str(e) else ''})") from None
        self.best = self.space.decode(state["best"])
        self.best_cost = state["best_cost"]
        self.default_cost = state["default_cost"]
        self.evaluations = state["evaluations"]
        self.history = list(state["history"])
        self.cost.memo.update(state["memo"])
        self._elapsed_before = elapsed
        self._overhead_before = overhead_before
        self._top = list(state["top"])
        self.resumed_from = {"directory": str(directory), "evaluations": self.evaluations, "elapsed_s": elapsed,
                             "search_budget_s": total, "remaining_s": self.budget.seconds}

    def _install_signals(self) -> dict:
        old = {}

        def handler(signum, frame):
            self._stop = signal.Signals(signum).name
        for s in (signal.SIGINT, signal.SIGTERM):
            try:
                old[s] = signal.signal(s, handler)
            except ValueError:  # not the main thread
                pass
        return old

    # ------------------------------------------------------------------ main loop
    def run(self) -> TuningResult:
        """Search until a budget, the strategy or a callback stops it; then verify on hardware."""
        if self.out_dir is not None:
            self.out_dir.mkdir(parents=True, exist_ok=True)
        default = self.space.default()
        if math.isnan(self.default_cost):
            t0 = self.budget.now()
            self.default_cost = float(self.cost([default])[0])
            # a configuration priced from scratch: what the first batch's size is planned with
            self._scratch_s = self.budget.now() - t0
        if self.best is None and self.include_default:
            self._note([default], np.array([self.default_cost]))
            self.history.append((self._elapsed(), self.evaluations, self.best_cost))
        self._lend_verification_slack()
        old_handlers = self._install_signals()
        result: Optional[TuningResult] = None
        try:
            for cb in self.callbacks:
                cb.on_start(self)
            while self._stop is None:
                self._stop = self._budget_stop()
                if self._stop is None:
                    self._step()
        finally:
            for s, h in old_handlers.items():
                signal.signal(s, h)
            self.history.append((self._elapsed(), self.evaluations, self.best_cost))
            result = TuningResult(self.best, self.best_cost, self.default_cost, self.evaluations, self._elapsed(),
                                  list(self.history), stopped_by=self._stop or "budget",
                                  kernel_evaluations=self.cost.kernels_priced)
            for cb in self.callbacks:
                cb.on_end(self, result)
        if self.evaluator is None:
            result.verification = {"status": "skipped", "reason": "no hardware evaluator (no hardware budget)"}
        elif self._stop in ("budget", "strategy_finished", "max_evaluations", "early_stopping"):
            t0 = time.monotonic()
            self.verify(result)
            result.verification["seconds"] = round(time.monotonic() - t0, 3)
            if self._hw_slack:
                result.verification["hw_seconds_lent_to_search"] = round(self._hw_slack, 3)
        else:
            result.verification = {"status": "skipped", "reason": f"the search was interrupted ({self._stop})"}
            result.warnings.append(f"not verified: the search was interrupted ({self._stop}); "
                                   "fused.hlo holds the best predicted configuration")
        return result

    def _lend_verification_slack(self) -> None:
        """Kernel-sum verification on an exact evaluator (the simulator) takes about top_k times a
        warm measurement of the default: measure the default now (verification reuses it), time a
        second, warm measurement, and lend the hardware seconds verification will not need (with a
        2x margin) to the search, so that the run ends near its budget rather than early by the
        verification's spare time."""
        from hardware.base import Budget
        ev = self.evaluator
        if (ev is None or not is_fusion_space(self.space) or hasattr(ev, "measure_program")
                or self.budget.seconds is None or self._default_measurement is not None):
            return
        hw = self.hw_budget.seconds if isinstance(self.hw_budget, Budget) else Budget(self.hw_budget).seconds
        if not hw:
            return
        old = ev.budget
        ev.budget = Budget(None)
        try:
            self._default_measurement = self.measure_config(self.space.default(), ev)
            t0 = self.budget.now()  # again, warm (the first one sized and tiled every kernel)
            self.measure_config(self.space.default(), ev)
            took = self.budget.now() - t0
        finally:
            ev.budget = old
        slack = hw - 2.0 * took * self.top_k_verify
        if slack > 0:
            self._hw_slack = slack
            self.budget.seconds += slack

    def _budget_stop(self) -> Optional[str]:
        """Why the search must stop before the next batch (None: go on). The search also stops when
        what is left of the budget would not price one more configuration and write the final
        checkpoint (both measured), so that the run ends within its budget."""
        if self.budget.exhausted:
            return "budget"
        if self.budget.seconds is not None and self._sec_per_config is not None \
                and self.budget.remaining < max(self._sec_per_config, self._last_sec_per_config) + self._checkpoint_s:
            return "budget"
        if self.max_evaluations is not None and self.evaluations >= self.max_evaluations:
            return "max_evaluations"
        if getattr(self.strategy, "finished", False):
            return "strategy_finished"
        return None

    def _step(self) -> None:
        """One batch: ask, price (memoized), tell, book-keep, call the callbacks."""
        n = self._batch_len()
        t0 = self.budget.now()
        cfgs = self.strategy.ask(n)
        if not cfgs:
            self._stop = "strategy_finished"
            return
        fresh_idx = [i for i, c in enumerate(cfgs) if not self.cost.is_priced(c)]
        costs = self.cost(cfgs)
        per = (self.budget.now() - t0) / len(cfgs)
        self._sec_per_config = per if self._sec_per_config is None else 0.5 * (self._sec_per_config + per)
        self._last_sec_per_config = per
        if self.on_config is not None:
            for i in fresh_idx:
                self.on_config(cfgs[i], float(costs[i]))
        self.strategy.tell(cfgs, costs)
        self.evaluations += len(fresh_idx)
        before = self.best_cost
        self._note(cfgs, costs)
        now = self._elapsed()
        if self.best_cost < before or not self.history or now - self.history[-1][0] > 1.0:
            self.history.append((now, self.evaluations, self.best_cost))
        info = {"t": now, "evaluations": self.evaluations, "batch": len(cfgs), "new": len(fresh_idx),
                "batch_best_s": float(np.min(costs)), "best_s": self.best_cost,
                "kernels_priced": self.cost.kernels_priced}
        for cb in self.callbacks:
            cb.on_batch(self, info)

    def _batch_len(self) -> int:
        """Configurations to ask for: `batch_size`, fewer when a whole batch at the measured cost of
        a configuration would overrun the budget (a cold learned model prices a from-scratch
        configuration of a large program in seconds), or `max_evaluations` is near. Before any batch
        is measured, a batch whose configurations priced like the default from scratch could take a
        quarter of what is left starts with one configuration."""
        n = self.batch_size
        if self.max_evaluations is not None:
            n = max(1, min(n, self.max_evaluations - self.evaluations))
        if self.budget.seconds is None:
            return n
        room = self.budget.remaining - self._checkpoint_s
        per = self._sec_per_config
        if per is None:  # nothing measured yet (a resumed run: not even the default): one configuration
            scratch = self._scratch_s  # first, unless a batch is cheap for sure
            return n if scratch is not None and scratch * n <= room / 4 else 1
        per = max(per, self._last_sec_per_config)  # the slower of the running mean and the last batch
        if per > 0 and per * n > room:
            n = max(1, min(n, int(room / per)))
        return n

    # ------------------------------------------------------------------ hardware verification
    def measure_config(self, cfg: FusionConfig, evaluator: Any) -> tuple[float, str]:
        """Program runtime of a configuration on the evaluator: sum of its kernels' measurements."""
        kernels = self.space.kernels(cfg)
        ms = evaluator.measure(kernels)
        total = 0.0
        for k, m in zip(kernels, ms):
            if not m.ok:
                return math.inf, f"kernel {k.hash} ({k.root_instruction.name}): {m.status}"
            total += m.seconds * k.multiplicity
        return total, "ok"

    def verify(self, result: TuningResult) -> TuningResult:
        """Measure the default and the top predicted configurations on the evaluator within the
        hardware budget; the best measured one wins (section 7 of the paper). End to end where the
        evaluator runs whole programs (module docstring), else by kernel sums."""
        from hardware.base import Budget
        ev = self.evaluator
        old_budget = ev.budget
        hw = self.hw_budget if isinstance(self.hw_budget, Budget) else Budget(self.hw_budget)
        if self._hw_slack and hw.seconds is not None:
            hw = Budget(max(hw.seconds - self._hw_slack, 0.0))
        ev.budget = Budget(None)  # the verification keeps to the hardware budget itself
        try:
            if is_layout_space(self.space) and hasattr(ev, "measure_program"):
                self._verify_layout_outputs(result, hw.seconds)
            elif is_layout_space(self.space):
                self._verify_kernel_sums(result, hw)
                if "how" in result.verification:
                    result.verification["how"] = result.verification["how"].replace("fused.hlo", "layouts.hlo")
            elif not is_fusion_space(self.space):
                self._verify_tile_race(result, hw.seconds)
            elif hasattr(ev, "measure_program") and getattr(ev, "hand_fusions", False):
                self._verify_end_to_end(result, hw.seconds)
            else:
                self._verify_kernel_sums(result, hw)
        finally:
            ev.budget = old_budget
        return result

    def _warn(self, result: TuningResult, message: str) -> None:
        if message not in result.warnings:
            result.warnings.append(message)

    def _verify_kernel_sums(self, result: TuningResult, hw: Any) -> None:
        """Kernel-sum verification: the default first, then the top predictions in predicted order
        while the hardware budget `hw` lasts (the default and the best prediction always)."""
        ev = self.evaluator
        exact = not hasattr(ev, "measure_program")  # the simulator times kernels; XLA runs programs
        md, status = self._default_measurement or self.measure_config(self.space.default(), ev)
        result.measured_default = md if status == "ok" else None
        default_status = status
        best_m, best_cfg, best_pred, best_rank = math.inf, None, None, None
        took = 0.0  # the longest measurement of a configuration so far
        for rank, (pred, cfg) in enumerate(self.top_predicted()):
            # the best prediction always; another only when what is left covers one more measurement
            if rank > 0 and (hw.exhausted or (hw.seconds is not None and hw.remaining < took)):
                break
            t0 = hw.now()
            m, status = self.measure_config(cfg, ev)
            took = max(took, hw.now() - t0)
            result.verified.append({"rank": rank, "predicted_s": pred, "measured_s": m if status == "ok" else None,
                                    "status": status})
            if m < best_m:
                best_m, best_cfg, best_pred, best_rank = m, cfg, pred, rank
        if best_cfg is not None and result.measured_default is not None and best_m > result.measured_default:
            # Nothing verified beat the default on hardware: keep the default, as the paper does.
            best_m, best_cfg, best_pred, best_rank = (result.measured_default, self.space.default(),
                                                      result.default_cost, "default")
        if best_cfg is None and result.measured_default is not None:
            best_m, best_cfg, best_pred, best_rank = (result.measured_default, self.space.default(),
                                                      result.default_cost, "default")
        result.measured_best = best_m if best_cfg is not None else None
        result.measured_best_config = best_cfg
        result.measured_best_predicted = best_pred
        name = getattr(ev, "name", type(ev).__name__)
        result.verification = {
            "status": "verified" if best_cfg is not None else "failed",
            "method": "kernel-sum",
            "exact": exact,
            "evaluator": name,
            "how": ("every kernel of each configuration (exactly the kernels its fused.hlo holds) measured on "
                    f"the {name} evaluator, times its multiplicity, summed; the default first, then the best "
                    "predictions in predicted order within the hardware budget; the lowest sum wins, the "
                    "default unless something measured faster"),
            "winner": best_rank,
        }
        if best_cfg is None:  # one line for the whole failure
            first = result.verified[0]["status"] if result.verified else "none measured"
            result.verification["reason"] = f"no configuration could be measured (default: {default_status}; " \
                                            f"best predicted: {first})"
            self._warn(result, f"verification failed: {result.verification['reason']} on the {name} evaluator; "
                               "fused.hlo holds the best predicted configuration, unverified")
            return
        if default_status != "ok":
            self._warn(result, f"the default configuration could not be measured ({default_status}): no measured speedup")
        if result.verified and result.verified[0]["status"] != "ok":
            self._warn(result, f"the best predicted configuration failed verification ({result.verified[0]['status']})")
        if not exact:
            # Kernel sums of real hardware are not the program that runs: no measured speedup.
            result.verification["reason"] = (f"the {name} evaluator on {getattr(ev, 'platform', '?')} cannot run "
                                             "hand-made fusions end to end; kernel sums are estimates")
            result.verification["kernel_sum_default_s"] = result.measured_default
            result.verification["kernel_sum_best_s"] = result.measured_best
            result.measured_default = result.measured_best = None
            self._warn(result, "not verified end to end: " + result.verification["reason"])

    def _verify_layout_outputs(self, result: TuningResult, seconds: Optional[float]) -> None:
        """Layouts on XLA: the default and the best predicted programs (rewritten with their layouts)
        run end to end on verification inputs; their outputs must match the original program's. The
        best predicted configuration whose outputs match is kept (the default when none does)."""
        from hardware.base import Budget
        ev, space = self.evaluator, self.space
        reference = self.reference_text if self.reference_text is not None else space.program.module.to_text()
        budget = Budget(seconds)
        chosen, chosen_pred = None, None
        ranked = [("default", result.default_cost, space.default())] + \
                 [(rank, pred, cfg) for rank, (pred, cfg) in enumerate(self.top_predicted())]
        for rank, pred, cfg in ranked:
            if rank not in ("default", 0) and (budget.exhausted or chosen is not None):
                break
            text = space.emit_text(cfg)
            m = ev.measure_program(text, reference=reference)
            match = bool(m.ok and m.extra.get("outputs_match", True))
            entry = {"rank": rank, "predicted_s": pred, "sha256": _sha256(text),
                     "config_hash": space.config_hash(cfg), "copies": space.copies(cfg),
                     "status": m.status if not m.ok else ("ok" if match else "output_mismatch"),
                     "output_error": m.extra.get("output_error"), "outputs_match": match}
            if "output_error_without_excess_precision" in m.extra:  # a 16-bit program judged without it
                entry["output_error_without_excess_precision"] = m.extra["output_error_without_excess_precision"]
            result.verified.append(entry)
            if match and rank != "default":
                chosen, chosen_pred = cfg, pred
        default_ok = bool(result.verified and result.verified[0]["outputs_match"])
        if chosen is None and default_ok:
            chosen, chosen_pred = space.default(), result.default_cost
        result.measured_best_config = chosen
        result.measured_best_predicted = chosen_pred
        name = getattr(ev, "name", type(ev).__name__)
        result.verification = {
            "status": "verified" if chosen is not None else "failed", "method": "outputs", "exact": False,
            "evaluator": name, "platform": getattr(ev, "platform", None),
            "inputs": f"hardware.xla.verification_inputs (seed {getattr(ev, 'seed', 0)})",
            "how": ("the default's and the best predicted configurations' programs (rewritten with their layouts and "
                    "copies) run end to end; their outputs compared with the original program's on the same inputs "
                    "(layouts change no values); the best predicted one that matches is kept"),
            "layouts_honoured": False, "reason": XLA_CPU_DROPS_LAYOUTS,
        }
        self._warn(result, "layout timings not measured: " + XLA_CPU_DROPS_LAYOUTS)
        if chosen is None:
            reasons = "; ".join(f"{v['rank']}: {v['status']}" for v in result.verified[:2])
            result.verification["reason"] = "no program computed the original's outputs: " + reasons
            self._warn(result, f"verification failed: {result.verification['reason']}")

    def _verify_tile_race(self, result: TuningResult, seconds: Optional[float]) -> None:
        """Race the default tile and the top predicted tiles on the evaluator (module docstring)."""
        from autotune.tuning.verification import race_tiles
        ev, space = self.evaluator, self.space
        kernel = space.kernel
        default_key = space.encode(space.default())
        ranked: dict = {default_key: ("default", result.default_cost)}
        for rank, (pred, cfg) in enumerate(self.top_predicted()):
            ranked.setdefault(space.encode(cfg), (rank, pred))
        race = race_tiles(kernel, space, (space.decode(k) for k in ranked if k != default_key), ev, seconds,
                          baseline=space.decode(default_key), finalists=self.finalists, repeats=self.verify_rounds)
        for key, e in race.entries.items():
            rank, pred = ranked[key]
            result.verified.append({"rank": rank, "tile": key, "predicted_s": pred,
                                    "measured_s": e.best if e.ok else None, "timings": len(e.timings),
                                    "status": e.status})
        base = race.entry(default_key)
        result.measured_default = base.best if base is not None and base.ok else None
        if race.winner is not None:
            result.measured_best = race.entries[race.winner].best
            result.measured_best_config = space.decode(race.winner)
            result.measured_best_predicted = ranked[race.winner][1]
        name = getattr(ev, "name", type(ev).__name__)
        result.verification = {
            "status": "verified" if race.winner is not None else "failed",
            "method": "race", "exact": True, "evaluator": name, "estimate": "median",
            "repeats": self.verify_rounds, "finalists": self.finalists,
            "how": (f"the default tile and the {len(ranked) - 1} best predicted tiles timed once each on the {name} "
                    f"evaluator (while 2/3 of the hardware budget lasts), then the {self.finalists} fastest and the "
                    f"default timed {self.verify_rounds} more times, interleaved; the lowest median of a tile's "
                    "timings wins" + ("; the simulator's noise is a fixed function of (seed, kernel, tile), so its "
                                      "repeated timings agree" if name == "sim" else "")),
            "timings": race.timings, "race_rounds": race.rounds,
            "winner": ranked[race.winner][0] if race.winner is not None else None,
        }
        if race.winner is None:
            reasons = "; ".join(f"{v['rank']}: {v['status']}" for v in result.verified[:2])
            result.verification["reason"] = "every tile failed: " + reasons
            self._warn(result, f"verification failed: no tile of kernel {kernel.hash} could be measured ({reasons})")
        elif base is None or not base.ok:
            self._warn(result, f"the default tile of kernel {kernel.hash} could not be measured "
                               f"({base.status if base is not None else 'not timed'}): no measured speedup")

    def _verify_end_to_end(self, result: TuningResult, seconds: Optional[float]) -> None:
        """Race the emitted programs of the default configuration and the top predictions against XLA's
        own compile of the original program (default options: what the user runs today; module
        docstring); where the evaluator times programs side by side (``measure_paired``), the race gets
        ``1 - paired_share`` of the budget and its winner is then timed beside the original for the
        rest (`confirm_paired`): it is kept only if the paired speedup's interval is above 1. When no
        emitted program is shown faster, the result is to keep the original: fused.hlo is the original
        program with a header saying so (`keep_original_text`), and one warning line says it."""
        from autotune.compiler.kernel import EMITTED_CPU_COMPILE_OPTIONS, emit_fused_text
        from autotune.tuning.verification import race_programs
        from hardware.xla import OUTPUT_TOL, OUTPUT_TOL_16BIT
        started = time.monotonic()
        ev = self.evaluator
        paired = hasattr(ev, "measure_paired")
        space = self.space
        original = self.reference_text if self.reference_text is not None else space.program.module.to_text()
        emitted: dict = {}    # text -> (rank or "default", FusionConfig, predicted seconds)
        emit_failures: list = []

        def emit(cfg: FusionConfig) -> Optional[str]:
            try:
                return emit_fused_text(space, cfg, header=True)  # exactly as write_fusion_outputs writes fused.hlo
            except Exception as e:  # an emitter bug must not lose the run: record it, go on
                emit_failures.append(f"emit_error: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
                return None

        default_cfg = space.default()
        default_text = emit(default_cfg)

        def candidates():
            if default_text is not None:
                emitted[default_text] = ("default", default_cfg, result.default_cost)
                yield default_text
            for rank, (pred, cfg) in enumerate(self.top_predicted()):
                text = emit(cfg)
                if text is None:
                    result.verified.append({"rank": rank, "predicted_s": pred, "measured_s": None,
                                            "status": emit_failures[-1]})
                    continue
                if text not in emitted:
                    emitted[text] = (rank, cfg, pred)
                    yield text

        def time_program(text: str, first: bool) -> Any:
            if text == original:  # XLA's own compile, as the user runs it today
                return ev.measure_program(text, **ORIGINAL_COMPILE_OPTIONS)
            return ev.measure_program(text, reference=original if first else None, **EMITTED_CPU_COMPILE_OPTIONS)

        race_seconds = seconds * (1 - self.paired_share) if paired and seconds is not None else seconds
        race = race_programs(time_program, candidates(), race_seconds, baseline=original,
                             max_rounds=self.verify_rounds, min_rounds=min(2, self.verify_rounds))
        for text, e in race.entries.items():
            if text == original:
                continue
            rank, cfg, pred = emitted[text]
            result.verified.append({"rank": rank, "sha256": _sha256(text), "predicted_s": pred,
                                    "measured_s": e.best if e.ok else None,
                                    "timings": len(e.timings), "status": e.status,
                                    "output_error": e.extra.get("output_error"),
                                    **({"output_error_vs_f64": e.extra["output_error_vs_f64"]}
                                       if "output_error_vs_f64" in e.extra else {}),
                                    "kernels": len(space.state(cfg).refs()), "fused_edges": cfg.count()})
        result.verified.sort(key=lambda v: (v["rank"] != "default", v["rank"] if v["rank"] != "default" else -1))
        base = race.entry(original)
        result.measured_original = base.best if base is not None and base.ok else None
        dflt = race.entry(default_text)
        result.measured_default = dflt.best if dflt is not None and dflt.ok else None
        winner = race.winner if race.winner != original else None
        if winner is not None:
            rank, cfg, pred = emitted[winner]
            result.measured_best = race.entries[winner].best
            result.measured_best_config = cfg
            result.measured_best_predicted = pred
            result.fused_text = winner
        verified_any = any(t != original and e.ok for t, e in race.entries.items())
        result.verification = {
            "status": "verified" if verified_any else "failed",
            "method": "end-to-end",
            "exact": True,
            "evaluator": getattr(ev, "name", type(ev).__name__),
            "platform": getattr(ev, "platform", None),
            "baseline": "original: XLA's own compile of the original program (default options)",
            "baseline_compile_options": ORIGINAL_COMPILE_OPTIONS,
            "compile_options": EMITTED_CPU_COMPILE_OPTIONS,
            "inputs": f"hardware.xla.verification_inputs (seed {getattr(ev, 'seed', 0)})",
            "output_tolerance": {"float": OUTPUT_TOL, "16-bit float": OUTPUT_TOL_16BIT,
                                 "float of a program computing in 16-bit floats": OUTPUT_TOL_16BIT,
                                 "integer": "exact",
                                 "beyond tolerance": "passes if as accurate as the original against the "
                                                     "program computed in f64 (hardware.xla.accuracy_fallback)"},
            "how": ("the original program compiled by XLA with its default options (what the user runs "
                    "today) is the baseline and the output reference; each candidate (the default "
                    "configuration, then the best predictions) emitted exactly as fused.hlo is written, "
                    "compiled with compile_options and run end to end; its outputs compared with the "
                    "original's on the same inputs (a mismatch fails it); the original timed first, the "
                    "candidates once each in that order for 2/3 of the hardware budget, then the two fastest "
                    "and the original timed again, interleaved, for at least two rounds and until the budget "
                    f"is spent or {self.verify_rounds} rounds are done; the lowest median over a program's "
                    "timings wins; when the original wins, or no candidate is shown faster, fused.hlo is the "
                    "original program (keep it)" + (
                        f"; the race had {1 - self.paired_share:.0%} of the hardware budget, then its winner was timed "
                        "beside the original for the rest (paired: short alternating blocks O W O W ... O, each "
                        "winner block over the original's block before it and over the one after it, so that the "
                        "machine's drift cancels; the median ratio, with a block-bootstrap interval), and kept only "
                        "if the whole "
                        f"{self.paired_confidence:.0%} interval of the paired speedup is above 1" if paired else "")),
            "programs_timed": len(race.entries), "timings": race.timings, "race_rounds": race.rounds,
            "winner": (emitted[winner][0] if winner is not None else "original" if race.winner == original
                       else None),
            "fused_hlo_sha256": _sha256(winner) if winner is not None else None,
        }
        if not verified_any:  # one line for the whole failure
            reasons = "; ".join(f"{v['rank']}: {v['status']}" for v in result.verified[:2])
            if not result.verified and emit_failures:
                reasons = emit_failures[0]
            result.verification["reason"] = "every program failed: " + reasons
            if base is not None and base.ok:
                self._keep_original(result, original, f"no tuned program could be verified end to end ({reasons})")
            else:
                self._warn(result, "verification failed: no program could be verified end to end "
                                   f"({reasons}); fused.hlo holds the best predicted configuration, unverified")
            return
        if base is None or not base.ok:
            why = base.status if base is not None else "not timed"
            self._warn(result, f"XLA's own compile of the original program could not be timed ({why}): "
                               "no measured speedup")
        first = next((v for v in result.verified if v["rank"] == 0), None)
        if first is not None and first["status"] != "ok":
            self._warn(result, f"the best predicted configuration failed verification ({first['status']}); "
                               "fused.hlo holds the best verified program")
        if base is None or not base.ok:
            return
        if winner is None:
            self._keep_original(result, original, "XLA's own compile of the original won the race "
                                f"({len(race.entries) - 1} tuned programs timed)")
            return
        if paired:
            remaining = None if seconds is None else max(0.0, seconds - (time.monotonic() - started))
            self._confirm_paired(result, race, emitted, original, remaining)

    def _keep_original(self, result: TuningResult, original: str, why: str) -> None:
        """Nothing verified beats XLA's own compile of the original: the result is to keep the original
        (fused.hlo is it, with a header saying so), said in one warning line."""
        result.keep_original = True
        result.fused_text = keep_original_text(original, why)
        result.measured_best = result.measured_original
        result.measured_best_config = None
        result.measured_best_predicted = None
        result.verification["winner"] = "original"
        result.verification["keep_original"] = why
        result.verification["fused_hlo_sha256"] = _sha256(result.fused_text)
        self._warn(result, f"keep the original: no tuned program was shown faster than XLA's own compile of it "
                           f"({why}); fused.hlo is the original program")

    def _confirm_paired(self, result: TuningResult, race: Any, emitted: dict, original: str,
                        seconds: Optional[float]) -> None:
        """Time the race's winner beside XLA's own compile of the original (`confirm_paired`); keep the
        original unless the paired speedup is above 1 beyond its interval (one warning line otherwise)."""
        from autotune.compiler.kernel import EMITTED_CPU_COMPILE_OPTIONS
        from autotune.tuning.verification import confirm_paired
        ev = self.evaluator
        ver = result.verification
        race_speedup = (result.measured_original / result.measured_best
                        if result.measured_original and result.measured_best else None)
        ver["race_speedup"] = race_speedup
        winner = emitted[race.winner][0]
        check = confirm_paired(
            lambda s: ev.measure_paired(original, race.winner, s, reference_options=ORIGINAL_COMPILE_OPTIONS,
                                        **EMITTED_CPU_COMPILE_OPTIONS),
            seconds, confidence=self.paired_confidence)
        ver["paired"] = {"candidate": winner, **check.as_dict()}
        result.paired = ver["paired"]
        if check.faster:
            return
        ver["race_winner"] = winner
        if check.status != "ok":
            why = f"the paired timing failed ({check.status})"
        elif check.low is None:
            why = f"{len(check.ratios)} block ratios are too few for an interval"
        else:
            lo, hi = check.speedup_interval
            why = (f"paired x{check.speedup:.3f}, {check.confidence:.0%} interval [{lo:.3f}, {hi:.3f}], "
                   f"{len(check.ratios)} block ratios")
        race_txt = f" (x{race_speedup:.3f} by race medians)" if race_speedup else ""
        what = f"prediction {winner}" if winner != "default" else "the default configuration"
        ver["kept_original"] = f"{what}{race_txt} not shown faster than the original when timed beside it: {why}"
        self._keep_original(result, original, ver["kept_original"])
