"""TpuGraphs npz interop: the tile and layout collections' file format, read and written.

The arrays of one graph file (node features, opcodes, edges, configurations and runtimes) as the
TpuGraphs project stores them, and the layout configuration features of a LayoutSpace. Needs only the
featurizer (costmodels.features), so the tuner's learned layout pricing and the dataset builder both
use it without importing each other.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

from costmodels.features import tpugraphs_module_features

TILE_KEYS = ("node_feat", "node_opcode", "edge_index", "config_feat", "config_runtime", "config_runtime_normalizers")
LAYOUT_KEYS = ("node_feat", "node_opcode", "edge_index", "node_config_feat", "node_config_ids", "config_runtime")


@dataclass
class TpuGraphsRecord:
    """One TpuGraphs graph file: `kind` is "tile" or "layout"; arrays as stored."""

    kind: str
    name: str
    arrays: dict

    def __getattr__(self, key: str) -> Any:
        try:
            return self.__dict__["arrays"][key]
        except KeyError:
            raise AttributeError(key) from None

    @property
    def num_configs(self) -> int:
        return int(len(self.arrays["config_runtime"]))

    def normalized_runtime(self) -> np.ndarray:
        rt = np.asarray(self.arrays["config_runtime"], np.float64)
        if self.kind == "tile":
            return rt / np.asarray(self.arrays["config_runtime_normalizers"], np.float64)
        return rt


def read_tpugraphs_npz(path: "str | os.PathLike") -> TpuGraphsRecord:
    """Read a TpuGraphs tile or layout npz file (validating array shapes)."""
    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as z:
            a = {k: z[k] for k in z.files}
    except (OSError, ValueError) as e:
        raise ValueError(f"cannot read TpuGraphs file {path}: {e}") from None
    if all(k in a for k in TILE_KEYS):
        kind = "tile"
    elif all(k in a for k in LAYOUT_KEYS):
        kind = "layout"
    else:
        missing = [k for k in TILE_KEYS if k not in a]
        raise ValueError(f"{path} is not a TpuGraphs tile or layout file (missing {', '.join(missing)})")
    n = a["node_feat"].shape[0]
    if a["node_feat"].ndim != 2 or a["node_opcode"].shape != (n,):
        raise ValueError(f"{path}: node_feat/node_opcode shapes disagree")
    ei = a["edge_index"]
    if ei.size and (ei.ndim != 2 or ei.shape[1] != 2 or ei.min() < 0 or ei.max() >= n):
        raise ValueError(f"{path}: edge_index must be [E, 2] node indices")
    c = len(a["config_runtime"])
    if kind == "tile" and (a["config_feat"].shape[0] != c or len(a["config_runtime_normalizers"]) != c):
        raise ValueError(f"{path}: config arrays disagree in length")
    if kind == "layout" and a["node_config_feat"].shape[0] != c:
        raise ValueError(f"{path}: node_config_feat and config_runtime disagree in length")
    return TpuGraphsRecord(kind, path.stem, a)


def _bounds8(dims: Sequence[int]) -> list:
    d = [float(x) for x in dims][:6]
    return d + [0.0] * (6 - len(d)) + [float(sum(dims)), float(math.prod(dims)) if len(dims) else 0.0]


def write_tpugraphs_tile(samples: Any, out_dir: "str | os.PathLike", prefix: str = "") -> list:
    """Write tile-task samples as TpuGraphs tile npz files, one per kernel (`<program>_<hash>.npz`).

    config_feat (24): kernel_bounds (6 + sum + product; zeros when absent), output_bounds (our tile
    extents, 6 + sum + product), input_bounds (zeros: not used); config_runtime in integer
    nanoseconds; config_runtime_normalizers: the kernel's default-tile runtime (the first stored
    sample of the kernel when no default is marked). Node features are the 140-dim TpuGraphs
    features stored at build time. Returns the written paths."""
    from autotune.compiler.tiles import TileConfig
    if samples.tg_feat is None:
        raise ValueError("these samples have no TpuGraphs node features (not a tile dataset)")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for g in np.unique(samples.graph):
        idx = np.nonzero((samples.graph == g) & np.isfinite(samples.runtime))[0]
        if not len(idx):
            continue
        kg = samples.graphs[g]
        feats = []
        for i in idx:
            t = TileConfig.from_key(samples.tile_keys[i]) if samples.tile_keys[i] else None
            kb = list(t.kernel) if t is not None and t.kernel else []
            ob = list(t.dims) if t is not None else list(kg.tiled_dims)
            feats.append(_bounds8(kb) + _bounds8(ob) + [0.0] * 8)
        rt_ns = np.round(samples.runtime[idx] * 1e9).astype(np.int64)
        d = np.nonzero(samples.is_default[idx])[0] if samples.is_default is not None else []
        norm = np.full(len(idx), max(int(rt_ns[d[0] if len(d) else 0]), 1), np.int64)
        prog = samples.programs[int(samples.program[idx[0]])]
        ei = kg.edge_index[::-1].T.astype(np.int64)  # rows [consumer, producer]
        path = out / f"{prefix}{prog}_{kg.hash}.npz"
        np.savez(path, node_feat=samples.tg_feat[g].astype(np.float32), node_opcode=kg.opcode.astype(np.uint8),
                 edge_index=np.ascontiguousarray(ei), config_feat=np.array(feats, np.float32),
                 config_runtime=rt_ns, config_runtime_normalizers=norm)
        written.append(path)
    return written


# ---- the layout collection: node_config_ids, node_config_feat (c, nc, 18), config_runtime
LAYOUT_TENSORS = 3  # output, input 0, input 1 (tpu_graphs' layout config features)
LAYOUT_DIMS = 6     # minor-to-major dims per tensor, padded with -1


def _layout_row(tensors: Sequence[Sequence[int]]) -> list:
    """18 config features of one node: per tensor its minor-to-major dims, -1 padded (an unset layout: all -1)."""
    row: list = []
    for t in range(LAYOUT_TENSORS):
        dims = [int(d) for d in tensors[t]][:LAYOUT_DIMS] if t < len(tensors) else []
        row += dims + [-1] * (LAYOUT_DIMS - len(dims))
    return row


def layout_config_features(space: Any, cfg: Any) -> np.ndarray:
    """node_config_feat rows (nc, 18) of one configuration of a LayoutSpace (full layouts)."""
    lay = space.layouts(cfg)
    return np.array([_layout_row(lay[(nd.comp, nd.node)]) for nd in space.nodes], np.float32).reshape(-1, 18)


def layout_configs(space: Any, node_config_feat: np.ndarray) -> list:
    """The LayoutConfigs of node_config_feat rows (c, nc, 18): -1 padding dropped, partial layouts
    completed (`autotune.compiler.layouts.complete_layout`). ValueError for an illegal layout."""
    feat = np.asarray(node_config_feat)
    if feat.ndim != 3 or feat.shape[1:] != (len(space.nodes), LAYOUT_TENSORS * LAYOUT_DIMS):
        raise ValueError(f"node_config_feat has shape {feat.shape}, this program needs "
                         f"(configs, {len(space.nodes)}, {LAYOUT_TENSORS * LAYOUT_DIMS})")
    out = []
    for rows in feat:
        per_node = [[[int(d) for d in row[t * LAYOUT_DIMS:(t + 1) * LAYOUT_DIMS] if d >= 0]
                     for t in range(LAYOUT_TENSORS)] for row in rows]
        out.append(space.from_layouts(per_node))
    return out


def write_tpugraphs_layout(path: "str | os.PathLike", module: Any, node_names: Sequence[tuple],
                           node_config_feat: np.ndarray, runtimes_s: Sequence[float],
                           extra: Optional[dict] = None) -> Path:
    """Write one TpuGraphs layout npz file: the module's graph (`tpugraphs_module_features`), the
    configurable nodes (`node_names`: (computation, instruction) each, in config-feature order),
    node_config_feat (c, nc, 18) and config_runtime (c,) in integer nanoseconds; `extra` arrays
    (autotune's own, e.g. `config_analytical`) are stored beside them."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, **tpugraphs_layout_arrays(module, node_names, node_config_feat, runtimes_s), **(extra or {}))
    return path


def tpugraphs_layout_arrays(module: Any, node_names: Sequence[tuple], node_config_feat: np.ndarray,
                            runtimes_s: Sequence[float]) -> dict:
    """The arrays of a TpuGraphs layout npz file (`write_tpugraphs_layout`)."""
    feat, ops, edges, names = tpugraphs_module_features(module)
    index = {n: i for i, n in enumerate(names)}
    missing = [n for n in node_names if tuple(n) not in index]
    if missing:
        raise ValueError(f"configurable node {missing[0][1]} of {missing[0][0]} is not in the module")
    ids = np.array([index[tuple(n)] for n in node_names], np.int64)
    cfeat = np.asarray(node_config_feat, np.float32).reshape(-1, len(ids), LAYOUT_TENSORS * LAYOUT_DIMS)
    rt = np.asarray(runtimes_s, np.float64)
    if len(rt) != len(cfeat) or not np.all(np.isfinite(rt)):
        raise ValueError(f"{len(cfeat)} configurations need as many finite runtimes (got {len(rt)})")
    return dict(node_feat=feat, node_opcode=ops.astype(np.uint8) if ops.size and ops.max() < 256 else ops,
                edge_index=edges, node_config_ids=ids, node_config_feat=cfeat,
                config_runtime=np.round(rt * 1e9).astype(np.int64))


def read_tpugraphs_layout(path: "str | os.PathLike", space: Any = None) -> tuple:
    """(record, configurations): a layout npz file read and checked (`read_tpugraphs_npz`); with a
    LayoutSpace its configurations decoded (`layout_configs`), else None."""
    rec = read_tpugraphs_npz(path)
    if rec.kind != "layout":
        raise ValueError(f"{path} is a TpuGraphs {rec.kind} file, not a layout file")
    ids, cfeat = rec.node_config_ids, rec.node_config_feat
    n = rec.node_feat.shape[0]
    if ids.ndim != 1 or (ids.size and (ids.min() < 0 or ids.max() >= n)) or cfeat.ndim != 3 \
            or cfeat.shape[1] != len(ids):
        raise ValueError(f"{path}: node_config_ids and node_config_feat do not fit the graph")
    return rec, (layout_configs(space, cfeat) if space is not None else None)


def tpugraphs_layout_sample(summary_path: "str | os.PathLike", hlo_path: "str | os.PathLike") -> dict:
    """The vendored TpuGraphs layout sample (data/tpugraphs: tile_layout_summary.json and its module)
    as layout-npz arrays plus `module` and `node_names`: the recorded layout dims as stored (partial
    layouts such as [4, 0] included), the runs that have a runtime (error runs have none)."""
    from autotune.compiler.hlo import parse_hlo_file
    summary = json.loads(Path(summary_path).read_text())
    module = parse_hlo_file(str(hlo_path))
    names = [(m["computation"], m["instruction"]) for m in summary["configurable_nodes_mapped"]]
    runs = [r for r in summary["runs"] if not r["error"] and r["compute_time_ns"] is not None]
    cfeat = np.array([[_layout_row(node) for node in r["layout_nodes"]] for r in runs], np.float32)
    return {"module": module, "node_names": names, "node_config_feat": cfeat,
            "runtimes_s": np.array([r["compute_time_ns"] for r in runs], np.float64) * 1e-9,
            "is_default": np.array([bool(r["is_default"]) for r in runs]),
            "config_index_to_node": np.array(summary["config_index_to_node"], np.int64)}
