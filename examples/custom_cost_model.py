"""A custom cost model: copy this file to write your own.

BandwidthModel prices a kernel as its bytes moved over a fixed memory bandwidth plus a launch
overhead (a one-term roofline: a baseline that ignores compute). Use it with
`autotune fusion PROG.hlo --cost-model examples/custom_cost_model.py:BandwidthModel`, or publish it in
your package's setup.cfg: `[options.entry_points] autotune.costmodels = bandwidth = pkg.mod:BandwidthModel`.
Contracts (costmodels/base.py, checked by `autotune.testing.contracts.check_cost_model`, docs/plugins.md):
predict(kernels, tiles=None) returns one runtime in seconds per kernel, as a numpy array; `__init__` stores
each parameter under its own name and nothing else; `task`/`target` are passed to the constructor when it
names them.
"""
import numpy as np

from costmodels.base import CostModel


class BandwidthModel(CostModel):
    name = "bandwidth"

    def __init__(self, target: str = "tpu", bytes_per_second: float = 900e9, launch_seconds: float = 2e-6):
        self.target, self.bytes_per_second, self.launch_seconds = target, bytes_per_second, launch_seconds

    def predict(self, kernels, tiles=None) -> np.ndarray:
        moved = np.array([k.bytes_read + k.bytes_written for k in kernels], dtype=float)
        return moved / self.bytes_per_second + self.launch_seconds
