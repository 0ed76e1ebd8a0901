"""Real execution of HLO through jaxlib: compile, run, time, and read XLA's own fusion decisions.

Optional extra ``xla`` (``pip install autotune[xla]``). Nothing here imports jax at module import
time: every function that needs jaxlib imports it lazily, so ``import hardware.xla`` is cheap and
works without jax installed (the functions then raise ``ImportError``).

This package re-exports the public names of its modules: import them from ``hardware.xla``. One
concept per module, each importing only the ones listed before it:

1. :mod:`hardware.xla._jaxlib`: the private-API shim (``_api()``), the only place that touches jaxlib
   internals (HLO text -> ``HloModule`` -> StableHLO -> ``LoadedExecutable``, cost analysis, program
   shape, profiler session). If one is missing, :class:`XlaApiError` names the installed jaxlib
   version and the missing API. Verified with jaxlib 0.10.2.
2. Helpers on top:

   * :mod:`~hardware.xla.compile`: :func:`parse_hlo_text`, :func:`parameter_shapes`,
     :func:`donated_parameters`, :func:`compile_hlo` (:class:`CompiledHlo`), :func:`optimized_hlo_text`,
     :func:`cost_analysis`;
   * :mod:`~hardware.xla.outputs`: :func:`random_inputs`, :func:`verification_inputs`, :func:`run_hlo`
     and :func:`output_error` (does a rewritten program compute what the original computes);
   * :mod:`~hardware.xla.accuracy`: the second opinions on a mismatch (without excess precision,
     :func:`strict_precision_error`; against the program in f64, :func:`f64_accuracy`:
     :func:`accuracy_fallback`);
   * :mod:`~hardware.xla.timing`: :func:`time_compiled` (AutoTVM-style :class:`TimingOptions`; programs
     that donate buffers are timed as given, with fresh copies per execution) and :func:`time_paired`
     (a program's time as a ratio to a reference timed in alternating blocks beside it,
     :class:`PreparedRun`/:func:`paired_ratios`: the VM's drift cancels);
   * :mod:`~hardware.xla.fusion_report`: :func:`xla_fusion_report` (XLA's own fusion decisions).
3. In-program kernel times (XLA:CPU, where a kernel's standalone time is not what it costs inside
   its program): :mod:`~hardware.xla.profile`: :func:`profile_compiled` runs a compiled program under a
   jaxlib profiler session, interleaved with unprofiled end-to-end repeats, and reads each thunk's
   time; :mod:`~hardware.xla.attribution`: :func:`attribute_thunks` maps thunks back to the kernels of a
   fusion configuration (:class:`InProgramTiming`).
4. :mod:`~hardware.xla.evaluator`: :class:`XlaEvaluator`, an :class:`~hardware.base.Evaluator` that
   measures each kernel's standalone HLO module in worker processes of a
   :class:`~hardware.pool.MeasurementPool` (spawn context, started on first use). A compile error, a
   crash of the worker (segfault in XLA, abort) or a hang past ``timeout_s`` becomes a failed
   :class:`~hardware.base.Measurement` and the worker is replaced; the run goes on.
   :meth:`XlaEvaluator.measure_in_program` times a configuration's kernels inside its program (3.).
   The test hook ``AUTOTUNE_XLA_TEST_FAULT`` (:data:`FAULT_ENV`) is described there.
5. :mod:`~hardware.xla.in_program`: :class:`XlaInProgramEvaluator` (evaluator name ``xla-inprogram``)
   measures kernels that way.

Tiles: XLA chooses its own tiling, so :class:`XlaEvaluator` ignores the tile of a request (the
measurement's ``extra["tile_ignored"]`` is then True).
"""
from __future__ import annotations

from hardware.base import Measurement  # noqa: F401  (re-exported: hardware.xla.Measurement, as before)
from hardware.xla._jaxlib import XlaApiError, XlaStartError, backend_platform, jaxlib_version
from hardware.xla.accuracy import (
    ACCURACY_FACTOR, STRICT_PRECISION_FLAGS, accuracy_fallback, excess_precision_fallback, f64_accuracy, norm_error,
    strict_precision_error, strict_precision_options,
)
from hardware.xla.attribution import InProgramTiming, attribute_thunks
from hardware.xla.compile import (
    CompiledHlo, Shape, compile_hlo, cost_analysis, donated_parameters, optimized_hlo_text, parameter_shapes,
    parse_hlo_text,
)
from hardware.xla.evaluator import FAULT_ENV, OUTPUT_CHECK_KEYS, XlaEvaluator
from hardware.xla.fusion_report import strip_metadata, xla_fusion_report
from hardware.xla.in_program import IN_PROGRAM_TIMEOUT_S, XlaInProgramEvaluator, configuration_of
from hardware.xla.outputs import (
    OUTPUT_TOL, OUTPUT_TOL_16BIT, ZERO_OUTPUT_SCALE, computes_in_16bit, output_error, output_tolerance, random_inputs,
    run_hlo, verification_inputs,
)
from hardware.xla.profile import (
    ProgramProfile, ThunkTiming, profile_answer, profile_compiled, thunk_gaps, thunk_self_times,
)
from hardware.xla.timing import (
    PairedTiming, PreparedRun, TimingOptions, TimingResult, neighbour_ratios, paired_ratios, time_compiled,
    time_paired, time_paired_for,
)

__all__ = [
    "XlaApiError", "XlaStartError", "TimingOptions", "TimingResult", "CompiledHlo", "XlaEvaluator",
    "jaxlib_version", "backend_platform", "parse_hlo_text", "parameter_shapes", "compile_hlo",
    "optimized_hlo_text", "cost_analysis", "random_inputs", "run_hlo", "time_compiled",
    "xla_fusion_report", "strip_metadata", "donated_parameters", "verification_inputs", "output_error",
    "STRICT_PRECISION_FLAGS", "strict_precision_options", "strict_precision_error", "excess_precision_fallback",
    "ACCURACY_FACTOR", "norm_error", "f64_accuracy", "accuracy_fallback",
    "ThunkTiming", "ProgramProfile", "profile_compiled", "thunk_self_times", "InProgramTiming",
    "profile_answer", "attribute_thunks", "configuration_of", "XlaInProgramEvaluator",
    "PreparedRun", "PairedTiming", "paired_ratios", "time_paired", "time_paired_for",
    "neighbour_ratios",
]
