"""Equivalent formulations of an HLO `convolution`, written as plain HLO that XLA accepts.

`ConvGeometry.of` reads one convolution (any dim_labels, padding, stride, lhs/rhs dilation, window
reversal, feature_group_count) and answers which formulations apply, or why not. Each formulation
computes the convolution's exact sum in the canonical order [batch, spatial..., feature]:

* `shifted_multiply_add`: one strided slice of the padded input per window position, times that
  position's weights, summed: depthwise convolutions (one input feature per group), which XLA:CPU
  runs 25-44x below this on the machines measured (docs/lab-notes/2026-12-02-formulations.md).
* `im2col_dot`: the window positions' slices concatenated along the features and contracted with the
  kernel in one dot (a batched dot per group for grouped convolutions); a 1x1 convolution is a plain dot.
* `window_dot`: one dot per output position, contracting its window with the kernel: the weight
  gradients, whose window is the whole image and whose output is the small kernel.

A convolution with batch_group_count > 1 (the weight gradient of a grouped or depthwise convolution) is
first written as the grouped convolution it equals: the batch groups move next to the features.

Floating-point results are accumulated in f32 (or the output type where it is wider): at least as
accurate as the original against float64. Integer results are identical (wrapping sums commute).
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Optional

from autotune.compiler.hlo import ConvDimLabels, HloInstruction, Shape, WindowDim, array_shape, default_layout

__all__ = ["ConvGeometry", "CONV_FORMULATIONS", "MAX_WINDOW_POSITIONS", "MAX_PATCH_BYTES", "write_convolution"]

MAX_WINDOW_POSITIONS = 64        # slices one formulation may write (a 7x7 window is 49)
WINDOW_DOTS_BESIDE_IM2COL = 16   # window_dot beside an im2col dot only up to this many dots (compile time)
MAX_PATCH_BYTES = 256 * 2 ** 20  # the im2col buffer's size at most
CONV_FORMULATIONS = ("shifted_multiply_add", "im2col_dot", "window_dot")

_FLOATS = {"f16": 2, "bf16": 2, "f32": 4, "f64": 8}
_INTS = {"s8", "s16", "s32", "s64", "u8", "u16", "u32", "u64"}


def _accumulator(out_dtype: str) -> Optional[str]:
    """The element type the formulations compute in (None: a type they do not handle)."""
    if out_dtype in ("f16", "bf16", "f32"):
        return "f32"
    if out_dtype == "f64" or out_dtype in _INTS:
        return out_dtype
    return None


@dataclass(frozen=True)
class ConvGeometry:
    """One convolution's sizes in canonical order: input [B, S..., C_in], kernel [K..., I, C_out] with
    I = C_in / G, output [B, O..., C_out]; G = feature_group_count."""

    lhs: Shape
    rhs: Shape
    out: Shape
    labels: ConvDimLabels
    window: tuple
    groups: int
    batch_groups: int

    @classmethod
    def of(cls, ins: HloInstruction, lhs: Shape, rhs: Shape) -> "ConvGeometry":
        labels = ins.attr("dim_labels")
        window = ins.attr("window") or ()
        n = len(labels.lhs_spatial)
        if not window:
            window = tuple(WindowDim() for _ in range(n))
        return cls(lhs, rhs, ins.shape, labels, tuple(window), int(ins.attr("feature_group_count", 1) or 1),
                   int(ins.attr("batch_group_count", 1) or 1))

    @property
    def n(self) -> int:
        return len(self.labels.lhs_spatial)

    @property
    def batch(self) -> int:
        """The batch the formulations see: the input's, divided into its batch groups."""
        return self.lhs.dims[self.labels.lhs_batch] // self.batch_groups

    @property
    def c_in(self) -> int:
        """The features the formulations see: the input's times its batch groups (moved beside them)."""
        return self.lhs.dims[self.labels.lhs_feature] * self.batch_groups

    @property
    def feature_groups(self) -> int:
        """The groups the formulations see (feature groups, or the batch groups moved to the features)."""
        return self.groups * self.batch_groups

    @property
    def c_out(self) -> int:
        return self.out.dims[self.labels.out_feature]

    @property
    def in_per_group(self) -> int:
        return self.rhs.dims[self.labels.kernel_input_feature]

    @property
    def spatial(self) -> tuple:
        return tuple(self.lhs.dims[d] for d in self.labels.lhs_spatial)

    @property
    def kernel(self) -> tuple:
        return tuple(self.rhs.dims[d] for d in self.labels.kernel_spatial)

    @property
    def out_spatial(self) -> tuple:
        return tuple(self.out.dims[d] for d in self.labels.out_spatial)

    @property
    def positions(self) -> int:
        return math.prod(self.kernel)

    def padded(self, i: int) -> int:
        w, s = self.window[i], self.spatial[i]
        return (s - 1) * w.lhs_dilate + 1 + w.pad_lo + w.pad_hi if s > 0 else w.pad_lo + w.pad_hi

    def flops(self) -> float:
        """Multiply-adds of the convolution's definition (2 flops each)."""
        return 2.0 * self.batch * math.prod(self.out_spatial) * self.c_out * self.positions * self.in_per_group

    def refusal(self, formulation: str) -> Optional[str]:
        """Why `formulation` does not apply to this convolution (None: it applies)."""
        if formulation not in CONV_FORMULATIONS:
            return f"unknown formulation {formulation!r}"
        acc = _accumulator(self.out.dtype)
        if acc is None or self.lhs.dtype not in set(_FLOATS) | _INTS or self.rhs.dtype not in set(_FLOATS) | _INTS:
            return f"element types {self.lhs.dtype}, {self.rhs.dtype} -> {self.out.dtype} are not rewritten"
        if (self.out.dtype in _INTS) != (self.lhs.dtype in _INTS) or (self.out.dtype in _INTS) != (self.rhs.dtype in _INTS):
            return "mixed integer and floating-point operands are not rewritten"
        if self.batch_groups != 1 and self.groups != 1:
            return "feature_group_count and batch_group_count both above 1"
        if self.lhs.dims[self.labels.lhs_batch] % self.batch_groups or self.c_out % self.feature_groups:
            return "the groups do not divide the batch or the output features"
        if any(d <= 0 for d in self.out.dims + self.lhs.dims + self.rhs.dims):
            return "an empty dimension"
        for i in range(self.n):
            w = self.window[i]
            if w.stride < 1 or w.lhs_dilate < 1 or w.rhs_dilate < 1:
                return "a window stride or dilation below 1"
            span = (self.kernel[i] - 1) * w.rhs_dilate + 1
            if self.padded(i) < span or (self.padded(i) - span) // w.stride + 1 != self.out_spatial[i]:
                return "the output size does not follow from the window"
        if formulation == "window_dot":
            out_positions = math.prod(self.out_spatial)
            if out_positions > MAX_WINDOW_POSITIONS:
                return f"{out_positions} output positions (at most {MAX_WINDOW_POSITIONS} dots)"
            if self.positions == 1:
                return "a 1x1 window (im2col_dot is the same dot)"
            if out_positions > WINDOW_DOTS_BESIDE_IM2COL and self.positions <= MAX_WINDOW_POSITIONS:
                return (f"{out_positions} output positions, more than {WINDOW_DOTS_BESIDE_IM2COL} dots where "
                        "im2col_dot writes it as one")
            return None
        if self.positions > MAX_WINDOW_POSITIONS:
            return f"{self.positions} window positions (at most {MAX_WINDOW_POSITIONS} slices)"
        if formulation == "shifted_multiply_add":
            if self.in_per_group != 1:
                return "more than one input feature per group (not a depthwise convolution)"
            return None
        patch = self.batch * math.prod(self.out_spatial) * self.positions * self.c_in * 4
        if patch > MAX_PATCH_BYTES:
            return f"the im2col buffer would take {patch / 2 ** 20:.0f} MiB (at most {MAX_PATCH_BYTES // 2 ** 20})"
        return None

    def applicable(self) -> tuple:
        """The formulations that apply, in CONV_FORMULATIONS order."""
        return tuple(f for f in CONV_FORMULATIONS if self.refusal(f) is None)


class _Writer:
    """Appends new instructions with fresh names (`<base>.<tag>.<k>`) that do not collide with `taken`."""

    def __init__(self, base: str, taken: set):
        self.base, self.taken = base, taken
        self.out: list[HloInstruction] = []
        self.k = 0

    def add(self, opcode: str, dtype: str, dims: tuple, operands: list, attrs: Optional[dict] = None,
            literal: Optional[str] = None) -> tuple:
        while True:
            self.k += 1
            name = f"{self.base}.f{self.k}"
            if name not in self.taken:
                break
        self.taken.add(name)
        shape = array_shape(dtype, dims, default_layout(len(dims)) if dims else None)
        self.out.append(HloInstruction(name, opcode, shape, list(operands), dict(attrs or {}), literal=literal))
        return name, tuple(dims)

    def in_place_of(self, ins: HloInstruction, y: tuple) -> list:
        """The instructions written, the last one (`y`) renamed and reshaped as `ins` so that `ins`'s users
        read it unchanged (a copy of `y` when `y` is not an instruction written here)."""
        if not (self.out and self.out[-1].name == y[0]):
            self.add("copy", ins.shape.dtype, y[1], [y[0]])
        last = self.out[-1]
        self.taken.discard(last.name)
        last.name = ins.name
        last.shape = ins.shape
        return self.out

    def convert(self, x: tuple, src: str, dtype: str) -> tuple:
        return x if src == dtype else self.add("convert", dtype, x[1], [x[0]])

    def transpose(self, x: tuple, perm: tuple, dtype: str) -> tuple:
        if perm == tuple(range(len(perm))):
            return x
        return self.add("transpose", dtype, tuple(x[1][p] for p in perm), [x[0]], {"dimensions": _ints(perm)})

    def reshape(self, x: tuple, dims: tuple, dtype: str) -> tuple:
        return x if tuple(dims) == x[1] else self.add("reshape", dtype, tuple(dims), [x[0]])

    def slice(self, x: tuple, spec: list, dtype: str) -> tuple:
        """`spec`: (start, limit, stride) per dimension."""
        if all(s == (0, d, 1) for s, d in zip(spec, x[1])):
            return x
        dims = tuple((lim - st + sd - 1) // sd for st, lim, sd in spec)
        text = "{" + ", ".join(f"[{st}:{lim}:{sd}]" if sd != 1 else f"[{st}:{lim}]" for st, lim, sd in spec) + "}"
        return self.add("slice", dtype, dims, [x[0]], {"slice": text})

    def broadcast(self, x: tuple, dims: tuple, mapping: tuple, dtype: str) -> tuple:
        if tuple(dims) == x[1] and mapping == tuple(range(len(dims))):
            return x
        return self.add("broadcast", dtype, tuple(dims), [x[0]], {"dimensions": _ints(mapping)})


def _ints(xs: tuple) -> str:
    return "{" + ",".join(str(int(x)) for x in xs) + "}"


def write_convolution(ins: HloInstruction, lhs: Shape, rhs: Shape, formulation: str, taken: set) -> list:
    """The instructions that compute `ins` (a convolution of operands with shapes `lhs`, `rhs`) as
    `formulation`; the last one has `ins`'s name and shape (layout included), so its users are unchanged.
    Raises ValueError when the formulation does not apply (`ConvGeometry.refusal`)."""
    g = ConvGeometry.of(ins, lhs, rhs)
    why = g.refusal(formulation)
    if why:
        raise ValueError(f"{ins.name}: {formulation} does not apply: {why}")
    acc = _accumulator(g.out.dtype)
    assert acc is not None
    w = _Writer(ins.name, taken)
    L = g.labels
    n = g.n
    # the input as [B, S..., C_in] in the accumulator's type, padded (lhs dilation as interior padding)
    x = w.transpose((ins.operands[0], lhs.dims), (L.lhs_batch, *L.lhs_spatial, L.lhs_feature), lhs.dtype)
    x = w.convert(x, lhs.dtype, acc)
    if g.batch_groups > 1:  # [bgc*B, S..., C] -> [B, S..., bgc*C]: the batch groups as feature groups
        bg, sp = g.batch_groups, tuple(lhs.dims[d] for d in L.lhs_spatial)
        per = lhs.dims[L.lhs_feature]
        x = w.reshape(x, (bg, g.batch, *sp, per), acc)
        x = w.transpose(x, (*range(1, n + 2), 0, n + 2), acc)
        x = w.reshape(x, (g.batch, *sp, bg * per), acc)
    if any(wd.pad_lo or wd.pad_hi or wd.lhs_dilate > 1 for wd in g.window):
        zero = w.add("constant", acc, (), [], literal="0")
        pads = ["0_0"] + [f"{wd.pad_lo}_{wd.pad_hi}" + (f"_{wd.lhs_dilate - 1}" if wd.lhs_dilate > 1 else "")
                          for wd in g.window] + ["0_0"]
        dims = (g.batch, *(g.padded(i) for i in range(n)), g.c_in)
        x = w.add("pad", acc, dims, [x[0], zero[0]], {"padding": "x".join(pads)})
    # the kernel as [K..., I, C_out], reversed where the window says so
    k = w.transpose((ins.operands[1], rhs.dims), (*L.kernel_spatial, L.kernel_input_feature, L.kernel_output_feature),
                    rhs.dtype)
    k = w.convert(k, rhs.dtype, acc)
    flips = tuple(i for i in range(n) if g.window[i].reversal and g.kernel[i] > 1)
    if flips:
        k = w.add("reverse", acc, k[1], [k[0]], {"dimensions": _ints(flips)})
    positions = list(itertools.product(*(range(s) for s in g.kernel)))
    osp = g.out_spatial

    def window_slice(p: tuple) -> tuple:
        spec = [(0, g.batch, 1)]
        for i in range(n):
            wd = g.window[i]
            start = p[i] * wd.rhs_dilate
            spec.append((start, start + (osp[i] - 1) * wd.stride + 1, wd.stride))
        spec.append((0, g.c_in, 1))
        return w.slice(x, spec, acc)

    out_dims = (g.batch, *osp, g.c_out)
    if formulation == "shifted_multiply_add":
        groups, mult = g.c_in, g.c_out // g.c_in
        wide = (g.batch, *osp, groups, mult) if mult > 1 else out_dims
        kk = w.reshape(k, (*g.kernel, groups, mult) if mult > 1 else (*g.kernel, g.c_out), acc)
        total: Optional[tuple] = None
        for p in positions:
            s = window_slice(p)
            if mult > 1:
                s = w.broadcast(s, wide, tuple(range(n + 2)), acc)
            wk = w.slice(kk, [(pi, pi + 1, 1) for pi in p] + [(0, d, 1) for d in kk[1][n:]], acc)
            wk = w.reshape(wk, kk[1][n:], acc)
            wk = w.broadcast(wk, wide, tuple(range(n + 1, len(wide))), acc)
            term = w.add("multiply", acc, wide, [s[0], wk[0]])
            total = term if total is None else w.add("add", acc, wide, [total[0], term[0]])
        assert total is not None
        y = w.reshape(total, out_dims, acc)
    elif formulation == "window_dot":
        groups, ig, og = g.feature_groups, g.in_per_group, g.c_out // g.feature_groups
        span = [(g.kernel[i] - 1) * g.window[i].rhs_dilate + 1 for i in range(n)]
        kg = w.reshape(k, (*g.kernel, ig, groups, og), acc) if groups > 1 else k
        outs = []
        for o in itertools.product(*(range(s) for s in osp)):
            spec = [(0, g.batch, 1)] + [(o[i] * g.window[i].stride, o[i] * g.window[i].stride + span[i],
                                         g.window[i].rhs_dilate) for i in range(n)] + [(0, g.c_in, 1)]
            s = w.slice(x, spec, acc)
            if groups == 1:
                d = w.add("dot", acc, (g.batch, g.c_out), [s[0], k[0]],
                          {"lhs_contracting_dims": _ints(range(1, n + 2)), "rhs_contracting_dims": _ints(range(n + 1))})
            else:
                s = w.reshape(s, (g.batch, *g.kernel, groups, ig), acc)
                d = w.add("dot", acc, (groups, g.batch, og), [s[0], kg[0]],
                          {"lhs_batch_dims": "{" + str(n + 1) + "}", "rhs_batch_dims": "{" + str(n + 1) + "}",
                           "lhs_contracting_dims": _ints((*range(1, n + 1), n + 2)),
                           "rhs_contracting_dims": _ints(range(n + 1))})
                d = w.transpose(d, (1, 0, 2), acc)
            outs.append(w.reshape(d, (g.batch, 1, g.c_out), acc))
        y = outs[0] if len(outs) == 1 else w.add("concatenate", acc, (g.batch, len(outs), g.c_out),
                                                  [o[0] for o in outs], {"dimensions": "{1}"})
        y = w.reshape(y, out_dims, acc)
    else:
        groups, ig, og = g.feature_groups, g.in_per_group, g.c_out // g.feature_groups
        P = len(positions)
        cols = []
        for p in positions:
            s = window_slice(p)
            cols.append(w.reshape(s, (g.batch, *osp, groups, ig), acc) if groups > 1 else s)
        patch_dims = (g.batch, *osp, groups, P * ig) if groups > 1 else (g.batch, *osp, P * ig)
        patches = cols[0] if P == 1 else w.add("concatenate", acc, patch_dims, [c[0] for c in cols],
                                                 {"dimensions": "{" + str(len(patch_dims) - 1) + "}"})
        if groups == 1:
            kk = w.reshape(k, (P * ig, g.c_out), acc)
            y = w.add("dot", acc, out_dims, [patches[0], kk[0]],
                      {"lhs_contracting_dims": "{" + str(n + 1) + "}", "rhs_contracting_dims": "{0}"})
        else:
            kk = w.reshape(k, (P, ig, groups, og), acc)
            kk = w.transpose(kk, (2, 0, 1, 3), acc)
            kk = w.reshape(kk, (groups, P * ig, og), acc)
            yg = w.add("dot", acc, (groups, g.batch, *osp, og), [patches[0], kk[0]],
                       {"lhs_batch_dims": "{" + str(n + 1) + "}", "lhs_contracting_dims": "{" + str(n + 2) + "}",
                        "rhs_batch_dims": "{0}", "rhs_contracting_dims": "{1}"})
            yg = w.transpose(yg, (*range(1, n + 2), 0, n + 2), acc)
            y = w.reshape(yg, out_dims, acc)
    # back to the output's type and dimension order; the last instruction takes the convolution's place
    y = w.convert(y, acc, g.out.dtype)
    perm = [0] * (n + 2)
    perm[L.out_batch] = 0
    perm[L.out_feature] = n + 1
    for i, d in enumerate(L.out_spatial):
        perm[d] = 1 + i
    y = w.transpose(y, tuple(perm), g.out.dtype)
    return w.in_place_of(ins, y)
