"""The GNN on the TpuGraphs layout task: one program's graph, scored per layout configuration.

Input (`LayoutGraph`): a layout npz record (autotune.tuning.dataset: node_feat, node_opcode, edge_index,
node_config_ids, node_config_feat, config_runtime), optionally pruned to the configurable nodes'
`hops`-hop neighbourhoods (`prune_layout_graph`). Each node's input is its opcode embedding, its 140
TpuGraphs features (signed log1p, min-max scaled on the training split) and `LAYOUT_INPUT_DIM` layout
features, zero except on configurable nodes, where they describe the node's configuration (the
TpuGraphs join of node_config_feat on node_config_ids): a configurable flag and, per tensor (output,
operand 0, operand 1), the one-hot minor and second-minor dims, the log2 sizes of those dims, the log2
(8, 128) tile padding factor they give, and whether the layout is row-major. The network is the
project's `GnnNet` (task "layout": opcode embedding + input layer, SAGE/GAT layers, column-wise
mean/max reduction, MLP head): one score per configuration, lower = faster, trained over the
configurations of one program with ListMLE, a pairwise hinge loss or MSE on the program's
standardized log runtime (costmodels.gnn.train.fit_layout_gnn).

Residual (`residual=True`): the score of a configuration is the analytical model's price reweighted
per kernel class, relative to the default configuration's (`analytical_term_ratios`: the classes of
autotune.compiler.layouts.KERNEL_CLASSES, learned weights exp(v_k) starting at 1), as a log, times
`analytical_scale` (1 / the median spread of the analytical log ratio over the training programs) and a
learned exp(w), plus the network's output, whose last layer starts at zero: untrained, the model ranks
as the analytical model; training learns where the analytical model is wrong. `score_scale` converts
score differences back to log runtime ratios (autotune.tuning.pricing.LearnedLayoutCost).

Graph segment training (GST, Cao et al. 2023, TpuGraphs' baselines): with `segments` K > 1 the node
list (module order) is cut into K contiguous segments, each encoded on its own (edges inside it);
a graph's column reduction is joined from the segments' partial sums and maxima. A training step
backpropagates through one sampled segment and takes the others from a table of stored, detached
partials (refreshed when their segment is sampled), so activations are kept for one segment only.
Inference encodes every segment (no gradients) and joins them the same way.
"""
from __future__ import annotations

import io
import os
from typing import Any, Optional

import numpy as np
import torch

from autotune.compiler.layouts import KERNEL_CLASSES
from costmodels.features import NUM_OPCODES, TPUGRAPHS_NODE_DIM, FeatureScaler, prune_layout_graph
from costmodels.gnn.layers import GraphBatch
from costmodels.base import LayoutModel, OldFittedName, reject_unknown_parameters
from costmodels.gnn.model import CONFIG_KEYS, GnnNet, normalize_config, torch_threads
from costmodels.gnn.train import fit_layout_gnn, join_partials, segment_partials, torch_seeded

__all__ = ["LAYOUT_INPUT_DIM", "LayoutGraph", "LayoutGnnModel", "analytical_log_ratio", "analytical_term_ratios",
           "config_node_features", "segment_bounds"]

LAYOUT_FORMAT = "autotune-gnn-layout"
LAYOUT_FORMAT_VERSION = 1
_TENSORS, _DIMS = 3, 6
_PER_TENSOR = 2 * _DIMS + 4
LAYOUT_INPUT_DIM = 1 + _TENSORS * _PER_TENSOR
_SHAPE_COLS = slice(21, 27)  # TpuGraphs node_feat columns of the shape dims (costmodels.features)


def _operand_dims(node_feat: np.ndarray, edge_index: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """[nc, 3, 6] dims of each configurable node's tensors: its output, then its first two producers
    in edge order (the operand order `tpugraphs_module_features` writes); 0 where absent."""
    dims = np.zeros((len(ids), _TENSORS, _DIMS), np.float64)
    shapes = np.asarray(node_feat, np.float64)[:, _SHAPE_COLS]
    dims[:, 0] = shapes[ids]
    ei = np.asarray(edge_index, np.int64).reshape(-1, 2)
    pos = {int(n): k for k, n in enumerate(ids)}
    seen = np.zeros(len(ids), np.int64)
    for consumer, producer in ei:
        k = pos.get(int(consumer))
        if k is not None and seen[k] < _TENSORS - 1:
            seen[k] += 1
            dims[k, seen[k]] = shapes[producer]
    return dims


def config_node_features(node_feat: np.ndarray, edge_index: np.ndarray, node_config_ids: np.ndarray,
                         node_config_feat: np.ndarray) -> np.ndarray:
    """[c, nc, LAYOUT_INPUT_DIM] layout features of the configurable nodes per configuration (module
    docstring); partial TpuGraphs layouts (two minor dims, -1 padded) are read as far as they go."""
    cf = np.asarray(node_config_feat, np.int64).reshape(len(node_config_feat), len(node_config_ids), _TENSORS, _DIMS)
    dims = _operand_dims(node_feat, edge_index, np.asarray(node_config_ids, np.int64))[None]  # [1, nc, 3, 6]
    rank = (dims > 0).sum(-1)                                                             # [1, nc, 3]
    out = [np.ones(cf.shape[:2] + (1,), np.float32)]
    minor, second = cf[..., 0], cf[..., 1]
    size = []
    for which in (minor, second):
        onehot = (which[..., None] == np.arange(_DIMS)).astype(np.float32)               # [c, nc, 3, 6]
        s = np.take_along_axis(np.broadcast_to(dims, cf.shape), np.clip(which, 0, _DIMS - 1)[..., None], -1)[..., 0]
        size.append(np.where((which >= 0) & (s > 0), s, 1.0))
        out.append(onehot)
    s0, s1 = size
    pad = np.log2(np.ceil(s0 / 128) * 128 / s0) + np.log2(np.ceil(s1 / 8) * 8 / s1) * (rank >= 2)
    desc = np.where(np.arange(_DIMS) < rank[..., None], rank[..., None] - 1 - np.arange(_DIMS), -1)  # [1, nc, 3, 6]
    row_major = np.all((cf == desc) | (cf < 0), axis=-1)
    scal = np.stack([np.log2(s0) / 10, np.log2(s1) / 10, pad, row_major.astype(np.float64)], axis=-1)
    per_tensor = np.concatenate([out[1], out[2], scal.astype(np.float32)], axis=-1)      # [c, nc, 3, 16]
    return np.concatenate([out[0], per_tensor.reshape(cf.shape[0], cf.shape[1], -1)], axis=-1).astype(np.float32)


def segment_bounds(n: int, segments: int) -> list:
    """[(start, stop)] of `segments` contiguous, near-equal node ranges (at most n of them)."""
    k = max(1, min(int(segments), n))
    cuts = np.linspace(0, n, k + 1).round().astype(int)
    return [(int(a), int(b)) for a, b in zip(cuts[:-1], cuts[1:]) if b > a]


def _signed_log(x: np.ndarray) -> np.ndarray:
    return (np.sign(x) * np.log1p(np.abs(x))).astype(np.float32)


def _analytical_reference(arrays: dict, reference_s: Optional[float]) -> float:
    """log seconds of the reference price: `reference_s`, else the default configuration's analytical
    price (`config_is_default`), else the median over the record's configurations."""
    a = np.log(np.maximum(np.asarray(arrays["config_analytical"], np.float64), 1e-30))
    if reference_s is not None:
        return float(np.log(max(reference_s, 1e-30)))
    if "config_is_default" in arrays and np.asarray(arrays["config_is_default"]).any():
        return float(a[np.flatnonzero(np.asarray(arrays["config_is_default"]))[0]])
    return float(np.median(a))


def analytical_log_ratio(arrays: dict, reference_s: Optional[float] = None) -> Optional[np.ndarray]:
    """log(analytical price / the reference's) per configuration of a layout record (the reference:
    `_analytical_reference`); None when the record has no analytical prices."""
    if "config_analytical" not in arrays:
        return None
    a = np.log(np.maximum(np.asarray(arrays["config_analytical"], np.float64), 1e-30))
    return a - _analytical_reference(arrays, reference_s)


def analytical_term_ratios(arrays: dict, reference_s: Optional[float] = None) -> Optional[np.ndarray]:
    """[configs, len(KERNEL_CLASSES)]: the analytical price split by kernel class
    (`config_analytical_terms`), over the reference price: each row sums to exp(analytical_log_ratio).
    None when the record has no terms."""
    if "config_analytical_terms" not in arrays or "config_analytical" not in arrays:
        return None
    ref = np.exp(_analytical_reference(arrays, reference_s))
    return np.asarray(arrays["config_analytical_terms"], np.float64) / ref


class LayoutGraph:
    """One program of a layout dataset, prepared for the network: its (pruned) graph, the layout
    features per configuration, the runtimes, the analytical log ratios, and its segments."""

    def __init__(self, name: str, family: str, arrays: dict, hops: Optional[int] = None, segments: int = 1,
                 analytical_reference_s: Optional[float] = None):
        a = prune_layout_graph(arrays, hops) if hops is not None else arrays
        self.name, self.family = name, family
        self.raw = _signed_log(np.asarray(a["node_feat"], np.float32))
        self.opcode = np.asarray(a["node_opcode"], np.int64)
        self.node_feat = np.asarray(a["node_feat"])
        self.edge_index = np.asarray(a["edge_index"], np.int64).reshape(-1, 2)
        self.edges = np.ascontiguousarray(self.edge_index[:, ::-1].T)  # [2, E] producer -> consumer
        self.ids = np.asarray(a["node_config_ids"], np.int64)
        self.set_configs(a, analytical_reference_s)
        self.x: Optional[np.ndarray] = None
        self.set_segments(segments)

    def set_configs(self, arrays: dict, analytical_reference_s: Optional[float] = None) -> None:
        """Take the configurations (node_config_feat, config_runtime, config_analytical) of `arrays`, a
        record of this graph's program (the search prices new configurations this way)."""
        self.cfg = config_node_features(self.node_feat, self.edge_index, self.ids, arrays["node_config_feat"])
        self.runtime = np.asarray(arrays["config_runtime"], np.float64)
        self.analytical = np.asarray(arrays["config_analytical"], np.float64) if "config_analytical" in arrays else None
        self.analytical_ratio = analytical_log_ratio(arrays, analytical_reference_s)
        self.analytical_terms = analytical_term_ratios(arrays, analytical_reference_s)
        ly = np.log(np.maximum(self.runtime, 1e-30))
        self.y = ((ly - ly.mean()) / max(float(ly.std()), 1e-6)).astype(np.float32)  # per-program standardized

    @property
    def num_nodes(self) -> int:
        return int(self.raw.shape[0])

    @property
    def num_configs(self) -> int:
        return int(len(self.runtime))

    def set_segments(self, segments: int) -> None:
        self.bounds = segment_bounds(self.num_nodes, segments)
        self.seg_edges = []
        for lo, hi in self.bounds:
            keep = (self.edges[0] >= lo) & (self.edges[0] < hi) & (self.edges[1] >= lo) & (self.edges[1] < hi)
            self.seg_edges.append(self.edges[:, keep] - lo)
        self.seg_cfg = [(np.nonzero((self.ids >= lo) & (self.ids < hi))[0]) for lo, hi in self.bounds]

    def scale(self, scaler: FeatureScaler) -> None:
        self.x = scaler.transform(self.raw).astype(np.float32)

    def batch(self, configs: np.ndarray, segment: int) -> GraphBatch:
        """The disjoint batch of one segment's subgraph under each of `configs`."""
        lo, hi = self.bounds[segment]
        n, m = hi - lo, len(configs)
        base = np.concatenate([self.x[lo:hi], np.zeros((n, LAYOUT_INPUT_DIM), np.float32)], axis=1)
        x = np.repeat(base[None], m, axis=0)                                  # [m, n, F]
        sel = self.seg_cfg[segment]
        if len(sel):
            x[:, self.ids[sel] - lo, -LAYOUT_INPUT_DIM:] = self.cfg[np.asarray(configs)][:, sel]
        e = self.seg_edges[segment]
        offs = np.arange(m, dtype=np.int64) * n
        ei = (e[:, None, :] + offs[None, :, None]).reshape(2, -1)
        return GraphBatch(torch.from_numpy(x.reshape(m * n, -1)), torch.from_numpy(np.tile(self.opcode[lo:hi], m)),
                          torch.from_numpy(ei), torch.from_numpy(np.repeat(np.arange(m), n)),
                          torch.from_numpy(np.tile(np.arange(n), m)), torch.full((m,), n, dtype=torch.long), m)


class LayoutGnnModel(LayoutModel):
    """Layout-configuration ranking model: a `GnnNet` of task "layout" and its feature scaler. Fitted state
    (costmodels.base.Estimator), set by fit or load: `net_`, `scaler_`, `analytical_scale_` (residual: score
    units per unit of log analytical ratio), `history_`."""

    name = "gnn"
    task = "layout"
    predicts_absolute = False
    requires_fit = True
    # the names these attributes had before the fitted-state convention
    net = OldFittedName("net_")
    scaler = OldFittedName("scaler_", FeatureScaler)
    analytical_scale = OldFittedName("analytical_scale_", lambda: 1.0)  # (1.0 until fitted)
    history = OldFittedName("history_", list)

    def __init__(self, target: str = "tpu", threads: Optional[int] = 1, hops: Optional[int] = None,
                 segments: int = 1, residual: bool = False, **config: Any):
        reject_unknown_parameters(type(self).__name__, config, ("target", "threads", "hops", "segments", "residual")
                                  + tuple(k for k in CONFIG_KEYS if k not in ("task", "target", "residual")))
        self.target = target
        self.threads = threads
        self.hops = hops
        self.segments = segments
        self.residual = residual
        self._config_params = dict(config)  # as given (`CONFIG_KEYS`); `config` adds the defaults

    def get_params(self) -> dict:
        return {"target": self.target, "threads": self.threads, "hops": self.hops, "segments": self.segments,
                "residual": self.residual, **self._config_params}

    @property
    def config(self) -> dict:
        """The network's configuration (task layout, column reduction), checked on first use (`normalize_config`)."""
        cfg = self.__dict__.get("_config")
        if cfg is None:
            cfg = self._config = normalize_config(dict(self._config_params, task="layout", target=self.target,
                                                       reduction="column"))
        return cfg

    @property
    def num_segments(self) -> int:
        """Graph segments (`segments`, at least 1)."""
        return max(1, int(self.segments))

    def init_network(self) -> GnnNet:
        """A new untrained network as `net_`, its weights drawn from a generator seeded with config seed (torch's
        global random state is left as it was). Residual: the correction starts at zero, so an untrained residual
        model ranks as the analytical model."""
        with torch_seeded(int(self.config.get("seed", 0) or 0)):
            net = GnnNet(self.config, in_dim=TPUGRAPHS_NODE_DIM + LAYOUT_INPUT_DIM, num_opcodes=NUM_OPCODES)
        if self.residual:
            last = [mod for mod in net.head.modules() if isinstance(mod, torch.nn.Linear)][-1]
            torch.nn.init.zeros_(last.weight)
            torch.nn.init.zeros_(last.bias)
            # learned weights (logs, 0 = the analytical model): of the analytical term as a whole, so that
            # sharpening it costs the network nothing, and of each kernel class's part of the price
            net.register_parameter("analytical_log_weight", torch.nn.Parameter(torch.zeros(())))
            net.register_parameter("analytical_term_log_weights", torch.nn.Parameter(torch.zeros(len(KERNEL_CLASSES))))
        self.net_ = net
        return net

    @property
    def loss_name(self) -> str:
        return "listmle" if self.config["loss"] == "rank" and self.config["rank_loss"] == "listmle" else (
            "rank" if self.config["loss"] == "rank" else "mse")

    @property
    def score_scale(self) -> float:
        """Score units per unit of log runtime: a residual model's scores are its analytical log ratio
        times `analytical_scale` plus the network's correction (1 for a plain ranking model)."""
        if not self.residual:
            return 1.0
        return self.analytical_scale * float(self.net_.analytical_log_weight.detach().exp())

    def prepare(self, name: str, family: str, arrays: dict, analytical_reference_s: Optional[float] = None) -> LayoutGraph:
        g = LayoutGraph(name, family, arrays, self.hops, self.num_segments, analytical_reference_s)
        if self.residual and g.analytical_terms is None:
            raise ValueError(f"{name}: the residual layout GNN needs the configurations' analytical prices "
                             "by kernel class (config_analytical_terms: `add_layout_analytical_terms` adds them "
                             "to a dataset built without them)")
        scaler = self.__dict__.get("scaler_")
        if scaler is not None and scaler.fitted:
            g.scale(scaler)
        return g

    def offsets(self, g: LayoutGraph, configs: np.ndarray) -> torch.Tensor:
        """The analytical part of the scores of `configs` (zero unless residual)."""
        if not self.residual:
            return torch.zeros(len(configs))
        terms = torch.from_numpy(g.analytical_terms[np.asarray(configs)].astype(np.float32))
        reweighted = (terms * self.net_.analytical_term_log_weights.exp()).sum(-1).clamp_min(1e-12)
        return self.analytical_scale * self.net_.analytical_log_weight.exp() * reweighted.log()

    def fit_analytical_scale(self, graphs: list) -> None:
        """Residual: scale the analytical log ratio to unit spread, 1 / the median over the training
        programs of its standard deviation over their configurations."""
        spread = [float(np.std(g.analytical_ratio)) for g in graphs if g.analytical_ratio is not None]
        spread = [v for v in spread if v > 0]
        self.analytical_scale_ = 1.0 / float(np.median(spread)) if spread else 1.0

    def scores(self, g: LayoutGraph, configs: Optional[np.ndarray] = None, chunk: int = 32) -> np.ndarray:
        """Scores (lower = faster) of a prepared program's configurations, without gradients."""
        self.check_is_fitted("layout GNN", ("net_", "scaler_"))
        if g.x is None:
            g.scale(self.scaler_)
        configs = np.arange(g.num_configs) if configs is None else np.asarray(configs)
        out = np.empty(len(configs))
        self.net_.eval()
        with torch.inference_mode(), torch_threads(self.threads):
            for s in range(0, len(configs), chunk):
                c = configs[s:s + chunk]
                parts = [segment_partials(self.net_, g, c, k) for k in range(len(g.bounds))]
                sums = torch.stack([p[0] for p in parts], 1)
                maxs = torch.stack([p[1] for p in parts], 1)
                out[s:s + len(c)] = (join_partials(self.net_, sums, maxs, g.num_nodes) + self.offsets(g, c)).double().numpy()
        return out

    def predict_layouts(self, name: str, family: str, arrays: dict) -> np.ndarray:
        """Scores of every configuration of one layout record's arrays."""
        return self.scores(self.prepare(name, family, arrays))

    def fit(self, dataset: Any, **train_kw: Any) -> "LayoutGnnModel":
        """Train on a layout `Dataset`'s train split (validation split for checkpoint selection)."""
        if dataset.task != "layout":
            raise ValueError(f"dataset is for task {dataset.task!r}, the model for 'layout'")
        train = [self.prepare(n, f, r.arrays) for n, f, r in dataset.iter_layouts("train")]
        if not train:
            raise ValueError(f"dataset {dataset.root} has no programs in the train split")
        val = [self.prepare(n, f, r.arrays) for n, f, r in dataset.iter_layouts("validation")]
        self.init_network()  # scikit-learn's fit: from scratch every time
        self.analytical_scale_ = 1.0
        if self.residual:
            self.fit_analytical_scale(train)
        with torch_threads(self.threads):
            fit_layout_gnn(self, train, val, **train_kw)
        return self

    # ---- persistence
    def save(self, path: str) -> None:
        self.check_is_fitted("layout GNN", ("net_", "scaler_"))
        st = {"format": LAYOUT_FORMAT, "version": LAYOUT_FORMAT_VERSION, "config": self.config, "target": self.target,
              "hops": self.hops, "segments": self.num_segments, "residual": bool(self.residual),
              "analytical_scale": self.analytical_scale, "state_dict": self.net_.state_dict(),
              "scaler": self.scaler_.state_dict(), "history": self.history_,
              "input_dim": TPUGRAPHS_NODE_DIM + LAYOUT_INPUT_DIM, "num_opcodes": NUM_OPCODES}
        tmp = f"{path}.tmp{os.getpid()}"
        torch.save(st, tmp)
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str) -> "LayoutGnnModel":
        try:
            with open(path, "rb") as f:
                st = torch.load(io.BytesIO(f.read()), map_location="cpu", weights_only=True)
        except OSError as e:
            raise ValueError(f"cannot read layout GNN model {path}: {e.strerror or e}") from None
        except Exception as e:  # noqa: BLE001 - any unpickling failure is a corrupt file
            raise ValueError(f"{path} is not a layout GNN model file (corrupt: {type(e).__name__})") from None
        if not isinstance(st, dict) or st.get("format") != LAYOUT_FORMAT:
            raise ValueError(f"{path} is not a layout GNN model file")
        if st.get("version") != LAYOUT_FORMAT_VERSION or st.get("input_dim") != TPUGRAPHS_NODE_DIM + LAYOUT_INPUT_DIM \
                or st.get("num_opcodes") != NUM_OPCODES:
            raise ValueError(f"{path}: layout GNN model of another format or feature layout; retrain it")
        cfg = {k: v for k, v in st["config"].items() if k in CONFIG_KEYS and k not in ("task", "target", "residual")}
        m = cls(st["target"], hops=st.get("hops"), segments=int(st.get("segments", 1)),
                residual=bool(st.get("residual", False)), **cfg)
        m.analytical_scale_ = float(st.get("analytical_scale", 1.0))
        m.init_network().load_state_dict(st["state_dict"])
        m.scaler_ = FeatureScaler.from_state(st["scaler"])
        m.history_ = list(st.get("history", []))
        return m


def is_layout_model_file(path: str) -> bool:
    """Whether a .pt file holds a layout GNN (by content)."""
    try:
        with open(path, "rb") as f:
            st = torch.load(io.BytesIO(f.read()), map_location="cpu", weights_only=True)
    except Exception:  # noqa: BLE001
        return False
    return isinstance(st, dict) and st.get("format") == LAYOUT_FORMAT

