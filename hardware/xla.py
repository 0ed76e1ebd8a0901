"""Real execution of HLO through jaxlib: compile, run, time, and read XLA's own fusion decisions.

Optional extra ``xla`` (``pip install autotune[xla]``). Nothing here imports jax at module import
time: every function that needs jaxlib imports it lazily, so ``import hardware.xla`` is cheap and
works without jax installed (the functions then raise ``ImportError``).

Layers
------
1. A private-API shim (:func:`_api`), the only place that touches jaxlib internals. It resolves,
   once per process, the path that turns raw HLO text into a loaded executable::

       xla_client.hlo.hlo_module_from_text(text)          # jaxlib._hlo.HloModule
         .as_serialized_hlo_module_proto()                # HloModuleProto bytes
       _jax.mlir.hlo_to_stablehlo(proto)                  # StableHLO bytecode
       client.compile_and_load(bytecode, DeviceList, CompileOptions)   # LoadedExecutable

   plus ``_jax.hlo_module_cost_analysis(client, HloModule)`` and
   ``xla_client.XlaComputation(proto).program_shape()``. If one is missing, :class:`XlaApiError`
   names the installed jaxlib version and the missing API. Verified with jaxlib 0.10.2.
2. Helpers on top: :func:`parse_hlo_text`, :func:`parameter_shapes`, :func:`compile_hlo`,
   :func:`optimized_hlo_text`, :func:`cost_analysis`, :func:`random_inputs`, :func:`run_hlo`,
   :func:`time_compiled` (AutoTVM-style :class:`TimingOptions`; programs that donate buffers are
   timed as given, with fresh copies per execution: :func:`donated_parameters`),
   :func:`time_paired` (a program's time as a ratio to a reference timed in alternating blocks
   beside it, :class:`PreparedRun`/:func:`paired_ratios`: the VM's drift cancels),
   :func:`verification_inputs` and :func:`output_error` (does a rewritten program compute what the
   original computes) and :func:`xla_fusion_report`.
3. :class:`XlaEvaluator`: an :class:`~hardware.base.Evaluator` that measures each kernel's
   standalone HLO module in worker processes of a :class:`~hardware.pool.MeasurementPool`
   (spawn context, started on first use). A compile error, a crash of the worker (segfault in
   XLA, abort) or a hang past ``timeout_s`` becomes a failed :class:`~hardware.base.Measurement`
   and the worker is replaced; the run goes on.
4. In-program kernel times (XLA:CPU, where a kernel's standalone time is not what it costs inside
   its program): :func:`profile_compiled` runs a compiled program under a jaxlib profiler session,
   interleaved with unprofiled end-to-end repeats, and reads each thunk's time;
   :func:`attribute_thunks` maps thunks back to the kernels of a fusion configuration;
   :meth:`XlaEvaluator.measure_in_program` does both for a configuration (:class:`InProgramTiming`),
   and :class:`XlaInProgramEvaluator` (evaluator name ``xla-inprogram``) measures kernels that way.

Test hook
---------
The environment variable ``AUTOTUNE_XLA_TEST_FAULT`` simulates faults deterministically. It is a
comma-separated list of ``crash:<hash>`` / ``segv:<hash>`` / ``hang:<hash>`` entries (``<hash>`` a
kernel hash, or ``*`` for every kernel). It is read by the *parent* at each request, so it can be
changed while an evaluator is alive; the worker then exits with code 86 (``crash``), dies of a
segmentation fault (``segv``: a null read, as a crash inside XLA would) or sleeps forever (``hang``)
instead of measuring that kernel.

Tiles: XLA chooses its own tiling, so :class:`XlaEvaluator` ignores the tile of a request (the
measurement's ``extra["tile_ignored"]`` is then True).
"""
from __future__ import annotations

import bisect
import functools
import hashlib
import importlib.util
import math
import os
import re
import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Optional, Sequence, Union

import numpy as np

from hardware.base import Budget, Evaluator, KernelLike, Measurement
from hardware.pool import MeasurementPool

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

FAULT_ENV = "AUTOTUNE_XLA_TEST_FAULT"
_HAND_FUSION = re.compile(r"\bfusion\([^\n]*\bkind=k[A-Za-z]+")
_CRASH_EXIT_CODE = 86
_IMPL_VERSION = "1"


class XlaApiError(RuntimeError):
    """The installed jaxlib lacks a private API this module relies on."""


class XlaStartError(XlaApiError):
    """The measuring worker could not start jax (an error, a crash or no answer in time).

    A kind of XlaApiError: the installed jax/jaxlib cannot be used here (one clear line in the CLI)."""


# --------------------------------------------------------------------------------------------
# 1. private-API shim
# --------------------------------------------------------------------------------------------

def jaxlib_version() -> str:
    """Installed jaxlib version (without importing jax), or "" when absent."""
    try:
        from importlib.metadata import version
        return version("jaxlib")
    except Exception:
        return ""


def _require_jaxlib() -> None:
    if importlib.util.find_spec("jaxlib") is None or importlib.util.find_spec("jax") is None:
        raise ImportError("hardware.xla needs jax and jaxlib: pip install 'autotune[xla]'")


class _Api:
    """The resolved jaxlib internals (one instance per process, see `_api()`)."""

    def __init__(self) -> None:
        _require_jaxlib()
        # Allocate GPU memory on demand: jax's default takes 75% of the device per process, so a
        # second measuring process (a worker pool, or a worker beside its parent) could not start.
        os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
        import jax  # noqa: F401  (initialises the plugin machinery)
        from jax._src.lib import xla_client as xc
        ver = jaxlib_version()

        def need(obj: Any, attr: str, what: str) -> Any:
            val = getattr(obj, attr, None)
            if val is None:
                raise XlaApiError(
                    f"jaxlib {ver}: private API {what} not found; hardware/xla.py was written "
                    f"against jaxlib 0.10.2 - update the shim in _Api for this version")
            return val

        try:
            from jax._src.lib import _jax  # jaxlib >= 0.6
        except ImportError:  # older layouts expose the extension as xla_client._xla
            _jax = need(xc, "_xla", "jax._src.lib._jax / xla_client._xla")
        self.xc = xc
        self._jax = _jax
        hlo_ns = getattr(xc, "hlo", None) or _jax
        self.hlo_module_from_text = need(hlo_ns, "hlo_module_from_text",
                                         "xla_client.hlo.hlo_module_from_text")
        self.hlo_to_stablehlo = need(need(_jax, "mlir", "_jax.mlir"), "hlo_to_stablehlo",
                                     "_jax.mlir.hlo_to_stablehlo")
        self.cost_analysis = need(_jax, "hlo_module_cost_analysis", "_jax.hlo_module_cost_analysis")
        self.CompileOptions = need(xc, "CompileOptions", "xla_client.CompileOptions")
        self.DeviceList = need(xc, "DeviceList", "xla_client.DeviceList")
        self.XlaComputation = need(xc, "XlaComputation", "xla_client.XlaComputation")
        try:
            from jax.extend.backend import get_backend
        except ImportError:  # pragma: no cover - older jax
            from jax._src.xla_bridge import get_backend
        self.client = get_backend()
        need(self.client, "compile_and_load", "Client.compile_and_load")
        self.device = self.client.local_devices()[0]
        self.platform: str = str(self.client.platform)
        self.version = ver
        self._get_backend = get_backend
        self._cpu_client: Any = None

    @property
    def profiler_session(self) -> Any:
        """jaxlib's ``ProfilerSession`` class (started by construction; ``stop_and_get_profile_data()``
        returns the trace in memory): resolved on first use, only in-program timing needs it."""
        from jax._src.lib import _profiler
        session = getattr(_profiler, "ProfilerSession", None)
        if session is None or not hasattr(session, "stop_and_get_profile_data"):
            raise XlaApiError(f"jaxlib {self.version}: private API _profiler.ProfilerSession."
                              f"stop_and_get_profile_data not found; hardware/xla.py was written against "
                              f"jaxlib 0.10.2 - update the shim in _Api for this version")
        return session

    @property
    def cpu_client(self) -> Any:
        """jax's CPU client (the default client where the default platform is CPU)."""
        if self._cpu_client is None:
            self._cpu_client = self.client if self.platform == "cpu" else self._get_backend("cpu")
        return self._cpu_client


_API: Optional[_Api] = None


def _api() -> _Api:
    """The process-wide shim; imports jax on first use."""
    global _API
    if _API is None:
        _API = _Api()
    return _API


def backend_platform() -> str:
    """Platform of jax's default backend in this process ("cpu", "cuda", "rocm", ...)."""
    return _api().platform


def _target_for_platform(platform: str) -> str:
    return "cpu" if platform == "cpu" else "gpu" if platform in ("cuda", "rocm", "gpu") else platform


# --------------------------------------------------------------------------------------------
# 2. helpers
# --------------------------------------------------------------------------------------------

def parse_hlo_text(text: str) -> Any:
    """Parse HLO text into jaxlib's ``HloModule`` (raises on text XLA's parser rejects).

    The parser does not run the shape verifier: a well-formed module with inconsistent shapes
    parses here and fails in :func:`compile_hlo`.
    """
    return _api().hlo_module_from_text(text)


def _proto(text_or_module: Any) -> bytes:
    mod = parse_hlo_text(text_or_module) if isinstance(text_or_module, str) else text_or_module
    return mod.as_serialized_hlo_module_proto()


Shape = tuple[np.dtype, tuple[int, ...]]


def parameter_shapes(text: str) -> list[Shape]:
    """(numpy dtype, dims) of each ENTRY parameter, from XLA's program shape.

    Raises ValueError for tuple- or token-typed parameters (not supported by the runner).
    """
    api = _api()
    ps = api.XlaComputation(_proto(text)).program_shape()
    out: list[Shape] = []
    for i, s in enumerate(ps.parameter_shapes()):
        if s.is_tuple() or not s.is_array():
            raise ValueError(f"parameter {i} has non-array shape {s}; only array parameters are supported")
        out.append((np.dtype(s.numpy_dtype()), tuple(int(d) for d in s.dimensions())))
    return out


_ALIAS_HEADER = re.compile(r"\b(input_output_alias|buffer_donor)=\{")
_ALIAS_PARAMETER = re.compile(r"\(\s*(\d+)\s*,")


def _braced(text: str, start: int) -> str:
    """The text inside the braces that open just before `start` (nested braces aware)."""
    depth, i = 1, start
    while i < len(text) and depth:
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        i += 1
    return text[start:i - 1]


def donated_parameters(text: str) -> frozenset:
    """ENTRY parameter numbers whose buffers the module may donate to its outputs.

    From the ``HloModule`` header's ``input_output_alias={ {out}: (param, {index}, kind), ... }``
    (what ``jax.jit(..., donate_argnums=...)`` writes) and ``buffer_donor={ (param, {index}), ... }``.
    An execution consumes such a device buffer: it cannot be passed to a second execution.
    """
    m = re.search(r"^\s*HloModule\b[^\n]*", text, re.M)  # (comment lines may come first)
    header = m.group(0) if m else ""
    params: set = set()
    for m in _ALIAS_HEADER.finditer(header):
        params.update(int(p) for p in _ALIAS_PARAMETER.findall(_braced(header, m.end())))
    return frozenset(params)


def _x64() -> Any:
    """Context in which jax keeps 64-bit dtypes (u64/s64/f64 parameters stay 64-bit on device)."""
    import jax
    ctx = getattr(jax, "enable_x64", None)
    if ctx is None:  # pragma: no cover - older jax
        from jax.experimental import enable_x64 as ctx
    return ctx(True)


@dataclass
class CompiledHlo:
    """A module compiled for the default backend's first device."""

    executable: Any  # jaxlib LoadedExecutable
    text: str
    compile_seconds: float
    flags: dict = field(default_factory=dict)

    @property
    def donated(self) -> frozenset:
        """Parameters whose device buffers an execution consumes (see :func:`donated_parameters`)."""
        return donated_parameters(self.text)

    def put(self, inputs: Sequence[np.ndarray]) -> list[Any]:
        """Copy host arrays to the device, dtypes unchanged (64-bit types too: threefry's u64).

        Reusable across executions, except the :attr:`donated` ones: give each execution fresh
        copies of those (:func:`time_compiled` does)."""
        import jax
        dev = _api().device
        with _x64():
            return [jax.device_put(np.asarray(x), dev) for x in inputs]

    def execute(self, device_args: Sequence[Any]) -> list[Any]:
        """Run once on device arrays and wait for the results (tuple outputs come flattened).

        Donated parameters' buffers are consumed (deleted) by the execution."""
        outs = self.executable.execute(list(device_args))
        for o in outs:
            o.block_until_ready()
        return outs

    def __call__(self, *inputs: np.ndarray) -> list[np.ndarray]:
        return [np.asarray(o) for o in self.execute(self.put(inputs))]

    def optimized_text(self) -> str:
        """The HLO module after XLA's passes (what actually runs)."""
        return self.executable.hlo_modules()[0].to_string()

    def optimized_module(self) -> Any:
        """jaxlib ``HloModule`` after XLA's passes."""
        return self.executable.hlo_modules()[0]


def compile_hlo(text: str, *, disable_fusion: bool = False,
                xla_flags: Optional[dict[str, Any]] = None) -> CompiledHlo:
    """Compile HLO text on the default backend (CPU here, GPU where jax sees one).

    Args:
      text: a standalone HLO module.
      disable_fusion: disable XLA's fusion passes (``xla_disable_hlo_passes``: ``fusion`` on CPU;
        ``priority-fusion``/``multi_output_fusion`` etc. too, harmless on CPU). XLA:CPU still wraps
        lone elementwise ops into single-op ``wrapped_*`` kLoop fusions, and still emits library
        (``__ynn_fusion`` kCustom) fusions for dots/reductions.
      xla_flags: further DebugOptions, e.g. ``{"xla_backend_optimization_level": 0}`` or
        ``{"xla_cpu_enable_fast_math": True}``, passed as
        CompileOptions.env_option_overrides (unknown names raise "No such compile option").

    Raises whatever jaxlib raises (``JaxRuntimeError``/``XlaRuntimeError``) on a bad module.
    """
    api = _api()
    flags = dict(xla_flags or {})
    if disable_fusion:
        passes = [p for p in str(flags.get("xla_disable_hlo_passes", "")).split(",") if p]
        from autotune.compiler.kernel import XLA_FUSION_PASSES
        passes += list(XLA_FUSION_PASSES)
        flags["xla_disable_hlo_passes"] = ",".join(dict.fromkeys(passes))
    if "lapack_" in text:
        _initialize_lapack()
    stablehlo = api.hlo_to_stablehlo(_proto(text))
    opts = api.CompileOptions()
    if flags:
        opts.env_option_overrides = [(str(k), _flag_value(v)) for k, v in flags.items()]
    t0 = time.perf_counter()
    exe = api.client.compile_and_load(stablehlo, api.DeviceList((api.device,)), opts)
    return CompiledHlo(exe, text, time.perf_counter() - t0, flags)


def _initialize_lapack() -> None:
    """Load the LAPACK kernels behind jaxlib's `lapack_*_ffi` custom calls (cholesky,
    triangular_solve, ...). jax does this when it lowers a linalg op itself; a program given as
    HLO text skips that step, and executing its custom calls then segfaults."""
    try:
        from jax._src.lax import linalg
        linalg.initialize_lapack()
    except (ImportError, AttributeError):  # pragma: no cover - another jax layout
        from jax._src.lib import lapack
        lapack._lapack.initialize()


def _flag_value(v: Any) -> Any:
    if isinstance(v, bool):
        return v
    if isinstance(v, (int, float)):
        return v
    return str(v)


def optimized_hlo_text(text: str, *, disable_fusion: bool = False) -> str:
    """The module after XLA's optimization passes, as XLA prints it (fusions included)."""
    return compile_hlo(text, disable_fusion=disable_fusion).optimized_text()


def cost_analysis(text: str) -> dict[str, Any]:
    """XLA's HloCostAnalysis of the *unoptimized* module (before fusion).

    Returns ``{"flops", "transcendentals", "bytes_accessed"}`` as floats (a dot M x K x N counts
    2*M*N*K flops), plus ``"raw"``: everything jaxlib reported (per-operand
    ``"bytes accessed0{}"``, ``"utilization..."`` etc.).
    """
    api = _api()
    # A static analysis: ask the CPU client, which every jaxlib has (PJRT plugins such as CUDA's
    # answer UNIMPLEMENTED for GetHloCostAnalysis).
    raw = dict(api.cost_analysis(api.cpu_client, parse_hlo_text(text)))
    return {
        "flops": float(raw.get("flops", 0.0)),
        "transcendentals": float(raw.get("transcendentals", 0.0)),
        "bytes_accessed": float(raw.get("bytes accessed", 0.0)),
        "raw": raw,
    }


def random_inputs(text_or_shapes: Union[str, Sequence[Shape]], seed: int = 0, *,
                  float_scale: float = 0.1, int_high: int = 2) -> list[np.ndarray]:
    """Random arguments for a module's ENTRY parameters.

    Floats ~ N(0, 1) * ``float_scale`` (small, so exp/log chains stay finite); integers uniform in
    [0, ``int_high``) so that gather/dynamic-slice index operands are in range; preds uniform;
    complex numbers get random real and imaginary parts. Deterministic for a given seed.
    """
    shapes = parameter_shapes(text_or_shapes) if isinstance(text_or_shapes, str) else text_or_shapes
    rng = np.random.default_rng(seed)
    out: list[np.ndarray] = []
    for dtype, dims in shapes:
        dtype = np.dtype(dtype)
        dims = tuple(dims)
        if dtype == np.bool_:
            a = rng.integers(0, 2, size=dims).astype(np.bool_)
        elif np.issubdtype(dtype, np.integer):
            a = rng.integers(0, int_high, size=dims).astype(dtype)
        elif np.issubdtype(dtype, np.complexfloating):
            a = ((rng.standard_normal(dims) + 1j * rng.standard_normal(dims)) * float_scale).astype(dtype)
        else:  # float32/64/16 and ml_dtypes (bfloat16, float8...)
            a = (rng.standard_normal(dims) * float_scale).astype(np.float32).astype(dtype)
        out.append(np.asarray(a))
    return out


def _is_float(a: np.ndarray) -> bool:
    """numpy floats and ml_dtypes' (bfloat16, float8...), whose numpy kind is 'V'."""
    return a.dtype.kind == "f" or (a.dtype.kind == "V" and np.issubdtype(a.dtype, np.inexact)) \
        or a.dtype.name in ("bfloat16",) or a.dtype.name.startswith("float8")


# Ops through which a parameter's value reaches a square root or logarithm with its sign intact
# (`_parameters_under_roots`): an optimizer's second moment (adam's nu) is updated elementwise and
# then square-rooted.
_SIGN_CARRYING = frozenset({"add", "subtract", "multiply", "divide", "maximum", "minimum", "convert", "copy",
                            "broadcast", "reshape", "transpose", "slice", "concatenate", "select", "bitcast",
                            "dynamic-slice", "dynamic-update-slice", "pad", "clamp"})
_ROOTS = frozenset({"sqrt", "rsqrt", "log", "log-plus-one", "power", "cbrt"})


@functools.lru_cache(maxsize=16)
def _parameters_under_roots(text: str) -> frozenset:
    """Entry parameter numbers whose values reach a sqrt/rsqrt/log/power operand through elementwise
    arithmetic and data movement in the entry computation (an optimizer's second-moment state).
    Empty where the text does not parse."""
    from autotune.compiler.hlo import parse_hlo
    try:
        entry = parse_hlo(text).entry
    except Exception:  # noqa: BLE001  (no analysis: the plain rule applies)
        return frozenset()
    users: dict = {}
    for ins in entry.instructions:
        for o in ins.operands:
            users.setdefault(o, []).append(ins)
    out = set()
    for p in entry.instructions:
        if p.opcode != "parameter":
            continue
        seen, todo = {p.name}, [p.name]
        while todo:
            for u in users.get(todo.pop(), ()):
                if u.opcode in _ROOTS:
                    out.add(p.parameter_number)
                    todo = []
                    break
                if u.opcode in _SIGN_CARRYING and u.name not in seen:
                    seen.add(u.name)
                    todo.append(u.name)
    return frozenset(out)


def verification_inputs(text_or_shapes: Union[str, Sequence[Shape]], seed: int = 0) -> list[np.ndarray]:
    """:func:`random_inputs` with some float parameters made non-negative: the inputs on which a
    rewritten program's outputs are compared with the original's (and whole programs are timed).

    Non-negative: vector-like parameters (at most one dimension longer than 1), mostly normalization
    statistics and biases (flax keeps a variance as f32[C], haiku as f32[1,1,1,C], in bf16 too), and,
    given program text, parameters that reach a square root or logarithm through elementwise
    arithmetic (adam's second moment nu, of any shape). A negative random "variance" makes rsqrt
    produce NaNs inside the program, which a later relu ``maximum(x, 0)`` then drops or keeps
    depending on the kernel that runs it (XLA:CPU's library and vectorized kernels do not all
    propagate NaN the same way), or that fill the outputs (haiku's ResNet and MobileNet in
    inference; half the updated weights of an adam step): a comparison of NaN with NaN checks
    nothing. Weights and activations keep their signs. Rewritten programs keep the original's
    parameters: make the inputs from the original's text, for both."""
    under_roots = _parameters_under_roots(text_or_shapes) if isinstance(text_or_shapes, str) else frozenset()
    return [np.abs(a) if _is_float(a) and (sum(d > 1 for d in a.shape) <= 1 or k in under_roots) else a
            for k, a in enumerate(random_inputs(text_or_shapes, seed))]


# Tolerance of output_error: f32/f64 (and complex) outputs, and 16-bit floats.
OUTPUT_TOL = 1e-4
OUTPUT_TOL_16BIT = 1e-2
ZERO_OUTPUT_SCALE = 1e-2  # the magnitude an all-zero reference output is measured against


_16BIT_FLOAT = re.compile(r"(?<![\w.])(?:bf16|f16|f8e\w*|f4e\w*|f6e\w*)\[")


def computes_in_16bit(text: str) -> bool:
    """Whether a program holds values of a float type of 16 bits or fewer (bf16, f16, f8...): its
    f32 outputs then carry that precision (XLA:CPU may keep a fused chain of bf16 ops in f32, its
    `xla_allow_excess_precision`, so where fusions start and end moves the roundings)."""
    return bool(_16BIT_FLOAT.search(text))


# XLA option that makes every HLO instruction round to its declared type: XLA:CPU otherwise keeps a
# chain of 16-bit float ops in f32 (normalization's converts cancel out), so where fusions start
# and end decides where the roundings happen.
STRICT_PRECISION_FLAGS = {"xla_allow_excess_precision": False}


def strict_precision_options(options: Optional[dict] = None) -> dict:
    """`compile_hlo` keyword options `options` with :data:`STRICT_PRECISION_FLAGS` added."""
    out = dict(options or {})
    out["xla_flags"] = {**(out.get("xla_flags") or {}), **STRICT_PRECISION_FLAGS}
    return out


def strict_precision_error(text: str, reference_text: str, inputs: Sequence[np.ndarray],
                           options: Optional[dict] = None) -> tuple[float, bool]:
    """`output_error` of program `text` against `reference_text`, both compiled with `options`
    plus :data:`STRICT_PRECISION_FLAGS` (every instruction rounds to its declared type).

    For programs that compute in 16-bit floats (`computes_in_16bit`): emitting a program's fusions
    moves where XLA:CPU's excess precision rounds, by a few ulps of bf16 after a few chained ops
    (measured: 2 ulps, relative 1.3e-2, of a bf16 GELU + RMSNorm in a 3-step fori_loop; the
    original itself differs by as much between excess precision on and off). Under strict
    precision both compute the HLO's own roundings, so an emitted program that computes what the
    original computes matches it (exactly there)."""
    opts = strict_precision_options(options)
    ref = compile_hlo(reference_text, **opts)(*inputs)
    got = compile_hlo(text, **opts)(*inputs)
    return output_error(got, ref, low_precision=computes_in_16bit(reference_text))


def excess_precision_fallback(ok: bool, low_precision: bool, text: str, reference_text: str,
                              inputs: Sequence[np.ndarray], options: Optional[dict] = None
                              ) -> tuple[bool, Optional[float]]:
    """The judgement of an output comparison (`ok`) after the 16-bit fallback: a program computing in 16-bit
    floats whose outputs mismatched is judged again without excess precision (:func:`strict_precision_error`).
    Returns (match, that error); (ok, None) where no second judgement was needed; a failure to compile or
    run under strict precision leaves the mismatch standing."""
    if ok or not low_precision:
        return ok, None
    try:
        err, ok = strict_precision_error(text, reference_text, inputs, options)
    except Exception:  # noqa: BLE001  (the mismatch stands)
        return False, None
    return ok, err


# "As accurate as the original": an output that differs from the original program's beyond tolerance
# still passes when its error against the program computed in f64 is at most this factor times the
# original's own error there (the two round in different places; either may land closer by chance).
ACCURACY_FACTOR = 2.0


_F64_OUTPUTS: dict = {}  # the last reference's outputs in f64 (a tuning run checks many candidates)


def _as_f64(inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    return [np.asarray(a, np.float64) if _is_float(a) else a for a in inputs]


def norm_error(out: Sequence[Any], exact: Sequence[Any]) -> float:
    """The worst output's distance from `exact`, as a whole array: ``||a - b|| / ||b||`` for floats
    (finite elements; non-finite ones must sit at the same places, else inf), the fraction of
    differing elements for integers and booleans; inf for a different number of outputs or shapes.
    Unlike :func:`output_error`'s per-element maximum, one cancelling element (a batch-norm variance
    E[x^2] - E[x]^2 in bf16) cannot dominate it, so a wrong program stands out against a merely
    imprecise one."""
    if len(out) != len(exact):
        return math.inf
    worst = 0.0
    for a, b in zip(out, exact):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape:
            return math.inf
        if not a.size:
            continue
        if _is_float(b) or _is_float(a):
            a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
            fa, fb = np.isfinite(a64), np.isfinite(b64)
            if (fa != fb).any() or not np.array_equal(a64[~fa], b64[~fb], equal_nan=True):
                return math.inf
            num, den = np.linalg.norm(a64[fa] - b64[fb]), np.linalg.norm(b64[fb])
            worst = max(worst, float(num / den) if den > 0 else (0.0 if num == 0 else math.inf))
        else:
            worst = max(worst, float(np.mean(a != b)))
    return worst


def f64_accuracy(got: Sequence[Any], ref: Sequence[Any], reference_text: str,
                 inputs: Sequence[np.ndarray]) -> dict:
    """How far a rewritten program's outputs `got` and the original's `ref` are from the original
    program computed in f64 (:func:`autotune.compiler.widen.widen_to_f64`, XLA's default options,
    the same inputs widened), by :func:`norm_error`: ``{"emitted": e, "original": e, "ok":
    e_emitted <= max(tolerance, ACCURACY_FACTOR * e_original)}``. Raises where the program has no
    f64 version."""
    from autotune.compiler.widen import widen_to_f64
    key = hashlib.sha1(reference_text.encode() + b"".join(np.ascontiguousarray(a).tobytes() for a in inputs)).digest()
    if key not in _F64_OUTPUTS:
        _F64_OUTPUTS.clear()
        _F64_OUTPUTS[key] = compile_hlo(widen_to_f64(reference_text))(*_as_f64(inputs))
    exact = _F64_OUTPUTS[key]
    e_new, e_old = norm_error(got, exact), norm_error(ref, exact)
    tol = output_tolerance(computes_in_16bit(reference_text))
    return {"emitted": e_new, "original": e_old, "ok": bool(e_new <= max(tol, ACCURACY_FACTOR * e_old))}


def accuracy_fallback(ok: bool, low_precision: bool, text: str, reference_text: str,
                      inputs: Sequence[np.ndarray], got: Sequence[Any], ref: Sequence[Any],
                      options: Optional[dict] = None) -> tuple[bool, dict]:
    """The judgement of an output comparison (`ok`: within tolerance of the original's outputs `ref`)
    after the second opinions, in order: a program computing in 16-bit floats is compared again
    without excess precision (:func:`excess_precision_fallback`); then any program is judged
    against the original computed in f64 (:func:`f64_accuracy`): as accurate as the original
    passes. Returns (match, what the second opinions measured: ``without_excess_precision``,
    ``vs_f64``, or ``vs_f64_error`` where the program has no f64 version)."""
    notes: dict = {}
    if ok:
        return ok, notes
    ok, strict = excess_precision_fallback(ok, low_precision, text, reference_text, inputs, options)
    if strict is not None:
        notes["without_excess_precision"] = strict
    if ok:
        return ok, notes
    try:
        acc = f64_accuracy(got, ref, reference_text, inputs)
    except Exception as exc:  # noqa: BLE001  (no f64 version: the mismatch stands)
        notes["vs_f64_error"] = _first_line(exc)
        return False, notes
    notes["vs_f64"] = {"emitted": acc["emitted"], "original": acc["original"]}
    return acc["ok"], notes


def output_tolerance(low_precision: bool = False) -> float:
    """The float tolerance of :func:`output_error` for a program (`computes_in_16bit`)."""
    return OUTPUT_TOL_16BIT if low_precision else OUTPUT_TOL


def output_error(out: Sequence[Any], ref: Sequence[Any], low_precision: bool = False) -> tuple[float, bool]:
    """(max error, within tolerance) of a program's outputs against reference outputs.

    Float outputs: max over elements of ``|a - b| / max(|b|, 1e-2 * max|b|, 1e-30)``, b the
    reference array: a relative error, except that elements tiny compared with the rest of their
    array (cancellations, e.g. gradients summing to ~0) are measured against 1% of the array's
    magnitude (f32 re-association error in a fused reduction scales with the summed terms, not with
    the possibly ~0 result); an all-zero reference array against :data:`ZERO_OUTPUT_SCALE`. Within tolerance: err <= :data:`OUTPUT_TOL` (1e-4; 1e-2 for 16-bit
    floats, and for every float output of a program that computes in 16-bit floats: `low_precision`,
    see :func:`computes_in_16bit`), non-finite elements at the same places; integer/bool outputs
    must be equal; a different number of outputs or shapes is an infinite error.
    """
    worst, ok = 0.0, True
    if len(out) != len(ref):
        return math.inf, False
    for a, b in zip(out, ref):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape:
            return math.inf, False
        if a.size == 0:
            continue
        if b.dtype.kind in "biu":
            if not np.array_equal(a, b):
                worst, ok = math.inf, False
            continue
        tol = OUTPUT_TOL_16BIT if low_precision or (b.dtype.itemsize <= 2 and b.dtype.kind != "c") else OUTPUT_TOL
        a64 = a.astype(np.complex128 if b.dtype.kind == "c" else np.float64)
        b64 = b.astype(a64.dtype)
        fin = np.isfinite(b64)
        if not np.array_equal(fin, np.isfinite(a64)):
            return math.inf, False
        if not fin.any():
            continue
        mag = np.abs(b64[fin])
        # An output that is exactly zero everywhere (imag(conj(z) * z), a gradient that vanishes)
        # has no scale of its own: rounding noise there (~1e-11 from a re-associated or FMA-contracted
        # product) is measured against an absolute 1e-2, so it passes up to 1e-6 (f32) / 1e-4 (16-bit).
        floor = 1e-2 * float(mag.max()) if mag.max() > 0 else ZERO_OUTPUT_SCALE
        denom = np.maximum(mag, max(floor, 1e-30))
        e = float(np.max(np.abs(a64[fin] - b64[fin]) / denom))
        worst = max(worst, e)
        ok = ok and e <= tol
    return worst, ok


def run_hlo(text: str, inputs: Optional[Sequence[np.ndarray]] = None, *, seed: int = 0,
            disable_fusion: bool = False) -> list[np.ndarray]:
    """Compile and run once; tuple results come back flattened. ``inputs=None``: random inputs."""
    if inputs is None:
        inputs = random_inputs(text, seed)
    return compile_hlo(text, disable_fusion=disable_fusion)(*inputs)


# ---- timing ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class TimingOptions:
    """AutoTVM-style timing: ``repeat`` measurements, each the mean of ``number`` runs.

    ``number`` grows (x1.6 at least, or straight to the estimate) until one repeat lasts at least
    ``min_repeat_ms``; ``warmup`` untimed executions come first. The result is the minimum over
    repeats (the noise on these machines is one-sided: interference only makes runs slower).
    """

    number: int = 1
    repeat: int = 5
    min_repeat_ms: float = 20.0
    warmup: int = 2
    max_number: int = 100_000


@dataclass
class TimingResult:
    """Seconds per execution (min over repeats) and every repeat's mean."""

    seconds: float
    repeats: list[float]
    number: int

    @property
    def cv(self) -> float:
        """Coefficient of variation of the repeat means (0 for fewer than two repeats)."""
        if len(self.repeats) < 2:
            return 0.0
        m = statistics.fmean(self.repeats)
        return statistics.stdev(self.repeats) / m if m > 0 else 0.0


def _argument_source(compiled: CompiledHlo, inputs: Sequence[np.ndarray]) -> tuple[Any, list[int]]:
    """(fresh_args, donated): a function giving the device arguments of one execution (the same
    device arrays each time, except fresh copies of the donated parameters, which an execution
    consumes), and the donated parameter numbers."""
    args = compiled.put(inputs)
    donated = sorted(i for i in compiled.donated if i < len(args))

    def fresh_args() -> list[Any]:
        if not donated:
            return args
        new = list(args)
        for i, a in zip(donated, compiled.put([inputs[i] for i in donated])):
            a.block_until_ready()
            new[i] = a
        return new

    return fresh_args, donated


def time_compiled(compiled: CompiledHlo, inputs: Sequence[np.ndarray],
                  options: TimingOptions = TimingOptions(),
                  after_repeat: Optional[Callable[[int], None]] = None) -> TimingResult:
    """Time a compiled module on fixed device-resident inputs (each execution is waited for).

    A module that donates parameters (``input_output_alias``/``buffer_donor``: jax's
    ``donate_argnums``) consumes those buffers at each execution; it runs exactly as given, with
    fresh device copies of the donated inputs made before each execution, outside the timed region
    (each execution is then timed on its own and the times summed). ``after_repeat(i)`` runs,
    untimed, after repeat i (work interleaved with the repeats sees the same machine states).
    """
    execute = compiled.execute
    fresh_args, donated = _argument_source(compiled, inputs)
    args = fresh_args() if not donated else []

    for _ in range(max(0, options.warmup)):
        execute(fresh_args())

    def one_repeat(n: int) -> float:
        if donated:
            total = 0.0
            for _ in range(n):
                run_args = fresh_args()
                t0 = time.perf_counter()
                execute(run_args)
                total += time.perf_counter() - t0
            return total
        t0 = time.perf_counter()
        for _ in range(n):
            execute(args)
        return time.perf_counter() - t0

    number = max(1, int(options.number))
    min_s = max(0.0, options.min_repeat_ms) / 1e3
    # Calibrate `number` (these runs also warm caches further; they are not reported).
    while min_s > 0 and number < options.max_number:
        elapsed = one_repeat(number)
        if elapsed >= min_s:
            break
        per_run = max(elapsed / number, 1e-9)
        number = min(options.max_number,
                     max(math.ceil(number * 1.6), math.ceil(min_s / per_run * 1.05)))
    repeats = []
    for i in range(max(1, options.repeat)):
        repeats.append(one_repeat(number) / number)
        if after_repeat is not None:
            after_repeat(i)
    return TimingResult(min(repeats), repeats, number)


# ---- paired (drift-cancelling) end-to-end timing ------------------------------------------------
#
# On a shared VM the machine's speed drifts over seconds (whole rounds of an interleaved benchmark
# ran 0.7x to 1.46x of their usual speed, with no job on the machine), so two programs' absolute
# times taken seconds apart do not rank them reproducibly. A *paired* timing alternates short blocks
# of a reference program R and a candidate C within milliseconds, R C R C ... R, and takes each
# candidate block's time over the mean of the two reference blocks around it: the drift, slow
# against a pair's few milliseconds, cancels in the ratio.


class PreparedRun:
    """A compiled program bound to device-resident inputs, timed in short blocks of ``number``
    executions (each waited for; donated parameters get fresh copies outside the timed region, as in
    :func:`time_compiled`)."""

    def __init__(self, compiled: CompiledHlo, inputs: Sequence[np.ndarray]):
        self.compiled = compiled
        self._fresh, self._donated = _argument_source(compiled, inputs)
        self._args = self._fresh() if not self._donated else None
        self.number = 1

    def block(self, n: Optional[int] = None, warmup: int = 0) -> float:
        """Seconds per execution over ``n`` (default ``number``) timed executions, after ``warmup``
        untimed ones."""
        execute = self.compiled.execute
        n = max(1, int(self.number if n is None else n))
        for _ in range(max(0, warmup)):
            execute(self._fresh() if self._donated else self._args)
        if self._donated:
            total = 0.0
            for _ in range(n):
                run_args = self._fresh()
                t0 = time.perf_counter()
                execute(run_args)
                total += time.perf_counter() - t0
            return total / n
        args = self._args
        t0 = time.perf_counter()
        for _ in range(n):
            execute(args)
        return (time.perf_counter() - t0) / n

    def calibrate(self, min_block_ms: float, max_number: int = 100_000) -> int:
        """Set (and return) ``number`` so that a block lasts at least ``min_block_ms`` (the smallest
        of three estimates, so that one slow execution does not inflate it)."""
        if min_block_ms <= 0:
            raise ValueError(f"min_block_ms must be > 0, got {min_block_ms}")
        self.block(1, warmup=1)
        per_run = min(self.block(1) for _ in range(3))
        self.number = int(min(max_number, max(1, math.ceil(min_block_ms / 1e3 / max(per_run, 1e-9)))))
        return self.number


@dataclass
class PairedTiming:
    """A candidate's end-to-end time as a ratio to a reference timed beside it (:func:`paired_ratios`)."""

    ratio: float                  # median of the per-pair ratios (candidate / reference)
    ratios: list[float]           # one per candidate block
    seconds: list[float]          # the candidate blocks' seconds per execution
    reference_seconds: list[float]  # the reference blocks' (one more than candidate blocks)


def paired_ratios(reference: PreparedRun, candidate: PreparedRun, pairs: int = 4,
                  warmup: int = 1) -> PairedTiming:
    """Time ``reference`` and ``candidate`` in alternating blocks, R C R C ... R (``pairs`` candidate
    blocks, ``pairs + 1`` reference blocks, each of its run's ``number`` executions after ``warmup``
    untimed ones, so that neither block pays for the other's cache state); each candidate block's
    time over the mean of the reference blocks just before and after it is one ratio. Calibrate both
    runs first (:meth:`PreparedRun.calibrate`): a block of about a millisecond keeps a pair within a
    few milliseconds, where the machine's drift cancels.

    The median of these ratios is biased low on a loaded machine (a block over the mean of two
    catches fewer interruptions than a block over a block: a program against itself measured 0.95
    to 0.97, BENCHMARKS.md 2026-11-27); :func:`neighbour_ratios` of the same blocks is not."""
    if pairs < 1:
        raise ValueError(f"pairs must be >= 1, got {pairs}")
    ref = [reference.block(warmup=warmup)]
    cand: list[float] = []
    for _ in range(pairs):
        cand.append(candidate.block(warmup=warmup))
        ref.append(reference.block(warmup=warmup))
    ratios = [c / ((ref[k] + ref[k + 1]) / 2) for k, c in enumerate(cand)]
    return PairedTiming(float(statistics.median(ratios)), ratios, cand, ref)


def time_paired(reference: CompiledHlo, candidate: CompiledHlo, inputs: Sequence[np.ndarray], *,
                pairs: int = 20, min_block_ms: float = 1.0, warmup: int = 1) -> PairedTiming:
    """A candidate program's end-to-end time relative to a reference program taking the same inputs
    (:func:`paired_ratios` after calibrating both to blocks of ``min_block_ms``)."""
    ref, cand = PreparedRun(reference, inputs), PreparedRun(candidate, inputs)
    ref.calibrate(min_block_ms)
    cand.calibrate(min_block_ms)
    return paired_ratios(ref, cand, pairs, warmup)



def neighbour_ratios(p: PairedTiming) -> list[float]:
    """Two single-block ratios per candidate block of one :func:`paired_ratios` round: over the
    reference block before it, and over the one after it (in order; see :func:`time_paired_for`)."""
    return [c / r for k, c in enumerate(p.seconds) for r in p.reference_seconds[k:k + 2]]


def time_paired_for(reference: CompiledHlo, candidate: CompiledHlo, inputs: Sequence[np.ndarray],
                    seconds: float, *, pairs: int = 4, min_block_ms: float = 1.0, warmup: int = 1,
                    clock: Callable[[], float] = time.perf_counter) -> PairedTiming:
    """:func:`time_paired` for about ``seconds`` of wall time (calibration excluded): rounds of
    :func:`paired_ratios` (``pairs`` candidate blocks each, R C R C ... R) until ``seconds`` are
    spent, at least one round; ``reference_seconds`` holds each round's ``pairs + 1`` reference
    blocks one round after the other. Both programs run on the same input buffers (unless one
    donates them) and the same number of executions per block.

    ``ratios`` here are *single-block* ratios, two per candidate block: over the reference block
    before it and over the one after it (in order). A block over the mean of two is biased low on a
    loaded machine, whose noise is a few long interruptions: the mean of two blocks catches one more
    often than a single block does, so a program paired with itself measured 0.98 (load 10) to
    0.73 (load 14) that way (BENCHMARKS.md, 2026-11-27); a single block over a single block has median
    1 for identical programs whatever the noise, and a linear drift still cancels (the two ratios
    err by as much in opposite directions)."""
    if seconds is None or not seconds >= 0:
        raise ValueError(f"seconds must be >= 0, got {seconds}")
    ref, cand = PreparedRun(reference, inputs), PreparedRun(candidate, inputs)
    if not ref._donated and not cand._donated:
        cand._args = ref._args  # the same input buffers: no difference of placement between the two
    # the same executions per block for both (calibrated on the slower): blocks of different lengths
    # catch interruptions differently, which biases the median of their ratios
    cand.number = ref.number = max(ref.calibrate(min_block_ms), cand.calibrate(min_block_ms))
    start = clock()
    ratios: list[float] = []
    secs: list[float] = []
    refs: list[float] = []
    while True:
        p = paired_ratios(ref, cand, pairs, warmup)
        ratios += neighbour_ratios(p)
        secs += p.seconds
        refs += p.reference_seconds
        if clock() - start >= seconds:
            break
    return PairedTiming(float(statistics.median(ratios)), ratios, secs, refs)


# ---- in-program kernel timing ---------------------------------------------------------------
#
# On XLA:CPU the sum of standalone kernel times is not a program's runtime (each standalone kernel
# pays its own launch, cache misses on its inputs and output allocation), so kernels are also timed
# *inside* the compiled program: while a jaxlib profiler session is active, XLA:CPU's thunk executor
# records one trace event per thunk it runs, named after the instruction of the optimized module,
# with ``hlo_op`` and ``run_id`` stats; the session hands them back in memory. (jaxlib 0.10.2 records
# them without any compile option: ``xla_cpu_enable_xprof_traceme`` adds no thunk events, so the
# profiled program is compiled exactly as the one timed end to end.) The executor's idle time
# between thunks (dispatching the next one) is no thunk's: :func:`thunk_gaps` measures the gap
# before each thunk, and :func:`attribute_thunks` charges it to the kernel of that thunk, so that
# the kernels' times add up to the executor's run.

_CONTROL_OPCODES = frozenset({"while", "conditional", "call", "async-start", "async-done"})


@dataclass
class ThunkTiming:
    """One thunk of a profiled program: its self time in each profiled execution (seconds, the sum
    over its events in that execution: a thunk in a while body runs once per iteration), how
    many times it ran per execution, and in each execution the idle time before its events
    (``gaps``, :func:`thunk_gaps`: the executor's dispatch of it)."""

    seconds: list[float]
    count: int
    gaps: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        """Repeat median of its per-execution time."""
        return float(statistics.median(self.seconds)) if self.seconds else 0.0


@dataclass
class ProgramProfile:
    """A compiled program's end-to-end time (unprofiled, :func:`time_compiled`) and the time of
    each thunk inside it over ``runs`` profiled executions (``thunks``: optimized-module instruction
    name -> :class:`ThunkTiming`); ``run_seconds`` is each profiled execution's span (its
    ``ThunkExecutor::Execute`` event, or from its first thunk's start to its last thunk's end where
    the trace has none) and ``tail_seconds`` the part of it after the last thunk ended."""

    end_to_end: TimingResult
    thunks: dict[str, ThunkTiming]
    runs: int
    run_seconds: list[float]
    tail_seconds: list[float] = field(default_factory=list)


def thunk_self_times(events: Sequence[tuple[Any, str, int, float, float]],
                     control: "frozenset[str] | set[str]" = frozenset()) -> dict[int, dict[str, tuple[float, int]]]:
    """{run id: {thunk name: (self seconds, events)}} from thunk trace events
    ``(thread, name, run_id, start_ns, duration_ns)``.

    A control thunk (a name in `control`: while, conditional, call) encloses the thunks of its body,
    which may run on other threads: its self time is its duration less the union of the intervals of
    the run's other events inside it, so that no time is counted twice. Other thunks' self time is
    their duration (independent thunks may overlap on two threads).
    """
    by_run: dict[int, list] = {}
    for ev in events:
        by_run.setdefault(int(ev[2]), []).append(ev)
    out: dict[int, dict[str, tuple[float, int]]] = {}
    for run, evs in by_run.items():
        evs.sort(key=lambda e: (e[3], -e[4]))
        acc: dict[str, list] = {}
        for j, (_, name, _, start, dur) in enumerate(evs):
            self_ns = dur
            if name in control:
                end, covered, reach = start + dur, 0.0, start
                for k in range(j + 1, len(evs)):
                    s2, d2 = evs[k][3], evs[k][4]
                    if s2 >= end:
                        break
                    if s2 + d2 > end:
                        continue  # not inside this thunk
                    lo, hi = max(s2, reach), s2 + d2
                    if hi > lo:
                        covered += hi - lo
                        reach = hi
                self_ns = dur - covered
            slot = acc.setdefault(name, [0.0, 0])
            slot[0] += max(self_ns, 0.0) * 1e-9
            slot[1] += 1
        out[run] = {n: (v[0], v[1]) for n, v in acc.items()}
    return out


def thunk_gaps(events: Sequence[tuple[Any, str, int, float, float]],
               control: "frozenset[str] | set[str]" = frozenset(),
               execute: Optional[dict[int, tuple[float, float]]] = None) -> dict[int, tuple[dict[str, float], float]]:
    """{run id: ({thunk name: seconds idle before it}, seconds after the last thunk)} from thunk
    trace events ``(thread, name, run_id, start_ns, duration_ns)``.

    Over the run's thunks in start order (all threads), a thunk's gap is the time from the latest
    end of the thunks started before it (the run's start: ``execute[run]``, the
    ``ThunkExecutor::Execute`` span ``(start_ns, end_ns)``, else its first thunk's start) to its own
    start, 0 when it starts while another runs. A control thunk (while, conditional, call) is no
    work of its own: it neither ends a gap nor gets one, so its overhead goes to the thunks of its
    body and after it. A thunk's gaps over its events add up; the gaps, the union of the
    non-control thunks' intervals and the tail cover the run exactly.
    """
    by_run: dict[int, list] = {}
    for ev in events:
        if ev[1] not in control:
            by_run.setdefault(int(ev[2]), []).append(ev)
    out: dict[int, tuple[dict[str, float], float]] = {}
    for run, evs in by_run.items():
        evs.sort(key=lambda e: (e[3], -e[4]))
        span = (execute or {}).get(run)
        reach = min(evs[0][3], span[0]) if span else evs[0][3]
        acc: dict[str, float] = {}
        for _, name, _, start, dur in evs:
            acc[name] = acc.get(name, 0.0) + max(start - reach, 0.0) * 1e-9
            reach = max(reach, start + dur)
        tail = max(span[1] - reach, 0.0) * 1e-9 if span else 0.0
        out[run] = (acc, tail)
    return out


def _thunk_events(profile_data: Any) -> tuple[list[tuple[Any, str, int, float, float]], dict[int, tuple[float, float]]]:
    """Thunk events ``(thread, hlo_op, run_id, start_ns, duration_ns)`` of jaxlib ProfileData, and
    each run's span ``(start_ns, end_ns)``: from the start of the last ``ThunkExecutor::Execute``
    event (any thread: the executor hands thunks to a thread pool) that began at or before its first
    thunk, else that thunk's start, to the end of its last thunk or of that event, whichever is later."""
    events: list = []
    first: dict[int, float] = {}
    last: dict[int, float] = {}
    executes: list[tuple[float, float]] = []
    for plane in profile_data.planes:
        for li, line in enumerate(plane.lines):
            for ev in line.events:
                if ev.name == "ThunkExecutor::Execute":
                    start = float(ev.start_ns)
                    executes.append((start, start + float(ev.duration_ns)))
                    continue
                stats = dict(ev.stats)
                op, run = stats.get("hlo_op"), stats.get("run_id")
                if op is None or run is None:
                    continue
                run = int(run)
                start, dur = float(ev.start_ns), float(ev.duration_ns)
                events.append(((plane.name, li), str(op), run, start, dur))
                first[run] = min(first.get(run, start), start)
                last[run] = max(last.get(run, start + dur), start + dur)
    executes.sort()
    starts = [e[0] for e in executes]
    spans: dict[int, tuple[float, float]] = {}
    for run, start in first.items():
        k = bisect.bisect_right(starts, start) - 1
        spans[run] = (executes[k][0], max(executes[k][1], last[run])) if k >= 0 else (start, last[run])
    return events, spans


def profile_compiled(compiled: CompiledHlo, inputs: Sequence[np.ndarray], runs: int = 20,
                     timing: TimingOptions = TimingOptions()) -> ProgramProfile:
    """End-to-end time of a program (:func:`time_compiled`, unprofiled) and each thunk's time inside
    it over `runs` profiled executions, spread over the end-to-end repeats (after each repeat, an
    equal share of the profiled executions, then ``timing.warmup`` (at least 1) untimed ones: the
    first execution after a profiler session runs up to 10x slow, and would count in the next repeat).
    RuntimeError when the profile holds no thunk event (an XLA backend that does not trace its thunks)."""
    fresh_args, _ = _argument_source(compiled, inputs)
    execute = compiled.execute
    session_type = _api().profiler_session
    n_repeats = max(1, int(timing.repeat))
    runs = max(1, int(runs))
    events: list = []
    spans: dict[int, tuple[float, float]] = {}

    def profiled_block(i: int) -> None:
        n = runs // n_repeats + (i < runs % n_repeats)
        if n == 0:
            return
        session = session_type()
        try:
            for _ in range(n):
                execute(fresh_args())
        finally:
            data = session.stop_and_get_profile_data()
        for _ in range(max(1, timing.warmup)):  # the first executions after a profiler session run slow
            execute(fresh_args())
        evs, sp = _thunk_events(data)
        events.extend(evs)
        spans.update(sp)

    end_to_end = time_compiled(compiled, inputs, timing, after_repeat=profiled_block)
    control = {r["name"] for r in xla_fusion_report("", include_unfused=True,
                                                    optimized_module=compiled.optimized_module())
               if r["kind"] is None and r["instructions"] and r["instructions"][0]["opcode"] in _CONTROL_OPCODES}
    per_run = thunk_self_times(events, control)
    if not per_run:
        raise RuntimeError("no thunk events in the profile: this XLA backend does not trace its thunks")
    gaps = thunk_gaps(events, control, spans)
    run_ids = sorted(per_run)
    names = sorted({n for d in per_run.values() for n in d})
    thunks = {}
    for n in names:
        seen = [per_run[r].get(n, (0.0, 0)) for r in run_ids]
        thunks[n] = ThunkTiming([s for s, _ in seen], int(statistics.median(c for _, c in seen)),
                                [gaps.get(r, ({}, 0.0))[0].get(n, 0.0) for r in run_ids])
    return ProgramProfile(end_to_end, thunks, len(run_ids),
                          [(spans[r][1] - spans[r][0]) * 1e-9 for r in run_ids],
                          [gaps.get(r, ({}, 0.0))[1] for r in run_ids])


# ---- XLA's own fusion decisions -------------------------------------------------------------

_METADATA_RE = re.compile(r",?\s*metadata=\{")
_OP_NAME_RE = re.compile(r'op_name="((?:[^"\\]|\\.)*)"')
_KIND_RE = re.compile(r"\bkind=(k\w+)")
_CALLS_RE = re.compile(r"\bcalls=%?([\w.\-]+)")
_FREE_OPCODES = frozenset({"parameter", "constant", "tuple", "get-tuple-element", "bitcast",
                           "after-all", "partition-id", "replica-id"})
_CUSTOM_KIND_RE = re.compile(r'"fusion_config":\{[^}]*"kind":"([^"]*)"')


def strip_metadata(text: str) -> str:
    """Remove every ``metadata={...}`` attribute from HLO text (quotes and nested braces aware).

    Compiling through StableHLO turns instruction names into MLIR locations, which XLA prints back
    as ``metadata={op_name="<name>"}``; but an instruction that already carries metadata keeps its
    old ``op_name`` instead. Stripping first makes ``op_name`` always the original name.
    """
    out: list[str] = []
    pos = 0
    while True:
        m = _METADATA_RE.search(text, pos)
        if m is None:
            out.append(text[pos:])
            return "".join(out)
        out.append(text[pos:m.start()])
        i, depth, in_str = m.end(), 1, False
        while i < len(text) and depth:
            c = text[i]
            if in_str:
                if c == "\\":
                    i += 1
                elif c == '"':
                    in_str = False
            elif c == '"':
                in_str = True
            elif c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
            i += 1
        pos = i


def _opcode_of(line: str) -> str:
    """Opcode as XLA prints it, from an instruction's text ``%n = shape opcode(...)``."""
    rhs = line.split(" = ", 1)[1].lstrip() if " = " in line else line
    if rhs.startswith("("):  # tuple shape: skip balanced parentheses
        depth = 0
        for i, c in enumerate(rhs):
            depth += c == "("
            depth -= c == ")"
            if depth == 0:
                rhs = rhs[i + 1:].lstrip()
                break
    else:
        rhs = rhs.split(" ", 1)[1] if " " in rhs else rhs
    return rhs.split("(", 1)[0].strip()


def _instr_info(instr: Any) -> dict[str, Any]:
    line = instr.to_string()
    m = _OP_NAME_RE.search(line)
    op_name = m.group(1) if m else None
    return {"name": instr.name, "opcode": _opcode_of(line), "op_name": op_name,
            "origin": op_name.rsplit("/", 1)[-1] if op_name else None}


def xla_fusion_report(text: str, *, strip_input_metadata: bool = True,
                      include_wrapped: bool = True, include_unfused: bool = False,
                      optimized_module: Any = None) -> list[dict[str, Any]]:
    """Which fusions XLA made: compile ``text`` and list every fusion in the optimized module.

    One dict per ``fusion`` instruction in a non-fused computation, in program order::

        {"name": "subtract_tanh_fusion",       # the fusion instruction, as XLA named it
         "computation": "main.1",              # where it sits
         "kind": "kLoop" | "kOutput" | "kCustom" | ...,
         "custom_kind": "__ynn_fusion" | None, # backend_config fusion_config.kind (kCustom)
         "calls": "fused_computation",
         "op_name": "tanh.1",                  # the fusion's metadata = its root's origin
         "wrapped": bool,                      # single-op `wrapped_*` fusion, see below
         "instructions": [{"name", "opcode", "op_name", "origin"}, ...],  # parameters excluded
         "origins": ["add.1", "exp.1", ...]}   # input instruction names, where known

    What survives in XLA:CPU's printout (jaxlib 0.10.2, measured on JAX-generated HLO for an
    elementwise chain, dot+bias+relu and exp+reduce):

    * Instruction *names* do not survive exactly: the HLO -> StableHLO -> HLO round trip renames
      every instruction, keeping the name's prefix and renumbering the suffix (``add.1`` ->
      ``add.0``, ``a`` -> ``a.0``; entry parameters ``x.1`` stay). Fusions get new names from
      their ops (``subtract_tanh_fusion``, ``add_exponential_fusion``, ``ynn_fusion``).
    * The original name survives as ``metadata={op_name="<name>"}`` on every fused instruction
      and on the fusion itself (= its root's), *provided the input had no metadata* (otherwise
      the old op_name is kept; hence ``strip_input_metadata``). ``origin`` is that name; an
      instruction inlined from a ``call`` gets ``"<call name>/<name>"`` and origin ``<name>``.
    * Constants materialised inside a fused computation carry no op_name (origin None), and
      broadcasts XLA creates itself carry the op_name of the instruction they came from.
    * Elementwise chains become one ``kLoop`` fusion (e.g. add, exp, broadcast, multiply,
      subtract, tanh -> ``subtract_tanh_fusion``).
    * A dot becomes a ``kCustom`` fusion with backend_config kind ``__ynn_fusion`` (a YNNPACK
      library call) and its bias-add + relu a separate ``kLoop`` fusion: no ``kOutput`` fusion
      for dot+bias on CPU here. ``exp`` feeding a ``reduce`` is fused with the reduce into one
      ``__ynn_fusion`` kCustom fusion.
    * Every op XLA:CPU leaves unfused (or every op, with the fusion pass disabled) is wrapped in
      a single-instruction ``kLoop`` fusion named ``wrapped_<opcode>`` calling
      ``wrapped_<opcode>_computation``: not a fusion decision. Such entries have
      ``wrapped=True`` (drop them with ``include_wrapped=False``).
    * A hand-written ``fusion`` in the input is kept as written, but its fused computation is
      renamed (``region_N.M``) and its parameters inherit the fusion's op_name.
    * More patterns (JAX-generated, 256x256 f32): ``exp(x)`` with two users is *not* duplicated
      into them (it stays ``wrapped_exponential``, each user fusing only its cheap ops); a dot
      followed by a full-matrix add or a tanh leaves the add/tanh as a separate kernel; a
      ``reduce`` is fused with its elementwise producers and, in softmax, with its
      broadcast/subtract/exp consumers into one ``__ynn_fusion``; transpose+add becomes one
      ``copy_add_fusion``; concatenate fuses its exp producer; a gather fuses with its index
      clamping and the multiply after it. A ``convolution`` stays a bare (Eigen) instruction,
      with XLA-made layout transposes around it as ``transpose_copy_fusion`` (no op_name on the
      ones for the operands; the output one fuses the relu that follows). When the convolution
      is the module's root (a standalone conv kernel), the rewritten ``convolution`` has *no*
      op_name and the output ``transpose_copy_fusion`` carries the conv's original name.
    * ``backend_config`` of a loop fusion may carry ``outer_dimension_partitions`` (the
      parallel split over the 2 cores); it does not change what was fused.

    ``include_unfused=True`` also lists every other top-level instruction that does work (not
    parameter, constant, tuple, get-tuple-element, bitcast), e.g. a bare ``convolution`` or
    ``copy``, with ``kind=None`` and itself as the single instruction: with it, the report
    covers every kernel of the optimized entry computation.
    """
    if optimized_module is None:
        src = strip_metadata(text) if strip_input_metadata else text
        optimized_module = compile_hlo(src).optimized_module()
    comps = {c.name: c for c in optimized_module.computations()}
    printed = optimized_module.to_string()
    position = {m.group(1): m.start() for m in re.finditer(r"^\s*(?:ROOT\s+)?%?([\w.\-]+) = ", printed, re.M)}
    try:
        top = list(optimized_module.make_nonfusion_computations())
    except Exception:  # pragma: no cover - older jaxlib
        top = list(comps.values())
    report: list[dict[str, Any]] = []
    for comp in top:
        for instr in comp.instructions():
            line = instr.to_string()
            opcode = _opcode_of(line)
            if opcode != "fusion":
                if include_unfused and opcode not in _FREE_OPCODES:
                    info = _instr_info(instr)
                    report.append({"name": instr.name, "computation": comp.name, "kind": None,
                                   "custom_kind": None, "calls": None, "op_name": info["op_name"],
                                   "wrapped": False, "instructions": [info],
                                   "origins": [info["origin"]] if info["origin"] else []})
                continue
            kind = _KIND_RE.search(line)
            calls = _CALLS_RE.search(line)
            ck = _CUSTOM_KIND_RE.search(line)
            op = _OP_NAME_RE.search(line)
            callee = comps.get(calls.group(1)) if calls else None
            fused = [] if callee is None else [
                _instr_info(i) for i in callee.instructions() if _opcode_of(i.to_string()) != "parameter"]
            fused.sort(key=lambda f: position.get(f["name"], 0))  # printed (topological) order
            wrapped = instr.name.startswith("wrapped_") and len(fused) == 1
            if wrapped and not include_wrapped:
                continue
            report.append({
                "name": instr.name,
                "computation": comp.name,
                "kind": kind.group(1) if kind else None,
                "custom_kind": ck.group(1) if ck else None,
                "calls": calls.group(1) if calls else None,
                "op_name": op.group(1) if op else None,
                "wrapped": wrapped,
                "instructions": fused,
                "origins": [f["origin"] for f in fused if f["origin"]],
            })
    return report


# --------------------------------------------------------------------------------------------
# 3. worker subprocess + evaluator
# --------------------------------------------------------------------------------------------

def _first_line(exc: BaseException) -> str:
    msg = str(exc).strip()
    for line in msg.splitlines():
        if line.strip():
            return line.strip()[:500]
    return type(exc).__name__


# Whole programs timed repeatedly (a verification race) are compiled once per worker: the last few
# compiled programs, and the last reference program's outputs, are kept here (worker side).
_PROGRAM_CACHE: dict = {}
_PROGRAM_CACHE_SIZE = 4
_REFERENCE_OUTPUTS: dict = {}


def _compile_cached(text: str, disable_fusion: bool, xla_flags: Optional[dict], cache: bool) -> CompiledHlo:
    key = (hashlib.sha1(text.encode()).hexdigest(), disable_fusion, repr(sorted((xla_flags or {}).items())))
    if cache and key in _PROGRAM_CACHE:
        return _PROGRAM_CACHE[key]
    compiled = compile_hlo(text, disable_fusion=disable_fusion, xla_flags=xla_flags)
    if cache:
        while len(_PROGRAM_CACHE) >= _PROGRAM_CACHE_SIZE:
            del _PROGRAM_CACHE[next(iter(_PROGRAM_CACHE))]
        _PROGRAM_CACHE[key] = compiled
    return compiled


def _reference_outputs(text: str, seed: int) -> list[np.ndarray]:
    """Outputs of a reference program (XLA's default compilation) on its verification inputs."""
    key = (hashlib.sha1(text.encode()).hexdigest(), seed)
    if key not in _REFERENCE_OUTPUTS:
        _REFERENCE_OUTPUTS.clear()
        _REFERENCE_OUTPUTS[key] = compile_hlo(text)(*verification_inputs(text, seed))
    return _REFERENCE_OUTPUTS[key]


def _measure_in_process(req: dict) -> dict:
    """Compile, make inputs, (compare outputs,) time: the work one request does (in the worker).

    Request keys besides the text: ``inputs`` ("random": :func:`random_inputs`, or "verification":
    :func:`verification_inputs`), ``cache`` (keep the compiled program for the next request), and
    ``reference`` (a program text: before timing, run once and compare the outputs with the
    reference's on the same inputs; the answer then carries ``output_error``/``outputs_match``).
    """
    fault = req.get("fault")
    if fault == "crash":
        os._exit(_CRASH_EXIT_CODE)
    if fault == "segv":
        import ctypes
        ctypes.string_at(0)
    if fault == "hang":
        while True:
            time.sleep(3600)
    text = req["text"]
    seed = req.get("seed", 0)
    try:
        compiled = _compile_cached(text, req.get("disable_fusion", False), req.get("xla_flags"),
                                   bool(req.get("cache")))
    except Exception as exc:
        return {"status": f"compile_error: {_first_line(exc)}"}
    try:
        make_inputs = verification_inputs if req.get("inputs") == "verification" else random_inputs
        # checked against a reference: the reference's inputs (verification_inputs reads the text)
        inputs = make_inputs(req.get("reference") or text, seed)
    except Exception as exc:
        return {"status": f"unsupported: {_first_line(exc)}"}
    extra: dict = {}
    if req.get("reference") is not None:
        try:
            ref = _reference_outputs(req["reference"], seed)
        except Exception as exc:
            return {"status": f"reference_error: the original program does not run: {_first_line(exc)}"}
        try:
            low = computes_in_16bit(req["reference"])
            got = compiled(*inputs)
            err, ok = output_error(got, ref, low_precision=low)
        except Exception as exc:
            return {"status": f"runtime_error: {_first_line(exc)}"}
        ok, notes = accuracy_fallback(ok, low, text, req["reference"], inputs, got, ref,
                                      {"disable_fusion": req.get("disable_fusion", False),
                                       "xla_flags": req.get("xla_flags")})
        extra = {"output_error": err, "outputs_match": ok}
        if "without_excess_precision" in notes:  # judged without excess precision: recorded beside it
            extra["output_error_without_excess_precision"] = notes["without_excess_precision"]
        if "vs_f64" in notes:  # judged against the program in f64: both errors recorded
            extra["output_error_vs_f64"] = notes["vs_f64"]
        if not ok:  # a program computing something else is no candidate, whatever its speed
            return {"status": f"output_mismatch: outputs differ from the original program's (max error "
                              f"{err:.3g}, tolerance {output_tolerance(low):g})", **extra}
    timing = TimingOptions(**req.get("timing", {}))
    if req.get("profile_runs"):
        try:
            return {"status": "ok", "compile_s": compiled.compile_seconds, **extra,
                    **profile_answer(compiled, inputs, int(req["profile_runs"]), timing)}
        except Exception as exc:
            return {"status": f"runtime_error: {_first_line(exc)}", **extra}
    try:
        res = time_compiled(compiled, inputs, timing)
    except Exception as exc:
        return {"status": f"runtime_error: {_first_line(exc)}", **extra}
    return {"status": "ok", "seconds": res.seconds, "repeats": res.repeats, "number": res.number,
            "compile_s": compiled.compile_seconds, **extra}



def _paired_in_process(req: dict) -> dict:
    """A paired timing request (worker side): ``text`` (the candidate) against ``paired_with`` (the
    reference), both compiled with the request's options (the reference with ``reference_options``
    where given; cached), on the candidate's
    :func:`verification_inputs`, for ``seconds`` (:func:`time_paired_for`)."""
    fault = req.get("fault")
    if fault == "crash":
        os._exit(_CRASH_EXIT_CODE)
    if fault == "hang":
        while True:
            time.sleep(3600)
    opts = (req.get("disable_fusion", False), req.get("xla_flags"), True)
    ref_opts = req.get("reference_options")
    ref_opts = opts if ref_opts is None else (ref_opts.get("disable_fusion", False), ref_opts.get("xla_flags"), True)
    try:
        reference = _compile_cached(req["paired_with"], *ref_opts)
        candidate = _compile_cached(req["text"], *opts)
    except Exception as exc:
        return {"status": f"compile_error: {_first_line(exc)}"}
    try:
        inputs = verification_inputs(req["text"], req.get("seed", 0))
    except Exception as exc:
        return {"status": f"unsupported: {_first_line(exc)}"}
    try:
        p = time_paired_for(reference, candidate, inputs, float(req["seconds"]), pairs=int(req.get("pairs", 4)),
                            min_block_ms=float(req.get("min_block_ms", 1.0)))
    except Exception as exc:
        return {"status": f"runtime_error: {_first_line(exc)}"}
    return {"status": "ok", "ratio": p.ratio, "ratios": p.ratios,
            "candidate_s": float(statistics.median(p.seconds)),
            "reference_s": float(statistics.median(p.reference_seconds)),
            "candidate_blocks": p.seconds, "reference_blocks": p.reference_seconds, "pairs": int(req.get("pairs", 4))}


def _paired_request(req: dict) -> Measurement:
    """One paired timing as a MeasurementPool task: ``seconds`` is the median ratio candidate /
    reference, ``extra`` the per-pair ``ratios`` and both programs' median block times."""
    try:
        resp = _paired_in_process(req)
    except Exception as exc:
        resp = {"status": f"worker_error: {type(exc).__name__}: {_first_line(exc)}"}
    if resp.get("status") != "ok":
        return Measurement.failure(resp.get("status", "worker_error: no status"))
    return Measurement(float(resp["ratio"]), extra={k: resp[k] for k in ("ratios", "candidate_s", "reference_s",
                                                                         "candidate_blocks", "reference_blocks", "pairs")})


def _result_elements(line: str) -> Optional[int]:
    """Elements of an instruction's array result, from its printed text (None for tuples)."""
    m = re.match(r"\s*(?:ROOT\s+)?%?[\w.\-]+ = \w+\[([\d,]*)\]", line)
    if m is None:
        return None
    return math.prod(int(d) for d in m.group(1).split(",") if d)


def profile_answer(compiled: CompiledHlo, inputs: Sequence[np.ndarray], runs: int,
                    timing: TimingOptions) -> dict:
    """A profiled program's answer (worker side): the end-to-end repeat median as ``seconds``, and
    per thunk its per-execution seconds, the idle time before it in each (``gap_seconds``), count
    and where it comes from in the input program (``origin``: the op_name of the optimized
    instruction, i.e. the input instruction it was made from, its ``opcode``, the opcodes it
    ``computes`` and whether it is a ``control`` thunk whose time is its body's); per profiled
    execution its span and the part after its last thunk (``run_seconds``, ``tail_seconds``)."""
    prof = profile_compiled(compiled, inputs, runs, timing)
    module = compiled.optimized_module()
    made_from = {r["name"]: r for r in xla_fusion_report("", include_unfused=True, optimized_module=module)}
    lines = {i.name: i.to_string() for c in module.computations() for i in c.instructions()}
    thunks = {}
    for name, t in prof.thunks.items():
        r = made_from.get(name)
        op_name = r["op_name"] if r else None
        opcode = (r["instructions"][0]["opcode"] if r and r["kind"] is None and r["instructions"]
                  else "fusion" if r else None)
        thunks[name] = {"seconds": t.seconds, "gap_seconds": t.gaps, "count": t.count,
                        "origin": op_name.rsplit("/", 1)[-1] if op_name else None,
                        "opcode": opcode, "control": opcode in _CONTROL_OPCODES,
                        "computes": sorted({i["opcode"] for i in r["instructions"]}) if r else [],
                        "elements": _result_elements(lines.get(name, ""))}
    return {"seconds": float(statistics.median(prof.end_to_end.repeats)), "repeats": prof.end_to_end.repeats,
            "number": prof.end_to_end.number, "thunks": thunks, "profiled_runs": prof.runs,
            "run_seconds": prof.run_seconds, "tail_seconds": prof.tail_seconds}


# What a measurement with a `reference` says about its outputs (kept in its extra, failed or not).
OUTPUT_CHECK_KEYS = ("output_error", "outputs_match", "output_error_without_excess_precision", "output_error_vs_f64")


def _measure_request(req: dict) -> Measurement:
    """One kernel or program request as a MeasurementPool task (module level: picklable)."""
    try:
        resp = _measure_in_process(req)
    except Exception as exc:
        resp = {"status": f"worker_error: {type(exc).__name__}: {_first_line(exc)}"}
    checked = {k: resp[k] for k in OUTPUT_CHECK_KEYS if k in resp}
    if resp.get("status") != "ok":
        m = Measurement.failure(resp.get("status", "worker_error: no status"))
        m.extra.update(checked)
        return m
    repeats = list(resp["repeats"])
    cv = statistics.stdev(repeats) / statistics.fmean(repeats) if len(repeats) > 1 else 0.0
    profiled = {k: resp[k] for k in ("thunks", "profiled_runs", "run_seconds", "tail_seconds") if k in resp}
    return Measurement(float(resp["seconds"]), extra={
        "repeats": repeats, "number": resp["number"], "compile_s": resp["compile_s"], "cv": cv, **checked,
        **profiled})


def _backend_probe(_: Any = None) -> Measurement:
    """Pool task: the worker's backend, as ``extra`` {"platform", "jaxlib", "machine"} (raises if jax
    cannot start); "machine" is the worker's host CPU, or its first accelerator's name."""
    from autotune.compiler.targets.host import host_machine
    api = _api()
    machine = host_machine()
    if api.platform != "cpu":
        try:
            import jax
            machine = f"{jax.devices()[0].device_kind} ({machine})"
        except Exception:  # noqa: BLE001 - the host still names the machine
            pass
    return Measurement(0.0, extra={"platform": api.platform, "jaxlib": api.version, "machine": machine})


def _start_jax() -> None:
    """Pool initializer: import jax and resolve the shim as each worker starts, outside the item
    timeouts. An error is left for the worker's first request to report with its message."""
    try:
        _api()
    except Exception:
        pass


def _faults_from_env() -> dict[str, str]:
    spec = os.environ.get(FAULT_ENV, "")
    faults: dict[str, str] = {}
    for item in spec.split(","):
        kind, _, key = item.strip().partition(":")
        if kind in ("crash", "segv", "hang") and key:
            faults[key] = kind
    return faults


class XlaEvaluator(Evaluator):
    """Kernel runtimes measured on the real backend through jaxlib (CPU here, GPU where present).

    Each kernel's ``to_hlo_module()`` text goes to a worker of a :class:`~hardware.pool.MeasurementPool`
    (``n_workers`` spawn-context processes, or a dask cluster with ``scheduler``) that compiles it,
    makes :func:`random_inputs`, times it with ``timing`` and answers seconds per execution. The
    constructor starts nothing: the workers start on first use (a measurement, or a question about
    the backend: ``platform``, ``version``, a ``target`` left to the backend) and stop at `close()`,
    the end of a ``with`` block or interpreter exit. A backend that cannot start at all raises
    :class:`XlaStartError` from that first use. Statuses: ``ok``; ``compile_error: <first line>``;
    ``crash: worker ...`` (the worker died: segfault in XLA, abort; it is replaced and the run goes
    on); ``timeout`` (no answer within ``timeout_s``, compile included: the worker is killed and
    replaced); ``unsupported: ...`` (e.g. tuple parameters); ``runtime_error: ...``;
    ``budget_exhausted`` (the Budget ran out during the batch: checked before each kernel starts).
    ``extra`` carries ``repeats`` (seconds per run of each repeat), ``number``, ``compile_s`` and
    ``cv``. Each result reaches the store as soon as it exists.

    ``version`` is ``"1-jaxlib<ver>-<platform>"`` (plus a flags digest when fusion is disabled or
    XLA flags are set), so stored measurements never mix jaxlib versions or backends.
    """

    name = "xla"

    def __init__(self, target: Optional[str] = None, budget: "Budget | str | float | None" = None,
                 store: Any = None, *, timing: TimingOptions = TimingOptions(),
                 timeout_s: float = 60.0, seed: int = 0, disable_fusion: bool = False,
                 xla_flags: Optional[dict[str, Any]] = None, startup_timeout_s: float = 120.0,
                 n_workers: int = 1, scheduler: Optional[str] = None):
        _require_jaxlib()
        super().__init__(target, budget, store)  # target None: the backend's, learnt on first use
        self.timing = timing
        self.timeout_s = timeout_s
        self.seed = seed
        self.disable_fusion = disable_fusion
        self.xla_flags = dict(xla_flags or {})
        self.startup_timeout_s = startup_timeout_s
        self._backend: Optional[dict] = None
        self._pool = MeasurementPool(n_workers=max(1, int(n_workers)), timeout=timeout_s,
                                     scheduler=scheduler, setup_timeout=startup_timeout_s,
                                     initializer=_start_jax)

    # -- the backend, learnt from a worker on first use --------------------------------------------
    def _backend_info(self) -> dict:
        """{"platform", "jaxlib"} of the measuring workers (starts them; raises XlaStartError)."""
        if self._backend is None:
            (m,) = self._pool.map(_backend_probe, [None], timeout=self.startup_timeout_s)
            if not m.ok:
                raise XlaStartError(f"XLA worker failed to start: {m.status}")
            self._backend = dict(m.extra)
        return self._backend

    @property
    def platform(self) -> str:
        """Platform of the workers' jax backend ("cpu", "cuda", ...)."""
        return self._backend_info()["platform"]

    @property
    def jaxlib_version(self) -> str:
        return self._backend_info()["jaxlib"]

    @property
    def machine(self) -> str:
        """The measuring workers' machine (on a dask cluster, not this host): CPU model and cores,
        or the accelerator's name."""
        return self._backend_info().get("machine") or super().machine

    @property
    def target(self) -> str:  # type: ignore[override]
        if self._target is None:
            self._target = _target_for_platform(self.platform)
        return self._target

    @target.setter
    def target(self, value: Optional[str]) -> None:
        self._target = value

    @property
    def version(self) -> str:  # type: ignore[override]
        version = f"{_IMPL_VERSION}-jaxlib{self.jaxlib_version}-{self.platform}"
        if self.disable_fusion or self.xla_flags:
            digest = hashlib.sha1(repr((self.disable_fusion, sorted(self.xla_flags.items()))).encode())
            version += f"-flags{digest.hexdigest()[:8]}"
        return version

    @property
    def worker_restarts(self) -> int:
        """How many workers were replaced after a crash or timeout of their kernel."""
        return self._pool.crashes + self._pool.timeouts

    def _request(self, text: str, key: str, faults: dict[str, str], **options: Any) -> dict:
        return {"text": text, "seed": self.seed, "timing": asdict(self.timing),
                "disable_fusion": self.disable_fusion, "xla_flags": self.xla_flags,
                "fault": faults.get(key) or faults.get("*"), **options}

    # Hand-made `fusion` instructions reach XLA through jaxlib's HLO -> MLIR conversion as
    # mhlo.fusion; the CPU client compiles that, but PJRT plugins (CUDA) take StableHLO only, where
    # mhlo.fusion is illegal (measured with jaxlib 0.11.2 on an H100). There, a kernel is emitted
    # as its plain instructions and XLA's own fusion pass fuses the standalone module (for a
    # kernel that is one fusion in practice), and end-to-end timing of a configuration is refused.
    @property
    def hand_fusions(self) -> bool:
        """Whether this backend compiles hand-made fusion instructions (CPU: yes)."""
        return self.platform == "cpu"

    def _kernel_text(self, k: KernelLike) -> str:
        if self.hand_fusions:
            return k.to_hlo_module()
        try:
            return k.to_hlo_module(fused=False)
        except TypeError:  # a duck-typed kernel without the option
            return k.to_hlo_module()

    def measure(self, kernels: Sequence[KernelLike], tiles: Optional[Sequence[Any]] = None) -> list[Measurement]:
        kernels = list(kernels)
        if kernels and not self.budget.exhausted:
            self._backend_info()  # a backend that cannot start is an error, not a failure per kernel
        return super().measure(kernels, tiles)

    def _measure_batch(self, kernels: Sequence[KernelLike], tiles: Sequence[Any]) -> list[Measurement]:
        out: list[Optional[Measurement]] = [None] * len(kernels)
        faults = _faults_from_env()
        reqs, where = [], []
        for i, k in enumerate(kernels):
            try:
                text = self._kernel_text(k)
            except Exception as exc:
                out[i] = Measurement.failure(f"emit_error: {type(exc).__name__}: {_first_line(exc)}")
                self._report(i, out[i])
                continue
            reqs.append(self._request(text, k.hash, faults))
            where.append(i)

        def budget_gate() -> Optional[Measurement]:
            if self.budget.exhausted:
                self.budget_exhausted = True
                return Measurement.failure("budget_exhausted")
            return None

        def measured(j: int, m: Measurement) -> None:
            i = where[j]
            if tiles[i] is not None and m.status != "budget_exhausted":
                m.extra["tile_ignored"] = True
            out[i] = m
            self._report(i, m)

        self._pool.map(_measure_request, reqs, skip=budget_gate, on_result=measured)
        return out  # type: ignore[return-value]

    def measure_program(self, hlo_text: str, *, reference: Optional[str] = None,
                        disable_fusion: Optional[bool] = None,
                        xla_flags: Optional[dict[str, Any]] = None) -> Measurement:
        """Time a whole (possibly fused) program end to end, on the same path as kernels.

        The program runs exactly as given (donated parameters get fresh copies per execution, see
        :func:`time_compiled`) on :func:`verification_inputs`; each worker keeps the last few
        compiled programs, so timing the same text again does not recompile it. ``reference``: a
        program text whose outputs (XLA's default compilation, same inputs) this program's must
        match: ``extra["output_error"]``/``extra["outputs_match"]`` (:func:`output_error`).
        ``disable_fusion``/``xla_flags`` override the evaluator's compile options for this program
        (e.g. ``autotune.compiler.kernel.EMITTED_CPU_COMPILE_OPTIONS`` for an emitted configuration).

        Not cached in the store. Its fault-hook key is the sha1 hex digest of the text.
        """
        if self.budget.exhausted:
            self.budget_exhausted = True
            return Measurement.failure("budget_exhausted")
        if not self.hand_fusions and _HAND_FUSION.search(hlo_text):
            return Measurement.failure(
                f"unsupported: hand-made fusion instructions do not compile through jaxlib's "
                f"{self.platform} plugin (mhlo.fusion is not StableHLO); time configurations end to "
                f"end on the cpu backend")
        req = self._program_request(hlo_text, disable_fusion, xla_flags,
                                    inputs="verification", cache=True, reference=reference)
        return self._pool.map(_measure_request, [req])[0]

    def _program_request(self, hlo_text: str, disable_fusion: Optional[bool],
                         xla_flags: Optional[dict[str, Any]], **options: Any) -> dict:
        """The request of one whole-program timing (`measure_program`, `measure_paired`): the compile
        options given override the evaluator's; counted as one measurement; keyed by the text's sha1."""
        if disable_fusion is not None:
            options["disable_fusion"] = disable_fusion
        if xla_flags is not None:
            options["xla_flags"] = dict(xla_flags)
        self.measured += 1
        return self._request(hlo_text, hashlib.sha1(hlo_text.encode()).hexdigest(), _faults_from_env(), **options)

    def measure_paired(self, reference_text: str, hlo_text: str, seconds: float, *,
                       disable_fusion: Optional[bool] = None, xla_flags: Optional[dict[str, Any]] = None,
                       pairs: int = 4, min_block_ms: float = 1.0,
                       reference_options: Optional[dict[str, Any]] = None) -> Measurement:
        """``hlo_text``'s end-to-end time relative to ``reference_text``'s (taking the same inputs),
        timed beside it: :func:`time_paired_for` in one worker for about ``seconds`` (at most a third
        of ``timeout_s``, so that a request never times out for its length; call again for more).
        ``seconds`` of the answer: the median ratio candidate / reference; ``extra["ratios"]``: two
        per candidate block (over the reference block before it, and after it), in order;
        ``candidate_blocks``/``reference_blocks``: the blocks' seconds per execution (``pairs`` and
        ``pairs + 1`` per round, round after round); ``candidate_s``/``reference_s``: the median block times. Compile
        options as :meth:`measure_program`. Outputs are not compared (time programs checked by
        :meth:`measure_program` first). ``reference_options`` (``disable_fusion``, ``xla_flags``): the
        reference's own compile options where they differ from the candidate's (XLA's own compile
        of an original program against an emitted one). Fault-hook key: the sha1 hex digest of
        ``hlo_text``."""
        if self.budget.exhausted:
            self.budget_exhausted = True
            return Measurement.failure("budget_exhausted")
        if not self.hand_fusions and (_HAND_FUSION.search(hlo_text) or _HAND_FUSION.search(reference_text)):
            return Measurement.failure(f"unsupported: hand-made fusion instructions do not compile through "
                                       f"jaxlib's {self.platform} plugin")
        extra = {} if reference_options is None else {"reference_options": dict(reference_options)}
        req = self._program_request(hlo_text, disable_fusion, xla_flags, paired_with=reference_text, pairs=pairs,
                                    min_block_ms=min_block_ms, **extra,
                                    seconds=max(0.0, min(float(seconds), self.timeout_s / 3)))
        return self._pool.map(_paired_request, [req])[0]

    def measure_in_program(self, space: Any, cfg: Any, kernels: Optional[Sequence[Any]] = None, *,
                           runs: Optional[int] = None, reference: Optional[str] = None) -> InProgramTiming:
        """A fusion configuration's kernels timed inside the program: the configuration is emitted
        (``emit_fused_text``), compiled once with ``EMITTED_CPU_COMPILE_OPTIONS`` (as `measure_program`
        compiles it), timed end to end (unprofiled) and run ``runs`` times (default: the evaluator's, 20)
        under jaxlib's profiler, interleaved (:func:`profile_compiled`); each thunk is mapped back to the
        kernel it runs (:func:`attribute_thunks`).

        ``kernels``: the configuration's kernels to report (default: all, ``space.kernels(cfg)``). A
        failure (emission, compile, runtime, budget) fails the end-to-end measurement and every kernel
        with its status. Not cached in the store; CPU backend only (hand-made fusions)."""
        from autotune.compiler.kernel import EMITTED_CPU_COMPILE_OPTIONS, emit_fused_text
        kernels = list(space.kernels(cfg) if kernels is None else kernels)

        def failed(status: str, extra: Optional[dict] = None) -> InProgramTiming:
            m = Measurement.failure(status)
            m.extra.update(extra or {})
            return InProgramTiming(m, [Measurement.failure(status) for _ in kernels])

        if self.budget.exhausted:
            self.budget_exhausted = True
            return failed("budget_exhausted")
        if not self.hand_fusions:
            return failed(f"unsupported: in-program kernel timing needs hand-made fusions, which jaxlib's "
                          f"{self.platform} plugin does not compile; use the cpu backend")
        try:
            text = strip_metadata(emit_fused_text(space, cfg))
        except Exception as exc:
            return failed(f"emit_error: {type(exc).__name__}: {_first_line(exc)}")
        flags = dict(EMITTED_CPU_COMPILE_OPTIONS["xla_flags"])
        flags.update(self.xla_flags)
        self.measured += 1
        req = self._request(text, hashlib.sha1(text.encode()).hexdigest(), _faults_from_env(),
                            inputs="verification", reference=reference,
                            disable_fusion=EMITTED_CPU_COMPILE_OPTIONS["disable_fusion"], xla_flags=flags,
                            profile_runs=int(runs or getattr(self, "runs", 20)))
        m = self._pool.map(_measure_request, [req])[0]
        if not m.ok:
            return failed(m.status, m.extra)
        per_kernel, unattributed = attribute_thunks(kernels, m.extra["thunks"])
        return InProgramTiming(m, per_kernel, unattributed)

    def close(self) -> None:
        """Stop the worker processes (a later measurement starts new ones)."""
        self._pool.close()

    def __enter__(self) -> "XlaEvaluator":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


# --------------------------------------------------------------------------------------------
# 4. in-program kernel times: a configuration's kernels timed inside the compiled program
# --------------------------------------------------------------------------------------------

# Kernels made only of these become layout bitcasts in XLA:CPU (no thunk, no time) when layout
# assignment can choose the layouts around them.
_LAYOUT_OPCODES = frozenset({"reshape", "bitcast", "transpose", "copy"})


@dataclass
class InProgramTiming:
    """A fusion configuration measured in place (:meth:`XlaEvaluator.measure_in_program`).

    ``end_to_end``: the emitted program's time per execution (median of the repeats of
    :func:`time_compiled`, unprofiled), its ``extra`` as an XLA measurement's plus ``thunks``.
    ``kernels``: one Measurement per kernel asked for, its in-program seconds per execution (median
    over the profiled executions of the time of its thunks in each, each with the idle time before
    it charged to it, divided by how often they ran per execution: :func:`attribute_thunks`);
    ``extra["thunks"]`` names them, ``extra["count"]`` says how often, ``extra["thunk_seconds"]`` and
    ``extra["gap_seconds"]`` split the time. A kernel no thunk ran for costs 0 s with
    ``extra["no_thunk"]`` saying why. ``unattributed``: thunks of no kernel (copies XLA inserted),
    seconds per program execution.
    """

    end_to_end: Measurement
    kernels: list[Measurement]
    unattributed: dict[str, float] = field(default_factory=dict)

    @property
    def kernel_sum(self) -> float:
        """Sum of the in-program kernel times weighted by how often each runs (nan if one failed)."""
        if not all(m.ok for m in self.kernels):
            return math.nan
        return float(sum(m.seconds * m.extra.get("count", 1) for m in self.kernels))


# Opcodes whose work XLA may move under another instruction's name (it folds transpose(dot(a, b))
# into dot(b, a) named after the transpose).
_MOVABLE_WORK_OPCODES = frozenset({"dot", "convolution"})


def _thunk_series(t: dict, charge_gaps: bool) -> np.ndarray:
    """A thunk's time in each profiled execution: its self time, plus the idle time before it when
    `charge_gaps` (a control thunk then costs 0: its overhead is in its body's gaps)."""
    own = np.asarray(t["seconds"], np.float64)
    if not charge_gaps:
        return own
    if t.get("control"):
        return np.zeros_like(own)
    gaps = np.asarray(t.get("gap_seconds") or [], np.float64)
    return own + gaps if gaps.shape == own.shape else own


def _folded_into(kernels: Sequence[Any], i: int, t: dict, taken: Any) -> Optional[int]:
    """The kernel whose dot/convolution XLA folded into kernel ``i``'s thunk ``t`` (named after
    ``i``'s root, which computes neither), or None: among the kernels without a thunk that compute
    what ``t`` computes and have its result size, the one producer of kernel ``i``, else the only one."""
    work = set(t.get("computes") or [t.get("opcode")]) & _MOVABLE_WORK_OPCODES
    if not work or set(kernels[i].opcodes) & _MOVABLE_WORK_OPCODES:
        return None
    cands = [j for j, k in enumerate(kernels) if j not in taken and work & set(k.opcodes)
             and k.root_instruction.shape.elements == t.get("elements")]
    inputs = set(getattr(kernels[i], "inputs", ()) or ())
    feeding = [j for j in cands if getattr(kernels[j], "comp", None) == getattr(kernels[i], "comp", None)
               and getattr(kernels[j], "root", None) in inputs]
    if len(feeding) == 1:
        return feeding[0]
    return cands[0] if len(cands) == 1 else None


def attribute_thunks(kernels: Sequence[Any], thunks: dict[str, dict], *,
                     charge_gaps: bool = True) -> tuple[list[Measurement], dict[str, float]]:
    """Each kernel's in-program time from a profiled program's thunks (``profile_answer``'s
    ``thunks``), and the thunks that belong to no kernel.

    A thunk belongs to the kernel whose root instruction it was made from (its ``origin``: the emitted
    program names each fusion after its kernel's root, or ``<root>.sunk.<n>`` where the emission moved a
    reshape past it: ``emitted_kernel_root``; XLA keeps that name as op_name), except a dot or
    convolution named after a kernel computing neither: XLA folded ``transpose(dot)`` into a dot
    named after the transpose, and the thunk belongs to the dot's kernel (:func:`_folded_into`,
    ``extra["matched_by"]``; the transpose kernel then has no thunk). A thunk
    without op_name (XLA rewrote the instruction, e.g. a batched dot) belongs to the one kernel
    without a thunk whose root has its opcode and result size (and, among several, runs as often per
    execution: ``multiplicity``), when exactly one does (``extra["matched_by"]``); the rest are ``unattributed``.

    With `charge_gaps` (the default) a thunk costs its self time plus the idle time before it in the
    same execution (``gap_seconds``, :func:`thunk_gaps`: the executor dispatching it), so the kernel
    times and the unattributed ones add up to the executor's run; each kernel's ``extra`` keeps both
    parts (``thunk_seconds``, ``gap_seconds``, medians per run of it). Kernels need
    ``root_instruction`` (name, opcode, shape) and ``opcodes``. See :class:`InProgramTiming`."""
    from autotune.compiler.kernel import emitted_kernel_root
    by_root: dict[str, int] = {}
    for i, k in enumerate(kernels):
        by_root.setdefault(k.root_instruction.name, i)
    mine: dict[int, list[str]] = {}
    orphans: list[str] = []
    for name, t in thunks.items():
        i = by_root.get(emitted_kernel_root(t.get("origin") or ""))
        if i is None:
            orphans.append(name)
        else:
            mine.setdefault(i, []).append(name)
    matched: dict[int, str] = {}
    folded: dict[int, str] = {}  # kernel -> why its thunk went to another kernel
    for i in sorted(mine):
        for name in sorted(mine[i]):
            j = _folded_into(kernels, i, thunks[name], mine.keys() | matched.keys())
            if j is not None:
                mine[i].remove(name)
                mine[j] = [name]
                matched[j] = "XLA folded it into the thunk named after the kernel it feeds (transpose(dot) -> dot)"
                folded[i] = (f"XLA folded it into the {'/'.join(sorted(set(kernels[j].opcodes) & _MOVABLE_WORK_OPCODES))}"
                             f" of kernel {kernels[j].root_instruction.name}, whose thunk is named after it")
        if not mine[i]:
            del mine[i]
    # A thunk XLA made without op_name (e.g. a dot it rewrote) belongs to the one kernel without a
    # thunk whose root has its opcode and result size, if exactly one does.
    for name in sorted(orphans):
        t = thunks[name]
        if t.get("origin") is not None or t.get("opcode") in (None, "fusion", "copy") or not t.get("elements"):
            continue
        cands = [i for i, k in enumerate(kernels) if i not in mine and i not in matched
                 and k.root_instruction.opcode == t["opcode"] and k.root_instruction.shape.elements == t["elements"]]
        if len(cands) > 1:  # tell them apart by how often they run (a while body's kernel: trip count)
            cands = [i for i in cands if getattr(kernels[i], "multiplicity", None) == t["count"]]
        if len(cands) == 1:
            mine[cands[0]] = [name]
            matched[cands[0]] = "opcode and result size (the thunk has no op_name)"
    done = {n for names in mine.values() for n in names}
    unattributed = {n: float(np.median(_thunk_series(thunks[n], charge_gaps))) if thunks[n]["seconds"] else 0.0
                    for n in orphans if n not in done}
    out: list[Measurement] = []
    for i, k in enumerate(kernels):
        names = sorted(mine.get(i, []))
        if not names:
            ops = set(k.opcodes)
            why = folded.get(i) or ("a layout bitcast (no data moved)" if ops <= _LAYOUT_OPCODES else
                                    f"elided or folded by XLA ({', '.join(sorted(ops))})")
            out.append(Measurement(0.0, extra={"no_thunk": f"no thunk ran for it: {why}", "count": 1,
                                               "thunks": []}))
            continue
        per_run = np.sum([_thunk_series(thunks[n], charge_gaps) for n in names], axis=0)
        own = np.sum([np.asarray(thunks[n]["seconds"], np.float64) for n in names], axis=0)
        count = max(1, max(int(thunks[n]["count"]) for n in names))
        extra = {"thunks": names, "count": count, "repeats": [float(x) / count for x in per_run],
                 "thunk_seconds": float(np.median(own)) / count,
                 "gap_seconds": float(np.median(per_run - own)) / count if charge_gaps else 0.0}
        if i in matched:
            extra["matched_by"] = matched[i]
        out.append(Measurement(float(np.median(per_run)) / count, extra=extra))
    return out, unattributed


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

    def __init__(self, *args: Any, runs: int = 20, **kwargs: Any):
        # One request compiles a whole program (efficientnet_small_train: 110 s at load average 10 on
        # 2 cores) and runs it `runs` times under the profiler: the kernel evaluator's 60 s is too short.
        kwargs.setdefault("timeout_s", IN_PROGRAM_TIMEOUT_S)
        super().__init__(*args, **kwargs)
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
