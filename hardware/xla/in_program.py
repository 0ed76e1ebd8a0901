""":class:`XlaInProgramEvaluator` (evaluator name ``xla-inprogram``): kernels measured inside their
program on XLA:CPU, a batch's kernels put back into one fusion configuration (:func:`configuration_of`)
and timed by :meth:`~hardware.xla.evaluator.XlaEvaluator.measure_in_program`."""
from __future__ import annotations

from typing import Any, Optional, Sequence

from hardware.base import Budget, KernelLike, Measurement
from hardware.xla.evaluator import XlaEvaluator
from hardware.xla.timing import TimingOptions


def configuration_of(space: Any, kernels: Sequence[Any]) -> Any:
    """The fusion configuration whose fused edges are those inside the given kernels (of one space):
    the configuration they came from when they are all its kernels; other instructions unfused."""
    from autotune.compiler.fusion import FusionConfig
    bits = bytearray(space.n_edges)
    for k in kernels:
        members = set(k.members)
        for m in k.members:
            for e, p in space.in_edges[k.comp][m]:
                if p in members:
                    bits[e] = 1
    return FusionConfig(bits)


IN_PROGRAM_TIMEOUT_S = 600.0  # default time limit of one in-program request (compile + profiled runs)


class XlaInProgramEvaluator(XlaEvaluator):
    """Kernel runtimes measured *inside* their program on XLA:CPU (name ``xla-inprogram``).

    The kernels of a batch that come from one fusion space are put back into one configuration
    (:func:`configuration_of`: their fused edges, everything else unfused), emitted as one program,
    compiled once and run under jaxlib's profiler (:meth:`XlaEvaluator.measure_in_program`); each
    kernel's time is its thunks' time in that program (repeat median over ``runs`` profiled
    executions). A kernel without a fusion space cannot be placed in a program and fails
    (``unsupported: ...``); a kernel XLA runs no thunk for costs 0 s with ``extra["no_thunk"]``.
    A kernel's in-program time depends a little on its neighbours (what is in cache): measure a
    whole configuration's kernels together, as `autotune dataset build` does.
    """

    name = "xla-inprogram"
    in_program = True  # kernel times are in-program times: datasets measure whole configurations

    # The constructor names every option (no *args/**kwargs): `create_evaluator` passes an evaluator the
    # options its signature names, and a catch-all signature lost the store, the budget and the seed.
    def __init__(self, target: Optional[str] = None, budget: "Budget | str | float | None" = None,
                 store: Any = None, *, runs: int = 20, timing: TimingOptions = TimingOptions(),
                 timeout_s: float = IN_PROGRAM_TIMEOUT_S, seed: int = 0, disable_fusion: bool = False,
                 xla_flags: Optional[dict[str, Any]] = None, startup_timeout_s: float = 120.0,
                 n_workers: int = 1, scheduler: Optional[str] = None):
        # One request compiles a whole program (efficientnet_small_train: 110 s at load average 10 on
        # 2 cores) and runs it `runs` times under the profiler: the kernel evaluator's 60 s is too short.
        super().__init__(target, budget, store, timing=timing, timeout_s=timeout_s, seed=seed,
                         disable_fusion=disable_fusion, xla_flags=xla_flags, startup_timeout_s=startup_timeout_s,
                         n_workers=n_workers, scheduler=scheduler)
        self.runs = max(1, int(runs))

    def _measure_batch(self, kernels: Sequence[KernelLike], tiles: Sequence[Any]) -> list[Measurement]:
        out: list[Optional[Measurement]] = [None] * len(kernels)
        groups: dict[int, list[int]] = {}
        for i, k in enumerate(kernels):
            if getattr(k, "space", None) is None or not hasattr(k, "members"):
                out[i] = Measurement.failure("unsupported: in-program timing needs a kernel of a fusion space")
                self._report(i, out[i])
            else:
                groups.setdefault(id(k.space), []).append(i)
        for idx in groups.values():
            if self.budget.exhausted:
                self.budget_exhausted = True
                for i in idx:
                    out[i] = Measurement.failure("budget_exhausted")
                continue
            space = kernels[idx[0]].space
            cfg = configuration_of(space, [kernels[i] for i in idx])
            placed = {k.hash: k for k in space.kernels(cfg)}
            missing = [i for i in idx if kernels[i].hash not in placed]
            for i in missing:
                out[i] = Measurement.failure("unsupported: the kernel is not a kernel of the configuration its "
                                             "batch forms (measure a whole configuration's kernels together)")
                self._report(i, out[i])
            present = [i for i in idx if kernels[i].hash in placed]
            if not present:
                continue
            timing = self.measure_in_program(space, cfg, [placed[kernels[i].hash] for i in present])
            for i, m in zip(present, timing.kernels):
                if tiles[i] is not None and m.ok:
                    m.extra["tile_ignored"] = True
                out[i] = m
                self._report(i, m)
        return out  # type: ignore[return-value]
