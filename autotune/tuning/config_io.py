"""Configurations on disk (best_config.json), readable by people and other tools and meaningful
across runs: a fusion configuration names its fused edges by computation, producer and consumer; a
layout configuration gives the minor-to-major layout of every tensor (output, operands) of every
configurable node, named by computation and instruction. `save_config`/`load_config` take either space."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

from autotune.compiler.fusion import FusionConfig, FusionSpace
from autotune.compiler.layouts import LayoutConfig, LayoutSpace

FORMAT = "autotune-fusion-config"
LAYOUT_FORMAT = "autotune-layout-config"
VERSION = 1


def layout_config_to_dict(space: LayoutSpace, cfg: LayoutConfig, extra: Optional[dict] = None) -> dict:
    """A layout configuration as JSON data: every configurable node with the layout of each tensor."""
    lay = space.layouts(cfg)
    nodes = [{"computation": nd.computation, "instruction": nd.instruction, "opcode": nd.opcode,
              "layouts": [list(t) for t in lay[(nd.comp, nd.node)]]} for nd in space.nodes]
    d: dict[str, Any] = {"format": LAYOUT_FORMAT, "version": VERSION, "program": space.program.name,
                         "target": space.target, "n_nodes": len(nodes), "config_hash": space.config_hash(cfg),
                         "copies": space.copies(cfg), "nodes": nodes}
    if extra:
        d.update(extra)
    return d


def layout_config_from_dict(space: LayoutSpace, d: dict, source: str = "<config>") -> LayoutConfig:
    """The configuration of `layout_config_to_dict` data (ValueError naming what does not fit)."""
    for key, want in (("target", space.target), ("program", space.program.name), ("n_nodes", len(space.nodes))):
        have = d.get(key)
        if have is not None and have != want:
            raise ValueError(f"{source}: layout configuration is for {key} {have!r}, this one is {want!r}")
    given = {}
    for item in d.get("nodes", []):
        if not isinstance(item, dict) or not isinstance(item.get("layouts"), list):
            raise ValueError(f"{source}: node entry {item!r} needs computation, instruction and layouts")
        given[(item.get("computation"), item.get("instruction"))] = item["layouts"]
    names = {(nd.computation, nd.instruction) for nd in space.nodes}
    unknown = [k for k in given if k not in names]
    if unknown:
        raise ValueError(f"{source}: {unknown[0][1]} in {unknown[0][0]} is not a configurable node of this program")
    try:
        return space.from_layouts([given.get((nd.computation, nd.instruction), []) for nd in space.nodes])
    except ValueError as e:
        raise ValueError(f"{source}: {e}") from None


def config_to_dict(space: FusionSpace, cfg: FusionConfig, extra: Optional[dict] = None) -> dict:
    if isinstance(space, LayoutSpace):
        return layout_config_to_dict(space, cfg, extra)
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
    if isinstance(space, LayoutSpace):
        if not isinstance(d, dict) or d.get("format") != LAYOUT_FORMAT:
            raise ValueError(f"{source}: not an autotune layout configuration (missing format={LAYOUT_FORMAT!r})")
        if d.get("version", 0) > VERSION:
            raise ValueError(f"{source}: configuration version {d.get('version')} is newer than this autotune "
                             f"understands ({VERSION})")
        return layout_config_from_dict(space, d, source)
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
