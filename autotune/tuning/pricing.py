"""Pricing a space's configurations with a cost model: `ProgramCost` (fusion), `TileCost` (tiles),
`LayoutCost` and `LearnedLayoutCost` (layouts), chosen by `space_cost`; all are `Pricer`s. Each batches
the cost model's calls and memoizes them (a fusion or layout move prices only the kernels it changes),
so that the Tuner's loop (autotune/tuning/tuner.py) and other callers (datasets, transfer) price alike."""
from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Any, Callable, Optional, Sequence

import numpy as np

from autotune.compiler.fusion import FusionConfig, FusionSpace
from autotune.compiler.layouts import KERNEL_CLASSES, LayoutSpace, kernel_class
from autotune.tuning.result import TuningError
from costmodels.base import CostModel, LayoutModel, Predictor


def is_fusion_space(space: Any) -> bool:
    """A program's fusion space (else: a kernel's tile space, or a layout space)."""
    return isinstance(space, FusionSpace)


def is_layout_space(space: Any) -> bool:
    """A program's layout space (autotune.compiler.layouts)."""
    return isinstance(space, LayoutSpace)


class Pricer(ABC):
    """What the Tuner prices a space's configurations with: their costs (seconds), memoized, and the
    cost model's calls counted. `space_cost` makes one from a cost model; a Pricer given as the cost
    model is used as it is (e.g. PairedProgramCost, autotune/tuning/paired_cost.py)."""

    memo: dict            # what a checkpoint keeps of the pricer: its memoized costs
    config_cost: dict     # configuration key -> seconds (the Tuner's de-duplication)
    kernel_calls: int     # calls of the cost model
    kernels_priced: int   # items (kernels, tiles, configurations) the cost model priced

    @abstractmethod
    def __call__(self, cfgs: Sequence[Any]) -> np.ndarray:
        """One cost per configuration (inf: a failure)."""

    @abstractmethod
    def is_priced(self, cfg: Any) -> bool:
        """Whether the configuration's cost is memoized already (pricing it again is free)."""


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


class ProgramCost(Pricer):
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
        from autotune.compiler.emission import Kernel
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


class TileCost(Pricer):
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


class LayoutCost(Pricer):
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
            while self.incremental and node.parent is not None and len(slots) < self.MAX_CHAIN:
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
            if c.parent is not None:
                c.parent.detach()
        return np.array([self.config_cost[k] for k in keys], dtype=float)

    def terms(self, cfgs: Sequence[Any]) -> np.ndarray:
        """[configs, len(KERNEL_CLASSES)]: each configuration's cost split by kernel class (summing to it)."""
        self(cfgs)
        return np.stack([self.config_terms[self.space.encode(c)] for c in cfgs]) if len(cfgs) else \
            np.zeros((0, len(KERNEL_CLASSES)))

    def is_priced(self, cfg: Any) -> bool:
        return self.space.encode(cfg) in self.config_cost


class LearnedLayoutCost(Pricer):
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
        self.scale = float(model.score_scale) or 1.0
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


def space_cost(space: Any, cost_model: Any) -> Pricer:
    """The memoized pricing of a space's configurations with a cost model (a CostModel, anything with
    `predict`, or a bare function); a `Pricer` (e.g. paired end-to-end trials,
    autotune/tuning/paired_cost.py) is used as it is."""
    if isinstance(cost_model, Pricer):
        return cost_model
    if isinstance(space, LayoutSpace) and isinstance(cost_model, LayoutModel):  # a layout model ranks programs
        return LearnedLayoutCost(space, cost_model)
    fn = cost_model.predict if isinstance(cost_model, Predictor) else cost_model  # cost models, the simulator, functions
    if isinstance(space, FusionSpace):
        return ProgramCost(space, fn, dedup=cost_model.dedup_by_hash if isinstance(cost_model, CostModel) else True)
    if isinstance(space, LayoutSpace):
        return LayoutCost(space, fn)
    return TileCost(space, fn)
