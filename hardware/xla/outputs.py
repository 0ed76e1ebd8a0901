"""What a program is run on and whether its outputs match: the inputs (:func:`random_inputs`,
:func:`verification_inputs`), one run (:func:`run_hlo`) and the comparison of a rewritten program's
outputs with the original's (:func:`output_error` and its tolerances)."""
from __future__ import annotations

import functools
import math
import re
from typing import Any, Optional, Sequence, Union

import numpy as np

from hardware.xla.compile import Shape, compile_hlo, parameter_shapes


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
