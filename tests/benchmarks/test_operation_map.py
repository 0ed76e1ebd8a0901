"""benchmarks/operation_map.py: thunks of XLA:CPU's compile of small programs get their operation class
(a depthwise convolution is classified depthwise, ...), and the summary ranks slow classes; no timing is
asserted."""
import pytest

pytest.importorskip("jax")

from benchmarks import operation_map as om  # noqa: E402

_CONV = """HloModule conv
ENTRY e {{
  x = f32[{x}] parameter(0)
  w = f32[{w}] parameter(1)
  ROOT c = f32[{out}] convolution(x, w), window={{{window}}}, dim_labels=b01f_01io->b01f{extra}
}}
"""

CONVS = {
    "depthwise": (dict(x="2,8,8,16", w="3,3,1,16", out="2,8,8,16", window="size=3x3 pad=1_1x1_1",
                       extra=", feature_group_count=16"), om.CONV_DEPTHWISE),
    "1x1": (dict(x="2,8,8,16", w="1,1,16,32", out="2,8,8,32", window="size=1x1", extra=""), om.CONV_1X1),
    "kxk": (dict(x="2,8,8,16", w="3,3,16,32", out="2,8,8,32", window="size=3x3 pad=1_1x1_1", extra=""),
            om.CONV_KXK),
    "input-gradient": (dict(x="2,4,4,32", w="3,3,32,16", out="2,8,8,16", window="size=3x3 pad=1_2x1_2 lhs_dilate=2x2",
                            extra=""), om.CONV_INPUT_GRAD),
    # a weight gradient as XLA writes it: the activations convolved with the output gradient
    "weight-gradient": (dict(x="16,8,8,2", w="8,8,2,32", out="16,3,3,32", window="size=8x8 pad=1_1x1_1", extra=""),
                        om.CONV_WEIGHT_GRAD),
}


def _classes(text: str) -> set:
    return {v["class"] for v in om.classify_text(text).values()}


@pytest.mark.parametrize("kind", sorted(CONVS))
def test_convolutions_are_split_by_kind(kind):
    fmt, want = CONVS[kind]
    classes = _classes(_CONV.format(**fmt))
    assert want in classes
    assert not ({c for c in classes if c.startswith("conv")} - {want})


def test_batched_and_transposed_dots():
    batched = """HloModule bdot
ENTRY e {
  a = f32[8,64,32] parameter(0)
  b = f32[8,32,48] parameter(1)
  ROOT d = f32[8,64,48] dot(a, b), lhs_batch_dims={0}, rhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_contracting_dims={1}
}
"""
    plain = """HloModule dot
ENTRY e {
  a = f32[64,32] parameter(0)
  b = f32[32,48] parameter(1)
  ROOT d = f32[64,48] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
"""
    assert om.DOT_BATCHED in _classes(batched)
    assert om.DOT in _classes(plain)


def test_pooling_reduce_sort_and_while():
    text = """HloModule pools
max_f {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] maximum(a, b)
}
add_f {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
lt {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = pred[] compare(a, b), direction=LT
}
cond {
  p = (s32[], f32[64]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(3)
  ROOT c = pred[] compare(i, n), direction=LT
}
body {
  p = (s32[], f32[64]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  v = f32[64] get-tuple-element(p), index=1
  one = s32[] constant(1)
  j = s32[] add(i, one)
  w = f32[64] sine(v)
  ROOT t = (s32[], f32[64]) tuple(j, w)
}
ENTRY e {
  x = f32[2,16,16,8] parameter(0)
  y = f32[64] parameter(1)
  ninf = f32[] constant(-inf)
  zero = f32[] constant(0)
  mp = f32[2,8,8,8] reduce-window(x, ninf), window={size=1x2x2x1 stride=1x2x2x1}, to_apply=max_f
  ap = f32[2,8,8,8] reduce-window(x, zero), window={size=1x2x2x1 stride=1x2x2x1}, to_apply=add_f
  r = f32[2,8] reduce(x, zero), dimensions={1,2}, to_apply=add_f
  s = f32[64] sort(y), dimensions={0}, to_apply=lt
  i0 = s32[] constant(0)
  t0 = (s32[], f32[64]) tuple(i0, y)
  wl = (s32[], f32[64]) while(t0), condition=cond, body=body
  wv = f32[64] get-tuple-element(wl), index=1
  ROOT out = (f32[2,8,8,8], f32[2,8,8,8], f32[2,8], f32[64], f32[64]) tuple(mp, ap, r, s, wv)
}
"""
    classes = _classes(text)
    assert {om.REDUCE_WINDOW_MAX, om.REDUCE_WINDOW_AVG, om.REDUCE, om.SORT, om.WHILE} <= classes


def test_summary_ranks_a_slow_class_and_leaves_a_fast_one_out():
    peaks = {"peak_gflop_per_s": 100.0, "peak_gb_per_s": 10.0, "dram_gb_per_s": 5.0}
    thunks = [  # 1 ms of 1 GFLOP (0.01 of roofline, 50% of the program) and 1 ms at its roofline
        {"name": "c", "class": om.CONV_DEPTHWISE, "signature": "s", "seconds": 1e-3, "gap_seconds": 0.0, "count": 1,
         "flops": 1e6, "transcendentals": 0.0, "bytes": 1e3},
        {"name": "e", "class": om.ELEMENTWISE, "signature": "t", "seconds": 1e-3, "gap_seconds": 0.0, "count": 1,
         "flops": 0.0, "transcendentals": 0.0, "bytes": 1e7},
    ]
    summ = om.summarize([{"program": "p", "program_s": 2e-3, "thunks": thunks}], peaks)
    assert [r["class"] for r in summ["ranking"]] == [om.CONV_DEPTHWISE]
    assert summ["ranking"][0]["median_fraction"] == pytest.approx(0.01)
    assert summ["classes"][om.ELEMENTWISE]["median_fraction"] == pytest.approx(1.0)
    assert summ["top_class"]["p"]["share"] == pytest.approx(0.5)
