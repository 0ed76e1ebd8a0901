"""benchmarks/gnn_speed.py: a saved model's inference rate (--model), tiny sizes."""
from pathlib import Path

import numpy as np

from benchmarks import gnn_speed

ROOT = Path(__file__).resolve().parents[2]


def test_speed_of_a_saved_model(tmp_path):
    from costmodels.features import TILE_DIM, kernel_graphs
    from autotune.compiler.fusion import FusionSpace
    from autotune.compiler.program import Program
    from costmodels.gnn import GnnCostModel
    space = FusionSpace(Program.from_file(str(ROOT / "examples/hlo/lstm_small_infer.hlo")), "tpu")
    graphs = kernel_graphs([k for k in space.kernels(space.default()) if not k.is_trivial])
    m = GnnCostModel("fusion", hidden=8, layers=1, head_layers=2, residual=True, geometry_features=True)
    m.fit_scalers(graphs, np.zeros((len(graphs), TILE_DIM), np.float32))
    m.save(str(tmp_path / "m.pt"))
    res = gnn_speed.main(["--programs", "lstm_small_infer", "--seconds", "0.05", "--batch", "64",
                          "--model", str(tmp_path / "m.pt"), "--threads", "1"])
    (name, rate), = res["inference_kernels_per_s"].items()
    assert name.startswith("m.pt (sage/column, hidden 8)") and rate > 0
    assert res["predict_kernels_per_s"] > 0 and res["model"] == str(tmp_path / "m.pt")
