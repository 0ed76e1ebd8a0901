"""GNN cost model: encoders, reductions, losses, training."""
