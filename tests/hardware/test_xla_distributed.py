"""XlaEvaluator through a dask.distributed LocalCluster on loopback (`--scheduler tcp://...`)."""
from __future__ import annotations

import os

import pytest

pytest.importorskip("jax")
distributed = pytest.importorskip("distributed")

from autotune.compiler.fusion import FusionSpace  # noqa: E402
from autotune.compiler.program import Program  # noqa: E402
from hardware.xla import XlaEvaluator  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_kernels_measured_on_a_dask_cluster():
    prog = Program.from_file(os.path.join(ROOT, "examples", "hlo", "vae_small_infer.hlo"))
    kernels = FusionSpace(prog, "cpu").kernels(FusionSpace(prog, "cpu").default())[:4]
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True, host="127.0.0.1",
                                  dashboard_address=None) as cluster:
        ev = XlaEvaluator(scheduler=cluster.scheduler_address, timeout_s=120)
        try:
            ms = ev.measure(kernels)
        finally:
            ev.close()
    assert len(ms) == len(kernels)
    assert all(m.ok and m.seconds > 0 for m in ms), [m.status for m in ms]
