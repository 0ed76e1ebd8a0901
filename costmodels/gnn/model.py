"""The GNN of Kaufman et al. (MLSys 2021, section 3) and its CostModel wrapper.

    opcode embedding ++ scaled node features (++ tile features, early join)
      -> linear + relu
      -> k x encoder layer: directed GraphSAGE (default), GAT, or none (the "no GNN" ablation)
      -> reduction to one vector / value per kernel:
           node        per-node head, summed over the nodes (the paper's per-node reduction)
           column      column-wise mean and max over the nodes, concatenated
           lstm        LSTM over the nodes in topological order, last hidden state
           transformer Transformer encoder over the nodes (padding-masked), mean over the nodes
      (config dropout: in training, dropout after every encoder layer and of the reduced vector)
      (++ scaled kernel-level features `KERNEL_FEATURE_NAMES`, config graph_features, and the kernel's
          default-tile geometry `GEOMETRY_FEATURE_NAMES`, config geometry_features; costmodels.features)
      (++ a piecewise-linear encoding of the geometry groups `ple_groups`, config ple_bins > 0: each scaled column x
          becomes ple_bins values clip((x - lo_j) / (hi_j - lo_j), 0, 1) over bins [lo_j, hi_j] between quantiles of
          the training kernels (Gorishniy et al., NeurIPS 2022): the thresholds a tree model splits on, as inputs)
      (++ scaled tile features again, the late join; config late_join; tile task only)
      -> MLP head (config head_layers hidden layers of width head_hidden, default hidden) -> one value: log seconds (loss "mse",
         fusion) or a rank score (loss "rank", tiles)
With config residual (loss "mse"), the head's value is the log of the ratio of the runtime to the tiled
analytical model's time at the kernel's default tile (`geo_t` of the geometry features,
`costmodels.features.geometry_analytical_seconds`): the network learns the analytical model's error, not
the runtime itself. A kernel without geometry (targets that do not tile) has no baseline (log ratio to 1 s).
"""
from __future__ import annotations

import copy
import io
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Optional, Sequence

import numpy as np
import torch
from torch import nn
import torch.nn.functional as F

from costmodels.features import (feature_version, GEOMETRY_DIM, GEOMETRY_FEATURE_NAMES, GEOMETRY_GROUPS,
                               KERNEL_FEATURE_NAMES, NODE_DIM, NUM_OPCODES,
                               STATIC_COLUMNS, TILE_DIM, FeatureScaler, KernelGraph, finish_kernel_graphs,
                               geometry_analytical_seconds, kernel_graphs, start_kernel_graphs,
                               tile_features, uncached_count)
from costmodels.feature_worker import fork_available, graphs_in_chunks
from autotune.compiler.gc_pause import gc_paused
from autotune.compiler.tiles import default_tile

KDIM = len(KERNEL_FEATURE_NAMES)
KERNEL_STATIC = (0, 1, 2, 3, 4)  # flops, transcendentals, bytes read/written, intensity
from costmodels.base import (CostModel, NotFittedError, OldFittedName, check_model_scope, register_cost_model,
                             reject_unknown_parameters)
from costmodels.gnn.train import torch_seeded

from costmodels.gnn.layers import (DirectedSAGEConv, GATConv, GraphBatch, collate_prepared, scatter_max, scatter_mean,
                                  scatter_sum, to_padded)

__all__ = ["GnnNet", "GnnEnsembleNet", "GnnCostModel", "DEFAULT_CONFIG", "CONFIG_KEYS", "LEGACY_CONFIG", "ENCODERS", "REDUCTIONS",
           "FORMAT_VERSION", "PLE_GROUPS", "ple_columns", "mlp_head"]

FORMAT_VERSION = 1
ENCODERS = ("sage", "gat", "none")
REDUCTIONS = ("node", "column", "lstm", "transformer")
_REDUCTION_ALIASES = {"per-node": "node", "per_node": "node", "pernode": "node", "column-wise": "column",
                      "columnwise": "column", "mean-max": "column"}

DEFAULT_CONFIG: dict = {
    "task": "fusion", "target": "tpu", "encoder": "sage", "reduction": "column", "layers": 3,
    "hidden": 64, "embedding": 32, "edge_direction": "both", "aggr": "mean", "heads": 4,
    "transformer_layers": 1, "loss": None, "rank_loss": "hinge", "margin": 0.1, "static_features": True,
    "dropout": 0.0, "graph_features": True, "late_join": True, "geometry_features": False,
    "residual": False, "head_layers": 1, "head_hidden": None, "ple_bins": 0, "ple_groups": None,
}
# the configuration parameters of the GNN models (`GnnCostModel`, `costmodels.gnn.layout.LayoutGnnModel`)
CONFIG_KEYS: tuple = tuple(DEFAULT_CONFIG) + ("seed",)
# geometry groups (`GEOMETRY_GROUPS`) encoded piecewise-linearly by default (config ple_bins > 0): the groups
# XGBoost's fusion predictions come from (SHAP, docs/lab-notes/2026-11-27-gnn-head-piecewise-linear.md)
PLE_GROUPS = ("tile", "dot", "analytical")
# Values of config keys added after a model format was in use, for files saved without them.
LEGACY_CONFIG: dict = {"residual": False, "head_layers": 1, "head_hidden": None, "ple_bins": 0, "ple_groups": None}


def ple_columns(cfg: dict) -> list:
    """Columns of the kernel-level input (`KERNEL_FEATURE_NAMES` then `GEOMETRY_FEATURE_NAMES`) that config
    ple_bins encodes piecewise-linearly: those of the geometry groups `ple_groups` (default `PLE_GROUPS`)."""
    if not int(cfg.get("ple_bins") or 0):
        return []
    names = {n: KDIM + i for i, n in enumerate(GEOMETRY_FEATURE_NAMES)}
    return [names[n] for grp in (cfg.get("ple_groups") or PLE_GROUPS) for n in GEOMETRY_GROUPS[grp]]


def kernel_dim(cfg: dict) -> int:
    """Width of the kernel-level input: kernel features, plus the geometry features when enabled."""
    return KDIM + (GEOMETRY_DIM if cfg.get("geometry_features") else 0)


def normalize_config(cfg: dict) -> dict:
    out = dict(DEFAULT_CONFIG)
    out.update({k: v for k, v in cfg.items() if v is not None})
    red = str(out["reduction"]).lower()
    out["reduction"] = _REDUCTION_ALIASES.get(red, red)
    if out["task"] not in ("fusion", "tile", "layout"):
        raise ValueError(f"task must be fusion, tile or layout, not {out['task']!r}")
    if out["encoder"] not in ENCODERS:
        raise ValueError(f"encoder must be one of {', '.join(ENCODERS)}, not {out['encoder']!r}")
    if out["reduction"] not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {', '.join(REDUCTIONS)}, not {out['reduction']!r}")
    if out["edge_direction"] not in ("both", "in", "out"):
        raise ValueError(f"edge direction must be both, in or out, not {out['edge_direction']!r}")
    if out["loss"] is None:
        out["loss"] = "rank" if out["task"] in ("tile", "layout") else "mse"
    if out["task"] == "layout":  # a whole program's graph: no kernel-level or tile features to join
        out["graph_features"], out["late_join"], out["geometry_features"] = False, False, False
    if out["loss"] not in ("rank", "mse"):
        raise ValueError(f"loss must be rank or mse, not {out['loss']!r}")
    if out["rank_loss"] not in ("hinge", "logistic", "listmle"):
        raise ValueError(f"rank loss must be hinge, logistic or listmle, not {out['rank_loss']!r}")
    if int(out["layers"]) < 0 or int(out["hidden"]) < 1:
        raise ValueError("layers must be >= 0 and hidden >= 1")
    if int(out["head_layers"]) < 1:
        raise ValueError(f"head layers must be >= 1, not {out['head_layers']}")
    if out["head_hidden"] is not None and int(out["head_hidden"]) < 1:
        raise ValueError(f"head width must be >= 1, not {out['head_hidden']}")
    out["residual"] = bool(out["residual"])
    out["ple_bins"] = int(out["ple_bins"] or 0)
    if out["ple_bins"] < 0:
        raise ValueError(f"piecewise-linear bins must be >= 0, not {out['ple_bins']}")
    if out["ple_bins"]:
        if not out["geometry_features"] or not out["graph_features"]:
            raise ValueError("piecewise-linear encoding (ple_bins) encodes the geometry features: it needs "
                             "geometry_features and graph_features")
        from costmodels.features import geometry_layout
        if geometry_layout(out.get("target") or "tpu") != "tpu":
            raise ValueError(f"piecewise-linear encoding (ple_bins) encodes the tpu tile geometry; target "
                             f"{out.get('target')}'s geometry block holds other rows: use ple_bins 0")
        groups = list(out["ple_groups"] or PLE_GROUPS)
        bad = [g for g in groups if g not in GEOMETRY_GROUPS]
        if bad:
            raise ValueError(f"unknown geometry group {bad[0]!r} for ple_groups (known: {', '.join(GEOMETRY_GROUPS)})")
        out["ple_groups"] = groups
    if out["residual"] and out["loss"] != "mse":
        raise ValueError("a residual over the analytical model needs loss mse (rank scores have no scale)")
    return out


def mlp_head(din: int, hidden: int, hidden_layers: int) -> nn.Sequential:
    """`hidden_layers` linear + relu layers of width `hidden`, then a linear layer to one value."""
    mods: list = []
    for i in range(hidden_layers):
        mods += [nn.Linear(din if i == 0 else hidden, hidden), nn.ReLU()]
    return nn.Sequential(*mods, nn.Linear(hidden, 1))


class GnnNet(nn.Module):
    def __init__(self, cfg: dict, in_dim: int = NODE_DIM + TILE_DIM, num_opcodes: int = NUM_OPCODES):
        super().__init__()
        self.cfg = cfg
        H, E = int(cfg["hidden"]), int(cfg["embedding"])
        HH = int(cfg.get("head_hidden") or H)  # the head runs once per kernel: it can be wider than the encoder
        self.embed = nn.Embedding(num_opcodes, E)
        self.inp = nn.Linear(in_dim + E, H)
        self.convs = nn.ModuleList()
        enc = cfg["encoder"]
        for _ in range(int(cfg["layers"]) if enc != "none" else 0):
            if enc == "sage":
                self.convs.append(DirectedSAGEConv(H, H, cfg["edge_direction"], cfg["aggr"]))
            else:
                self.convs.append(GATConv(H, H, int(cfg["heads"]), cfg["edge_direction"]))
        self.dropout = float(cfg.get("dropout", 0.0))
        red = cfg["reduction"]
        self.reduction = red
        # per-graph features come in as [kernel (+ geometry) features (kd) | tile features (TILE_DIM)]
        kd = kernel_dim(cfg)
        cols = (list(range(kd)) if cfg.get("graph_features", True) else []) + \
            (list(range(kd, kd + TILE_DIM)) if cfg.get("late_join", True) and cfg["task"] == "tile" else [])
        self.register_buffer("gcols", torch.tensor(cols, dtype=torch.long), persistent=False)
        pcols = ple_columns(cfg)
        nb = int(cfg.get("ple_bins") or 0)
        self.register_buffer("ple_cols", torch.tensor(pcols, dtype=torch.long), persistent=False)
        # bin lower edges and widths [columns, bins], fitted on the training split (`set_ple_bins`); saved (only
        # when used: files of models without the encoding have no such entries)
        self.register_buffer("ple_lo", torch.zeros((len(pcols), nb)), persistent=bool(pcols))
        self.register_buffer("ple_w", torch.ones((len(pcols), nb)), persistent=bool(pcols))
        self.gdim = len(cols) + len(pcols) * nb
        if red == "node":
            self.head = mlp_head(H, HH, int(cfg["head_layers"]))
            self.ghead = nn.Linear(self.gdim, 1) if self.gdim else None
        else:
            if red == "column":
                rd = 2 * H
            elif red == "lstm":
                self.lstm = nn.LSTM(H, H, batch_first=True)
                rd = H
            else:
                heads = 4 if H % 4 == 0 else 1
                layer = nn.TransformerEncoderLayer(H, heads, dim_feedforward=2 * H, dropout=0.0, batch_first=True)
                self.transformer = nn.TransformerEncoder(layer, int(cfg["transformer_layers"]),
                                                         enable_nested_tensor=False)
                rd = H
            self.head = mlp_head(rd + self.gdim, HH, int(cfg["head_layers"]))

    def set_ple_bins(self, scaled_rows: np.ndarray) -> None:
        """Fit the piecewise-linear bins on scaled kernel-level rows of the training split: per encoded column,
        `ple_bins` bins between its quantiles (a bin of zero width becomes a step at its edge)."""
        if not len(self.ple_cols):
            return
        nb = self.ple_lo.shape[1]
        x = np.asarray(scaled_rows, np.float64)[:, self.ple_cols.numpy()]
        q = np.quantile(x, np.linspace(0.0, 1.0, nb + 1), axis=0).T  # [columns, bins + 1]
        self.ple_lo.copy_(torch.from_numpy(q[:, :-1]).float())
        self.ple_w.copy_(torch.from_numpy(np.maximum(np.diff(q, axis=1), 1e-6)).float())

    def _gfeat(self, b: GraphBatch) -> torch.Tensor:
        if b.gfeat is None:
            return torch.zeros((b.num_graphs, self.gdim), dtype=b.x.dtype)
        g = b.gfeat.index_select(1, self.gcols)
        if not len(self.ple_cols):
            return g
        x = b.gfeat.index_select(1, self.ple_cols)
        enc = ((x.unsqueeze(-1) - self.ple_lo) / self.ple_w).clamp_(0.0, 1.0)
        return torch.cat([g, enc.reshape(len(x), -1)], dim=1)

    def node_embeddings(self, b: GraphBatch) -> torch.Tensor:
        """[N, H] node embeddings: the input layer and the encoder layers (before the reduction)."""
        h = F.relu(self.inp(torch.cat([self.embed(b.opcode), b.x], dim=1)))
        for conv in self.convs:
            h = conv(h, b.edge_index)
            if self.dropout and self.training:
                h = F.dropout(h, self.dropout)
        return h

    def head_of_columns(self, mean: torch.Tensor, mx: torch.Tensor) -> torch.Tensor:
        """The head's output from column-wise mean and max vectors [B, H] each (reduction "column",
        no per-graph features): how graph segment training joins segments' partial reductions."""
        if self.reduction != "column" or self.gdim:
            raise ValueError("joining segment reductions needs the column reduction without per-graph features")
        return self.head(torch.cat([mean, mx], dim=1)).squeeze(-1)

    def forward(self, b: GraphBatch) -> torch.Tensor:
        if self.reduction == "node":
            h = self.node_embeddings(b)
            out = scatter_sum(self.head(h).squeeze(-1), b.graph, b.num_graphs)
            if self.ghead is not None:
                out = out + self.ghead(self._gfeat(b)).squeeze(-1)
            return out
        return self.head(self.readout(b)).squeeze(-1)

    def readout(self, b: GraphBatch) -> torch.Tensor:
        """[B, head input] per graph: the reduction of its node embeddings with its per-graph features,
        what the head maps to the output (fine-tuning the head alone starts from here; not for the
        "node" reduction, whose head runs per node)."""
        if self.reduction == "node":
            raise ValueError("the node reduction has no per-graph readout (its head runs per node)")
        h = self.node_embeddings(b)
        B = b.num_graphs
        if self.reduction == "column":
            g = torch.cat([scatter_mean(h, b.graph, B), scatter_max(h, b.graph, B)], dim=1)
        elif self.reduction == "lstm":
            seq, _ = to_padded(h, b)
            packed = nn.utils.rnn.pack_padded_sequence(seq, b.lengths.clamp(min=1), batch_first=True,
                                                       enforce_sorted=False)
            _, (hn, _) = self.lstm(packed)
            g = hn[-1]
        else:
            seq, mask = to_padded(h, b)
            out = self.transformer(seq, src_key_padding_mask=mask)
            keep = (~mask).unsqueeze(-1).to(out.dtype)
            g = (out * keep).sum(1) / keep.sum(1).clamp(min=1.0)
        if self.dropout and self.training:  # the graph's part of the head's input (not the kernel features)
            g = F.dropout(g, self.dropout)
        if self.gdim:
            g = torch.cat([g, self._gfeat(b)], dim=1)
        return g


class GnnEnsembleNet(nn.Module):
    """A seed ensemble: member `GnnNet`s of one configuration run on the same batch; the output is the mean of
    their outputs. The members of a `GnnCostModel` share its scalers, output standardization and baseline, so
    the mean of the outputs is the mean of the members' predicted log runtimes (`GnnCostModel.ensemble`)."""

    def __init__(self, nets: Sequence[GnnNet]):
        super().__init__()
        if len(nets) < 2:
            raise ValueError("an ensemble needs at least two member networks")
        self.members = nn.ModuleList(nets)
        self.cfg = nets[0].cfg
        self.reduction = nets[0].reduction

    def forward(self, b: GraphBatch) -> torch.Tensor:
        out = self.members[0](b)
        for m in self.members[1:]:
            out = out + m(b)
        return out / len(self.members)

    def readout(self, b: GraphBatch) -> torch.Tensor:
        raise ValueError("a GNN ensemble has no single readout (its members' heads differ)")


# --------------------------------------------------------------------------------------------------
class GnnCostModel(CostModel):
    """Learned kernel cost model (GNN). Task "fusion": log-runtime regression, predicts seconds.
    Task "tile": rank-trained by default (scores; `predicts_absolute` False), or MSE (seconds).
    Parameters: task, target, batch_size, threads and the configuration (`CONFIG_KEYS`). Fitted state
    (costmodels.base.Estimator), set by fit or load: `net_` (the network), `node_scaler_`, `kernel_scaler_`,
    `tile_scaler_` (feature scalers), `y_mu_`, `y_sigma_` (the standardization of log runtime), `history_`."""

    name = "gnn"
    requires_fit = True
    # the names these attributes had before the fitted-state convention
    net = OldFittedName("net_")
    node_scaler = OldFittedName("node_scaler_", FeatureScaler)
    tile_scaler = OldFittedName("tile_scaler_", FeatureScaler)
    kernel_scaler = OldFittedName("kernel_scaler_", FeatureScaler)
    y_mu = OldFittedName("y_mu_", lambda: 0.0)
    y_sigma = OldFittedName("y_sigma_", lambda: 1.0)
    history = OldFittedName("history_", list)

    def __init__(self, task: str = "fusion", target: str = "tpu", batch_size: int = 256, threads: Optional[int] = 1,
                 **config: Any):
        reject_unknown_parameters(type(self).__name__, config, ("task", "target", "batch_size", "threads") + CONFIG_KEYS)
        self.task, self.target = task, target
        self.batch_size = batch_size
        self.threads = threads  # torch intra-op threads while predicting/training (None: leave as is)
        self._config_params = dict(config)  # as given (`CONFIG_KEYS`); `config` adds the defaults
        self._prep_cache: dict = {}
        self._mask = None

    def get_params(self) -> dict:
        return {"task": self.task, "target": self.target, "batch_size": self.batch_size, "threads": self.threads,
                **self._config_params}

    @property
    def config(self) -> dict:
        """The network's configuration: `DEFAULT_CONFIG` under the parameters given, checked on first use
        (`normalize_config`: a bad value is a one-line ValueError from fit, predict or load)."""
        cfg = self.__dict__.get("_config")
        if cfg is None:
            cfg = self._config = normalize_config(dict(self._config_params, task=self.task, target=self.target))
        return cfg

    def init_network(self) -> "GnnNet":
        """A new untrained network for the configuration, as `net_`: its weights are drawn from a generator
        seeded with config seed, and torch's global random state is left as it was (`torch_seeded`)."""
        with torch_seeded(int(self.config.get("seed", 0) or 0)):
            self.net_ = GnnNet(self.config)
        return self.net_

    @property
    def predicts_absolute(self) -> bool:  # type: ignore[override]
        return self.config["loss"] == "mse"

    # ---- features
    def _static_mask(self) -> np.ndarray:
        if self._mask is None:
            m = np.ones(NODE_DIM, np.float32)
            if not self.config["static_features"]:
                m[list(STATIC_COLUMNS)] = 0.0
            self._mask = m
        return self._mask

    def clear_prepared_cache(self) -> None:
        """Forget every graph `prepare_graph` scaled: the next prediction of a kernel scales its features again,
        as the first time a program's kernels are seen (cold pricing, benchmarks/pricing_speed.py)."""
        self._prep_cache.clear()

    def prepare_graph(self, g: KernelGraph) -> tuple:
        """(scaled node features, opcodes, edge_index) of a graph, cached by hash."""
        key = g.hash or id(g)
        p = self._prep_cache.get(key)
        if p is None:
            x = self.node_scaler_.transform(g.node_feat) * self._static_mask()
            kf = self.kernel_scaler_.transform(self._kernel_row(g)[None, :])[0]
            if not self.config["static_features"]:
                kf[list(KERNEL_STATIC)] = 0.0
            p = (x.astype(np.float32), g.opcode, g.edge_index, kf.astype(np.float32))
            if len(self._prep_cache) > 100_000:
                self._prep_cache.clear()
            self._prep_cache[key] = p
        return p

    PREPARE_CHUNK = 256  # graphs scaled together by prepare_graphs

    def prepare_graphs(self, graphs: Sequence[KernelGraph]) -> list:
        """`prepare_graph` of many graphs, those not cached scaled together (one scaler call for all
        their node rows and one for their kernel rows: the same arrays, fewer numpy calls)."""
        keys = [g.hash or id(g) for g in graphs]
        todo: dict = {}
        for k, g in zip(keys, graphs):
            if k not in self._prep_cache and k not in todo:
                todo[k] = g
        if len(todo) > 1:
            if len(self._prep_cache) + len(todo) > 100_000:
                self._prep_cache.clear()
            items = list(todo.items())
            for s0 in range(0, len(items), self.PREPARE_CHUNK):  # chunks: the temporaries stay in cache
                chunk = items[s0:s0 + self.PREPARE_CHUNK]
                new = [g for _, g in chunk]
                x = self.node_scaler_.transform(np.concatenate([g.node_feat for g in new]), self._static_mask())
                kf = self.kernel_scaler_.transform(self._kernel_rows(new))
                if not self.config["static_features"]:
                    kf[:, list(KERNEL_STATIC)] = 0.0
                kf = kf.astype(np.float32)
                ends = np.cumsum([g.num_nodes for g in new])
                for i, ((k, g), xs) in enumerate(zip(chunk, np.split(x, ends[:-1]))):
                    self._prep_cache[k] = (xs, g.opcode, g.edge_index, kf[i])
        return [self.prepare_graph(g) for g in graphs]

    def _kernel_rows(self, graphs: Sequence[KernelGraph]) -> np.ndarray:
        """`_kernel_row` of many graphs, stacked."""
        kf = np.stack([g.kernel_feat for g in graphs])
        if self.config["geometry_features"]:
            return np.concatenate([kf, np.stack([g.geom_feat for g in graphs])], axis=1).astype(np.float32)
        return kf

    def _kernel_row(self, g: KernelGraph) -> np.ndarray:
        if self.config["geometry_features"]:
            return np.concatenate([g.kernel_feat, g.geom_feat]).astype(np.float32)
        return g.kernel_feat

    def log_baseline(self, graphs: Sequence[KernelGraph]) -> np.ndarray:
        """Per graph, the log seconds the network's output is relative to: the tiled analytical time with
        config residual (0 for a graph without geometry), else 0."""
        if not self.config["residual"] or not len(graphs):
            return np.zeros(len(graphs))
        t = geometry_analytical_seconds(np.stack([g.geom_feat for g in graphs]))
        return np.where(t > 0, np.log(np.maximum(t, 1e-300)), 0.0)

    def scale_tiles(self, tile_feat: np.ndarray) -> np.ndarray:
        tf = np.asarray(tile_feat, np.float32).reshape(-1, TILE_DIM)
        if self.task == "fusion":
            return np.zeros_like(tf)
        return self.tile_scaler_.transform(tf)

    def fit_scalers(self, graphs: Sequence[KernelGraph], tile_feat: np.ndarray) -> None:
        """Fit the feature scalers (and the network's piecewise-linear bins) on training graphs (a part of fit:
        builds the network when there is none yet)."""
        if getattr(self, "net_", None) is None:
            self.init_network()
        self.node_scaler_ = FeatureScaler().fit([g.node_feat for g in graphs])
        rows = self._kernel_rows(graphs)
        self.kernel_scaler_ = FeatureScaler().fit(rows)
        self.net_.set_ple_bins(self.kernel_scaler_.transform(rows))
        tf = np.asarray(tile_feat, np.float32).reshape(-1, TILE_DIM)
        self.tile_scaler_ = FeatureScaler().fit(tf if len(tf) else np.zeros((1, TILE_DIM), np.float32))
        self._prep_cache.clear()

    # ---- inference
    def forward_graphs(self, graphs: Sequence[KernelGraph], tile_feat: Optional[np.ndarray] = None) -> np.ndarray:
        """Raw network outputs (log seconds or scores) for graphs with raw tile features."""
        n = len(graphs)
        if n == 0:
            return np.zeros(0)
        self.check_is_fitted("GNN cost model")
        tf = np.zeros((n, TILE_DIM), np.float32) if tile_feat is None else np.asarray(tile_feat, np.float32)
        return self.forward_prepared(self.prepare_graphs(graphs), self.scale_tiles(tf))

    def forward_prepared(self, preps: Sequence[tuple], tfs: np.ndarray, readout: bool = False) -> np.ndarray:
        """Raw network outputs for `prepare_graph` tuples and scaled tile features, in batches
        (inference, and validation scoring during training); `readout`: the head's inputs instead,
        [n, readout width] (`GnnNet.readout`)."""
        n = len(preps)
        out = np.empty(n) if not readout else None
        self.net_.eval()
        bs = int(self.batch_size)
        # sequence reductions pad every graph to the longest in the batch: batch similar sizes together
        order = (np.argsort([len(p[0]) for p in preps], kind="stable")
                 if self.config["reduction"] in ("lstm", "transformer") else np.arange(n))
        with torch.inference_mode(), torch_threads(self.threads):
            for s in range(0, n, bs):
                idx = order[s:s + bs]
                b = collate_prepared([preps[i] for i in idx], tfs[idx])
                if not readout:
                    out[idx] = self.net_(b).double().numpy()
                    continue
                r = self.net_.readout(b).numpy()
                if out is None:
                    out = np.empty((n, r.shape[1]), np.float32)
                out[idx] = r
        return out if out is not None else np.zeros((0, 0), np.float32)

    def predict_graphs(self, graphs: Sequence[KernelGraph], tile_feat: Optional[np.ndarray] = None) -> np.ndarray:
        raw = self.forward_graphs(graphs, tile_feat)
        if not self.predicts_absolute:
            return raw
        return self.seconds(raw, self.log_baseline(graphs))

    def seconds(self, raw: np.ndarray, log_base: np.ndarray) -> np.ndarray:
        """Seconds from raw network outputs (standardized log runtime, over `log_baseline`)."""
        return np.exp(np.clip(self.y_mu_ + self.y_sigma_ * np.asarray(raw, np.float64) + log_base, -80, 20))

    PIPELINE_CHUNK = 1024  # kernels featurized per step of a pipelined predict (a multiple of batch_size)
    WORKER_CHUNK = 512  # kernels per chunk of a predict featurized on two processes (a multiple of batch_size)
    WORKER_MIN_NEW = 1024  # uncached kernels from which a fusion predict featurizes on two processes
    # featurization worker process (feature_worker.graphs_in_chunks): "auto" when a core is free (1-minute load
    # average below the usable cores - 0.5: on a 2-core machine at load 8 the two processes ran 16% slower than one,
    # the worker's share of the CPU coming out of this process's), True always (given two usable cores), False never
    featurize_workers: "bool | str" = "auto"

    def predict(self, kernels: Sequence[Any], tiles: Optional[Sequence[Any]] = None) -> np.ndarray:
        """Seconds (or scores) of kernels at tiles (None: each kernel's default tile). Given two usable
        cores (one of them idle: `featurize_workers`), a fusion predict of at least `WORKER_MIN_NEW`
        uncached kernels is featurized on two processes (`costmodels.feature_worker`: a forked worker
        takes chunks of `WORKER_CHUNK` kernels
        from the back while this process featurizes chunks from the front and runs the network on
        every chunk); otherwise more than `PIPELINE_CHUNK` kernels are priced as a pipeline on two
        threads: while one thread works out the next chunk's tiling and geometry
        (`start_kernel_graphs`, mostly Python), the other gathers the graphs of the chunk before,
        scales them and runs the network. In both the network's batches are the same as in one
        thread's predict (chunks are whole batches), so are the predictions, bit for bit. The cyclic
        garbage collector is paused meanwhile (featurization allocates many small acyclic objects)."""
        with gc_paused():
            return self._predict(kernels, tiles)

    def _predict(self, kernels: Sequence[Any], tiles: Optional[Sequence[Any]] = None) -> np.ndarray:
        kernels = list(kernels)
        n = len(kernels)
        if not n:
            return np.zeros(0)
        self.check_is_fitted("GNN cost model")
        if (self.task == "fusion" and self.featurize_workers and n >= self.WORKER_MIN_NEW
                and self.config["reduction"] not in ("lstm", "transformer") and _usable_cores() >= 2
                and fork_available() and uncached_count(kernels, self.target) >= self.WORKER_MIN_NEW
                and (self.featurize_workers != "auto" or _a_core_is_free())):
            raw = np.empty(n)
            log_base = np.empty(n)
            chunk = max(self.WORKER_CHUNK // int(self.batch_size), 1) * int(self.batch_size)
            for a, b, graphs in graphs_in_chunks(kernels, self.target, chunk):
                raw[a:b], log_base[a:b] = self._network_stage(graphs, None)
            return self.seconds(raw, log_base) if self.predicts_absolute else raw
        tl = list(tiles) if tiles is not None else [None] * n
        chunk = max(self.PIPELINE_CHUNK // int(self.batch_size), 1) * int(self.batch_size)
        if n <= chunk or self.config["reduction"] in ("lstm", "transformer") or _usable_cores() < 2:
            # (sequence reductions sort their batches over all graphs; one core: nothing to overlap)
            graphs, tf = self._inputs(kernels, tl)
            return self.predict_graphs(graphs, tf)
        raw = np.empty(n)
        log_base = np.empty(n)
        with ThreadPoolExecutor(1, thread_name_prefix="gnn-network") as pool:
            running = None
            for s0 in range(0, n, chunk):
                ks = kernels[s0:s0 + chunk]
                if self.task == "tile":  # tile features need the graphs here
                    graphs, tf = self._inputs(ks, tl[s0:s0 + chunk])
                    work = pool.submit(self._network_stage, graphs, tf)
                else:
                    work = pool.submit(self._network_stage, start_kernel_graphs(ks, self.target), None)
                if running is not None:
                    a, b, fut = running
                    raw[a:b], log_base[a:b] = fut.result()
                running = (s0, s0 + len(ks), work)
            a, b, fut = running
            raw[a:b], log_base[a:b] = fut.result()
        return self.seconds(raw, log_base) if self.predicts_absolute else raw

    def _network_stage(self, graphs: "list | tuple", tf: Optional[np.ndarray]) -> tuple:
        """(raw outputs, log baselines) of graphs (or of `start_kernel_graphs`' output, finished
        here): the second thread of a pipelined predict, the only user of the graph and scaled-graph
        caches meanwhile."""
        if isinstance(graphs, tuple):
            graphs = finish_kernel_graphs(graphs)
        raw = self.forward_graphs(graphs, tf)
        return raw, (self.log_baseline(graphs) if self.predicts_absolute else np.zeros(len(graphs)))

    def _inputs(self, kernels: list, tiles: list) -> tuple:
        """(kernel graphs, raw tile features) of kernels at tiles (None: the default tile)."""
        graphs = kernel_graphs(kernels, self.target)
        tf = np.zeros((len(kernels), TILE_DIM), np.float32)
        if self.task == "tile":
            cache: dict = {}
            for i, (k, g, t) in enumerate(zip(kernels, graphs, tiles)):
                if t is None:
                    t = default_tile(k, self.target)
                key = (g.hash, getattr(t, "key", lambda: str(t))())
                r = cache.get(key)
                if r is None:
                    r = cache[key] = tile_features(g.tiled_dims, t)
                tf[i] = r
        return graphs, tf

    # ---- training
    def fit(self, dataset: Any, validation: Any = None, **train_kw: Any) -> "GnnCostModel":
        """Train on a `autotune.tuning.dataset.Dataset` (its train and validation splits) or on `Samples`."""
        from costmodels.gnn.train import fit_gnn
        if hasattr(dataset, "load") and validation is None:
            train = dataset.load("train")
            try:
                validation = dataset.load("validation")
            except ValueError:
                validation = None
            if dataset.task != self.task:
                raise ValueError(f"dataset is for task {dataset.task!r}, the model for {self.task!r}")
        else:
            train = dataset
        self.init_network()  # scikit-learn's fit: from scratch every time
        with torch_threads(self.threads):
            fit_gnn(self, train, validation, **train_kw)
        return self

    # ---- seed ensembles
    @property
    def members(self) -> int:
        """Number of member networks: 1, or a seed ensemble's size (`ensemble`)."""
        net = self.__dict__.get("net_")
        return len(net.members) if isinstance(net, GnnEnsembleNet) else 1

    @classmethod
    def ensemble(cls, models: Sequence["GnnCostModel"], names: Optional[Sequence[str]] = None) -> "GnnCostModel":
        """A seed ensemble of trained models: one model whose prediction is exp of the mean of the members'
        predicted log runtimes (rank-trained tile models: the mean of their scores). Features are computed and scaled once and every member's network runs on
        the same batches. The members must be models of one configuration (the seed aside) trained on the
        same training split: the same task, target, scalers and output standardization (a mismatch is a
        one-line ValueError naming the member by `names`)."""
        models = list(models)
        names = list(names) if names is not None else [f"member {i}" for i in range(len(models))]
        if len(models) < 2:
            raise ValueError(f"an ensemble needs at least two GNN models, got {len(models)}")
        ref = models[0]

        def strip(cfg: dict) -> dict:
            return {k: v for k, v in cfg.items() if k != "seed"}

        for name, m in zip(names, models):
            if type(m) is not GnnCostModel:
                raise ValueError(f"{name}: an ensemble combines fusion/tile GNN cost models, not {type(m).__name__}")
            if m.members != 1:
                raise ValueError(f"{name} is already an ensemble ({m.members} members): give its member files")
            if not m.is_fitted():
                raise NotFittedError(f"{name}: the GNN cost model is not trained")
        for name, m in zip(names[1:], models[1:]):
            if (m.task, m.target) != (ref.task, ref.target):
                raise ValueError(f"{name} is a {m.task} model for {m.target}, {names[0]} a {ref.task} model for "
                                 f"{ref.target}: ensemble members must share task and target")
            diff = sorted(k for k in set(strip(m.config)) | set(strip(ref.config))
                          if m.config.get(k) != ref.config.get(k))
            if diff:
                raise ValueError(f"{name} and {names[0]} differ in configuration ({', '.join(diff)}): ensemble "
                                 "members must be seeds of one recipe")
            same = (all(_same_state(getattr(m, s).state_dict(), getattr(ref, s).state_dict())
                        for s in ("node_scaler_", "kernel_scaler_", "tile_scaler_"))
                    and (m.y_mu_, m.y_sigma_) == (ref.y_mu_, ref.y_sigma_)
                    and all(torch.equal(m.net_.state_dict()[k], ref.net_.state_dict()[k])
                            for k in ("ple_lo", "ple_w") if k in ref.net_.state_dict()))
            if not same:
                raise ValueError(f"{name} and {names[0]} were fitted on different training data (feature scalers, "
                                 "bins or runtime standardization differ): ensemble members must share them")
        out = cls(**strip(ref.config), batch_size=ref.batch_size, threads=ref.threads)
        out.net_ = GnnEnsembleNet([copy.deepcopy(m.net_) for m in models])
        out.net_.eval()
        out.node_scaler_, out.tile_scaler_, out.kernel_scaler_ = ref.node_scaler_, ref.tile_scaler_, ref.kernel_scaler_
        out.y_mu_, out.y_sigma_ = ref.y_mu_, ref.y_sigma_
        out.history_ = [{"member": name, "seed": m.config.get("seed"), "history": m.history_}
                       for name, m in zip(names, models)]
        return out

    def member(self, i: int) -> "GnnCostModel":
        """Member i of an ensemble as a model of its own (sharing its scalers); i = 0 of a single model: itself."""
        if self.members == 1:
            if i != 0:
                raise IndexError(f"member {i} of a single model")
            return self
        m = GnnCostModel(**self.config, batch_size=self.batch_size, threads=self.threads)
        m.net_ = self.net_.members[i]
        m.node_scaler_, m.tile_scaler_, m.kernel_scaler_ = self.node_scaler_, self.tile_scaler_, self.kernel_scaler_
        m.y_mu_, m.y_sigma_ = self.y_mu_, self.y_sigma_
        return m

    # ---- persistence
    def state(self) -> dict:
        """What `save` writes (the file format keeps the names of before the fitted-state convention)."""
        self.check_is_fitted("GNN cost model", ("net_", "node_scaler_"))
        weights = ({"members": [n.state_dict() for n in self.net_.members]} if self.members > 1
                   else {"state_dict": self.net_.state_dict()})
        return {"format": "autotune-gnn", "version": FORMAT_VERSION, "config": self.config,
                "task": self.task, "target": self.target, **weights,
                "node_scaler": self.node_scaler_.state_dict(), "tile_scaler": self.tile_scaler_.state_dict(),
                "kernel_scaler": self.kernel_scaler_.state_dict(),
                "node_dim": NODE_DIM, "tile_dim": TILE_DIM, "num_opcodes": NUM_OPCODES,
                "history": getattr(self, "history_", []), "feature_version": feature_version(self.target),
                # (a model whose scalers alone are fitted has no runtime standardization yet: the identity)
                "y_mu": getattr(self, "y_mu_", 0.0), "y_sigma": getattr(self, "y_sigma_", 1.0)}

    def save(self, path: str) -> None:
        tmp = f"{path}.tmp{os.getpid()}"
        torch.save(self.state(), tmp)
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str, task: Optional[str] = None, target: Optional[str] = None) -> "GnnCostModel":
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as e:
            raise ValueError(f"cannot read GNN model {path}: {e.strerror or e}") from None
        try:
            st = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
        except Exception as e:  # noqa: BLE001 - any unpickling failure is a corrupt file
            raise ValueError(f"{path} is not a GNN cost model file (corrupt or wrong format: {type(e).__name__})") from None
        if not isinstance(st, dict) or st.get("format") != "autotune-gnn":
            raise ValueError(f"{path} is not a GNN cost model file")
        if st.get("version") != FORMAT_VERSION:
            raise ValueError(f"{path}: GNN model format version {st.get('version')} is not supported "
                             f"(expected {FORMAT_VERSION})")
        if st.get("node_dim") != NODE_DIM or st.get("tile_dim") != TILE_DIM or st.get("num_opcodes") != NUM_OPCODES:
            raise ValueError(f"{path}: the model was trained with another feature layout "
                             f"({st.get('node_dim')}+{st.get('tile_dim')} features, now {NODE_DIM}+{TILE_DIM})")
        want = feature_version(st.get("target") or "tpu")
        if (st.get("config") or {}).get("geometry_features") and st.get("feature_version") != want:
            raise ValueError(f"{path}: GNN model trained with feature layout {st.get('feature_version')}, this "
                             f"autotune computes layout {want} for target {st.get('target')}; retrain it with "
                             f"`autotune train --model gnn`")
        check_model_scope(path, "GNN", st.get("task"), st.get("target"), task, target)
        cfg = {k: v for k, v in {**LEGACY_CONFIG, **dict(st["config"])}.items() if k in CONFIG_KEYS}
        m = cls(**cfg)
        try:
            m.init_network()
            if "members" in st:  # a seed ensemble (`ensemble`): one state dict per member network
                sds = list(st["members"])
                if len(sds) < 2:
                    raise ValueError(f"{path}: a GNN ensemble file with {len(sds)} member(s)")
                with torch_seeded(0):  # (the weights are loaded over the initial ones)
                    nets = [m.net_] + [GnnNet(m.config) for _ in sds[1:]]
                for net, sd in zip(nets, sds):
                    net.load_state_dict(sd)
                m.net_ = GnnEnsembleNet(nets)
            else:
                m.net_.load_state_dict(st["state_dict"])
        except (RuntimeError, KeyError, TypeError) as e:
            raise ValueError(f"{path}: weights do not match the model configuration ({str(e).splitlines()[0]})") from None
        m.node_scaler_ = FeatureScaler.from_state(st["node_scaler"])
        m.tile_scaler_ = FeatureScaler.from_state(st["tile_scaler"])
        m.kernel_scaler_ = FeatureScaler.from_state(st["kernel_scaler"])
        m.history_ = list(st.get("history", []))
        m.y_mu_, m.y_sigma_ = float(st.get("y_mu", 0.0)), float(st.get("y_sigma", 1.0))
        return m


def _same_state(a: dict, b: dict) -> bool:
    """Whether two scaler state dicts (arrays and scalars) are equal."""
    return a.keys() == b.keys() and all(np.array_equal(np.asarray(a[k]), np.asarray(b[k])) for k in a)


def _a_core_is_free() -> bool:
    """Whether the 1-minute load average leaves a usable core idle (this process counted as busy)."""
    try:
        return os.getloadavg()[0] < _usable_cores() - 0.5
    except (AttributeError, OSError):
        return False


def _usable_cores() -> int:
    """CPU cores this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


_FLUSH = threading.local()  # .depth: nesting depth of torch_threads blocks flushing subnormal floats, per thread


class torch_threads:
    """Run torch ops with `n` intra-op threads, restoring the previous setting afterwards. Our graphs
    are small: on a loaded 2-core machine two OpenMP threads spin against each other and run up to
    100x slower than one (benchmarks/gnn_speed.py), so the model uses 1 thread by default.

    Inside the block subnormal floats are flushed to zero (`torch.set_flush_denormal`, x86 SSE FTZ/DAZ of
    the calling thread; the model's one intra-op thread by default), switched off again when the outermost
    block exits. Weight decay drives unused weights and Adam's first moments into the subnormal range,
    where every multiply takes a slow microcode path: a training with `--weight-decay 1e-4` ran 3x slower
    per epoch by its 4th epoch (49,187 of 214,337 weights subnormal), and the same training with flushing
    gives the same losses (docs/lab-notes/2026-11-27-subnormals-weight-decay.md)."""

    def __init__(self, n: Optional[int], flush_denormal: bool = True):
        self.n = n
        self.prev = None
        self.flush = flush_denormal

    def __enter__(self) -> "torch_threads":
        if self.n:
            self.prev = torch.get_num_threads()
            if self.prev != self.n:
                torch.set_num_threads(self.n)
        if self.flush:
            depth = getattr(_FLUSH, "depth", 0)
            if depth == 0:
                torch.set_flush_denormal(True)
            _FLUSH.depth = depth + 1
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.flush:
            _FLUSH.depth -= 1
            if _FLUSH.depth == 0:
                torch.set_flush_denormal(False)
        if self.n and self.prev is not None and self.prev != self.n:
            torch.set_num_threads(self.prev)


register_cost_model("gnn", GnnCostModel)
