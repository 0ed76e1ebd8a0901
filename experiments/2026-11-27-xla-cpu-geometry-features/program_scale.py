"""Issue 17 (a), 2026-11-27: how much a per-program correction could buy (README.md beside this file).

For each validation and test program, the shipped cpu xgboost's MAPE on kernels >= 5 us, and the same after
multiplying its predictions by the one factor (an oracle, chosen on the program's own labels) that minimizes it.

    python experiments/2026-11-27-xla-cpu-geometry-features/program_scale.py DS MODEL    # program_scale.txt
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from autotune import api  # noqa: E402
from autotune.tuning.dataset import Dataset  # noqa: E402

ds = Dataset.open(sys.argv[1])
model = api.load_model_file(sys.argv[2])
for split in ("validation", "test"):
    plain, scaled = [], []
    for name, s in ds.iter_programs(split):
        y = np.asarray(s.runtime, float)
        p = np.asarray(model.predict_graphs(s.sample_graphs(), s.tile_feat), float)
        ok = np.isfinite(y) & (y >= 5e-6)
        if not ok.any():
            continue
        ape = float(np.mean(np.abs(p[ok] - y[ok]) / y[ok]))
        best = min(float(np.mean(np.abs(c * p[ok] - y[ok]) / y[ok])) for c in np.exp(np.linspace(-1, 1, 201)))
        plain.append(ape)
        scaled.append(best)
        print(f"{split} {name}: MAPE {ape:.1%} -> with the best per-program scale {best:.1%}")
    print(f"{split} mean {np.mean(plain):.1%} -> {np.mean(scaled):.1%}")
