"""Hardware target specifications: TPU v2-like and v3-like, the host CPU (measured), NVIDIA H100.

The analytical cost model, the simulator, tile legality and fusion legality read their constants
from a `TargetSpec`. Throughput fields describe the unit that one kernel occupies: one TensorCore
on a TPU (XLA compiles a program per core), the whole device on a GPU, the whole host on a CPU.

Published numbers are cited next to each constant. Where no number is published (vector-unit and
transcendental throughput, fixed per-kernel and per-DMA overheads on TPUs) the value is an
estimate, marked as such; the simulator calibrates its own constants against the TPU v3
measurements in data/tpugraphs/ and treats these as starting points.

The host CPU is not looked up but measured: small numpy micro-benchmarks (a float32 matmul for
peak flops, a large array copy for memory bandwidth, in-cache elementwise and exp loops for the
vector and transcendental rates) run once per machine and are cached as JSON under
``$XDG_CACHE_HOME/autotune/`` (``~/.cache/autotune``), keyed by hostname and CPU model. Set
``AUTOTUNE_NO_MICROBENCH=1`` to skip them and use conservative defaults (tests, CI).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import platform
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from autotune.plugins import Registry, UnknownPluginError

__all__ = [
    "TargetSpec", "UnknownTargetError", "TARGETS", "get_target", "list_targets", "TPU_V2", "TPU_V3", "H100",
    "host_cpu_spec", "measure_host", "host_cache_path",
]

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30


class UnknownTargetError(UnknownPluginError):
    """A target name that `get_target` does not know."""


@dataclass(frozen=True)
class TargetSpec:
    """Constants of one hardware target (per unit that a single kernel runs on; see module doc).

    Rates are per second; sizes in bytes. `peak_flops` is a float32 matrix multiply at XLA's
    DEFAULT precision (one bf16 MXU pass on TPU, TF32 tensor cores on H100); `peak_flops_bf16` is
    the bf16 matrix rate; `vector_flops` is elementwise float32 work outside the matrix units.
    """

    name: str
    kind: str  # "tpu" | "cpu" | "gpu"
    clock_hz: float
    num_cores: int  # TensorCores per chip (TPU), SMs (GPU), logical CPUs (host)
    mxu_count: int  # matrix units available to one kernel (0: none)
    mxu_width: int  # systolic array side (128 on TPU); operands are padded to it
    peak_flops: float
    peak_flops_bf16: float
    vector_flops: float
    transcendental_per_s: float
    hbm_bytes_per_s: float  # off-chip memory bandwidth (HBM on TPU/GPU, DRAM on CPU)
    hbm_bytes: int  # off-chip memory capacity available to the kernel's unit
    scratchpad_bytes: int  # fast memory a tile must fit in (TPU VMEM, GPU shared memory/SM, CPU L2)
    vector_shape: tuple[int, int]  # (sublanes, lanes): minor-two-dims tile granularity
    kernel_launch_s: float  # fixed cost per kernel execution
    dma_setup_s: float  # fixed cost per DMA (tile transfer)
    description: str = ""
    measured: bool = False  # True when the numbers come from micro-benchmarks on this machine
    sources: tuple[str, ...] = field(default=(), compare=False)
    # Off-chip links, bytes per second one unit sends (0: not given, a copy through memory at
    # hbm_bytes_per_s): collectives cross the inter-chip interconnect, infeed/outfeed the host link.
    interconnect_bytes_per_s: float = 0.0
    host_link_bytes_per_s: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in ("tpu", "cpu", "gpu"):
            raise ValueError(f"TargetSpec.kind must be tpu, cpu or gpu, not {self.kind!r}")
        for f in ("interconnect_bytes_per_s", "host_link_bytes_per_s"):
            if not getattr(self, f) > 0:
                object.__setattr__(self, f, self.hbm_bytes_per_s)
        for f in ("clock_hz", "peak_flops", "peak_flops_bf16", "vector_flops", "transcendental_per_s",
                  "hbm_bytes_per_s"):
            if not getattr(self, f) > 0:
                raise ValueError(f"TargetSpec.{f} must be > 0")

    @property
    def ridge_flops_per_byte(self) -> float:
        """Arithmetic intensity above which a matmul kernel is compute bound (roofline ridge)."""
        return self.peak_flops / self.hbm_bytes_per_s

    def replace(self, **changes: Any) -> "TargetSpec":
        """A copy with some fields changed (e.g. for calibration or what-if studies)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        """JSON-friendly dict of all fields."""
        d = dataclasses.asdict(self)
        d["vector_shape"] = list(self.vector_shape)
        d["sources"] = list(self.sources)
        return d


# ------------------------------------------------------------------------------------------------
# TPU v2 / v3 (per TensorCore)
#
# Sources:
#  [JYK20] N. P. Jouppi, D. H. Yoon, G. Kurian, S. Li, N. Patil, J. Laudon, C. Young, D. Patterson,
#          "A Domain-Specific Supercomputer for Training Deep Neural Networks", CACM 63(7), 2020:
#          TPUv2 chip = 2 TensorCores, 1 MXU (128x128) per core, 700 MHz, 46 TFLOPS bf16, 16 GiB HBM,
#          700 GB/s; TPUv3 = 2 cores, 2 MXUs per core, 940 MHz, 123 TFLOPS bf16, 32 GiB HBM,
#          900 GB/s; 32 MiB on-chip memory per chip; vector unit of 8 sublanes x 128 lanes.
#  [GCTPU] Google Cloud TPU documentation, "TPU v2" / "TPU v3" and "System architecture"
#          (cloud.google.com/tpu/docs/v3, .../system-architecture-tpu-vm): v3 chip 2 TensorCores,
#          2 MXUs each, 123 TFLOPS bf16 per chip, HBM2 32 GiB at 900 GBps; an MXU is 128 x 128
#          multiply-accumulators, 16K MACs per cycle, bf16 inputs with fp32 accumulation.
#          (The v2 page gives 45 TFLOPS per chip, 16 GiB HBM; its bandwidth figure, 600 GBps, is
#          lower than the paper's 700 GB/s. We use the paper.)
# Per-core rates below are chip rates divided by the 2 TensorCores: each core has its own HBM
# stack and runs its own XLA program, so one kernel sees one core.
# Check: v2 1 MXU x 128 x 128 MACs x 2 flops x 700 MHz = 22.9 TFLOPS/core (x2 = 45.9 per chip);
#        v3 2 MXUs x 128 x 128 x 2 x 940 MHz = 61.6 TFLOPS/core (x2 = 123 per chip).
# ------------------------------------------------------------------------------------------------
def _tpu(name: str, clock_hz: float, mxus: int, hbm_chip_bytes_per_s: float, hbm_chip_bytes: int,
         ici_link_bits_per_s: float, description: str) -> TargetSpec:
    width = 128
    matrix = mxus * width * width * 2 * clock_hz
    # Vector unit: 8 sublanes x 128 lanes [JYK20]. Ops per lane per cycle are not published; we
    # assume 2 f32 ALU ops/lane/cycle (estimate). Transcendentals (exp, log, tanh, ...) go through a
    # narrower unit: estimate a quarter of the lane rate.
    lanes = 8 * 128
    return TargetSpec(
        name=name, kind="tpu", clock_hz=clock_hz, num_cores=2, mxu_count=mxus, mxu_width=width,
        # f32 dots at XLA's DEFAULT precision take one bf16 pass on the MXU, so the same rate as bf16
        # (Precision.HIGHEST takes 6 passes).
        peak_flops=matrix, peak_flops_bf16=matrix,
        vector_flops=lanes * 2 * clock_hz,  # estimate (see above)
        transcendental_per_s=lanes * clock_hz / 4,  # estimate
        hbm_bytes_per_s=hbm_chip_bytes_per_s / 2, hbm_bytes=hbm_chip_bytes // 2,
        # 32 MiB on-chip memory per chip [JYK20] -> 16 MiB vector memory (VMEM) per core.
        scratchpad_bytes=16 * MiB,
        vector_shape=(8, 128),  # vregs are 8 sublanes x 128 lanes of 32 bits [JYK20]
        kernel_launch_s=2e-6,  # estimate: per-kernel sync and pipeline fill; calibrated by simulator
        dma_setup_s=5e-7,  # estimate: fixed cost per HBM<->VMEM DMA; calibrated by simulator
        description=description,
        sources=("Jouppi et al., A Domain-Specific Supercomputer for Training Deep Neural Networks, "
                 "CACM 63(7), 2020", "Google Cloud TPU docs: TPU v2, TPU v3, System architecture"),
        # 4 ICI links per chip [JYK20], shared by its 2 cores: 4 x link rate / 8 bits / 2.
        interconnect_bytes_per_s=4 * ici_link_bits_per_s / 8 / 2,
        # PCIe Gen3 x16 to the host, ~15.75 GB/s per chip, shared by 2 cores (estimate).
        host_link_bytes_per_s=15.75e9 / 2,
    )


# ICI link rates [JYK20]: 496 Gbit/s (v2) and 656 Gbit/s (v3) per link.
TPU_V2 = _tpu("tpu-v2", 700e6, 1, 700e9, 16 * GiB, 496e9,
              "TPU v2-like TensorCore: 1 MXU 128x128 at 700 MHz, 8 GiB HBM at 350 GB/s, 16 MiB VMEM")
TPU_V3 = _tpu("tpu-v3", 940e6, 2, 900e9, 32 * GiB, 656e9,
              "TPU v3-like TensorCore: 2 MXUs 128x128 at 940 MHz, 16 GiB HBM at 450 GB/s, 16 MiB VMEM")

# ------------------------------------------------------------------------------------------------
# NVIDIA H100 SXM5 80 GB (whole device)
#
# Sources: NVIDIA H100 Tensor Core GPU datasheet (2023) and "NVIDIA H100 Tensor Core GPU
# Architecture" whitepaper (2022): 132 SMs, boost clock 1.98 GHz, FP32 67 TFLOPS, TF32 tensor
# 494.7 TFLOPS dense (989 with sparsity), BF16 tensor 989.4 TFLOPS dense (1979 with sparsity),
# 80 GB HBM3 at 3.35 TB/s, up to 228 KB shared memory per SM, 4 tensor cores and 16 SFUs per SM
# (4 per SM sub-partition).
# Check: 132 SMs x 128 FP32 lanes x 2 flops x 1.98 GHz = 66.9 TFLOPS.
# ------------------------------------------------------------------------------------------------
H100 = TargetSpec(
    name="h100", kind="gpu", clock_hz=1.98e9, num_cores=132, mxu_count=132 * 4, mxu_width=16,
    peak_flops=494.7e12,  # f32 dots at XLA's default precision use TF32 tensor cores on Hopper
    peak_flops_bf16=989.4e12,
    vector_flops=66.9e12,
    transcendental_per_s=132 * 16 * 1.98e9,  # 16 SFU results per SM per clock
    hbm_bytes_per_s=3.35e12, hbm_bytes=80 * 10**9,
    scratchpad_bytes=228 * KiB,  # shared memory per SM (227 KB usable by one thread block)
    vector_shape=(1, 32),  # a warp of 32 lanes
    kernel_launch_s=3e-6,  # typical CUDA launch overhead (estimate); XLA uses CUDA graphs where it can
    dma_setup_s=5e-7,  # estimate: TMA/async-copy issue cost
    description="NVIDIA H100 SXM5 80 GB: 132 SMs at 1.98 GHz, 3.35 TB/s HBM3",
    sources=("NVIDIA H100 Tensor Core GPU datasheet", "NVIDIA H100 Tensor Core GPU Architecture whitepaper"),
    interconnect_bytes_per_s=450e9,  # NVLink 4: 900 GB/s bidirectional (datasheet), one direction
    host_link_bytes_per_s=64e9,  # PCIe Gen5 x16: 128 GB/s bidirectional (datasheet), one direction
)

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


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "autotune"


def host_cache_path() -> Path:
    """Where this machine's micro-benchmark results are cached (keyed by hostname and CPU model)."""
    key = f"{socket.gethostname()}|{_cpu_model()}|{os.cpu_count()}"
    digest = hashlib.sha1(key.encode()).hexdigest()[:16]
    return _cache_dir() / f"host-cpu-{digest}.json"


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
_ALIASES = {
    "tpu": "tpu-v3", "tpuv3": "tpu-v3", "tpu_v3": "tpu-v3", "v3": "tpu-v3",
    "tpuv2": "tpu-v2", "tpu_v2": "tpu-v2", "v2": "tpu-v2",
    "host": "cpu", "cpu": "cpu",
    "gpu": "h100",  # the GPU spec shipped here; the xla evaluator's default target on a CUDA backend
    "nvidia-h100": "h100", "h100-sxm": "h100", "h100-sxm5": "h100",
}


def _as_target(obj: Any, spec: str) -> TargetSpec:
    """A registered target is a TargetSpec or a zero-argument factory of one (e.g. the measured host)."""
    target = obj() if callable(obj) else obj
    if not isinstance(target, TargetSpec):
        raise UnknownTargetError(f"{spec!r} is not a target (got {type(target).__name__})")
    return target


# Targets by name (autotune/plugins.py; entry-point group autotune.targets).
TARGETS = Registry("target", "autotune.targets", builtins={
    "tpu-v2": "autotune.compiler.targets:TPU_V2", "tpu-v3": "autotune.compiler.targets:TPU_V3",
    "cpu": "autotune.compiler.targets:host_cpu_spec", "h100": "autotune.compiler.targets:H100",
}, aliases={k: v for k, v in _ALIASES.items() if k != v}, check=_as_target, error=UnknownTargetError)


def list_targets() -> list[str]:
    """Canonical target names (aliases: tpu -> tpu-v3, host -> cpu)."""
    return TARGETS.names()


def get_target(name: "str | TargetSpec") -> TargetSpec:
    """The TargetSpec for a name ("tpu", "tpu-v2", "tpu-v3", "cpu", "h100"); a TargetSpec passes through."""
    if isinstance(name, TargetSpec):
        return name
    return TARGETS.get(str(name))
