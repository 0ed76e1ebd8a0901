"""One plug-in registry for cost models, strategies, evaluators and targets.

A `Registry` maps names to plug-ins (classes or factories). A spec resolves, in this order, to
- a registered name (`registry.register("mine", Mine)`; case-insensitive; aliases allowed),
- a built-in (name -> "module:attr", imported on first use),
- an entry point of the registry's group (`[options.entry_points] autotune.strategies = mine = pkg.mod:Mine`),
- `module:Class` (also `module.Class`), or `path/to/file.py:Class`; a bare `file:Class` is also looked up
  as `file.py` in the working directory, `./examples/` and the repository's `examples/`.
An unknown spec raises `UnknownPluginError` (a ValueError) in one line that lists the known names.

Constructing a registry does no work: nothing is imported and entry points are read on first look-up.
This module imports nothing else of the project, so every layer may use it.
"""
from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Optional

__all__ = ["Registry", "UnknownPluginError", "load_object", "FILE_SPEC_HINT"]

FILE_SPEC_HINT = "module:Class or path/to/file.py:Class"
_REPO = Path(__file__).resolve().parent.parent


class UnknownPluginError(ValueError):
    """A plug-in spec that names nothing known (or cannot be loaded)."""


def _load_file(path: Path, error: type[UnknownPluginError]) -> Any:
    """Import a Python file as a module, cached in sys.modules under a name made from its resolved path."""
    path = path.resolve()
    mod_name = "autotune_plugin_" + hashlib.blake2b(str(path).encode(), digest_size=6).hexdigest() + "_" + path.stem
    mod = sys.modules.get(mod_name)
    if mod is not None:
        return mod
    spec = importlib.util.spec_from_file_location(mod_name, path)
    if spec is None or spec.loader is None:
        raise error(f"cannot load plug-in file {str(path)!r}")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = mod
    try:
        spec.loader.exec_module(mod)
    except Exception:
        sys.modules.pop(mod_name, None)
        raise
    return mod


def _import_module(mod_name: str, error: type[UnknownPluginError]) -> Any:
    """A module by file path, by import name, or as `<name>.py` in ., ./examples or the repository's examples/."""
    if mod_name.endswith(".py") or "/" in mod_name or "\\" in mod_name:
        p = Path(mod_name)
        if not p.is_file():
            raise error(f"plug-in file {mod_name!r} not found")
        return _load_file(p, error)
    try:
        return importlib.import_module(mod_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and mod_name != exc.name and not mod_name.startswith(exc.name + "."):
            raise  # the module exists but one of its own imports is missing: report that
        rel = Path(*mod_name.split(".")).with_suffix(".py")
        for base in (Path.cwd(), Path.cwd() / "examples", _REPO / "examples"):
            if (base / rel).is_file():
                return _load_file(base / rel, error)
        raise error(f"cannot import module {mod_name!r}: {exc}") from None


def load_object(spec: str, error: type[UnknownPluginError] = UnknownPluginError) -> Any:
    """The object named by `module:attr`, `module.attr` or `path/to/file.py:attr` (dotted attr allowed)."""
    if ":" in spec:
        mod_name, _, attr = spec.rpartition(":")
    else:
        mod_name, _, attr = spec.rpartition(".")
    if not mod_name or not attr:
        raise error(f"bad plug-in spec {spec!r}: use a name, {FILE_SPEC_HINT}")
    obj = _import_module(mod_name, error)
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise error(f"module {mod_name!r} has no attribute {attr!r} ({spec!r})")
        obj = getattr(obj, part)
    return obj


def _entry_points(group: str) -> dict:
    try:
        from importlib.metadata import entry_points
        eps = entry_points()
        found = eps.select(group=group) if hasattr(eps, "select") else eps.get(group, [])
        return {ep.name.strip().lower(): ep for ep in found}
    except Exception:  # noqa: BLE001 - broken metadata must not break look-ups
        return {}


class Registry:
    """Name -> plug-in (class or factory) for one kind of plug-in, with an entry-point group.

    `check(obj, spec)` validates (and may adapt) what a spec resolved to; it raises the registry's
    error for an object of the wrong kind."""

    def __init__(self, kind: str, group: str, builtins: Optional[Mapping[str, str]] = None,
                 aliases: Optional[Mapping[str, str]] = None,
                 check: Optional[Callable[[Any, str], Any]] = None,
                 error: type[UnknownPluginError] = UnknownPluginError) -> None:
        self.kind = kind
        self.group = group
        self.error = error
        self._check = check
        self._builtins = {self._key(k): v for k, v in (builtins or {}).items()}
        self._aliases = {self._key(k): self._key(v) for k, v in (aliases or {}).items()}
        self._registered: dict[str, Any] = {}

    @staticmethod
    def _key(name: str) -> str:
        return name.strip().lower()

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, group={self.group!r})"

    # ------------------------------------------------------------------------------------ writing
    def register(self, name: str, obj: Any = None, aliases: Iterable[str] = ()) -> Any:
        """Register `obj` under `name` (and aliases); returns obj. Without obj: a class decorator."""
        if not name or not isinstance(name, str) or not name.strip():
            raise ValueError(f"{self.kind} name must be a non-empty string")
        if obj is None:
            return lambda o: self.register(name, o, aliases)
        key = self.canonical(name)  # registering under an alias replaces what the alias stands for
        self._registered[key] = obj
        for a in aliases:
            self._aliases[self._key(a)] = key
        return obj

    def registered(self, name: str) -> Any:
        """What was registered under a name or alias (None if nothing; built-ins and entry points aside)."""
        return self._registered.get(self.canonical(name))

    def unregister(self, name: str) -> None:
        """Forget a registered name and the aliases that point at it (built-ins and entry points stay)."""
        key = self.canonical(name)
        self._registered.pop(key, None)
        for alias in [a for a, target in self._aliases.items() if target == key]:
            del self._aliases[alias]

    # ------------------------------------------------------------------------------------ reading
    def entry_points(self) -> dict:
        """{name: EntryPoint} of the registry's group (read on every call: installs may change)."""
        return _entry_points(self.group)

    def names(self) -> list[str]:
        """Every name that resolves without a module path (registered, built-in, entry points)."""
        return sorted(set(self._registered) | set(self._builtins) | set(self.entry_points()))

    def builtin_names(self) -> list[str]:
        """The built-in names alone (no entry-point scan: cheap enough for a help text at import)."""
        return sorted(self._builtins)

    def aliases(self) -> dict[str, str]:
        """{alias: name}."""
        return dict(self._aliases)

    def canonical(self, name: str) -> str:
        """The name an alias stands for (lower-cased); other names unchanged."""
        key = self._key(name)
        return self._aliases.get(key, key)

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        key = self.canonical(name)
        return key in self._registered or key in self._builtins or key in self.entry_points()

    def unknown(self, spec: Any) -> UnknownPluginError:
        """The one-line error for a spec that names nothing known."""
        known = ", ".join(self.names()) or "(none)"
        return self.error(f"unknown {self.kind} {spec!r} (known: {known}; or give {FILE_SPEC_HINT})")

    def get(self, spec: Any) -> Any:
        """Resolve a spec to its plug-in (see the module doc); a non-string passes to `check` as it is."""
        if not isinstance(spec, str):
            return self._checked(spec, getattr(spec, "__name__", repr(spec)))
        text = spec.strip()
        if not text:
            raise self.error(f"{self.kind} spec must be a name, {FILE_SPEC_HINT}, not {spec!r}")
        key = self.canonical(text)
        if key in self._registered:
            return self._checked(self._registered[key], text)
        if key in self._builtins:
            obj = load_object(self._builtins[key], self.error)
            self._registered.setdefault(key, obj)
            return self._checked(obj, text)
        eps = self.entry_points()
        if key in eps:
            try:
                obj = eps[key].load()
            except Exception as exc:  # noqa: BLE001 - a broken plug-in is one line naming it
                raise self.error(f"{self.kind} {key!r}: entry point of {self.group} failed to load: {exc}") from None
            return self._checked(obj, text)
        if ":" in text or ("." in text and not text[0].isdigit()):
            return self._checked(load_object(text, self.error), text)
        raise self.unknown(text)

    def _checked(self, obj: Any, spec: str) -> Any:
        return self._check(obj, spec) if self._check is not None else obj
