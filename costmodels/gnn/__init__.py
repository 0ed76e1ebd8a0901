"""GNN cost model: encoders, reductions, losses, training (Kaufman et al., MLSys 2021, section 3)."""
from .layers import DirectedSAGEConv, GATConv, GraphBatch, collate
from .model import DEFAULT_CONFIG, ENCODERS, REDUCTIONS, GnnCostModel, GnnNet
from .train import fit_gnn, pairwise_rank_loss

__all__ = ["GnnCostModel", "GnnNet", "DirectedSAGEConv", "GATConv", "GraphBatch", "collate", "fit_gnn",
           "pairwise_rank_loss", "DEFAULT_CONFIG", "ENCODERS", "REDUCTIONS"]
