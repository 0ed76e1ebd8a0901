"""Strategy interface (ask/tell) and the strategy registry.

A strategy proposes configurations of a `Space` (fusion, tile or layout: autotune/compiler/space.py,
with the optional capabilities listed there) and learns from their costs; it never evaluates anything
itself. The tuner (autotune/tuning/tuner.py) owns budgets, cost evaluation,
memoization, de-duplication, logging, checkpoints and progress display. The shape follows AutoTVM's
tuners and Optuna's samplers, reduced to two calls:

    strategy = get_strategy("annealing")(space, seed=0)
    while budget_left:
        configs = strategy.ask(n)             # up to n configurations (fewer is fine)
        strategy.tell(configs, costs(configs))  # seconds; inf for failures

Contracts every strategy keeps (`autotune.testing.contracts.check_strategy` checks them, docs/plugins.md):
- `ask(n)` returns between 1 and n valid configurations, unless `finished` is True (then it may
  return []). It never returns the same configuration twice within one call, nor one it asked before
  (when every asked configuration is told).
- `tell(configs, costs)` accepts any configurations of the space (also ones it never asked, e.g.
  warm starts from a store), in any order, and tolerates asked configurations that are never told.
- The same seed and the same told costs give the same asks; nothing global (numpy's or torch's random
  state) is drawn from.
- `state_dict()` is picklable (configurations stored as `space.encode(...)`, rng state included);
  `load_state_dict()` on a fresh instance over the same space resumes exactly where it stopped.

Strategies are found by name: built-ins ("random", "annealing", "genetic", "topk", "model-based"), classes added
with `register_strategy`, entry points of group `autotune.strategies`, or `module:Class` /
`path/to/file.py:Class` (see `get_strategy`).
"""
from __future__ import annotations

import functools
import hashlib
import inspect
import math
from abc import ABC, abstractmethod
from typing import Any, ClassVar, Optional, Sequence

import numpy as np

from autotune.compiler.space import DigestSpace, Space
from autotune.plugins import Registry, UnknownPluginError

ENTRY_POINT_GROUP = "autotune.strategies"


class UnknownStrategyError(UnknownPluginError):
    """A strategy spec that names nothing loadable."""


# --------------------------------------------------------------------------------------------------
# Helpers shared by strategies


def as_costs(configs: Sequence[Any], costs: Sequence[float]) -> np.ndarray:
    """Costs as a float array; NaN counts as a failure (inf).

    Raises ValueError when the lengths differ (a tuner bug worth failing loudly on)."""
    arr = np.asarray(list(costs), dtype=float).reshape(-1)
    if len(arr) != len(configs):
        raise ValueError(f"tell got {len(configs)} configurations but {len(arr)} costs")
    arr[np.isnan(arr)] = math.inf
    return arr


def key_hash(key: Any) -> int:
    """A 63-bit hash of a configuration key, stable across processes (unlike hash()); visited sets
    store these instead of the keys, which keeps them small for spaces with thousands of edges."""
    data = key if isinstance(key, (bytes, bytearray)) else repr(key).encode()
    return int.from_bytes(hashlib.blake2b(bytes(data), digest_size=8).digest(), "little") >> 1


def config_hash(space: Space, cfg: Any) -> int:
    """`key_hash` of a configuration, from the space's incremental digest when it has one
    (`DigestSpace`, e.g. `FusionSpace.config_digest`: O(1) for a one-edge move, where hashing the key
    reads every bit)."""
    if _digests(type(space)):
        return space.config_digest(cfg) & ((1 << 63) - 1)  # type: ignore[attr-defined]
    return key_hash(space.encode(cfg))


@functools.lru_cache(maxsize=None)
def _digests(space_class: type) -> bool:
    """Whether a space class is a `DigestSpace` (per class, once: called for every configuration)."""
    return issubclass(space_class, DigestSpace)


class Best:
    """The best (configuration, cost) told so far; `update` returns whether it improved."""

    def __init__(self) -> None:
        self.config: Any = None
        self.cost: float = math.inf

    def update(self, configs: Sequence[Any], costs: "Sequence[float] | np.ndarray") -> bool:
        improved = False
        for cfg, c in zip(configs, costs):
            c = float(c)
            if c < self.cost:  # failures (inf) never become the best
                self.config, self.cost = cfg, c
                improved = True
        return improved

    def state_dict(self, space: Any) -> dict:
        return {"config": None if self.config is None else space.encode(self.config), "cost": self.cost}

    def load_state_dict(self, d: dict, space: Any) -> None:
        self.config = None if d.get("config") is None else space.decode(d["config"])
        self.cost = float(d.get("cost", math.inf))

    def __repr__(self) -> str:
        return f"Best(cost={self.cost:.6g})"


# --------------------------------------------------------------------------------------------------
# The interface


class Strategy(ABC):
    """Base class of search strategies over a `Space` (see the module docstring for the contracts).

    Subclasses take their own keyword parameters and pass the rest here; unknown parameters raise
    TypeError so that a typo on the command line does not silently fall back to a default.
    In `tell`, call `self.observe(configs, costs)` first: it checks lengths, maps NaN to inf,
    updates `self.best` and the counters, and returns the costs as an array.
    """

    name: ClassVar[str] = "base"

    def __init__(self, space: Space, seed: Optional[int] = None, **params: Any):
        if params:
            known = [p for p in inspect.signature(type(self).__init__).parameters
                     if p not in ("self", "space", "seed", "params")]
            raise TypeError(f"{type(self).__name__} got unknown parameter(s): {', '.join(sorted(params))} "
                            f"(accepted: {', '.join(known) or 'none'})")
        self.space = space
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.best = Best()
        self.n_asked = 0
        self.n_told = 0

    # ---- the protocol
    @abstractmethod
    def ask(self, n: int) -> list:
        """Up to n configurations to evaluate next (at least one unless `finished`)."""

    @abstractmethod
    def tell(self, configs: list, costs: "Sequence[float] | np.ndarray") -> None:
        """Costs (seconds; inf for failures) of configurations, asked or not."""

    @property
    def finished(self) -> bool:
        """True when the strategy has nothing left to propose (e.g. a small space is exhausted)."""
        return False

    def observe(self, configs: Sequence[Any], costs: Sequence[float]) -> np.ndarray:
        """Bookkeeping every `tell` starts with; returns the costs as a float array."""
        arr = as_costs(configs, costs)
        self.best.update(configs, arr)
        self.n_told += len(arr)
        return arr

    # ---- checkpoints
    def state_dict(self) -> dict:
        """Picklable state; subclasses extend the dict returned here."""
        return {"strategy": self.name, "rng": self.rng.bit_generator.state, "seed": self.seed,
                "best": self.best.state_dict(self.space), "n_asked": self.n_asked, "n_told": self.n_told}

    def load_state_dict(self, d: dict) -> None:
        """Restore `state_dict()` output into an instance built over the same space."""
        if d.get("strategy") != self.name:
            raise ValueError(f"state of strategy {d.get('strategy')!r} cannot be loaded into {self.name!r}")
        self.rng.bit_generator.state = d["rng"]
        self.seed = d.get("seed")
        self.best.load_state_dict(d["best"], self.space)
        self.n_asked = int(d.get("n_asked", 0))
        self.n_told = int(d.get("n_told", 0))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(seed={self.seed}, told={self.n_told}, best={self.best.cost:.6g})"


# --------------------------------------------------------------------------------------------------
# Registry (autotune.plugins)

def _check(obj: Any, spec: str) -> type:
    if not (isinstance(obj, type) and issubclass(obj, Strategy)):
        raise UnknownStrategyError(f"{spec!r} is not a strategy class (a subclass of search.base.Strategy)")
    return obj


STRATEGIES = Registry("strategy", ENTRY_POINT_GROUP, builtins={
    "random": "search.random:RandomSearch",
    "annealing": "search.annealing:SimulatedAnnealing",
    "genetic": "search.genetic:GeneticSearch",
    "topk": "search.topk:TopKTileSearch",
    "model-based": "search.model_based:ModelBasedSearch",
}, check=_check, error=UnknownStrategyError)


def register_strategy(name: str, cls: type) -> type:
    """Register a strategy class under a name (case-insensitive); returns the class."""
    return STRATEGIES.register(name, cls)


def list_strategies() -> list[str]:
    """Every name `get_strategy` resolves without a module path."""
    return STRATEGIES.names()


def get_strategy(spec: "str | type") -> type:
    """Resolve a strategy class: a class passes through; a string is a registered or built-in name
    (case-insensitive), an entry point of group `autotune.strategies`, `module:Class`, or
    `path/to/file.py:Class`. Raises ValueError (UnknownStrategyError) naming the known strategies."""
    return STRATEGIES.get(spec)


__all__ = ["Strategy", "Best", "UnknownStrategyError", "register_strategy", "get_strategy",
           "list_strategies", "STRATEGIES", "as_costs", "key_hash", "config_hash", "ENTRY_POINT_GROUP"]
