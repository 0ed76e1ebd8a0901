"""The private-API shim: the only place that touches jaxlib internals (and the errors it raises).

:func:`_api` resolves, once per process, the path that turns raw HLO text into a loaded executable::

    xla_client.hlo.hlo_module_from_text(text)          # jaxlib._hlo.HloModule
      .as_serialized_hlo_module_proto()                # HloModuleProto bytes
    _jax.mlir.hlo_to_stablehlo(proto)                  # StableHLO bytecode
    client.compile_and_load(bytecode, DeviceList, CompileOptions)   # LoadedExecutable

plus ``_jax.hlo_module_cost_analysis(client, HloModule)`` and
``xla_client.XlaComputation(proto).program_shape()``. If one is missing, :class:`XlaApiError`
names the installed jaxlib version and the missing API. Verified with jaxlib 0.10.2. jax is
imported on first use only, so importing this module is cheap and works without jax.
"""
from __future__ import annotations

import importlib.util
import os
from typing import Any, Optional


class XlaApiError(RuntimeError):
    """The installed jaxlib lacks a private API this module relies on."""


class XlaStartError(XlaApiError):
    """The measuring worker could not start jax (an error, a crash or no answer in time).

    A kind of XlaApiError: the installed jax/jaxlib cannot be used here (one clear line in the CLI)."""


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
                    f"jaxlib {ver}: private API {what} not found; hardware/xla/_jaxlib.py was written "
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
                              f"stop_and_get_profile_data not found; hardware/xla/_jaxlib.py was written against "
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


def _first_line(exc: BaseException) -> str:
    """The first non-blank line of an error message (jaxlib's run to many lines), at most 500 characters:
    what a failed measurement's status says."""
    msg = str(exc).strip()
    for line in msg.splitlines():
        if line.strip():
            return line.strip()[:500]
    return type(exc).__name__
