"""The host CPU's hardware spec, measured rather than looked up.

Small numpy micro-benchmarks (a float32 matmul for peak flops, a large array copy for memory
bandwidth, in-cache elementwise and exp loops for the vector and transcendental rates) run once per
machine and are cached as JSON under ``$XDG_CACHE_HOME/autotune/`` (``~/.cache/autotune``), keyed by
hostname and CPU model. Set ``AUTOTUNE_NO_MICROBENCH=1`` to skip them and use conservative defaults
(tests, CI).
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import socket
import threading
import time
from pathlib import Path
from typing import Optional

from autotune.compiler.targets.base import GiB, KiB, MiB, TargetSpec

__all__ = ["host_cpu_spec", "measure_host", "host_cache_dir", "host_cache_path", "host_machine"]

# ------------------------------------------------------------------------------------------------
# Host CPU (measured)
# ------------------------------------------------------------------------------------------------
_HOST_LOCK = threading.Lock()
_HOST_SPEC: Optional[TargetSpec] = None
_CACHE_FORMAT = 1

# Conservative defaults (AUTOTUNE_NO_MICROBENCH=1): well below any recent x86/ARM server core.
_DEFAULT_FLOPS_PER_CORE = 1e10
_DEFAULT_BYTES_PER_S = 5e9


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith(("model name", "hardware", "cpu model")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def host_machine() -> str:
    """This machine as measurements are keyed by it: the CPU model and the core count."""
    return f"{_cpu_model()} ({os.cpu_count() or 1} cores)"


def _cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def _l2_bytes() -> int:
    """Per-core L2 size from sysfs (the CPU's 'scratchpad' for tiling), else 1 MiB."""
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    try:
        for d in sorted(base.glob("index*")):
            if (d / "level").read_text().strip() == "2":
                text = (d / "size").read_text().strip().upper()
                mult = {"K": KiB, "M": MiB, "G": GiB}.get(text[-1:], 1)
                return int(text.rstrip("KMG")) * mult
    except (OSError, ValueError):
        pass
    return 1 * MiB


def _cpu_clock_hz() -> float:
    try:
        text = Path("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq").read_text()
        return float(text) * 1e3
    except (OSError, ValueError):
        pass
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("cpu mhz"):
                    return float(line.split(":", 1)[1]) * 1e6
    except (OSError, ValueError):
        pass
    return 2.0e9


def host_cache_dir() -> Path:
    """Where facts measured once per machine are cached: ``$XDG_CACHE_HOME/autotune`` (``~/.cache/autotune``)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "autotune"


def host_cache_path() -> Path:
    """Where this machine's micro-benchmark results are cached (keyed by hostname and CPU model)."""
    key = f"{socket.gethostname()}|{_cpu_model()}|{os.cpu_count()}"
    digest = hashlib.sha1(key.encode()).hexdigest()[:16]
    return host_cache_dir() / f"host-cpu-{digest}.json"


def _best_time(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return max(best, 1e-9)


def measure_host() -> dict:
    """Run the host micro-benchmarks (about a second) and return rates per second."""
    import numpy as np

    rng = np.random.default_rng(0)
    # Peak flops: float32 matmul through numpy's BLAS (all cores), best of several runs.
    n = 1024
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    c = np.empty((n, n), dtype=np.float32)
    np.matmul(a, b, out=c)  # warm up threads and caches
    peak = 2.0 * n ** 3 / _best_time(lambda: np.matmul(a, b, out=c), 5)
    # Memory bandwidth: copy 64 MiB (read + write, far beyond the last-level cache).
    src = np.ones(16 * MiB, dtype=np.float32)  # 64 MiB
    dst = np.empty_like(src)
    np.copyto(dst, src)
    bandwidth = 2.0 * src.nbytes / _best_time(lambda: np.copyto(dst, src), 5)
    # Vector rate: in-cache elementwise multiply-add (one numpy thread), 2 flops per element.
    v = 64 * 1024
    x = rng.standard_normal(v, dtype=np.float32)
    y = np.empty_like(x)

    def fma() -> None:
        for _ in range(20):
            np.multiply(x, 1.0001, out=y)
            np.add(y, x, out=y)

    vector = 2.0 * 20 * v / _best_time(fma, 5)

    def exp() -> None:
        for _ in range(20):
            np.exp(x, out=y)

    transcendental = 20.0 * v / _best_time(exp, 5)
    return {"peak_flops": peak, "hbm_bytes_per_s": bandwidth, "vector_flops": vector,
            "transcendental_per_s": transcendental}


def _default_rates() -> dict:
    cores = os.cpu_count() or 1
    return {"peak_flops": _DEFAULT_FLOPS_PER_CORE * cores, "hbm_bytes_per_s": _DEFAULT_BYTES_PER_S,
            "vector_flops": _DEFAULT_FLOPS_PER_CORE / 4, "transcendental_per_s": _DEFAULT_FLOPS_PER_CORE / 40}


def _load_cached(path: Path) -> Optional[dict]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    keys = ("peak_flops", "hbm_bytes_per_s", "vector_flops", "transcendental_per_s")
    if not isinstance(data, dict) or data.get("format") != _CACHE_FORMAT:
        return None
    if data.get("hostname") != socket.gethostname() or data.get("cpu_model") != _cpu_model():
        return None
    try:
        if not all(float(data[k]) > 0 for k in keys):
            return None
    except (KeyError, TypeError, ValueError):
        return None
    return data


def _save_cached(path: Path, rates: dict) -> None:
    data = {"format": _CACHE_FORMAT, "hostname": socket.gethostname(), "cpu_model": _cpu_model(),
            "cpu_count": os.cpu_count(), "measured_at": time.time(), **rates}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
        os.replace(tmp, path)
    except OSError:
        pass  # an unwritable cache only costs a re-measurement next time


def host_cpu_spec(refresh: bool = False) -> TargetSpec:
    """The host CPU's spec: micro-benchmarked at first use, then cached (AUTOTUNE_NO_MICROBENCH=1: defaults)."""
    global _HOST_SPEC
    with _HOST_LOCK:
        no_bench = os.environ.get("AUTOTUNE_NO_MICROBENCH", "").strip().lower() not in ("", "0", "false", "no")
        if _HOST_SPEC is not None and not refresh and _HOST_SPEC.measured != no_bench:
            return _HOST_SPEC
        if no_bench:
            rates, measured = _default_rates(), False
        else:
            path = host_cache_path()
            cached = None if refresh else _load_cached(path)
            if cached is None:
                cached = measure_host()
                _save_cached(path, cached)
            rates, measured = cached, True
        flags = _cpu_flags()
        lanes = 16 if "avx512f" in flags else 8 if ("avx" in flags or "avx2" in flags) else 4
        cores = os.cpu_count() or 1
        spec = TargetSpec(
            name="cpu", kind="cpu", clock_hz=_cpu_clock_hz(), num_cores=cores, mxu_count=0, mxu_width=0,
            peak_flops=float(rates["peak_flops"]),
            peak_flops_bf16=float(rates["peak_flops"]),  # numpy/XLA:CPU gain nothing from bf16 here
            vector_flops=float(rates["vector_flops"]),
            transcendental_per_s=float(rates["transcendental_per_s"]),
            hbm_bytes_per_s=float(rates["hbm_bytes_per_s"]),
            hbm_bytes=_mem_bytes(),
            scratchpad_bytes=_l2_bytes(),
            vector_shape=(1, lanes),  # f32 lanes of one SIMD register (AVX-512: 16, AVX: 8, else 4)
            kernel_launch_s=2e-6,  # estimate: XLA:CPU per-thunk dispatch overhead
            dma_setup_s=0.0,  # no explicit DMA: caches move data
            description=f"host CPU: {_cpu_model()} x{cores}" + ("" if measured else " (default rates)"),
            measured=measured,
            sources=("numpy micro-benchmarks on this machine" if measured
                     else "conservative defaults (AUTOTUNE_NO_MICROBENCH)",),
        )
        _HOST_SPEC = spec
        return spec


def _mem_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 8 * GiB


# ------------------------------------------------------------------------------------------------
