"""GNN cost model: encoders, reductions, losses, training (Kaufman et al., MLSys 2021, section 3)."""
from costmodels.gnn.layers import DirectedSAGEConv, GATConv, GraphBatch, collate
from costmodels.gnn.model import DEFAULT_CONFIG, ENCODERS, REDUCTIONS, GnnCostModel, GnnNet
from costmodels.gnn.train import FUSION_RECIPE, fit_gnn, listmle_loss, pairwise_rank_loss, rank_loss

__all__ = ["GnnCostModel", "GnnNet", "DirectedSAGEConv", "GATConv", "GraphBatch", "collate", "fit_gnn",
           "pairwise_rank_loss", "listmle_loss", "rank_loss", "DEFAULT_CONFIG", "ENCODERS", "REDUCTIONS",
           "FUSION_RECIPE"]
