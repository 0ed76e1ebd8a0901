"""The search loop: a Strategy proposes fusion configurations, the Tuner prices them.

The Tuner owns what strategies should not: the wall-clock budget, cost-model calls batched and
memoized by kernel hash (a neighbor evaluation only prices the kernels it changes), de-duplication
of configurations, a log line per batch, checkpoints (best configuration and strategy state, every
few seconds and on Ctrl-C/SIGTERM), resuming, a progress bar, and hardware verification of the top
predicted configurations (paper section 7).
"""
from __future__ import annotations

import heapq
import json
import math
import os
import pickle
import signal
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import numpy as np

from .fusion import FusionConfig, FusionSpace

CHECKPOINT = "checkpoint.pkl"


class TuningError(RuntimeError):
    """A tuning run that cannot start or go on (one line, for the CLI)."""


@dataclass
class TuningResult:
    """What a run found: predicted costs, measured costs (when verified) and bookkeeping."""

    best: FusionConfig
    best_cost: float
    default_cost: float
    evaluations: int
    elapsed_s: float
    history: list = field(default_factory=list)         # (elapsed_s, evaluations, best_cost)
    measured_default: Optional[float] = None
    measured_best: Optional[float] = None
    measured_best_config: Optional[FusionConfig] = None
    verified: list = field(default_factory=list)        # [{rank, predicted_s, measured_s, status}]
    stopped_by: str = "budget"
    kernel_evaluations: int = 0

    @property
    def speedup(self) -> float:
        return self.default_cost / self.best_cost if self.best_cost > 0 else float("nan")


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
        self.config_cost: dict[bytes, float] = {}
        self.kernel_calls = 0
        self.kernels_priced = 0

    def _key(self, r: Any) -> Any:
        return r.hash if self.dedup else (r.comp, r.members)

    def _price(self, refs: Sequence) -> None:
        from .kernel import Kernel
        todo: dict = {}
        memo = self.memo
        for r in refs:
            k = self._key(r)
            if k not in memo and k not in todo:
                todo[k] = r
        if not todo:
            return
        kernels = [Kernel.from_ref(self.space, r) for r in todo.values()]
        costs = np.asarray(self.kernel_cost(kernels), dtype=float)
        if costs.shape != (len(kernels),):
            raise TuningError(f"cost model returned {costs.shape} costs for {len(kernels)} kernels")
        self.kernel_calls += 1
        self.kernels_priced += len(kernels)
        for k, c in zip(todo, costs):
            memo[k] = float(c) if np.isfinite(c) else math.inf

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
            pk = parent.key()
            if pk not in space._state_cache:
                return None
            chain.append(node)
            if pk in self.config_cost:
                return chain
            node = parent
        return None

    def __call__(self, cfgs: Sequence[FusionConfig]) -> np.ndarray:
        """Costs of configurations (one batched kernel-cost call for all new kernels)."""
        space = self.space
        states = [space.state(c) for c in cfgs]
        chains: list = []
        new_refs = []
        for c, st in zip(cfgs, states):
            ch = None if c.key() in self.config_cost else self._chain(c)
            chains.append(ch)
            if ch is None:
                if c.key() not in self.config_cost:
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
        for i, (c, st, ch) in enumerate(zip(cfgs, states, chains)):
            ck = c.key()
            if ck in self.config_cost:
                out[i] = self.config_cost[ck]
                continue
            if ch is not None:
                cost = self.config_cost[ch[-1].parent.key()]
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
        if len(self.config_cost) > 2_000_000:
            self.config_cost.clear()
        if len(memo) > 2_000_000:
            memo.clear()
        return out


class Tuner:
    """Runs a Strategy over a FusionSpace against a cost model within a wall-clock budget."""

    def __init__(self, space: FusionSpace, cost_model: Any, strategy: Any, budget: Any = "60s", *,
                 evaluator: Any = None, hw_budget: Any = None, top_k_verify: int = 10,
                 out_dir: "str | Path | None" = None, batch_size: int = 64, checkpoint_every_s: float = 5.0,
                 progress: bool = True, on_batch: Optional[Callable[[dict], None]] = None,
                 max_evaluations: Optional[int] = None,
                 on_config: Optional[Callable[[FusionConfig, float], None]] = None,
                 include_default: bool = True):
        from hardware.base import Budget

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
        self.cost = ProgramCost(space, cost_model.predict if hasattr(cost_model, "predict") else cost_model,
                                dedup=getattr(cost_model, "dedup_by_hash", True))
        self.evaluations = 0
        self.history: list = []
        self.best: Optional[FusionConfig] = None
        self.best_cost = math.inf
        self.default_cost = math.nan
        self._top: list = []   # max-heap (negated) of the best distinct predicted configurations
        self._stop: Optional[str] = None
        self._elapsed_before = 0.0
        self._log = None

    # ------------------------------------------------------------------ bookkeeping
    def _note(self, cfgs: Sequence[FusionConfig], costs: np.ndarray) -> None:
        for c, v in zip(cfgs, costs):
            if v < self.best_cost:
                self.best_cost = float(v)
                self.best = FusionConfig(bytearray(c.bits))
            if len(self._top) < self.top_k_verify or v < -self._top[0][0]:
                key = c.key()
                if all(k != key for _, _, k in self._top):
                    heapq.heappush(self._top, (-float(v), self.evaluations, key))
                    if len(self._top) > self.top_k_verify:
                        heapq.heappop(self._top)

    def top_predicted(self) -> list:
        """The best distinct configurations seen, in predicted order: [(cost, FusionConfig)]."""
        return [(-c, FusionConfig(bytearray(k))) for c, _, k in sorted(self._top, key=lambda t: -t[0])]

    def _elapsed(self) -> float:
        return self._elapsed_before + self.budget.elapsed

    def _checkpoint(self) -> None:
        if self.out_dir is None or self.best is None:
            return
        from .config_io import save_config
        save_config(self.space, self.best, self.out_dir / "best_config.json",
                    {"predicted_cost_s": self.best_cost, "evaluations": self.evaluations})
        state = {
            "version": 1, "n_edges": self.space.n_edges, "strategy": self.strategy.state_dict(),
            "strategy_name": getattr(self.strategy, "name", type(self.strategy).__name__),
            "best": bytes(self.best.bits), "best_cost": self.best_cost, "default_cost": self.default_cost,
            "evaluations": self.evaluations, "history": self.history, "memo": self.cost.memo,
            "elapsed": self._elapsed(), "top": self._top,
        }
        tmp = self.out_dir / (CHECKPOINT + ".tmp")
        with open(tmp, "wb") as f:
            pickle.dump(state, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, self.out_dir / CHECKPOINT)

    def resume(self, directory: "str | Path") -> None:
        """Restore strategy state, memoized kernel costs and the best configuration of a run."""
        path = Path(directory) / CHECKPOINT
        try:
            with open(path, "rb") as f:
                state = pickle.load(f)
        except FileNotFoundError:
            raise TuningError(f"{path}: no checkpoint to resume from") from None
        except Exception as e:  # corrupt pickle
            raise TuningError(f"{path}: unreadable checkpoint ({type(e).__name__})") from None
        if state.get("n_edges") != self.space.n_edges:
            raise TuningError(f"{path}: checkpoint is for another program or target "
                              f"({state.get('n_edges')} edges, this one has {self.space.n_edges})")
        self.strategy.load_state_dict(state["strategy"])
        self.best = FusionConfig(bytearray(state["best"]))
        self.best_cost = state["best_cost"]
        self.default_cost = state["default_cost"]
        self.evaluations = state["evaluations"]
        self.history = list(state["history"])
        self.cost.memo.update(state["memo"])
        self._elapsed_before = state["elapsed"]
        self._top = list(state["top"])

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
        if self.out_dir is not None:
            self.out_dir.mkdir(parents=True, exist_ok=True)
            self._log = open(self.out_dir / "log.jsonl", "a")
        default = self.space.default()
        if math.isnan(self.default_cost):
            self.default_cost = float(self.cost([default])[0])
        if self.best is None and self.include_default:
            self._note([default], np.array([self.default_cost]))
            self.history.append((self._elapsed(), self.evaluations, self.best_cost))
        bar = self._progress_bar()
        old_handlers = self._install_signals()
        last_ckpt = time.monotonic()
        seen = self.cost.config_cost
        try:
            self._checkpoint()
            while self._stop is None:
                if self.budget.exhausted:
                    self._stop = "budget"
                    break
                if self.max_evaluations is not None and self.evaluations >= self.max_evaluations:
                    self._stop = "max_evaluations"
                    break
                if getattr(self.strategy, "finished", False):
                    self._stop = "strategy_finished"
                    break
                n = self.batch_size
                if self.max_evaluations is not None:
                    n = max(1, min(n, self.max_evaluations - self.evaluations))
                cfgs = self.strategy.ask(n)
                if not cfgs:
                    self._stop = "strategy_finished"
                    break
                fresh_idx = [i for i, c in enumerate(cfgs) if c.key() not in seen]
                fresh = len(fresh_idx)
                costs = self.cost(cfgs)
                if self.on_config is not None:
                    for i in fresh_idx:
                        self.on_config(cfgs[i], float(costs[i]))
                self.strategy.tell(cfgs, costs)
                self.evaluations += fresh
                before = self.best_cost
                self._note(cfgs, costs)
                now = self._elapsed()
                if self.best_cost < before or not self.history or now - self.history[-1][0] > 1.0:
                    self.history.append((now, self.evaluations, self.best_cost))
                if self._log is not None:
                    self._log.write(json.dumps({"t": round(now, 4), "evaluations": self.evaluations,
                                                "batch": len(cfgs), "new": fresh,
                                                "batch_best_s": float(np.min(costs)),
                                                "best_s": self.best_cost,
                                                "kernels_priced": self.cost.kernels_priced}) + "\n")
                if self.on_batch is not None:
                    self.on_batch({"t": now, "evaluations": self.evaluations, "best_s": self.best_cost})
                if bar is not None:
                    self._update_bar(bar)
                if time.monotonic() - last_ckpt > self.checkpoint_every_s:
                    self._checkpoint()
                    if self._log is not None:
                        self._log.flush()
                    last_ckpt = time.monotonic()
        finally:
            for s, h in old_handlers.items():
                signal.signal(s, h)
            if bar is not None:
                bar.close()
            self.history.append((self._elapsed(), self.evaluations, self.best_cost))
            self._checkpoint()
            if self._log is not None:
                self._log.close()
                self._log = None
        result = TuningResult(self.best, self.best_cost, self.default_cost, self.evaluations, self._elapsed(),
                              list(self.history), stopped_by=self._stop or "budget",
                              kernel_evaluations=self.cost.kernels_priced)
        if self.evaluator is not None and self._stop in ("budget", "strategy_finished", "max_evaluations"):
            self.verify(result)
        return result

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
        """Measure the default, then the top predicted configurations in predicted order within
        the hardware budget; the best measured one wins (section 7 of the paper)."""
        from hardware.base import Budget
        ev = self.evaluator
        old_budget = ev.budget
        ev.budget = self.hw_budget if isinstance(self.hw_budget, Budget) else Budget(self.hw_budget)
        try:
            md, status = self.measure_config(self.space.default(), ev)
            result.measured_default = md if status == "ok" else None
            best_m, best_cfg = math.inf, None
            for rank, (pred, cfg) in enumerate(self.top_predicted()):
                if ev.budget.exhausted:
                    break
                m, status = self.measure_config(cfg, ev)
                result.verified.append({"rank": rank, "predicted_s": pred, "measured_s": m if status == "ok" else None,
                                        "status": status})
                if m < best_m:
                    best_m, best_cfg = m, cfg
            if best_cfg is not None and result.measured_default is not None and best_m > result.measured_default:
                # Nothing verified beat the default on hardware: keep the default, as the paper does.
                best_m, best_cfg = result.measured_default, self.space.default()
            result.measured_best = best_m if best_cfg is not None else None
            result.measured_best_config = best_cfg
        finally:
            ev.budget = old_budget
        return result

    # ------------------------------------------------------------------ progress
    def _progress_bar(self):
        if not self.progress:
            return None
        try:
            from tqdm.auto import tqdm
        except ImportError:  # pragma: no cover
            return None
        total = self.budget.seconds
        # disable=None: no bar when stderr is not a terminal (logs, CI)
        return tqdm(total=round(total, 1) if total else None, unit="s", leave=False, dynamic_ncols=True,
                    disable=None, mininterval=0.25,
                    bar_format="{l_bar}{bar}| {n:.0f}/{total:.0f}s [{remaining} left{postfix}]")

    def _update_bar(self, bar) -> None:
        el = self.budget.elapsed
        bar.n = round(min(el, bar.total or el), 1)
        rate = self.evaluations / max(self._elapsed(), 1e-9)
        bar.set_postfix_str(f"best {self.best_cost * 1e3:.4g} ms, x{self.default_cost / self.best_cost:.3f} vs default, "
                            f"{rate:,.0f} evals/s", refresh=False)
        bar.refresh()
