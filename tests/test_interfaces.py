"""Interfaces a plug-in author can rely on: no public function or method of autotune/ takes more than
MAX_PARAMETERS parameters (options come grouped in dataclasses: autotune/tuning/options.py,
autotune/cli/arguments.py), and the click commands that take `**options` build their dataclass from
exactly the options they declare."""
from __future__ import annotations

import dataclasses
import importlib
import inspect
import pkgutil

import click
import pytest

import autotune

MAX_PARAMETERS = 10


def _modules() -> list:
    return [importlib.import_module(m.name) for m in pkgutil.walk_packages(autotune.__path__, "autotune.")]


def _public_functions(module) -> list:
    """(qualified name, function) of the module's own public functions, the public methods (and
    `__init__`) of its public classes, and the functions behind its click commands."""
    out = []
    for name, obj in vars(module).items():
        if name.startswith("_"):
            continue
        if isinstance(obj, click.Command) and obj.callback is not None:
            fn = inspect.unwrap(obj.callback)
            if fn.__module__ == module.__name__:
                out.append((f"{module.__name__}.{name} (command)", fn))
        elif inspect.isfunction(obj) and obj.__module__ == module.__name__:
            out.append((f"{module.__name__}.{name}", obj))
        elif inspect.isclass(obj) and obj.__module__ == module.__name__:
            generated_init = dataclasses.is_dataclass(obj) and obj.__init__.__code__.co_filename.startswith("<")
            for attr, value in vars(obj).items():
                if attr.startswith("_") and attr != "__init__":
                    continue
                if attr == "__init__" and generated_init:
                    continue  # a dataclass's fields are the grouping itself
                fn = value.__func__ if isinstance(value, (staticmethod, classmethod)) else value
                if inspect.isfunction(fn):
                    out.append((f"{module.__name__}.{name}.{attr}", inspect.unwrap(fn)))
    return out


def _parameter_count(fn) -> int:
    """Parameters a caller may pass by name or position (keyword-only included; not self/cls, *args, **kwargs)."""
    params = inspect.signature(fn).parameters.values()
    return sum(1 for p in params if p.name not in ("self", "cls")
               and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD))


def test_no_public_function_takes_more_than_ten_parameters():
    too_many = sorted(f"{name}: {n}" for module in _modules() for name, fn in _public_functions(module)
                      if (n := _parameter_count(fn)) > MAX_PARAMETERS)
    assert not too_many, "group these options in a dataclass:\n" + "\n".join(too_many)


def test_the_check_sees_commands_methods_and_functions():
    from autotune.cli import common, search
    from autotune.tuning import tuner
    names = [n for m in (common, search, tuner) for n, _ in _public_functions(m)]
    assert "autotune.cli.search.fusion (command)" in names and "autotune.tuning.tuner.Tuner.__init__" in names
    assert "autotune.cli.common.make_evaluator" in names and not [n for n in names if "._" in n and "__init__" not in n]


@pytest.mark.parametrize("command, args_class", [
    ("fusion", "FusionArgs"), ("layout", "SearchArgs"), ("tile", "TileArgs"), ("dataset build", "DatasetBuildArgs"),
])
def test_command_options_are_their_dataclass_fields(command, args_class):
    """A command taking `**options` builds its dataclass from them: the fields are exactly its options."""
    from autotune.cli import arguments
    from autotune.cli.app import main
    cmd = main
    for word in command.split():
        cmd = cmd.get_command(click.Context(cmd), word)
    declared = {p.name for p in cmd.params if isinstance(p, click.Option)}
    fields = {f.name for f in dataclasses.fields(getattr(arguments, args_class))}
    assert declared == fields


def test_train_passes_every_option_to_train_model():
    from autotune.cli.learn import _training_options, train
    ctx = click.Context(train)
    flags = {p.name: p.get_default(ctx) for p in train.params if p.name not in ("model", "task", "data_dir", "out_path")}
    opts = _training_options(flags)
    assert opts["static_features"] is True and opts["nthread"] is None and opts["rank_loss"] is None
    assert _training_options({**flags, "loss": "listmle"})["loss"] == "rank"
    with pytest.raises(TypeError, match="not passed"):
        _training_options({**flags, "new_flag": 1})


def test_no_hasattr_or_getattr_probes_for_interface_methods():
    """Interfaces are declared on base classes and checked with isinstance (DEVELOPERS.md): no
    hasattr/getattr on a name the plug-in interfaces declare, outside the contract suites (whose job is
    to probe third-party objects). `name` and `load` are too generic to tell apart from other objects'."""
    import inspect
    import pathlib
    import re
    from autotune.compiler.space import Space
    from autotune.tuning.callbacks import Callback
    from costmodels.base import CostModel, LayoutModel, Predictor
    from hardware.base import Evaluator, ProgramEvaluator
    from search.base import Strategy
    names = set()
    for cls in (CostModel, LayoutModel, Predictor, Evaluator, ProgramEvaluator, Strategy, Space, Callback):
        names |= {n for n, _ in inspect.getmembers(cls) if not n.startswith("_")}
    names -= {"name", "load"}
    root = pathlib.Path(__file__).resolve().parents[1]
    probe = re.compile(r'\b(?:hasattr|getattr)\(\s*[^,()]+,\s*"([A-Za-z_]+)"')
    found = []
    for package in ("autotune", "costmodels", "hardware", "search"):
        for path in (root / package).rglob("*.py"):
            if "testing" in path.relative_to(root).parts:
                continue
            for lineno, line in enumerate(path.read_text().splitlines(), 1):
                found += [f"{path.relative_to(root)}:{lineno}: {m}" for m in probe.findall(line) if m in names]
    assert not found, "declare these on the interface and check isinstance:\n" + "\n".join(found)
