"""autotune.plugins: the one registry behind cost models, strategies, evaluators and targets."""
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from autotune.plugins import Registry, UnknownPluginError, load_object

ROOT = Path(__file__).resolve().parents[2]


class Thing:
    pass


class Other:
    pass


def _broken_load():
    raise ImportError("boom")


def test_register_alias_decorator_and_case():
    reg = Registry("widget", "autotune.test-widgets")
    assert reg.register("Thing", Thing, aliases=["t"]) is Thing
    assert reg.get("THING") is Thing and reg.get(" t ") is Thing
    assert "thing" in reg and "T" in reg and "nope" not in reg and 3 not in reg

    @reg.register("other")
    class Decorated(Other):
        pass

    assert reg.get("other") is Decorated
    assert reg.names() == ["other", "thing"]
    assert reg.canonical("T") == "thing" and reg.aliases() == {"t": "thing"}
    reg.register("T", Other)  # an alias names its canonical entry
    assert reg.get("thing") is Other and reg.names() == ["other", "thing"]
    reg.unregister("other")
    assert "other" not in reg
    with pytest.raises(ValueError):
        reg.register("  ", Thing)


def test_builtins_are_imported_on_first_use_only():
    reg = Registry("widget", "g", builtins={"broken": "no_such_module_xyz:Thing", "path": "pathlib:Path"})
    assert reg.names() == ["broken", "path"]  # listed without importing anything
    assert reg.get("path") is Path
    with pytest.raises(UnknownPluginError, match="cannot import module 'no_such_module_xyz'"):
        reg.get("broken")


def test_module_colon_dotted_and_file_specs(tmp_path, monkeypatch):
    reg = Registry("widget", "g")
    assert reg.get("pathlib:Path") is Path and reg.get("pathlib.Path") is Path
    assert reg.get("json:JSONDecoder.decode") is json.JSONDecoder.decode  # dotted attribute
    f = tmp_path / "my_plugin.py"
    f.write_text("class Plug:\n    pass\n")
    cls = reg.get(f"{f}:Plug")
    assert cls.__name__ == "Plug"
    monkeypatch.chdir(tmp_path)
    assert reg.get("my_plugin.py:Plug") is cls  # the same file is one module
    assert reg.get("my_plugin:Plug") is cls     # a bare name is also looked up as a file in the folder
    assert load_object(f"{f}:Plug") is cls
    with pytest.raises(UnknownPluginError, match="not found"):
        reg.get("missing/dir/file.py:X")
    with pytest.raises(UnknownPluginError, match="has no attribute"):
        reg.get("pathlib:Nope")


def test_unknown_is_one_line_listing_known_names():
    reg = Registry("widget", "g", builtins={"b": "pathlib:Path"})
    reg.register("a", Thing)
    with pytest.raises(UnknownPluginError) as e:
        reg.get("zzz")
    msg = str(e.value)
    assert msg == ("unknown widget 'zzz' (known: a, b; or give module:Class or path/to/file.py:Class)")
    assert "\n" not in msg and issubclass(UnknownPluginError, ValueError)
    with pytest.raises(UnknownPluginError, match="must be a name"):
        reg.get("")


def test_entry_points_and_broken_plugins(monkeypatch):
    reg = Registry("widget", "autotune.test-widgets")
    monkeypatch.setattr(reg, "entry_points", lambda: {"ep": SimpleNamespace(load=lambda: Thing),
                                                      "broken": SimpleNamespace(load=_broken_load)})
    assert reg.get("EP") is Thing and "ep" in reg.names()
    with pytest.raises(UnknownPluginError, match=r"widget 'broken': entry point of autotune.test-widgets .*boom"):
        reg.get("broken")


def test_real_entry_point_group_is_read(tmp_path, monkeypatch):
    """An installed distribution's entry point (metadata on sys.path) resolves by name."""
    dist = tmp_path / "widgetplug-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: widgetplug\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[autotune.test-widgets]\nshiny = pathlib:PurePath\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    reg = Registry("widget", "autotune.test-widgets")
    from pathlib import PurePath
    assert reg.get("shiny") is PurePath and "shiny" in reg.names()


def test_check_validates_and_adapts():
    class Wrong(Exception):
        pass

    class WidgetError(UnknownPluginError):
        pass

    def check(obj, spec):
        if obj is Other:
            raise WidgetError(f"{spec!r} is not a widget")
        return ("checked", obj)

    reg = Registry("widget", "g", check=check, error=WidgetError)
    reg.register("thing", Thing)
    reg.register("other", Other)
    assert reg.get("thing") == ("checked", Thing)
    assert reg.get(Thing) == ("checked", Thing)  # non-strings go through check as they are
    with pytest.raises(WidgetError, match="not a widget"):
        reg.get("other")
    with pytest.raises(WidgetError, match="unknown widget"):
        reg.get("zzz")


def test_import_loads_nothing_of_the_project():
    code = textwrap.dedent("""
        import sys, json
        import autotune.plugins
        print(json.dumps(sorted(m for m in sys.modules
                                if m.split('.')[0] in ('autotune', 'costmodels', 'hardware', 'search'))))
    """)
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == ["autotune", "autotune.plugins"]


def test_every_plugin_kind_uses_the_registry():
    from autotune.compiler.targets import TARGETS, UnknownTargetError
    from costmodels.base import COST_MODELS, UnknownCostModelError
    from hardware.base import EVALUATORS, UnknownEvaluatorError
    from search.base import STRATEGIES, UnknownStrategyError
    groups = {reg.group: reg for reg in (TARGETS, COST_MODELS, EVALUATORS, STRATEGIES)}
    assert set(groups) == {"autotune.targets", "autotune.costmodels", "autotune.evaluators", "autotune.strategies"}
    for err in (UnknownTargetError, UnknownCostModelError, UnknownEvaluatorError, UnknownStrategyError):
        assert issubclass(err, UnknownPluginError)
    assert {"sim", "xla"} <= set(EVALUATORS.names())
    assert {"tpu", "tpu-v2", "cpu"} <= set(TARGETS.names()) and "h100" not in TARGETS  # h100: a spec, no rules
    setup = (ROOT / "setup.cfg").read_text()
    for group in groups:
        assert f"\n{group} =" in setup, f"setup.cfg declares no entry points of {group}"
