"""The fusion package's structure: one-way imports (targets <- fusion <- kernel emission), its public
names, and KernelRef/Kernel as one concept in two layers."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import autotune.compiler.fusion as fusion
from autotune.compiler.fusion import FusionSpace, Kernel, KernelRef
from autotune.compiler.program import Program

ROOT = Path(__file__).resolve().parents[3]
COMPILER = ROOT / "autotune" / "compiler"
PROG = ROOT / "examples" / "idioms" / "cond_train.hlo"


def _imports(path: Path) -> set[str]:
    """Every module a file imports, at top level or inside functions."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


@pytest.mark.parametrize("package, forbidden", [
    ("fusion", ("autotune.compiler.emission",)),  # emission imports the fusion space, not back
    ("targets", ("autotune.compiler.fusion", "autotune.compiler.emission")),  # rules know no space module
])
def test_imports_go_one_way(package: str, forbidden: tuple[str, ...]) -> None:
    for path in sorted((COMPILER / package).glob("*.py")):
        bad = {m for m in _imports(path) if m.startswith(forbidden)}
        assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


def test_fusion_loads_without_the_emitter() -> None:
    code = ("import sys, autotune.compiler.fusion; "
            "assert 'autotune.compiler.emission' not in sys.modules, 'fusion imported kernel'")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr


def test_public_names_from_the_package() -> None:
    for name in fusion.__all__:
        assert getattr(fusion, name) is not None
    from autotune.compiler.emission import Kernel as EmitterKernel
    assert EmitterKernel is Kernel


def test_kernel_is_a_materialized_kernel_ref() -> None:
    space = FusionSpace(Program.from_file(str(PROG)), "tpu")
    cfg = space.default()
    refs = space.state(cfg).refs()
    kernels = space.kernels(cfg)
    assert len(refs) == len(kernels) and all(isinstance(k, KernelRef) for k in kernels)
    for ref, k in zip(refs, kernels):
        assert (k.comp, k.root, k.members, k.valid) == (ref.comp, ref.root, ref.members, ref.valid)
        assert k.hash == ref.hash == space.kernel_hash(ref.comp, ref.root, ref.members)
    k = kernels[0]
    k.hash = "override"
    assert Kernel.from_ref(space, k).hash == "override"
