"""HLO parser and printer: real files, every syntax form, errors with positions, property tests."""
from __future__ import annotations

import glob
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autotune.compiler.hlo import HloParseError, parse_hlo, parse_hlo_file

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
TPUGRAPHS = os.path.join(ROOT, "data", "tpugraphs")  # vendored TpuGraphs sample (CC BY 4.0)
EXTERNAL = sorted(glob.glob(os.path.join(ROOT, "tests", "fixtures", "hlo", "external", "*.hlo")))
CORPUS = sorted(glob.glob(os.path.join(ROOT, "examples", "hlo", "*.hlo")))
FIXTURES = sorted(glob.glob(os.path.join(ROOT, "tests", "fixtures", "hlo", "*.hlo")))


def _roundtrip(text: str, name: str = "<t>") -> str:
    m = parse_hlo(text, name)
    printed = m.to_text()
    again = parse_hlo(printed, name).to_text()
    assert again == printed
    return printed


def test_external_fixtures_are_vendored():
    assert len(EXTERNAL) == 8  # tests/fixtures/hlo/external (openxla/xla, Apache-2.0)


@pytest.mark.parametrize("path", EXTERNAL, ids=os.path.basename)
def test_external_files_parse_and_roundtrip(path):
    m = parse_hlo_file(path)
    assert m.instruction_count() > 0
    _roundtrip(open(path).read(), path)


@pytest.mark.parametrize("path", CORPUS + FIXTURES, ids=os.path.basename)
def test_corpus_and_fixtures_roundtrip(path):
    _roundtrip(open(path).read(), path)


def test_tpugraphs_module_and_kernels_parse():
    m = parse_hlo_file(os.path.join(TPUGRAPHS, "layout_module.hlo"))
    assert m.instruction_count() == 3163
    import json
    data = json.load(open(os.path.join(TPUGRAPHS, "tile_kernels.json")))
    for k in data["kernels"]:
        _roundtrip(k["hlo_text"], k["name"])  # TPU tiled layouts like {3,0,2,1:T(8,128)}


DUMP_STYLE = r'''
HloModule jit_f, is_scheduled=true, entry_computation_layout={(f32[2,3]{1,0}, s32[])->(f32[3,2]{0,1}, f32[])}, frontend_attributes={fingerprint_before_lhs="abc"}

FileNames
1 "/tmp/x.py"

FunctionNames
1 "f"

FileLocations
1 {file_name_id=1 function_name_id=1 line=3 end_line=3 column=2 end_column=9}

StackFrames
1 {file_location_id=1 parent_frame_id=0}

%add.clone (x.1: f32[], y.1: f32[]) -> f32[] {
  %x.1 = f32[] parameter(0)
  %y.1 = f32[] parameter(1)
  ROOT %add.2 = f32[] add(f32[] %x.1, f32[] %y.1)
}

%fused_computation (param_0: f32[2,3], param_1.1: f32[]) -> f32[3,2] {
  %param_0 = f32[2,3]{1,0} parameter(0)
  %param_1.1 = f32[] parameter(1)
  %broadcast.1 = f32[2,3]{1,0} broadcast(f32[] %param_1.1), dimensions={}
  %multiply.1 = f32[2,3]{1,0} multiply(f32[2,3]{1,0} %param_0, f32[2,3]{1,0} %broadcast.1), metadata={op_name="jit(f)/mul" source_file="/tmp/x.py" source_line=3 stack_frame_id=1}
  ROOT %transpose.1 = f32[3,2]{0,1} transpose(f32[2,3]{1,0} %multiply.1), dimensions={1,0}
}

ENTRY %main.10 (Arg_0.1: f32[2,3], Arg_1.2: s32[]) -> (f32[3,2], f32[]) {
  %Arg_0.1 = f32[2,3]{1,0} parameter(0), sharding={replicated}
  %Arg_1.2 = s32[] parameter(1)
  %constant.3 = f32[] constant(2)
  %big = f32[4]{0} constant({...})
  %fusion = f32[3,2]{0,1} fusion(f32[2,3]{1,0} %Arg_0.1, f32[] %constant.3), kind=kLoop, calls=%fused_computation, backend_config={"outer_dimension_partitions":["2"]}
  %reduce.4 = f32[] reduce(f32[2,3]{1,0} %Arg_0.1, f32[] %constant.3), dimensions={0,1}, to_apply=%add.clone, frontend_attributes={_xla_stream="1"}
  ROOT %tuple.5 = (f32[3,2]{0,1}, f32[]) tuple(f32[3,2]{0,1} %fusion, /*index=1*/f32[] %reduce.4)
}
'''


def test_dump_style_module():
    m = parse_hlo(DUMP_STYLE, "dump.hlo")
    assert m.attrs["is_scheduled"] == "true"
    assert "StackFrames" in m.tables
    entry = m.entry
    assert entry.name == "main.10"
    assert entry.root.opcode == "tuple"
    assert entry.by_name["tuple.5"].operands == ["fusion", "reduce.4"]
    assert entry.by_name["fusion"].called_computations() == ["fused_computation"]
    assert entry.by_name["reduce.4"].attr("dimensions") == (0, 1)
    assert entry.by_name["big"].literal == "{...}"
    fc = m.computations_by_name["fused_computation"]
    assert fc.root.shape.layout == "0,1"
    assert fc.root.shape.minor_to_major() == (0, 1)
    _roundtrip(DUMP_STYLE)


ATTRIBUTE_FORMS = r'''
HloModule attrs

region {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] maximum(a, b)
}

cond {
  p = (s32[], f32[4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(10)
  ROOT lt = pred[] compare(i, n), direction=LT
}

body {
  p = (s32[], f32[4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  x = f32[4] get-tuple-element(p), index=1
  one = s32[] constant(1)
  j = s32[] add(i, one)
  ROOT t = (s32[], f32[4]) tuple(j, x)
}

ENTRY main {
  x = f32[1,8,8,3]{3,2,1,0} parameter(0)
  w = f32[3,3,3,16]{3,2,1,0} parameter(1)
  d = f32[<=16,4]{1,0} parameter(2)
  idx = s32[5,1]{1,0} parameter(3)
  conv = f32[1,4,4,16]{3,2,1,0} convolution(x, w), window={size=3x3 stride=2x2 pad=1_1x1_1 lhs_dilate=1x1 rhs_dilate=1x1}, dim_labels=b01f_01io->b01f, feature_group_count=1
  z = f32[] constant(0)
  rw = f32[1,4,4,16]{3,2,1,0} reduce-window(conv, z), window={size=1x2x2x1 stride=1x1x1x1 pad=0_0x0_1x0_1x0_0}, to_apply=region
  pd = f32[1,10,10,3]{3,2,1,0} pad(x, z), padding=0_0x1_1x1_1x0_0
  sl = f32[1,4,8,3]{3,2,1,0} slice(x), slice={[0:1], [0:8:2], [0:8], [0:3]}
  sl2 = f32[1,8,1,3]{3,2,1,0} slice(x), slice={[0:1], [0:8], [0:1], [0:3]}
  r = f32[8,3]{1,0} reshape(sl2)
  w3 = f32[1,1,3,16]{3,2,1,0} slice(w), slice={[0:1], [0:1], [0:3], [0:16]}
  w2 = f32[3,16]{1,0} reshape(w3)
  dot = f32[8,16]{1,0} dot(f32[8,3] %r, w2), lhs_contracting_dims={1}, rhs_contracting_dims={0}, operand_precision={highest,default}
  g = f32[5,4]{1,0} gather(d, idx), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,4}, indices_are_sorted=false
  ar = f32[5,4]{1,0} all-reduce(g), replica_groups={{0}}, to_apply=region, channel_id=1
  c0 = s32[] constant(0)
  v = f32[4]{0} constant({1, 2, 3, 4})
  init = (s32[], f32[4]) tuple(c0, v)
  wl = (s32[], f32[4]) while(init), condition=cond, body=body, backend_config={"known_trip_count":{"n":"10"}}
  cc = f32[4]{0} custom-call(v), custom_call_target="my_target", api_version=API_VERSION_STATUS_RETURNING
  ROOT out = (f32[1,4,4,16], f32[1,10,10,3], f32[8,16], f32[5,4], (s32[], f32[4]), f32[4]) tuple(rw, pd, dot, ar, wl, cc)
}
'''


def test_every_attribute_form():
    m = parse_hlo(ATTRIBUTE_FORMS, "attrs.hlo")
    e = m.entry.by_name
    win = e["conv"].attr("window")
    assert [(w.size, w.stride, w.pad_lo, w.pad_hi) for w in win] == [(3, 2, 1, 1), (3, 2, 1, 1)]
    labels = e["conv"].attr("dim_labels")
    assert (labels.lhs_batch, labels.lhs_feature, labels.lhs_spatial) == (0, 3, (1, 2))
    assert [(p.lo, p.hi) for p in e["pd"].attr("padding")] == [(0, 0), (1, 1), (1, 1), (0, 0)]
    assert [(s.start, s.limit, s.stride) for s in e["sl"].attr("slice")][1] == (0, 8, 2)
    assert e["d"].shape.dynamic == (True, False) and e["d"].shape.dims == (16, 4)
    assert e["g"].attr("slice_sizes") == (1, 4)
    assert e["wl"].called_computations() == ["cond", "body"]
    assert e["out"].shape.is_tuple and len(e["out"].shape.tuple_shapes) == 6
    _roundtrip(ATTRIBUTE_FORMS)


def test_headerless_and_no_root_keyword():
    text = "c {\n  a = f32[2] parameter(0)\n  b = f32[2] negate(a)\n}\n"
    m = parse_hlo(text)
    assert m.entry.root.name == "b"
    assert "ROOT b" in m.to_text()


@pytest.mark.parametrize("text,fragment,line,col", [
    ("HloModule m\nENTRY e {\n  a = f32[2] parameter(0)\n  b = f32[2] frobnicate(a)\n}\n", "unknown opcode 'frobnicate'", 4, 14),
    ("HloModule m\nENTRY e {\n  a = f32[2] parameter(0)\n  b = f32[2] add(a, q)\n}\n", "undefined value 'q'", 4, 21),
    ("HloModule m\nENTRY e {\n  a = f33[2] parameter(0)\n}\n", "unknown element type", 3, 7),
    ("HloModule m\nENTRY e {\n  a = f32[2] parameter(0)\n", "not closed", 4, 1),
    ("HloModule m\nENTRY e {\n  a = f32[2,x] parameter(0)\n}\n", "bad dimension", 3, 11),
    ("HloModule m\nENTRY e {\n  a = f32[2] parameter(0)\n  b = f32[2] reduce(a, a), dimensions={0}, to_apply=nope\n}\n", "unknown computation 'nope'", 4, 3),
    ("HloModule m\nENTRY e {\n  a = f32[4,4] parameter(0)\n  b = f32[2,2] slice(a), slice={[0:2], [0:x]}\n}\n", "attribute 'slice'", 4, 26),
])
def test_errors_carry_position_and_caret(text, fragment, line, col):
    with pytest.raises(HloParseError) as info:
        parse_hlo(text, "bad.hlo")
    err = info.value
    assert fragment in err.message
    assert (err.filename, err.line, err.col) == ("bad.hlo", line, col)
    assert err.one_line().startswith(f"bad.hlo:{line}:{col}: error: ")
    assert "\n" not in err.one_line()
    assert "^" in str(err)


# ---------------------------------------------------------------------------- property-based tests

_UNARY = ["negate", "exponential", "tanh", "abs", "log", "sqrt", "copy"]
_INTEGER_UNARY = ["negate", "abs", "copy", "not"]  # the others need floating-point operands
_BINARY = ["add", "multiply", "subtract", "maximum", "minimum", "divide"]
_DTYPES = ["f32", "bf16", "f16", "s32"]


@st.composite
def modules(draw):
    """Random well-formed modules: a chain of elementwise ops over a few same-shape values."""
    dtype = draw(st.sampled_from(_DTYPES))
    dims = draw(st.lists(st.integers(1, 9), min_size=0, max_size=3))
    shape = f"{dtype}[{','.join(map(str, dims))}]"
    if dims and draw(st.booleans()):
        shape += "{" + ",".join(str(i) for i in draw(st.permutations(range(len(dims))))) + "}"
    pct = "%" if draw(st.booleans()) else ""
    n_params = draw(st.integers(1, 3))
    lines = [f"  {pct}p{i} = {shape} parameter({i})" for i in range(n_params)]
    names = [f"p{i}" for i in range(n_params)]
    for k in range(draw(st.integers(1, 12))):
        if draw(st.booleans()):
            op = draw(st.sampled_from(_UNARY if dtype != "s32" else _INTEGER_UNARY))
            args = [draw(st.sampled_from(names))]
        else:
            op = draw(st.sampled_from(_BINARY))
            args = [draw(st.sampled_from(names)), draw(st.sampled_from(names))]
        meta = f', metadata={{op_name="op{k}" source_line={k}}}' if draw(st.booleans()) else ""
        lines.append(f"  {pct}v{k} = {shape} {op}({', '.join(pct + a for a in args)}){meta}")
        names.append(f"v{k}")
    lines[-1] = "  ROOT " + lines[-1].lstrip()
    header = "HloModule gen\n\n" if draw(st.booleans()) else ""
    return f"{header}ENTRY {pct}main {{\n" + "\n".join(lines) + "\n}\n"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(modules())
def test_print_then_parse_is_identity(text):
    m = parse_hlo(text)
    printed = m.to_text()
    m2 = parse_hlo(printed)
    assert m2.to_text() == printed
    assert [i.name for i in m2.entry.instructions] == [i.name for i in m.entry.instructions]
    assert [i.shape for i in m2.entry.instructions] == [i.shape for i in m.entry.instructions]
    assert [i.operands for i in m2.entry.instructions] == [i.operands for i in m.entry.instructions]


_SEEDS = [DUMP_STYLE, ATTRIBUTE_FORMS] + [open(p).read() for p in EXTERNAL if os.path.getsize(p) < 5000]


@st.composite
def corruptions(draw):
    text = draw(st.sampled_from(_SEEDS))
    for _ in range(draw(st.integers(1, 4))):
        if not text:
            break
        i = draw(st.integers(0, len(text) - 1))
        kind = draw(st.sampled_from(["delete", "insert", "replace", "truncate", "dup"]))
        if kind == "delete":
            j = draw(st.integers(i, min(len(text), i + 20)))
            text = text[:i] + text[j:]
        elif kind == "insert":
            text = text[:i] + draw(st.text(alphabet='{}()[],=:%"<>/*\n x1-._abcT', max_size=6)) + text[i:]
        elif kind == "replace":
            text = text[:i] + draw(st.sampled_from(list('{}()[],=:%"0 \n'))) + text[i + 1:]
        elif kind == "truncate":
            text = text[:i]
        else:
            j = draw(st.integers(i, min(len(text), i + 40)))
            text = text[:j] + text[i:j] + text[j:]
    return text


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(corruptions())
def test_random_corruptions_raise_only_parse_errors(text):
    try:
        m = parse_hlo(text, "fuzz.hlo")
    except HloParseError as e:
        assert e.line >= 0 and "\n" not in e.one_line()
        return
    # Whatever parses must print and re-parse.
    parse_hlo(m.to_text())


@pytest.mark.parametrize("path", EXTERNAL + CORPUS[::4], ids=os.path.basename)
def test_printed_text_is_accepted_by_xla(path):
    """Print-back is valid HLO for XLA's own parser (jaxlib), when jax is installed."""
    pytest.importorskip("jax")
    from hardware.xla import parse_hlo_text
    printed = parse_hlo_file(path).to_text()
    parse_hlo_text(printed)
    parse_hlo_text(parse_hlo(printed).to_text(percent=not parse_hlo(printed).percent))  # other name style


def test_instruction_positions_and_every_element_type():
    from autotune.compiler.hlo import DTYPE_BYTES
    text = ("HloModule m\n\nENTRY e {\n  p = s1[16]{0} parameter(0)\n  q = u1[16]{0} parameter(1)\n"
            "    ROOT t = (s1[16]{0}, u1[16]{0}) tuple(p, q)\n}\n")
    m = parse_hlo(text, "x.hlo")
    assert [i.location("x.hlo") for i in m.entry.instructions] == ["x.hlo:4:3", "x.hlo:5:3", "x.hlo:6:10"]
    assert m.entry.root.shape.bytes == 2 * 16 / 8
    with pytest.raises(HloParseError, match=r"^x.hlo:3:12: error: buffer shapes 'b\(...\)'"):
        parse_hlo("HloModule m\nENTRY e {\n  ROOT p = b(f32[4]) parameter(0)\n}\n", "x.hlo")
    # xla_data.proto's PrimitiveType, by its text names (BUFFER, `b(...)`, is refused above).
    assert set(DTYPE_BYTES) == set("""pred s1 s2 s4 s8 s16 s32 s64 u1 u2 u4 u8 u16 u32 u64 f16 f32 bf16 f64
        f8e5m2 f8e4m3 f8e4m3fn f8e4m3b11fnuz f8e3m4 f8e5m2fnuz f8e4m3fnuz f4e2m1fn f8e8m0fnu c64 c128
        token opaque""".split())
