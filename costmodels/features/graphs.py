"""Kernel graphs (`costmodels.features`): `KernelGraph`, `kernel_graph(s)` that assemble a kernel's
node arrays, kernel vector and geometry row, and the global graph cache (by kernel hash and target)
they share with the featurization worker."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

import numpy as np

from autotune.compiler.tiles import canonical_target_name
from costmodels.features.geometry import geometry_features, geometry_matrix
from costmodels.features.schema import GEOMETRY_DIM, _l2, _main_shape
from costmodels.features.tables import _PROGRAM_TABLES, _graph_arrays, graph_arrays_many


@dataclass
class KernelGraph:
    """A kernel as a graph of raw features (see the `costmodels.features` docstring)."""

    node_feat: np.ndarray            # [N, NODE_DIM] float32, raw (unscaled)
    opcode: np.ndarray               # [N] int64
    edge_index: np.ndarray           # [2, E] int64, producer -> consumer
    tiled_dims: tuple                # dims of the tiled shape
    kernel_feat: np.ndarray          # [len(KERNEL_FEATURE_NAMES)] float32
    hash: str = ""
    meta: dict = field(default_factory=dict)
    geom_feat: np.ndarray = field(default_factory=lambda: np.zeros(GEOMETRY_DIM, np.float32))  # [GEOMETRY_DIM]

    @property
    def num_nodes(self) -> int:
        return int(self.node_feat.shape[0])

    @property
    def num_edges(self) -> int:
        return int(self.edge_index.shape[1])


_GRAPH_CACHE: dict = {}
_GRAPH_CACHE_MAX = 200_000


_GENERATION = [0]  # bumped by clear_cache (a featurization worker process empties its caches too)


def cache_generation() -> int:
    """How many times `clear_cache` ran (costmodels/feature_worker.py)."""
    return _GENERATION[0]


def clear_cache() -> None:
    """Forget every cached kernel graph and per-program instruction feature table."""
    _GRAPH_CACHE.clear()
    _PROGRAM_TABLES.clear()
    _GENERATION[0] += 1


def _tiled_dims(kernel: Any, target: Any) -> tuple:
    try:
        from autotune.compiler.tiles import tiling_info
        return tuple(int(d) for d in tiling_info(kernel, target).dims)
    except Exception:  # noqa: BLE001 - a target without tiles: the output shape
        main = _main_shape(kernel.output_shape)
        return tuple(max(int(d), 1) for d in main.dims) if main is not None else ()


def kernel_graphs(kernels: Sequence[Any], target: str = "tpu") -> list:
    """`kernel_graph` of many kernels; those not cached yet are gathered together (`graph_arrays_many`)
    and their geometry computed in one batch."""
    return finish_kernel_graphs(start_kernel_graphs(kernels, target))


def start_kernel_graphs(kernels: Sequence[Any], target: str = "tpu") -> tuple:
    """The first half of `kernel_graphs`: the geometry rows of the kernels not cached yet (tiling
    descriptions and default tiles, mostly Python). `finish_kernel_graphs` does the rest (gathering
    the graphs, mostly numpy), possibly on another thread (a pipelined GNN predict)."""
    name = canonical_target_name(target)
    new = list({k.hash: k for k in kernels if (k.hash, name) not in _GRAPH_CACHE}.values())
    return list(kernels), target, new, (geometry_matrix(new, target) if new else None)


def finish_kernel_graphs(started: tuple) -> list:
    """The graphs of `start_kernel_graphs`' kernels (the new ones gathered together)."""
    kernels, target, new, geom = started
    name = canonical_target_name(target)
    if new:
        for k, row, arrays in zip(new, geom, graph_arrays_many(new)):
            kernel_graph(k, target, geom=row, arrays=arrays)
    return [_GRAPH_CACHE.get((k.hash, name)) or kernel_graph(k, target) for k in kernels]


def cache_graphs(graphs: Sequence[KernelGraph], target: Any = "tpu") -> None:
    """Put graphs built elsewhere (a featurization worker process) in the graph cache, as
    `kernel_graph` would have."""
    name = canonical_target_name(target)
    for g in graphs:
        if len(_GRAPH_CACHE) >= _GRAPH_CACHE_MAX:
            _GRAPH_CACHE.clear()
        _GRAPH_CACHE.setdefault((g.hash, name), g)


def drop_graphs(kernels: Sequence[Any], target: Any = "tpu") -> None:
    """Forget the cached graphs of these kernels (a featurization worker, once it sent them)."""
    name = canonical_target_name(target)
    for k in kernels:
        _GRAPH_CACHE.pop((k.hash, name), None)


def uncached_count(kernels: Sequence[Any], target: Any = "tpu") -> int:
    """How many distinct kernels have no cached graph yet (the work of a `kernel_graphs` call)."""
    name = canonical_target_name(target)
    return len({k.hash for k in kernels if (k.hash, name) not in _GRAPH_CACHE})


def kernel_graph(kernel: Any, target: str = "tpu", geom: Optional[np.ndarray] = None,
                 arrays: Optional[tuple] = None) -> KernelGraph:
    """The `KernelGraph` of a Kernel (cached by kernel hash and target); `geom`, `arrays`: its geometry
    row and `_graph_arrays` when already computed (`kernel_graphs`)."""
    key = (kernel.hash, canonical_target_name(target))
    g = _GRAPH_CACHE.get(key)
    if g is not None:
        return g
    rows, ops, edges, n_in = _graph_arrays(kernel) if arrays is None else arrays
    tiled = _tiled_dims(kernel, target)
    cost = kernel.cost
    kind = getattr(kernel, "fusion_kind", "kLoop")
    main = _main_shape(kernel.output_shape)
    kf = np.array([_l2(cost.flops), _l2(cost.transcendentals), _l2(cost.bytes_read), _l2(cost.bytes_written),
                   _l2(cost.flops / max(cost.bytes_read + cost.bytes_written, 1.0)), len(kernel.members), n_in,
                   edges.shape[1], kind == "kLoop", kind == "kInput", kind == "kOutput",
                   main.rank if main is not None else 0, _l2(main.elements) if main is not None else 0,
                   _l2(math.prod(tiled) if tiled else 1)], np.float32)
    g = KernelGraph(rows, ops, edges, tiled, kf, kernel.hash,
                    geom_feat=geometry_features(kernel, target) if geom is None else geom)
    if len(_GRAPH_CACHE) >= _GRAPH_CACHE_MAX:
        _GRAPH_CACHE.clear()
    _GRAPH_CACHE[key] = g
    return g
