"""Graph layers in plain PyTorch (scatter via index_add_ / scatter_reduce_): no torch_geometric.

A batch of graphs is one disjoint graph (`GraphBatch`, like PyG's Batch): node rows of all graphs
concatenated, edge indices offset, `graph[n]` the graph of node n and `pos[n]` its position in its
graph's topological order.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np
import torch
from torch import nn
import torch.nn.functional as F

__all__ = ["GraphBatch", "collate", "collate_prepared", "scatter_sum", "scatter_mean", "scatter_max", "segment_softmax",
           "DirectedSAGEConv", "GATConv", "to_padded"]


@dataclass
class GraphBatch:
    x: torch.Tensor            # [N, F] float
    opcode: torch.Tensor       # [N] long
    edge_index: torch.Tensor   # [2, E] long (producer -> consumer), offset per graph
    graph: torch.Tensor        # [N] long: graph id of each node
    pos: torch.Tensor          # [N] long: position of the node inside its graph
    lengths: torch.Tensor      # [B] long: nodes per graph
    num_graphs: int
    gfeat: Optional[torch.Tensor] = None  # [B, K] per-graph features (late join), optional

    @property
    def num_nodes(self) -> int:
        return int(self.x.shape[0])


def collate(node_feats: Sequence[np.ndarray], opcodes: Sequence[np.ndarray], edges: Sequence[np.ndarray],
            extra: Optional[np.ndarray] = None, graph_feat: Optional[np.ndarray] = None) -> GraphBatch:
    """One disjoint graph from per-graph arrays. `extra[i]` (a row per graph) is appended to every
    node of graph i (tile features: the paper's early join); `graph_feat[i]` is kept per graph."""
    lengths = np.fromiter((len(a) for a in node_feats), np.int64, len(node_feats))
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]) if len(lengths) else np.zeros(0, np.int64)
    x = np.concatenate(node_feats, axis=0) if len(node_feats) else np.zeros((0, 0), np.float32)
    graph = np.repeat(np.arange(len(lengths)), lengths)
    if extra is not None:
        x = np.concatenate([x, np.asarray(extra, np.float32)[graph]], axis=1)
    pos = np.arange(len(x)) - np.repeat(offsets, lengths)
    ne = np.fromiter((e.shape[1] for e in edges), np.int64, len(edges))
    if ne.sum():
        ei = np.concatenate(edges, axis=1) + np.repeat(offsets, ne)[None, :]
    else:
        ei = np.zeros((2, 0), np.int64)
    return GraphBatch(torch.from_numpy(np.ascontiguousarray(x, np.float32)),
                      torch.from_numpy(np.concatenate(opcodes).astype(np.int64)) if len(opcodes) else
                      torch.zeros(0, dtype=torch.long),
                      torch.from_numpy(ei.astype(np.int64)), torch.from_numpy(graph), torch.from_numpy(pos),
                      torch.from_numpy(lengths), len(lengths),
                      None if graph_feat is None else torch.from_numpy(np.ascontiguousarray(graph_feat, np.float32)))


def collate_prepared(preps: Sequence[tuple], tfs: np.ndarray) -> GraphBatch:
    """One batch from `GnnCostModel.prepare_graph` tuples (node features, opcodes, edges, kernel
    features) and their scaled tile features; the kernel-level input is kernel + tile features."""
    return collate([p[0] for p in preps], [p[1] for p in preps], [p[2] for p in preps], tfs,
                   np.concatenate([np.stack([p[3] for p in preps]), tfs], axis=1))


def scatter_sum(src: torch.Tensor, index: torch.Tensor, n: int) -> torch.Tensor:
    out = src.new_zeros((n,) + tuple(src.shape[1:]))
    return out.index_add_(0, index, src)


def scatter_mean(src: torch.Tensor, index: torch.Tensor, n: int) -> torch.Tensor:
    s = scatter_sum(src, index, n)
    cnt = torch.bincount(index, minlength=n).clamp_(min=1).to(src.dtype)
    return s / cnt.view(-1, *([1] * (src.dim() - 1)))


def scatter_max(src: torch.Tensor, index: torch.Tensor, n: int) -> torch.Tensor:
    """Column-wise max per segment (0 for empty segments)."""
    out = src.new_full((n,) + tuple(src.shape[1:]), float("-inf"))
    idx = index.view(-1, *([1] * (src.dim() - 1))).expand_as(src)
    out = out.scatter_reduce(0, idx, src, reduce="amax", include_self=True)
    return torch.where(torch.isinf(out), torch.zeros_like(out), out)


def segment_softmax(scores: torch.Tensor, index: torch.Tensor, n: int) -> torch.Tensor:
    """Softmax of scores [E, H] over the edges sharing the same index (destination)."""
    mx = scatter_max(scores.detach(), index, n)
    e = torch.exp(scores - mx[index])
    den = scatter_sum(e, index, n)
    return e / (den[index] + 1e-16)


def to_padded(h: torch.Tensor, batch: GraphBatch) -> tuple:
    """[B, Lmax, H] padded node sequences in topological order and a [B, Lmax] padding mask (True = pad)."""
    B = batch.num_graphs
    L = int(batch.lengths.max()) if B else 0
    out = h.new_zeros((B, L, h.shape[1]))
    out[batch.graph, batch.pos] = h
    mask = torch.arange(L).unsqueeze(0) >= batch.lengths.unsqueeze(1)
    return out, mask


class DirectedSAGEConv(nn.Module):
    """GraphSAGE with separate aggregation over incoming and outgoing edges (paper section 3.2):
    h' = l2norm(relu(W [h ; agg_in(relu(W_in h_u)) ; agg_out(relu(W_out h_w))]))
    where u ranges over producers (in-edges) and w over consumers (out-edges) of the node."""

    def __init__(self, din: int, dout: int, direction: str = "both", aggr: str = "mean",
                 normalize: bool = True):
        super().__init__()
        if direction not in ("both", "in", "out"):
            raise ValueError(f"edge direction must be both, in or out, not {direction!r}")
        if aggr not in ("mean", "sum", "max"):
            raise ValueError(f"aggregation must be mean, sum or max, not {aggr!r}")
        self.direction, self.aggr, self.normalize = direction, aggr, normalize
        self.lin_in = nn.Linear(din, dout) if direction in ("both", "in") else None
        self.lin_out = nn.Linear(din, dout) if direction in ("both", "out") else None
        k = 1 + (self.lin_in is not None) + (self.lin_out is not None)
        self.lin = nn.Linear(din + (k - 1) * dout, dout)

    def _agg(self, msg: torch.Tensor, index: torch.Tensor, n: int) -> torch.Tensor:
        if self.aggr == "sum":
            return scatter_sum(msg, index, n)
        if self.aggr == "max":
            return scatter_max(msg, index, n)
        return scatter_mean(msg, index, n)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        n = x.shape[0]
        src, dst = edge_index[0], edge_index[1]
        parts = [x]
        if self.lin_in is not None:
            parts.append(self._agg(F.relu(self.lin_in(x))[src], dst, n))
        if self.lin_out is not None:
            parts.append(self._agg(F.relu(self.lin_out(x))[dst], src, n))
        h = F.relu(self.lin(torch.cat(parts, dim=1)))
        if self.normalize:
            h = F.normalize(h, p=2.0, dim=1)
        return h


class GATConv(nn.Module):
    """Graph attention (Velickovic et al.) over the edges in both directions plus self-loops;
    `heads` heads concatenated (dout must be divisible by heads)."""

    def __init__(self, din: int, dout: int, heads: int = 4, direction: str = "both", negative_slope: float = 0.2):
        super().__init__()
        if dout % heads:
            raise ValueError(f"GAT output size {dout} is not divisible by {heads} heads")
        if direction not in ("both", "in", "out"):
            raise ValueError(f"edge direction must be both, in or out, not {direction!r}")
        self.heads, self.dh, self.direction, self.slope = heads, dout // heads, direction, negative_slope
        self.lin = nn.Linear(din, dout, bias=False)
        self.att_src = nn.Parameter(torch.empty(heads, self.dh))
        self.att_dst = nn.Parameter(torch.empty(heads, self.dh))
        self.bias = nn.Parameter(torch.zeros(dout))
        nn.init.xavier_uniform_(self.att_src)
        nn.init.xavier_uniform_(self.att_dst)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        n = x.shape[0]
        loops = torch.arange(n, device=x.device)
        src, dst = edge_index[0], edge_index[1]
        if self.direction == "both":
            s, d = torch.cat([src, dst, loops]), torch.cat([dst, src, loops])
        elif self.direction == "in":  # messages from producers
            s, d = torch.cat([src, loops]), torch.cat([dst, loops])
        else:  # messages from consumers
            s, d = torch.cat([dst, loops]), torch.cat([src, loops])
        h = self.lin(x).view(n, self.heads, self.dh)
        a = (h * self.att_src).sum(-1)[s] + (h * self.att_dst).sum(-1)[d]
        alpha = segment_softmax(F.leaky_relu(a, self.slope), d, n)
        out = scatter_sum(h[s] * alpha.unsqueeze(-1), d, n).reshape(n, -1)
        return F.elu(out + self.bias)
