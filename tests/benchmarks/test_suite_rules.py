"""The rules of the maintained benchmark suite (benchmarks/__init__.py): every module runs as
`python -m benchmarks.NAME` without editing the import path, uses the project's public names only, and has a
smoke test here; benchmarks/results/ holds results only (a one-off script goes to experiments/DATE-topic/)."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"
PROJECT = {"autotune", "costmodels", "hardware", "search"}
# modules other benchmarks import, not benchmarks themselves: no `python -m` entry point of their own
HELPERS = {"tables", "joblog", "guided_search"}
MODULES = sorted(p for p in BENCHMARKS.glob("*.py") if p.name != "__init__.py")


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_names(source: str) -> list[str]:
    """`from X import _name`, `import X._mod`, and `X._name` of a name bound by an import from a project
    package (autotune, costmodels, hardware, search), as `line: text`."""
    tree = ast.parse(source)
    bound: set[str] = set()
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                and node.module.split(".")[0] in PROJECT:
            if any(_private(part) for part in node.module.split(".")):
                found.append(f"{node.lineno}: from {node.module} import ...")
            for alias in node.names:
                if _private(alias.name):
                    found.append(f"{node.lineno}: from {node.module} import {alias.name}")
                bound.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in PROJECT:
                    if any(_private(part) for part in alias.name.split(".")):
                        found.append(f"{node.lineno}: import {alias.name}")
                    bound.add(alias.asname or alias.name.split(".")[0])
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            base = node.value
            while isinstance(base, ast.Attribute):
                base = base.value
            if isinstance(base, ast.Name) and base.id in bound:
                found.append(f"{node.lineno}: {ast.unparse(node)}")
    return sorted(set(found), key=lambda f: int(f.split(":", 1)[0]))


def test_the_scan_finds_private_names():
    src = ("from autotune.compiler import emission as K\nfrom costmodels.features.tables import _gather\n"
           "import hardware._x\nimport search.annealing as sa\nfrom benchmarks import _helper\n"
           "K._rule()\nsa.SimulatedAnnealing\nobj._cache\nK.__name__\n")
    assert [f.split(": ", 1)[1] for f in private_names(src)] == [
        "from costmodels.features.tables import _gather", "import hardware._x", "K._rule"]


def test_there_is_a_suite():
    assert len(MODULES) >= 20 and (BENCHMARKS / "__init__.py").is_file()


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.stem)
def test_no_import_path_edits_and_public_names_only(path: Path):
    text = path.read_text()
    assert "sys.path" not in text, f"{path.name}: run as `python -m benchmarks.{path.stem}`, never edit sys.path"
    assert not private_names(text), f"{path.name} uses private names of the project: {private_names(text)}"
    assert not re.search(r"python3? benchmarks/\w+\.py", text), (
        f"{path.name}: its usage says `python benchmarks/X.py`; the suite runs as `python -m benchmarks.X`")


@pytest.mark.parametrize("path", [p for p in MODULES if p.stem not in HELPERS], ids=lambda p: p.stem)
def test_every_benchmark_has_an_entry_point_and_a_smoke_test(path: Path):
    assert re.search(r'^if __name__ == "__main__":', path.read_text(), re.M), (
        f"{path.name}: no `if __name__ == \"__main__\":` block, so `python -m benchmarks.{path.stem}` does nothing")
    imports = re.compile(rf"from benchmarks import [^\n]*\b{path.stem}\b|from benchmarks\.{path.stem} import"
                         rf"|import benchmarks\.{path.stem}\b|benchmarks\.{path.stem}\b")
    tests = [t for t in (ROOT / "tests" / "benchmarks").glob("test_*.py") if t.name != Path(__file__).name]
    assert any(imports.search(t.read_text()) for t in tests), (
        f"{path.name} is a maintained benchmark with no smoke test in tests/benchmarks/")


def test_results_hold_no_scripts():
    scripts = sorted(str(p.relative_to(ROOT)) for p in (BENCHMARKS / "results").rglob("*")
                     if p.suffix in (".py", ".sh") and p.is_file())
    assert scripts == [], "scripts in benchmarks/results/ (move them to experiments/DATE-topic/): " + ", ".join(scripts)
