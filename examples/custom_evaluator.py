"""A custom evaluator: copy this file to write your own (for example, to measure on a remote device).

RooflineEvaluator "measures" a kernel as the max of its compute and memory time on the target's
spec, with a reproducible +-2% jitter: a stand-in for hardware that lets you try the verification
path without a device. Use it with `autotune fusion PROG.hlo --evaluator examples/custom_evaluator.py:RooflineEvaluator`,
or publish it: `[options.entry_points] autotune.evaluators = roofline = pkg.mod:RooflineEvaluator`.
Contracts (hardware/base.py): implement `_measure_batch(kernels, tiles)` returning one Measurement per
kernel (a failure is a Measurement with a status, never an exception); the base class owns the time
budget, the measurement store and caching.
"""
import hashlib

from autotune.compiler.targets import get_spec
from hardware.base import Evaluator, Measurement


class RooflineEvaluator(Evaluator):
    name = "roofline"

    def __init__(self, target: str = "tpu", budget=None, store=None, seed: int = 0):
        super().__init__(target=target, budget=budget, store=store)
        self.spec, self.seed = get_spec(target), seed

    def _measure_batch(self, kernels, tiles):
        out = []
        for k in kernels:
            t = max(k.flops / self.spec.peak_flops, (k.bytes_read + k.bytes_written) / self.spec.hbm_bytes_per_s)
            u = int(hashlib.sha256(f"{self.seed}:{k.hash}".encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
            out.append(Measurement(t * (0.98 + 0.04 * u) + 1e-6))
        return out
