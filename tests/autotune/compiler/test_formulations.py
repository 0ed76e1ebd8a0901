"""Equivalent formulations (autotune/compiler/formulations/): every formulation of randomly drawn
convolutions (dimension orders, padding including negative, strides, lhs/rhs dilation, window reversal,
feature and batch groups, element types) is accepted by XLA and computes what XLA computes for the
original: integer outputs identical, floating-point outputs as accurate as the original against the
program in f64 (the project's rule, hardware.xla.accuracy_fallback)."""
from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from autotune.compiler.formulations import (CONV_FORMULATIONS, ORIGINAL, FormulationError, FormulationSpace)
from autotune.compiler.hlo import parse_hlo

ROOT = Path(__file__).resolve().parents[3]
IDIOMS = ROOT / "examples" / "idioms"

# (lhs, rhs, out) element types: same type, 16-bit floats, a wider preferred output, integers
DTYPES = [("f32", "f32", "f32"), ("bf16", "bf16", "bf16"), ("f16", "f16", "f16"), ("bf16", "bf16", "f32"),
          ("s32", "s32", "s32"), ("s8", "s8", "s32")]


def _labels(rng: random.Random, n: int) -> tuple:
    """dim_labels strings (lhs, kernel, out) in random dimension orders."""
    sp = [str(i) for i in range(n)]
    lhs, ker, out = ["b", "f", *sp], ["i", "o", *sp], ["b", "f", *sp]
    for xs in (lhs, ker, out):
        rng.shuffle(xs)
    return "".join(lhs), "".join(ker), "".join(out)


def random_convolution(seed: int) -> str:
    """A one-convolution HLO module drawn from `seed` whose output size follows from its window."""
    rng = random.Random(seed)
    while True:
        n = rng.choice([1, 2, 2, 2, 3]) if seed % 7 else 0
        kind = rng.choice(["plain", "depthwise", "grouped", "batch_groups"])
        groups = bgroups = 1
        ig = rng.randint(1, 4)
        if kind == "depthwise":
            groups, ig = rng.randint(1, 6), 1
        elif kind == "grouped":
            groups = rng.randint(2, 3)
        batch = rng.randint(1, 3)
        og = rng.randint(1, 3)
        if kind == "batch_groups":
            bgroups = rng.randint(2, 4)
        c_in = groups * ig
        c_out = groups * og * bgroups
        sizes, ks, wins, outs = [], [], [], []
        for _ in range(n):
            s, k = rng.randint(1, 8), rng.randint(1, 4)
            stride, ld, rd = rng.choice([1, 1, 2, 3]), rng.choice([1, 1, 2]), rng.choice([1, 1, 2])
            lo, hi = rng.randint(-1, 3), rng.randint(-1, 3)
            padded = (s - 1) * ld + 1 + lo + hi
            span = (k - 1) * rd + 1
            if padded < span:
                break
            sizes.append(s), ks.append(k), outs.append((padded - span) // stride + 1)
            wins.append((k, stride, lo, hi, ld, rd, rng.random() < 0.25))
        else:
            break
    lt, rt, ot = rng.choice(DTYPES)
    lhs_l, ker_l, out_l = _labels(rng, n)

    def dims(labels: str, b: int, f: int, spatial: list) -> str:
        d = {"b": b, "f": f, "i": b, "o": f}
        return ",".join(str(d[c]) if c in d else str(spatial[int(c)]) for c in labels)

    lhs = f"{lt}[{dims(lhs_l, batch * bgroups, c_in, sizes)}]"
    ker = f"{rt}[{dims(ker_l, ig if kind != 'batch_groups' else c_in, c_out, ks)}]"
    out = f"{ot}[{dims(out_l, batch, c_out, outs)}]"
    window = ""
    if n:
        f = list(zip(*wins))
        window = (", window={size=" + "x".join(map(str, f[0])) + " stride=" + "x".join(map(str, f[1]))
                  + " pad=" + "x".join(f"{a}_{b}" for a, b in zip(f[2], f[3]))
                  + " lhs_dilate=" + "x".join(map(str, f[4])) + " rhs_dilate=" + "x".join(map(str, f[5]))
                  + (" rhs_reversal=" + "x".join("1" if r else "0" for r in f[6]) if any(f[6]) else "") + "}")
    groups_attr = (f", feature_group_count={groups}" if groups > 1 else "") + \
                  (f", batch_group_count={bgroups}" if bgroups > 1 else "")
    return (f"HloModule random_conv_{seed}\n\nENTRY main {{\n  x = {lhs} parameter(0)\n  k = {ker} parameter(1)\n"
            f"  ROOT c = {out} convolution(x, k){window}, dim_labels={lhs_l}_{ker_l}->{out_l}{groups_attr}\n}}\n")


def _outputs(text: str, inputs: list) -> list:
    from hardware.xla import compile_hlo
    return [np.asarray(o) for o in compile_hlo(text)(*inputs)]


def _as_accurate(text: str, reference: str, inputs: list) -> tuple:
    from hardware.xla import accuracy_fallback, computes_in_16bit, output_error
    got, ref = _outputs(text, inputs), _outputs(reference, inputs)
    if ref[0].dtype.kind in "iu":
        return bool(np.array_equal(got[0], ref[0])), "identical integers"
    low = computes_in_16bit(reference)
    err, ok = output_error(got, ref, low_precision=low)
    ok, notes = accuracy_fallback(ok, low, text, reference, inputs, got, ref)
    return ok, f"error {err:.3g} {notes}"


@pytest.mark.xla
@pytest.mark.parametrize("seed", range(32))
def test_every_formulation_of_a_random_convolution_computes_what_xla_computes(seed):
    pytest.importorskip("jax")
    from hardware.xla import verification_inputs
    text = random_convolution(seed)
    space = FormulationSpace(text)
    (site,) = space.sites
    assert set(site.choices[1:]) | set(site.refused) == set(CONV_FORMULATIONS)
    inputs = verification_inputs(text, seed)
    for choice in site.choices[1:]:
        rewritten = space.apply({site.key: choice})
        parse_hlo(rewritten)  # the project's verifier accepts it, as XLA does below
        ok, how = _as_accurate(rewritten, text, inputs)
        assert ok, f"{choice} of\n{text}\n{how}"


def test_the_draws_cover_every_formulation_and_refusal():
    """The property above is only as good as its draws: each formulation applies to some of them."""
    applied = {f: 0 for f in CONV_FORMULATIONS}
    for seed in range(32):
        (site,) = FormulationSpace(random_convolution(seed)).sites
        for c in site.choices[1:]:
            applied[c] += 1
    assert all(v >= 3 for v in applied.values()), applied


def test_sites_choices_and_refusals_of_a_depthwise_train_step():
    space = FormulationSpace((IDIOMS / "depthwise_separable_train.hlo").read_text())
    by = {s.name: s for s in space.sites}
    assert len(space.sites) == 5 and space.tunable
    depthwise = [s for s in space.sites if "shifted_multiply_add" in s.choices]
    assert depthwise and all(s.choices[0] == ORIGINAL for s in space.sites)
    # a pointwise convolution is not depthwise: the refusal says why
    pointwise = [s for s in space.sites if "more than one input feature" in s.refused.get("shifted_multiply_add", "")]
    assert pointwise
    # the weight gradients (whole-image windows) are written as one dot per output position
    assert any("window_dot" in s.choices for s in by.values())
    with pytest.raises(FormulationError, match="more than one input feature"):
        space.apply({pointwise[0].key: "shifted_multiply_add"})
    with pytest.raises(FormulationError, match="no formulation site"):
        space.apply({"main/nope": "im2col_dot"})
    assert space.apply({}) == space.text


def test_a_rewritten_instruction_keeps_its_name_shape_and_users():
    space = FormulationSpace((IDIOMS / "depthwise_separable_train.hlo").read_text())
    site = next(s for s in space.sites if "shifted_multiply_add" in s.choices)
    text = space.apply({site.key: "shifted_multiply_add"})
    module = parse_hlo(text)
    comp = module.computations_by_name[site.computation]
    new = comp.by_name[site.name]
    old = space.module_.computations_by_name[site.computation].by_name[site.name]
    assert new.opcode != "convolution" and new.shape == old.shape
    assert sum(1 for i in comp.instructions if i.opcode == "convolution") == \
        sum(1 for i in space.module_.computations_by_name[site.computation].instructions
            if i.opcode == "convolution") - 1


REDUCERS = {"add": "add", "maximum": "maximum", "minimum": "minimum", "multiply": "multiply"}


def random_reduce_window(seed: int) -> str:
    """A one-reduce-window HLO module (a pooling) drawn from `seed`, its init value a parameter."""
    rng = random.Random(10_000 + seed)
    while True:
        rank = rng.choice([1, 2, 3, 4])
        dims, wins, outs = [], [], []
        for _ in range(rank):
            s, k = rng.randint(1, 7), rng.choice([1, 1, 2, 3])
            stride, ld, rd = rng.choice([1, 1, 2, 3]), rng.choice([1, 1, 2]), rng.choice([1, 1, 2])
            lo, hi = rng.randint(-1, 2), rng.randint(-1, 2)
            padded = (s - 1) * ld + 1 + lo + hi
            span = (k - 1) * rd + 1
            if padded < span:
                break
            dims.append(s), wins.append((k, stride, lo, hi, ld, rd)), outs.append((padded - span) // stride + 1)
        else:
            if any(w[0] > 1 for w in wins):
                break
    reducer = rng.choice(list(REDUCERS))
    dtype = rng.choice(["f32", "f32", "bf16", "s32"] if reducer != "multiply" else ["f32", "s32"])
    f = list(zip(*wins))
    window = ("size=" + "x".join(map(str, f[0])) + " stride=" + "x".join(map(str, f[1]))
              + " pad=" + "x".join(f"{a}_{b}" for a, b in zip(f[2], f[3]))
              + " lhs_dilate=" + "x".join(map(str, f[4])) + " rhs_dilate=" + "x".join(map(str, f[5])))
    return (f"HloModule random_pool_{seed}\n\nred {{\n  a = {dtype}[] parameter(0)\n  b = {dtype}[] parameter(1)\n"
            f"  ROOT r = {dtype}[] {reducer}(a, b)\n}}\n\nENTRY main {{\n  x = {dtype}[{','.join(map(str, dims))}] "
            f"parameter(0)\n  init = {dtype}[] parameter(1)\n  ROOT w = {dtype}[{','.join(map(str, outs))}] "
            f"reduce-window(x, init), window={{{window}}}, to_apply=red\n}}\n")


@pytest.mark.xla
@pytest.mark.parametrize("seed", range(16))
def test_the_formulation_of_a_random_pooling_computes_what_xla_computes(seed):
    """Any init value (a parameter here, not the reducer's identity): padded positions take no part."""
    pytest.importorskip("jax")
    from hardware.xla import verification_inputs
    text = random_reduce_window(seed)
    space = FormulationSpace(text)
    (site,) = space.sites
    assert site.choices == (ORIGINAL, "shifted_reduce"), site.refused
    inputs = verification_inputs(text, seed)
    rewritten = space.apply({site.key: "shifted_reduce"})
    parse_hlo(rewritten)
    ok, how = _as_accurate(rewritten, text, inputs)
    assert ok, f"shifted_reduce of\n{text}\n{how}"


def test_a_reducer_that_is_not_one_operation_is_refused():
    text = random_reduce_window(0)
    body = text.split("ROOT r = ")[1].split("\n")[0]
    dtype = body.split("[")[0]
    text = text.replace(f"  ROOT r = {body}", f"  s = {dtype}[] add(a, b)\n  ROOT r = {dtype}[] multiply(s, b)")
    (site,) = FormulationSpace(text).sites
    assert site.choices == (ORIGINAL,) and "reducer" in site.refused["shifted_reduce"]
