"""The import contract of docs/architecture.md (setup.cfg, [importlinter]) holds, and it catches violations.

The contract is checked by import-linter (`lint-imports`) on grimp's import graph, which counts
function-level (lazy) and TYPE_CHECKING imports too. The violation tests add one import to the real graph
(or one offending module to a copy of the sources) and check that the contract breaks.
"""
from __future__ import annotations

import copy
import os
import shutil
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import grimp
import networkx as nx
import pytest
from importlinter.api import read_configuration
from importlinter.contracts.acyclic_siblings import AcyclicSiblingsContract
from importlinter.contracts.independence import IndependenceContract
from importlinter.contracts.layers import LayersContract

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "setup.cfg"
CONTRACT_TYPES = {c.type_name: c for c in (LayersContract, IndependenceContract, AcyclicSiblingsContract)}
LINT_IMPORTS = "from importlinter.cli import lint_imports_command; lint_imports_command()"


@lru_cache(maxsize=None)
def _configuration() -> dict:
    return read_configuration(str(CONFIG))


def _contract_options(contract_id: str) -> dict:
    return next(c for c in _configuration()["contracts_options"] if c["id"] == contract_id)


@lru_cache(maxsize=None)
def _graph() -> grimp.ImportGraph:
    options = _configuration()["session_options"]
    return grimp.build_graph(*options["root_packages"], cache_dir=None,
                             exclude_type_checking_imports=options.get("exclude_type_checking_imports") == "True")


def _contract_kept(contract_id: str, graph: grimp.ImportGraph) -> bool:
    options = _contract_options(contract_id)
    contract = CONTRACT_TYPES[options["type"]](name=options["name"], session_options=_configuration()["session_options"],
                                               contract_options=options)
    return contract.check(copy.deepcopy(graph), verbose=False).kept


def _graph_with(importer: str, imported: str) -> grimp.ImportGraph:
    graph = copy.deepcopy(_graph())
    assert importer in graph.modules and imported in graph.modules, (importer, imported)
    graph.add_import(importer=importer, imported=imported, line_number=1, line_contents=f"import {imported}")
    return graph


def _lint_imports(root: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(root))
    return subprocess.run([sys.executable, "-c", LINT_IMPORTS, "--no-cache", "--config", "setup.cfg"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=120)


def _import_cycles(graph: grimp.ImportGraph, ignored: list[str]) -> list[list[str]]:
    """Every set of modules that import one another in a cycle, across packages too, after removing the
    `ignored` imports ("importer -> imported", exact module names)."""
    edges = nx.DiGraph()
    for module in graph.modules:
        edges.add_edges_from((module, imported) for imported in graph.find_modules_directly_imported_by(module))
    for line in ignored:
        importer, imported = (part.strip() for part in line.split("->"))
        if edges.has_edge(importer, imported):
            edges.remove_edge(importer, imported)
    return sorted(sorted(c) for c in nx.strongly_connected_components(edges) if len(c) > 1)


def test_lint_imports_keeps_every_contract() -> None:
    """`lint-imports` on the repository: all contracts kept, no stale `ignore_imports` exception."""
    result = _lint_imports(REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_no_import_cycles_across_packages() -> None:
    """No cycle anywhere in the module graph, including across packages (e.g. compiler <-> costmodels), beyond
    the exceptions listed in the acyclic contract."""
    cycles = _import_cycles(_graph(), _contract_options("acyclic").get("ignore_imports", []))
    assert cycles == []


def _modules_in_no_layer(graph: grimp.ImportGraph) -> list[str]:
    layers = [name.strip() for line in _contract_options("layers")["layers"] for name in line.replace(":", "|").split("|")]
    roots = _configuration()["session_options"]["root_packages"]
    return sorted(m for m in graph.modules if m not in roots
                  and not any(m == layer or m.startswith(layer + ".") for layer in layers))


def test_every_module_belongs_to_a_layer() -> None:
    """A new module of autotune/ must be placed in a layer of the contract (else nothing checks its imports)."""
    unplaced = _modules_in_no_layer(_graph())
    assert unplaced == [], "modules in no layer of [importlinter:contract:layers] in setup.cfg: " + ", ".join(unplaced)
    graph = copy.deepcopy(_graph())
    graph.add_module("autotune.newmodule")
    assert _modules_in_no_layer(graph) == ["autotune.newmodule"]


def test_stale_exception_is_an_error() -> None:
    """An `ignore_imports` exception that matches no import (its branch removed the import) is an error, so that
    it gets deleted."""
    options = dict(_contract_options("acyclic"))
    options["ignore_imports"] = [*options.get("ignore_imports", []), "autotune.compiler.hlo -> autotune.compiler.program"]
    contract = AcyclicSiblingsContract(name=options["name"], session_options=_configuration()["session_options"],
                                       contract_options=options)
    with pytest.raises(Exception, match="No matches for ignored import autotune.compiler.hlo -> autotune.compiler.program"):
        contract.check(copy.deepcopy(_graph()), verbose=False)


@pytest.mark.parametrize("contract_id, importer, imported", [
    ("layers", "autotune.compiler.hlo", "autotune.tuning.tuner"),        # compiler -> tuning
    ("layers", "autotune.compiler.program", "costmodels.base"),          # compiler -> a cost model interface
    ("layers", "costmodels.xgb", "autotune.tuning.dataset"),             # costmodels -> tuning
    ("layers", "search.annealing", "autotune.cli.app"),                  # search -> cli
    ("layers", "autotune.tuning.tuner", "autotune.testing.fuzz"),        # tuning -> testing
    ("layers", "hardware.simulator", "benchmarks.paper"),                # hardware -> benchmarks
    ("layers", "autotune.cli.app", "autotune.testing.fuzz"),             # cli and testing are independent
    ("interfaces", "costmodels.xgb", "hardware.simulator"),              # past hardware.base
    ("interfaces", "search.random", "costmodels.analytical"),            # past costmodels.base
    ("interfaces", "hardware.base", "search.annealing"),                 # past search.base
    ("acyclic", "autotune.compiler.hlo", "autotune.compiler.program"),   # program imports hlo
    ("acyclic", "costmodels.gnn.train", "costmodels.gnn.model"),         # model.fit imports train
    ("acyclic", "search.base", "search.random"),                         # random imports base
])
def test_contract_breaks_on_a_violating_import(contract_id: str, importer: str, imported: str) -> None:
    assert _contract_kept(contract_id, _graph())
    assert not _contract_kept(contract_id, _graph_with(importer, imported))


@pytest.mark.parametrize("importer, imported", [
    ("search.random", "costmodels.base"),             # a sibling's interface
    ("autotune.tuning.store", "search.genetic"),      # a lower layer, any module
    ("benchmarks.paper", "autotune.testing.fuzz"),    # the top layer uses everything
])
def test_contract_allows_a_permitted_import(importer: str, imported: str) -> None:
    graph = _graph_with(importer, imported)
    assert all(_contract_kept(c["id"], graph) for c in _configuration()["contracts_options"])


def test_cycle_across_packages_is_found() -> None:
    """costmodels.base imports hardware.base; the reverse import closes a cycle that only the whole-graph
    check sees (both are interfaces, and they are not siblings of one package)."""
    ignored = _contract_options("acyclic").get("ignore_imports", [])
    assert ["costmodels.base", "hardware.base"] in _import_cycles(_graph_with("hardware.base", "costmodels.base"), ignored)


def test_lazy_upward_import_in_a_new_module_breaks_the_contract(tmp_path: Path) -> None:
    """End to end on a copy of the sources: a function-level import from the compiler layer up to the tuning
    layer, in a new module, makes `lint-imports` fail and name the import."""
    for root in _configuration()["session_options"]["root_packages"]:
        shutil.copytree(REPO / root, tmp_path / root, ignore=lambda d, names: [n for n in names if not
                        (n.endswith(".py") or (Path(d) / n).is_dir()) or n == "__pycache__"])
    shutil.copy(CONFIG, tmp_path / "setup.cfg")
    (tmp_path / "autotune" / "compiler" / "upward.py").write_text(
        '"""Offending module."""\n\n\ndef tuned() -> object:\n    from autotune.tuning import tuner\n    return tuner\n')
    result = _lint_imports(tmp_path)
    assert result.returncode != 0
    assert "autotune.compiler.upward -> autotune.tuning.tuner" in result.stdout, result.stdout + result.stderr
