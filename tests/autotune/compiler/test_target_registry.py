"""Tests for the Target objects of autotune/compiler/targets/: lookup and errors, each shipped target's
fusion rules and policies, and a toy target defined in this file alone (adding a target is one module)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Sequence

import pytest
from click.testing import CliRunner

from autotune.cli.app import main
from autotune.compiler.fusion import FusionSpace
from autotune.compiler.emission import emit_fused_text
from autotune.compiler.opcodes import ELEMENTWISE
from autotune.compiler.program import Computation, Program
from autotune.compiler.targets import (CPU, TPU, TPU_V2, TPU_V3, CpuRules, FusionRules, Target, TpuRules,
                                       UnknownTargetError, get_spec, get_target, register_target, target_names,
                                       unregister_target)

ROOT = Path(__file__).resolve().parents[3]

# dot(a, b) -> add(., c) -> exponential -> reduce: a matrix dot, an elementwise epilogue, a reduction.
HLO = """HloModule small

sum {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}

ENTRY main {
  a = f32[64,64] parameter(0)
  b = f32[64,64] parameter(1)
  c = f32[64,64] parameter(2)
  d = f32[64,64] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  e = f32[64,64] add(d, c)
  f = f32[64,64] exponential(e)
  z = f32[] constant(0)
  ROOT r = f32[64] reduce(f, z), dimensions={1}, to_apply=sum
}
"""


def _edges(space: FusionSpace) -> set[tuple[str, str]]:
    comp = space.program.computations[space.edge_comp[0]] if space.n_edges else None
    return {(comp.instructions[p].name, comp.instructions[c].name)
            for p, c in zip(space.edge_prod, space.edge_cons)} if comp else set()


def test_lookup_by_name_alias_and_object() -> None:
    assert get_target("tpu") is TPU and get_target("TPU-v3") is TPU and get_target(" tpu ") is TPU
    assert get_target("tpu-v2").spec is TPU_V2 and TPU.spec is TPU_V3
    assert get_target("host") is CPU and get_target(CPU) is CPU
    assert {"tpu", "tpu-v2", "cpu"} <= set(target_names())


@pytest.mark.parametrize("name, says", [("gpu", "no fusion rules"), ("h100", "no fusion rules"),
                                        ("tpu-v9", "unknown target"), ("", "unknown target")])
def test_unknown_target_is_a_clear_error(name: str, says: str) -> None:
    with pytest.raises(UnknownTargetError, match=says) as e:
        get_target(name)
    assert "known targets: cpu, tpu, tpu-v2" in str(e.value) and "\n" not in str(e.value)
    # The fusion space used to give `gpu` the TPU rules silently.
    with pytest.raises(UnknownTargetError):
        FusionSpace(Program.from_text(HLO), name)
    assert get_spec("gpu").kind == "gpu"  # the spec itself stays available to cost models


def test_cli_unknown_target_is_one_line_exit_2(tmp_path: Path) -> None:
    prog = tmp_path / "small.hlo"
    prog.write_text(HLO)
    r = subprocess.run([sys.executable, "-m", "autotune.cli", "emit", str(prog), "--target", "gpu",
                        "-o", str(tmp_path / "out.hlo")], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and "target 'gpu' has a hardware spec but no fusion rules" in r.stderr
    assert not (tmp_path / "out.hlo").exists()


def test_tpu_rules_and_policies() -> None:
    assert isinstance(TPU.fusion_rules, TpuRules) and get_target("tpu-v2").fusion_rules is TPU.fusion_rules
    assert TPU.default_evaluator == "sim" and not TPU.xla_cpu_emission
    space = FusionSpace(Program.from_text(HLO), "tpu")
    # One hero per kernel: the dot takes its elementwise epilogue, the reduce its elementwise producer,
    # but a kernel holding both heroes is illegal, so the default cuts between them.
    assert _edges(space) == {("d", "e"), ("e", "f"), ("f", "r")}
    kernels = space.kernels(space.default())
    heroes = [sum(i.opcode in ("dot", "reduce") for i in k.instructions) for k in kernels]
    assert max(heroes) == 1 and space.is_valid(space.default())


def test_cpu_rules_and_policies() -> None:
    assert isinstance(CPU.fusion_rules, CpuRules)
    assert CPU.default_evaluator == "xla" and CPU.xla_cpu_emission and CPU.spec.kind == "cpu"
    space = FusionSpace(Program.from_text(HLO), "cpu")
    # A matrix (not matrix-vector) dot stays a library call on XLA:CPU: no edge touches it.
    assert _edges(space) == {("e", "f"), ("f", "r")}
    assert "fusion(" in emit_fused_text(space, space.default())


def test_tile_fits_reads_the_spec() -> None:
    assert TPU.tile_fits(TPU_V3.scratchpad_bytes) and not TPU.tile_fits(TPU_V3.scratchpad_bytes + 1)


# -------------------------------------------------------------------------------------------------
# A third target, defined here alone: elementwise chains fuse, nothing else does.

class ElementwiseOnlyRules(FusionRules):
    """Toy rules: only elementwise ops fuse, into elementwise consumers; no heroes."""

    name = "toy"
    fusible = ELEMENTWISE

    def edge_ok(self, comp: Computation, p: int, c: int) -> bool:
        return True

    def kernel_ok(self, comp: Computation, root: int, members: Sequence[int]) -> bool:
        return len(members) <= 2  # at most two instructions per kernel: repair has to cut


@pytest.fixture
def toy_target():
    target = register_target(Target(name="toy", description="elementwise-only test target",
                                    spec_factory=lambda: TPU_V3, fusion_rules=ElementwiseOnlyRules(),
                                    evaluators=("sim",), aliases=("toy-1",)))
    yield target
    unregister_target("toy")
    assert "toy" not in target_names()


def test_toy_target_from_one_file(toy_target: Target, tmp_path: Path) -> None:
    assert get_target("TOY-1") is toy_target and "toy" in target_names()
    text = HLO.replace("exponential(e)", "exponential(e)\n  g = f32[64,64] negate(f)").replace(
        "reduce(f, z)", "reduce(g, z)")
    space = FusionSpace(Program.from_text(text), "toy")
    assert _edges(space) == {("e", "f"), ("f", "g")}
    cfg = space.repair(space.decode(bytes([1, 1])))  # a 3-instruction kernel is illegal: one edge cut
    assert cfg.count() == 1 and space.is_valid(cfg)
    assert space.default().count() == 1
    assert "kind=kLoop" in emit_fused_text(space, cfg)
    with pytest.raises(ValueError, match="already registered"):
        register_target(Target(name="toy2", description="", spec_factory=lambda: TPU_V3,
                               fusion_rules=ElementwiseOnlyRules(), aliases=("toy",)))
    # The CLI takes registered targets by name.
    prog = tmp_path / "toy.hlo"
    prog.write_text(text)
    r = CliRunner().invoke(main, ["show", str(prog), "--target", "toy-1"])
    assert r.exit_code == 0, r.output
    assert "toy" in r.output
