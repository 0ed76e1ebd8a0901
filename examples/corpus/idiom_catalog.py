"""The idioms the idiom corpus must cover (issue 16), each with the HLO text that proves it is there.

Pure Python (no jax): ``examples/corpus/idioms.py`` tags its programs with these names and
``tests/examples/test_idioms_manifest.py`` loads this file directly to check that every idiom is
exercised by at least one program and that each tagged program's HLO text shows the idiom.
"""
from __future__ import annotations

import re

# idiom -> (what it is, regular expression that must match the lowered HLO text)
IDIOMS: dict[str, tuple[str, str]] = {
    "keepdims_reduction": ("reductions with keepdims=True broadcast back over the reduced axis",
                           r"\breduce\("),
    "softmax": ("jax.nn.softmax or a hand-written max-shifted softmax", r"\bexponential\("),
    "log_softmax": ("jax.nn.log_softmax", r"\blog\("),
    "logsumexp": ("jax.nn.logsumexp / jax.scipy.special.logsumexp", r"\blog\("),
    "layer_norm": ("layer normalization (mean and variance over the feature axis)", r"\brsqrt\("),
    "rms_norm": ("RMS normalization (mean of squares, no centering)", r"\brsqrt\("),
    "causal_attention": ("self-attention with a causal (iota-compare) mask", r"\biota\("),
    "dropout_threefry": ("dropout with jax.random (default threefry2x32 PRNG)",
                         r"(?i)threefry"),
    "dropout_rng_bit_generator": ("dropout with the 'rbg'/'unsafe_rbg' PRNG (rng-bit-generator)",
                                  r"\brng-bit-generator\("),
    "one_hot_cross_entropy": ("cross-entropy against jax.nn.one_hot labels",
                              r"\bcompare\([^\n]*direction=EQ"),
    "argmax": ("jnp.argmax (a variadic value/index reduce)", r"\) reduce\("),
    "top_k": ("jax.lax.top_k", r"\btopk\("),
    "sort": ("jnp.sort / jnp.argsort", r"\bsort\("),
    "gather_embedding": ("embedding lookup (jnp.take / table[ids])", r"\bgather\("),
    "scatter_embedding_grad": ("gradient of an embedding lookup, or .at[].add (scatter-add)",
                               r"\bscatter\("),
    "dynamic_slice": ("lax.dynamic_slice (scan inputs, sliding windows, cache reads)",
                      r"\bdynamic-slice\("),
    "dynamic_update_slice": ("lax.dynamic_update_slice (scan outputs, cache writes)",
                             r"\bdynamic-update-slice\("),
    "scan_carry": ("lax.scan with a carried state", r"\bwhile\("),
    "kv_cache": ("autoregressive decoding with a key/value cache updated in place",
                 r"\bdynamic-update-slice\("),
    "while_static_trip_count": ("lax.fori_loop with static bounds", r"\bwhile\("),
    "while_data_dependent": ("lax.while_loop whose condition depends on computed data",
                             r"\bwhile\("),
    "conditional": ("lax.cond / lax.switch", r"\bconditional\("),
    "cumsum": ("jnp.cumsum / cumulative reductions", r"\breduce-window\("),
    "reduce_window": ("lax.reduce_window (moving sums, pooling)", r"\breduce-window\("),
    "conv_stride": ("strided convolution", r"convolution\([^\n]*window=\{[^}]*stride="),
    "conv_padding": ("convolution with SAME or explicit padding", r"convolution\([^\n]*pad="),
    "conv_dilation": ("dilated (atrous) convolution", r"convolution\([^\n]*rhs_dilate="),
    "conv_transpose": ("transposed convolution (lax.conv_transpose)",
                       r"convolution\([^\n]*lhs_dilate="),
    "conv_depthwise": ("depthwise convolution (feature_group_count = channels)",
                       r"convolution\([^\n]*feature_group_count="),
    "conv_grouped": ("grouped convolution (1 < feature_group_count < channels)",
                     r"convolution\([^\n]*feature_group_count="),
    "pool_forward": ("max / average pooling", r"\breduce-window\("),
    "pool_backward": ("gradient of pooling (select-and-scatter, padded reduce-window)",
                      r"\bselect-and-scatter\(|\breduce-window\([^\n]*pad="),
    "fft": ("jnp.fft.fft / ifft / fft2", r"fft_type=I?FFT\b"),
    "rfft": ("jnp.fft.rfft / irfft", r"fft_type=I?RFFT\b"),
    "cholesky": ("jnp.linalg.cholesky (a LAPACK potrf custom-call on CPU)", r"potrf"),
    "triangular_solve": ("jax.scipy.linalg.solve_triangular / cho_solve",
                         r"trsm|\btriangular-solve\("),
    "bf16": ("bfloat16 mixed precision", r"\bbf16\["),
    "f16": ("float16 mixed precision", r"(?<![b\w])f16\["),
    "int8_quantization": ("int8 quantize / dequantize (int8 x int8 -> int32 dots)", r"\bs8\["),
    "multiple_outputs": ("several results returned as a tuple", r"->\("),
    "donated_buffers": ("jax.jit(..., donate_argnums=...): input/output aliasing",
                        r"input_output_alias="),
    "custom_call": ("an op that jax on CPU lowers to a custom-call", r"\bcustom-call\("),
    "tiny": ("programs of at most 10 instructions (0 to 4 fusible edges)", r"\bENTRY\b"),
    "associative_scan": ("lax.associative_scan (a linear recurrence as strided slices, pads, concatenates)",
                         r"slice=\{[^}\n]*\[\d+:\d+:[2-9]\d*\]"),
    "image_resize": ("jax.image.resize (bilinear interpolation weights contracted with the image)",
                     r"\bdot\("),
    "reflect_pad_roll": ("jnp.pad(mode='reflect') and jnp.roll (reverses, slices, concatenates)",
                         r"\breverse\("),
    "bit_manipulation": ("population count, logical shifts and xor on unsigned integers",
                         r"\bpopcnt\("),
    "integer_division": ("floor division and modulo of signed integers (jnp // and %)", r"\bremainder\("),
    "segment_sum": ("jax.ops.segment_sum (scatter-add by segment ids)", r"\bscatter\("),
    "batched_while": ("jax.vmap of a lax.while_loop (batched predicate, selects in the body)",
                      r"\bwhile\("),
    "remat_policy": ("jax.checkpoint with a saveable-dots policy (optimization barriers)", r"\bopt-barrier\("),
    "reduce_precision": ("lax.reduce_precision (rounding to a narrower float format in place)",
                         r"\breduce-precision\("),
}

# program groups, in README order
GROUPS: dict[str, str] = {
    "tiny": "tiny programs with 0 to 4 fusible edges",
    "normalization": "reductions, softmax family, layer / RMS norm, losses",
    "attention": "causal attention and key/value caches",
    "random": "dropout and sampling with both PRNG implementations",
    "selection": "argmax, top-k, sort",
    "embedding": "gathers and scatters",
    "control_flow": "scan, fori_loop, while_loop, cond/switch, cumulative ops",
    "conv": "convolutions and pooling",
    "spectral": "FFTs",
    "linalg": "Cholesky, triangular solves and other LAPACK custom-calls",
    "precision": "bf16 / f16 mixed precision, int8 quantization",
    "outputs": "tuples, multiple outputs, donated buffers",
    "model": "small ViT, DLRM, GRU and WaveNet models",
    "array_ops": "associative scans, resizing, reflect padding and rolls, segment sums, integer and bit ops",
}

MODES = ("infer", "train")
TINY_MAX_INSTRUCTIONS = 10  # programs of group "tiny" have at most this many instructions


def evidence(idiom: str) -> re.Pattern:
    """The compiled pattern whose match in a program's HLO text shows ``idiom``."""
    return re.compile(IDIOMS[idiom][1])
