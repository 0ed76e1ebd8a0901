"""Second opinions on an output mismatch: the two programs compared again without excess
precision (16-bit floats, :func:`strict_precision_error`), then each against the original program
computed in f64 (:func:`f64_accuracy`, :func:`norm_error`): "as accurate as the original"
(:func:`accuracy_fallback`)."""
from __future__ import annotations

import hashlib
import math
from typing import Any, Optional, Sequence

import numpy as np

from hardware.xla._jaxlib import _first_line
from hardware.xla.compile import compile_hlo
from hardware.xla.outputs import _is_float, computes_in_16bit, output_error, output_tolerance


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


def outputs_identical(got: Sequence[Any], ref: Sequence[Any]) -> bool:
    """Whether two programs' outputs are equal bit for bit (shapes, dtypes and bytes)."""
    if len(got) != len(ref):
        return False
    for a, b in zip(got, ref):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape or a.dtype != b.dtype or a.tobytes() != b.tobytes():
            return False
    return True


def option_output_check(text: str, flags: dict, got: Sequence[Any], ref: Sequence[Any],
                        inputs: Sequence[np.ndarray], *, candidate_text: Optional[str] = None,
                        disable_fusion: bool = False) -> dict:
    """The outputs of a program compiled with the compiler options ``flags`` (`got`) against the program
    ``text`` under XLA's default options (`ref`, same `inputs`): ``identical`` (bit for bit), ``error``
    (:func:`output_error`), ``accurate``: within tolerance; or, for programs computing in 16-bit floats,
    within tolerance when both compiles round every instruction (``error_without_excess_precision``: the
    default compiled with :data:`STRICT_PRECISION_FLAGS` only, the candidate with ``flags`` too); or at
    most :data:`ACCURACY_FACTOR` times the default's error against the program computed in f64
    (``error_vs_f64``: both errors). Unlike :func:`accuracy_fallback`, whose two programs share one set of
    options, the reference here is always compiled with XLA's defaults. ``candidate_text`` (default:
    ``text``) and ``disable_fusion``: the program that ran with ``flags`` and its fusion switch, where it
    is a rewrite of ``text`` (a tuned fusion configuration)."""
    cand_text = text if candidate_text is None else candidate_text
    low = computes_in_16bit(text)
    err, ok = output_error(got, ref, low_precision=low)
    out: dict = {"identical": outputs_identical(got, ref), "error": err, "within_tolerance": ok}
    if not ok and low:
        try:
            strict_ref = compile_hlo(text, xla_flags=dict(STRICT_PRECISION_FLAGS))(*inputs)
            strict_got = compile_hlo(cand_text, disable_fusion=disable_fusion,
                                     xla_flags={**flags, **STRICT_PRECISION_FLAGS})(*inputs)
            e2, ok = output_error(strict_got, strict_ref, low_precision=low)
            out["error_without_excess_precision"] = e2
        except Exception as exc:  # noqa: BLE001 - the mismatch stands
            out["error_without_excess_precision"] = f"failed: {_first_line(exc)[:200]}"
    if not ok:
        try:
            acc = f64_accuracy(got, ref, text, inputs)
            out["error_vs_f64"] = {"option": acc["emitted"], "default": acc["original"]}
            ok = bool(acc["ok"])
        except Exception as exc:  # noqa: BLE001 - no f64 version: the mismatch stands
            out["error_vs_f64"] = f"failed: {_first_line(exc)[:200]}"
    out["accurate"] = bool(ok)
    return out
