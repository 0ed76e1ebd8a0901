"""Targets declare their compiler's option space as data (`CompilerOption`, `Target.compiler_options`): the
cpu target's options are XLA:CPU DebugOptions that this jaxlib accepts, each value compiles a small
program, and the first value of each is XLA's own default."""
from __future__ import annotations

import dataclasses

import pytest

from autotune.compiler.targets import CPU, get_target
from autotune.compiler.targets.base import CompilerOption, Target
from autotune.compiler.targets.cpu import CPU_COMPILER_OPTIONS

# a dot, an elementwise op and a reduction: something for every declared path (library fusions,
# fusion emitters, LLVM, fast-math) to act on
SMALL = """HloModule small
add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}
ENTRY e {
  a = f32[32,64] parameter(0)
  b = f32[64,16] parameter(1)
  d = f32[32,16] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  t = f32[32,16] tanh(d)
  z = f32[] constant(0)
  ROOT r = f32[32] reduce(t, z), dimensions={1}, to_apply=add
}
"""


def test_compiler_option_is_frozen_data_with_its_default_first():
    o = CompilerOption("xla_x", (1, 2), changes_numerics=True, requires=(("xla_y", True),), doc="d")
    assert o.default == 1 and o.flags(1) == {} and o.flags(2) == {"xla_y": True, "xla_x": 2}
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.name = "other"  # type: ignore[misc]
    with pytest.raises(ValueError):
        o.flags(3)
    with pytest.raises(ValueError):
        CompilerOption("xla_x", (True, False)).flags(1)  # 1 is not True here
    with pytest.raises(ValueError):
        CompilerOption("xla_x", (1,))  # nothing to choose
    with pytest.raises(ValueError):
        CompilerOption("xla_x", (1, 1))
    with pytest.raises(ValueError):
        Target(name="t", description="", spec_factory=lambda: None, fusion_rules=None,  # type: ignore[arg-type]
               compiler_options=(o, o))


def test_the_cpu_target_declares_its_option_space():
    assert get_target("cpu").compiler_options == CPU_COMPILER_OPTIONS == CPU.compiler_options
    assert CPU_COMPILER_OPTIONS and all(isinstance(o, CompilerOption) for o in CPU_COMPILER_OPTIONS)
    for o in CPU_COMPILER_OPTIONS:
        assert o.name.startswith("xla_") and o.doc and isinstance(o.changes_numerics, bool)
    assert get_target("tpu").compiler_options == ()  # none measured there


@pytest.mark.parametrize("option", CPU_COMPILER_OPTIONS, ids=lambda o: o.name)
def test_every_declared_value_compiles_and_runs(option):
    pytest.importorskip("jax")
    import numpy as np

    from hardware.xla.compile import compile_hlo
    from hardware.xla.outputs import output_error, random_inputs
    inputs = random_inputs(SMALL, 0)
    ref = compile_hlo(SMALL)(*inputs)
    for value in option.values:
        out = compile_hlo(SMALL, xla_flags=option.flags(value))(*inputs)
        assert output_error(out, ref)[1], (option.name, value)
        assert all(np.isfinite(o).all() for o in out)


@pytest.mark.parametrize("option", CPU_COMPILER_OPTIONS, ids=lambda o: o.name)
def test_the_first_value_is_xlas_default(option, tmp_path):
    """XLA dumps the DebugOptions that differ from its defaults (`*.debug_options`): setting an option to
    its declared default adds nothing there, and its other values do."""
    pytest.importorskip("jax")
    from hardware.xla.compile import compile_hlo

    def dumped(flags: dict, where: str) -> str:
        d = tmp_path / where
        compile_hlo(SMALL, xla_flags={"xla_dump_to": str(d), **flags})
        files = list(d.glob("*.debug_options"))
        assert files, "XLA wrote no debug_options dump"
        return files[0].read_text()

    assert f"{option.name}:" not in dumped({**dict(option.requires), option.name: option.default}, "default")
    for i, value in enumerate(option.values[1:]):
        assert f"{option.name}:" in dumped(option.flags(value), f"v{i}")
