"""NVIDIA H100 hardware spec (registered as a spec only: cost models and the xla evaluator on a CUDA
backend read it; no fusion rules exist for a GPU target yet, so `get_target("gpu")` is an error)."""
from __future__ import annotations

from autotune.compiler.targets.base import KiB, TargetSpec, register_spec

__all__ = ["H100"]

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

register_spec("h100", lambda: H100, aliases=("gpu", "nvidia-h100", "h100-sxm", "h100-sxm5"))
