"""TPU-like kernel simulator: the embedded default "hardware" (name "sim").

Every equation and constant is written out, with its source, in docs/simulator.md. In short, for a
kernel with tile t (per logical dim of its tiled shape; autotune.compiler.tiles) on a TPU v3-like TensorCore:

    steps    = n_tiles * k_steps                  (k_steps > 1 only for a split contraction)
    dma(b,r) = dma_setup + b / (hbm_bw * hbm_eff) * (1 + r0 / r)   one transfer of b bytes, runs of r bytes
    t_dma    = sum_inputs dma(in_i / k_steps, run_i) + dma(out / k_steps, run_out)   (shared HBM)
    t_mxu    = (K_pad_step / 128) * ceil(N_t / 128) * (ceil8(M_t) + mxu_fill) / (mxu_count * clock)
    t_vpu    = (vector work + producer recomputation, padded to (8,128) vregs) / vector_rate
               + transcendentals / transcendental_rate + [k_steps > 1] accumulator updates
    t_comp   = max(t_mxu, t_vpu) + (1 - vpu_mxu_overlap) * min(t_mxu, t_vpu)
    runtime  = launch + t_dma + t_comp + steps * (max(t_dma, t_comp) + step_overhead)  fits double-buffered
             = launch + steps * (t_dma + t_comp + step_overhead)       fits only single-buffered
             = +inf -> Measurement failure "tile does not fit the scratchpad"   otherwise
               (+ t_link: a collective's interconnect / an infeed's host-link transfer, once)
    measured = runtime * exp(noise * z),  z ~ N(0, 1) from a hash of (seed, kernel hash, tile)

Vector work and transcendentals are `autotune.compiler.tiles.device_work` (XLA's numbers, re-priced for the
opcodes listed in docs/simulator.md section 1b). Per-kernel static rows are cached by kernel hash
(autotune.compiler.tiles.tiling_info); the per-tile math is vectorized over all (kernel, tile) items of a call.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from typing import Any, Optional, Sequence

import numpy as np

from autotune.compiler.tiles import ROLE_LHS, TileConfig, TileRows, batch_inputs, default_tile, io_geometry, scratchpad_fit

from hardware.base import INVALID, Evaluator, Measurement
from autotune.compiler.targets import get_spec

__all__ = ["TpuSimulator", "SimConstants", "simulate", "SIMULATED_MACHINE"]


@dataclass(frozen=True)
class SimConstants:
    """Simulator constants not in the TargetSpec (docs/simulator.md gives the sources).

    Defaults marked [cal] were set with benchmarks/calibrate_tpugraphs.py against the TPU v3
    measurements in data/tpugraphs/ (leave-one-kernel-out; see docs/simulator.md)."""

    launch_s: float = 0.05e-6          # [cal] per-kernel fixed cost (sync, program start)
    step_overhead_s: float = 0.06e-6   # [cal] per pipeline step: loop, semaphores, DMA issue
    dma_setup_s: float = 0.03e-6       # per DMA descriptor (estimate, ~30 cycles at 940 MHz)
    dma_r0_bytes: float = 2048.0       # [cal] run length at which a DMA reaches half of peak bandwidth
    hbm_efficiency: float = 1.0        # [cal] sustained / peak HBM bandwidth (short runs pay via r0)
    mxu_fill_rows: float = 128.0       # systolic array fill/drain per weight block (array depth)
    vpu_mxu_overlap: float = 0.0       # 0: VPU work serializes with MXU; 1: fully overlapped
    acc_ops_per_element: float = 3.0   # VPU ops per output element and contraction step (load, add, store)
    reduce_combine_s: float = 0.1e-6   # per-output-tile combine of partial reductions (kInput)
    noise: float = 0.015               # lognormal sigma of measurement noise


DEFAULTS = SimConstants()
# The machine key of simulated measurements: the same on every host.
SIMULATED_MACHINE = "simulated (any host)"


def _splitmix64(x: np.ndarray) -> np.ndarray:
    x = (x + np.uint64(0x9E3779B97F4A7C15)) & np.uint64(0xFFFFFFFFFFFFFFFF)
    z = x
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


_HASH_SEEDS: dict = {}


def _kernel_seed(h: str) -> int:
    v = _HASH_SEEDS.get(h)
    if v is None:
        v = int.from_bytes(hashlib.blake2b(h.encode(), digest_size=8).digest(), "little")
        _HASH_SEEDS[h] = v
    return v


def noise_z(seed: int, hashes: Sequence[str], T: np.ndarray, ks: np.ndarray) -> np.ndarray:
    """Standard normal draws, deterministic in (seed, kernel hash, tile), vectorized (Box-Muller)."""
    n = len(hashes)
    if n == 0:
        return np.zeros(0)
    with np.errstate(over="ignore"):
        x = np.array([_kernel_seed(h) for h in hashes], np.uint64) ^ np.uint64(seed & 0xFFFFFFFFFFFFFFFF)
        for j in range(T.shape[1]):  # extents of 1 (incl. padding dims) are skipped: batch-independent
            mixed = _splitmix64(x ^ (T[:, j].astype(np.uint64) + np.uint64(j << 40)))
            x = np.where(T[:, j] != 1.0, mixed, x)
        x = _splitmix64(x ^ ks.astype(np.uint64))
        y = _splitmix64(x)
    u1 = ((x >> np.uint64(11)).astype(np.float64) + 0.5) / float(1 << 53)
    u2 = ((y >> np.uint64(11)).astype(np.float64) + 0.5) / float(1 << 53)
    return np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)


def simulate_batch(b: TileRows, T: np.ndarray, ks: np.ndarray, kp: np.ndarray, spec, c: SimConstants) -> np.ndarray:
    """Noise-free runtimes (seconds; +inf where the tile cannot fit) for stacked rows."""
    sub, lanes = spec.vector_shape
    g = io_geometry(b, T, sub, lanes)
    fit = scratchpad_fit(g, b.kind, spec.scratchpad_bytes, ks)
    rs = fit.steps
    ks = ks * rs  # streaming inputs over reduced/contracted dims: rs more steps, each a share of K
    kp = np.where(rs > 1, np.maximum(kp / rs, 1.0), kp)
    bw = spec.hbm_bytes_per_s * c.hbm_efficiency
    # ---- DMA: per transfer setup + bytes / bandwidth, inefficient for short contiguous runs
    in_step = g["in_tile"] * np.where(b.in_role == ROLE_LHS, b.lhs_mult[:, None], 1.0) / ks[:, None]
    in_run = np.minimum(g["in_run"], np.maximum(in_step, 1.0))
    has_in = in_step > 0
    t_in = np.where(has_in, c.dma_setup_s + in_step / bw * (1.0 + c.dma_r0_bytes / in_run), 0.0).sum(axis=1)
    out_step = g["out_tile"] / ks
    out_run = np.maximum(np.minimum(g["out_run"], out_step), 1.0)
    t_out = c.dma_setup_s / ks + out_step / bw * (1.0 + c.dma_r0_bytes / out_run)
    t_dma = t_in + t_out  # inputs and outputs share the HBM bandwidth
    # ---- compute: systolic matrix unit with padding and fill, vector and transcendental units
    is_mxu = b.is_mxu > 0
    Tm, Tn = g["Tm"], g["Tn"]
    blocks = (kp / 128.0) * np.ceil(Tn / 128.0)
    rows = np.ceil(Tm / sub) * sub
    t_mxu = np.where(is_mxu, blocks * (rows + c.mxu_fill_rows) / (max(spec.mxu_count, 1) * spec.clock_hz), 0.0)
    generic = is_mxu & ~b.mmask.any(axis=1) & ~b.nmask.any(axis=1)
    t_mxu = np.where(generic, g["mxu_tile"] / spec.peak_flops, t_mxu)
    t_vpu = (g["vec_tile"] / spec.vector_flops + g["trans_tile"] / spec.transcendental_per_s) / ks
    # split contraction: the f32 partial sums of the output tile are accumulated in VMEM by the VPU
    # (load, add, store per element and extra step)
    acc = np.ceil(Tm / sub) * sub * np.ceil(Tn / lanes) * lanes * c.acc_ops_per_element / spec.vector_flops
    t_vpu = t_vpu + np.where(ks > 1, acc, 0.0)
    t_comp = np.maximum(t_mxu, t_vpu) + (1.0 - c.vpu_mxu_overlap) * np.minimum(t_mxu, t_vpu)
    # partial reductions: combine once per output tile
    t_comp = t_comp + np.where(b.kind == 1, c.reduce_combine_s * (b.out_alpha < 1.0), 0.0) / ks
    steps = g["n"] * ks
    ovh = c.step_overhead_s
    piped = c.launch_s + t_dma + t_comp + steps * (np.maximum(t_dma, t_comp) + ovh)
    serial = c.launch_s + steps * (t_dma + t_comp + ovh)
    t = np.where(fit.double_buffered, piped, np.where(fit.fits, serial, np.inf))
    t = t + b.link_s  # collectives and infeed/outfeed: their off-chip transfer, once per kernel
    return np.where(b.trivial > 0, 0.0, t)  # bitcast-only kernels move no data


class TpuSimulator(Evaluator):
    """TPU v3-like (default) or v2-like kernel simulator; an Evaluator and a CostModel-like `simulate`."""

    name = "sim"
    # 2: hero rows of kernels whose tiled shape is not the dot output (tiles.m_scale)
    # 3: device work of every opcode (tiles.device_work): sort, fft, scan, batch norm, collectives,
    #    infeed/outfeed, ragged-dot/scaled-dot on the MXU; async pairs priced as their operation
    # 4: reductions and contractions whose inputs exceed the scratchpad stream them over the
    #    reduced/contracted dims
    #    (tiles.scratchpad_fit) instead of failing to fit
    version = "4"

    def __init__(self, target: str = "tpu", noise: Optional[float] = None, seed: int = 0,
                 budget: Any = None, store: Any = None, constants: Optional[SimConstants] = None,
                 sim_seconds_per_item: float = 0.0):
        spec = get_spec(target)
        if spec.kind != "tpu":
            raise ValueError(f"TpuSimulator needs a TPU target (tpu, tpu-v2, tpu-v3), not {target!r}")
        super().__init__(spec.name if target not in ("tpu",) else "tpu", budget, store)
        self.spec = spec
        c = constants or DEFAULTS
        if noise is not None:
            c = replace(c, noise=float(noise))
        self.constants = c
        self.seed = int(seed)
        self.sim_seconds_per_item = sim_seconds_per_item

    @property
    def store_namespace(self) -> str:
        return f"{self.name}/{self.version}/{self.spec.name}/n{self.constants.noise:g}/s{self.seed}"

    @property
    def machine(self) -> str:
        """Simulated times do not depend on the host that computes them."""
        return SIMULATED_MACHINE

    def simulate(self, kernels: Sequence[Any], tiles: Optional[Sequence[Any]] = None,
                 noise: bool = True) -> np.ndarray:
        """Runtimes in seconds (+inf where a tile does not fit), vectorized; a tile None is the kernel's
        `tiles.default_tile` (the analytical roofline's argmin, as XLA)."""
        kernels = list(kernels)
        if not kernels:
            return np.zeros(0)
        b, T, ks, kp, _ = batch_inputs(kernels, tiles, self.spec)
        t = simulate_batch(b, T, ks, kp, self.spec, self.constants)
        if noise and self.constants.noise > 0:
            z = noise_z(self.seed, [k.hash for k in kernels], T, ks)
            t = t * np.exp(self.constants.noise * z)
        return t

    def predict(self, kernels: Sequence[Any], tiles: Optional[Sequence[Any]] = None) -> np.ndarray:
        """CostModel-style alias of `simulate` (noise included)."""
        return self.simulate(kernels, tiles)

    def _measure_batch(self, kernels: Sequence[Any], tiles: Sequence[Any]) -> list:
        out: list = [None] * len(kernels)
        good: list = []
        for i, (k, t) in enumerate(zip(kernels, tiles)):
            try:
                if t is not None and not isinstance(t, TileConfig):
                    t = TileConfig(tuple(t))
                _ = k.hash, k.output_shape, k.cost
                good.append((i, k, t))
            except Exception as exc:  # noqa: BLE001 - failures are values
                out[i] = Measurement.failure(f"{INVALID}: {type(exc).__name__}: {exc}")
        if good:
            try:
                vals = self.simulate([g[1] for g in good], [g[2] for g in good])
            except Exception:  # noqa: BLE001 - fall back to one at a time to isolate the bad item
                vals = []
                for _, k, t in good:
                    try:
                        vals.append(float(self.simulate([k], [t])[0]))
                    except Exception as exc:  # noqa: BLE001
                        vals.append(exc)
            for (i, k, t), v in zip(good, vals):
                if isinstance(v, Exception):  # a bug here, not a property of the kernel: not stored
                    out[i] = Measurement.failure(f"{INVALID}: {type(v).__name__}: {v}")
                elif not np.isfinite(v):
                    out[i] = Measurement.failure("compile_error: tile does not fit the scratchpad")
                else:
                    out[i] = Measurement(float(v), extra={"tile": t.key() if t is not None else
                                                          default_tile(k, self.spec).key()})
        return out


def simulate(kernels: Sequence[Any], tiles: Optional[Sequence[Any]] = None, target: str = "tpu",
             noise: float = 0.0, seed: int = 0) -> np.ndarray:
    """Convenience: noise-free (by default) simulated runtimes."""
    return TpuSimulator(target, noise=noise, seed=seed).simulate(kernels, tiles)


try:  # the simulator also serves as a cost model ("sim")
    from costmodels.base import CostModel, register_cost_model

    class SimulatorCostModel(CostModel):
        """The simulator as a CostModel (noise off by default); parameters as `TpuSimulator`'s."""

        name = "sim"
        predicts_absolute = True

        def __init__(self, target: str = "tpu", noise: float = 0.0, seed: int = 0,
                     constants: Optional[SimConstants] = None, sim_seconds_per_item: float = 0.0):
            self.target, self.noise, self.seed = target, noise, seed
            self.constants, self.sim_seconds_per_item = constants, sim_seconds_per_item

        @property
        def sim(self) -> TpuSimulator:
            """The simulator of these parameters (made on first use)."""
            params = self.get_params()
            made = self.__dict__.get("_sim")
            if made is None or made[0] != params:
                made = self._sim = (params, TpuSimulator(**params))
            return made[1]

        def predict(self, kernels, tiles=None):
            return self.sim.simulate(kernels, tiles)

    register_cost_model("sim", SimulatorCostModel)
    register_cost_model("simulator", SimulatorCostModel)
except ImportError:  # pragma: no cover
    pass
