"""Programs written like users write them (not for the tests) that once broke a command.

Each fixture is the smallest program showing the pattern; see the docstring of each test for the
JAX program that found it.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from autotune.compiler.fusion import FusionSpace
from autotune.compiler.hlo import parse_hlo
from autotune.compiler.emission import emit_fused_text
from autotune.compiler.program import Program

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "hlo"


@pytest.mark.parametrize("target", ["cpu", "tpu"])
def test_custom_call_called_computations_survive_emission(target):
    """XLA dumps (``compile().as_text()``) print TopK as a custom-call naming its comparator with
    ``called_computations={...}`` (found by a lax.top_k beam search under while_loop). The
    comparator is a called computation: emission keeps it, and XLA parses what we wrote."""
    path = FIXTURES / "topk_comparator_opt.hlo"
    module = parse_hlo(path.read_text())
    cc = next(i for i in module.entry.instructions if i.opcode == "custom-call")
    assert cc.called_computations() == ["compare-greater-than.1.clone"]
    space = FusionSpace(Program.from_file(str(path)), target)
    for cfg in (space.default(), space.unfused()):
        text = emit_fused_text(space, cfg, header=True)
        assert "compare-greater-than.1.clone (" in text  # the comparator's definition is kept
        parse_hlo(text)
        pytest.importorskip("jax")
        from hardware.xla import parse_hlo_text
        parse_hlo_text(text)


def test_custom_call_called_computations_must_exist():
    text = (FIXTURES / "topk_comparator_opt.hlo").read_text()
    bad = text.replace("called_computations={%compare-greater-than.1.clone}", "called_computations={%nope}")
    with pytest.raises(Exception, match="nope"):
        parse_hlo(bad)


def test_computation_named_like_a_stack_frame_table_parses():
    """A computation whose name starts with a table keyword (found by the parser fuzz test: the
    parser looped forever on it, reading an empty table block at the same place)."""
    text = ("HloModule m\n\nFileNames.1 (p: f32[]) -> f32[] {\n  ROOT p = f32[] parameter(0)\n}\n\n"
            "ENTRY e {\n  x = f32[] parameter(0)\n  ROOT c = f32[] call(x), to_apply=FileNames.1\n}\n")
    module = parse_hlo(text)
    assert [c.name for c in module.computations][0] == "FileNames.1"


def test_bf16_attention_output_transpose_compiles_on_xla_cpu():
    """jax.nn.dot_product_attention in bf16 ends in transpose -> reshape; emission wrapped such a
    transpose in a fusion of its own (for u32 that keeps its permutation under the emission's
    options), and XLA:CPU aborted on the bf16 one ("Check failed: input_shape.has_layout()")."""
    pytest.importorskip("jax")
    from hardware.parity import check_program
    results = check_program(str(FIXTURES / "dot_product_attention_bf16.hlo"), "cpu", specs=("default", "random:0"),
                            modes=("xla", "measure"), timeout=300)
    assert [r.status for r in results] == ["ok"] * 4, [(r.config, r.mode, r.status) for r in results]


def test_bf16_select_of_an_input_predicate_is_not_fused_alone():
    """jax.nn.logsumexp in bf16 guards its max with `select(is_finite(m), m, 0)` in bf16. Emitted
    as a one-instruction fusion (cpu: every lone fusible op; tpu checked on XLA:CPU: a kernel that
    compiles as a loop fusion) with its predicate a fusion input, XLA:CPU's float normalization
    converts the branches to f32 inside the fusion and aborts ("Check failed: has_layout()
    f32[4]"). Such a select stays plain alone and out of kernels that do not compute its
    predicate; with the predicate fused in, it compiles."""
    from autotune.compiler.targets import CpuRules
    program = Program.from_file(str(FIXTURES / "logsumexp_bf16.hlo"))
    comp = program.entry
    names = [i.name for i in comp.instructions]
    sel, fin = names.index("select_n.1"), names.index("is_finite.1")
    assert not CpuRules().wrap_single(comp, sel)
    assert not CpuRules.loop_fusion_compiles(comp, sel, [sel])
    assert CpuRules.loop_fusion_compiles(comp, sel, [fin, sel])
    assert CpuRules().wrap_single(comp, names.index("exp.1"))
    pytest.importorskip("jax")
    from hardware.parity import check_program
    for target in ("cpu", "tpu"):
        results = check_program(str(FIXTURES / "logsumexp_bf16.hlo"), target, specs=("default", "unfused"),
                                modes=("xla",), timeout=300)
        assert [r.status for r in results] == ["ok"] * 2, [(r.target, r.config, r.mode, r.status) for r in results]
