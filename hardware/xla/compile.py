"""HLO text in, a compiled executable out: parse, read parameter shapes and donations, compile
on the default backend (:class:`CompiledHlo`), XLA's optimized module and its cost analysis."""
from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

import numpy as np

from hardware.xla._jaxlib import _api


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
        from autotune.compiler.emission import XLA_FUSION_PASSES
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
