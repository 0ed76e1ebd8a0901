"""The interface of a search space: what strategies (search/) and the Tuner (autotune/tuning/) call on
one. `FusionSpace`, `TileSpace` and `LayoutSpace` implement `Space`; a plug-in space implements it too
(subclassing is not needed: the protocols are structural, `isinstance` checks the members).

Beyond `Space`, strategies use optional capabilities when a space has them (each a small protocol):

    MutableSpace     mutate(cfg, rng, rate)                     fusion, layout   (genetic, annealing starts)
    EdgeSpace        n_edges, edge_groups(), group_neighbor()   fusion           (mutation rates, group moves)
    DigestSpace      config_digest(cfg)                         fusion           (O(1) hashes of one-edge moves)
    WalkingSpace     walks                                      layout           (starts are walks of moves)
    KernelSpace      kernel                                     tile             (top-K ranking, checkpoints)
    EnumerableSpace  tiles()                                    tile             (model-based: score them all)
    ArraySpace       to_array(cfgs)                             tile             (model-based knob features)
    FeatureSpace     features(cfgs)                             plug-ins         (model-based knob features)
"""
from __future__ import annotations

from typing import Any, Hashable, Protocol, Sequence, runtime_checkable

import numpy as np

__all__ = ["Space", "MutableSpace", "EdgeSpace", "DigestSpace", "WalkingSpace", "KernelSpace", "EnumerableSpace",
           "ArraySpace", "FeatureSpace"]


@runtime_checkable
class Space(Protocol):
    """A search space of configurations: its default, random draws, moves, and a picklable key per
    configuration (`encode`; `decode` restores it; equal keys are equal configurations)."""

    target: Any  # the compilation target the configurations are for (its name; a tile space: its spec)

    def default(self) -> Any:
        """The compiler's own configuration (the baseline a search is measured against)."""

    def random(self, rng: np.random.Generator) -> Any:
        """A uniformly random valid configuration (as the space defines uniform)."""

    def neighbor(self, cfg: Any, rng: np.random.Generator) -> Any:
        """A valid configuration one move from `cfg`."""

    def crossover(self, a: Any, b: Any, rng: np.random.Generator) -> Any:
        """A valid child mixing the knobs of `a` and `b`."""

    def encode(self, cfg: Any) -> Hashable:
        """The configuration's key: hashable, picklable, equal for equal configurations."""

    def decode(self, key: Any) -> Any:
        """The configuration of a key `encode` returned."""


@runtime_checkable
class MutableSpace(Protocol):
    """A space whose configurations mutate many knobs at once."""

    def mutate(self, cfg: Any, rng: np.random.Generator, rate: float) -> Any:
        """A valid configuration with each knob of `cfg` changed with probability `rate`."""


@runtime_checkable
class EdgeSpace(Protocol):
    """A space of binary edge knobs (fusion: one per fusible producer->consumer edge), with group moves over
    classes of structurally equal edges and a cache of derived kernel sets."""

    n_edges: int           # binary knobs
    state_cache_size: int  # derived configurations kept cached (a strategy raises it to keep its chain heads)

    def edge_groups(self) -> list:
        """Classes of structurally equal edges (lists of edge ids)."""

    def group_neighbor(self, cfg: Any, rng: np.random.Generator) -> Any:
        """A valid configuration with one class of equal edges flipped together."""


@runtime_checkable
class DigestSpace(Protocol):
    """A space that hashes configurations incrementally (a one-knob move in O(1))."""

    def config_digest(self, cfg: Any) -> int:
        """A digest of the configuration, stable across processes (at least 63 bits)."""


@runtime_checkable
class WalkingSpace(Protocol):
    """A space that says whether searches should start from walks of moves instead of random draws."""

    walks: bool  # True: a random configuration costs a whole-program rewrite, a move is priced incrementally


@runtime_checkable
class KernelSpace(Protocol):
    """A space of one kernel's configurations (tiles)."""

    kernel: Any


@runtime_checkable
class EnumerableSpace(Protocol):
    """A space small enough to list."""

    def tiles(self) -> list:
        """Every valid configuration."""


@runtime_checkable
class ArraySpace(Protocol):
    """A space whose configurations are numeric knob vectors."""

    def to_array(self, cfgs: Sequence[Any]) -> np.ndarray:
        """[configurations, knobs] of the configurations' knob values."""


@runtime_checkable
class FeatureSpace(Protocol):
    """A space that gives model-based search its own knob features."""

    def features(self, cfgs: Sequence[Any]) -> np.ndarray:
        """[configurations, features] for the local model."""
