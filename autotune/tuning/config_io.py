"""Fusion configurations on disk (best_config.json): fused edges named by computation, producer and
consumer, so a file stays meaningful across runs and is readable by people and other tools."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

from autotune.compiler.fusion import FusionConfig, FusionSpace

FORMAT = "autotune-fusion-config"
VERSION = 1


def config_to_dict(space: FusionSpace, cfg: FusionConfig, extra: Optional[dict] = None) -> dict:
    comps = space.program.computations
    fused = []
    for e in range(space.n_edges):
        if cfg.bits[e]:
            comp = comps[space.edge_comp[e]]
            fused.append([comp.name, comp.instructions[space.edge_prod[e]].name,
                          comp.instructions[space.edge_cons[e]].name])
    d: dict[str, Any] = {
        "format": FORMAT, "version": VERSION, "program": space.program.name, "target": space.target,
        "n_edges": space.n_edges, "n_fused": len(fused), "fused": fused,
    }
    if extra:
        d.update(extra)
    return d


def save_config(space: FusionSpace, cfg: FusionConfig, path: "str | Path", extra: Optional[dict] = None) -> None:
    """Write atomically (temp file + rename) so a crash never leaves a half-written file."""
    path = Path(path)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(config_to_dict(space, cfg, extra), indent=1))
    tmp.replace(path)


def config_from_dict(space: FusionSpace, d: dict, source: str = "<config>") -> FusionConfig:
    if not isinstance(d, dict) or d.get("format") != FORMAT:
        raise ValueError(f"{source}: not an autotune fusion configuration (missing format={FORMAT!r})")
    if d.get("version", 0) > VERSION:
        raise ValueError(f"{source}: configuration version {d.get('version')} is newer than this autotune "
                         f"understands ({VERSION})")
    for key, want in (("target", space.target), ("program", space.program.name), ("n_edges", space.n_edges)):
        have = d.get(key)
        if have is not None and have != want:
            raise ValueError(f"{source}: configuration is for {key} {have!r}, this one is {want!r} "
                             f"(was the configuration made for another program or target?)")
    index: dict[tuple, int] = {}
    comps = space.program.computations
    for e in range(space.n_edges):
        comp = comps[space.edge_comp[e]]
        index[(comp.name, comp.instructions[space.edge_prod[e]].name,
               comp.instructions[space.edge_cons[e]].name)] = e
    bits = bytearray(space.n_edges)
    for item in d.get("fused", []):
        key = tuple(item) if isinstance(item, list) else None
        if key not in index:
            raise ValueError(f"{source}: fused edge {item} is not a fusible edge of this program on target "
                             f"{space.target!r} (was the configuration made for another program?)")
        bits[index[key]] = 1
    cfg = FusionConfig(bits)
    if not space.is_valid(cfg):
        raise ValueError(f"{source}: configuration breaks the fusion rules of target {space.target!r}")
    return cfg


def load_config(space: FusionSpace, path: "str | Path") -> FusionConfig:
    try:
        d = json.loads(Path(path).read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}:{e.lineno}:{e.colno}: invalid JSON in configuration: {e.msg}") from None
    return config_from_dict(space, d, str(path))
