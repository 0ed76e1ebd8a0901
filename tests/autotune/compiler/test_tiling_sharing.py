"""The pieces of TilingInfo shared between kernels and the batch paths built on them (issue 21, round 6)
change no number: on the kernels of real programs (a transformer's dots, a convnet's convolutions),
every description equals one built from empty caches, stacked rows equal `TileRows.stack`, the batch's
tile rows equal `TilingInfo.tile_array`, and the geometry's per-kernel columns equal their definitions."""
import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest

from autotune.compiler import tiles
from autotune.compiler.fusion import FusionSpace
from autotune.compiler.program import Program
from autotune.compiler.tiles import TileConfig, TileRows, TileSpace, TilingInfo

ROOT = Path(__file__).resolve().parents[3]


def _kernels(name: str, n_random: int) -> list:
    space = FusionSpace(Program.from_file(str(ROOT / "examples/hlo" / name)), "tpu")
    rng = np.random.default_rng(0)
    out: dict = {}
    for cfg in [space.default()] + [space.random(rng) for _ in range(n_random)]:
        for k in space.kernels(cfg):
            if not k.is_trivial:
                out.setdefault(k.hash, k)
    return list(out.values())


@pytest.fixture(scope="module")
def kernels() -> list:
    return _kernels("bert_small_train.hlo", 3) + _kernels("efficientnet_small_infer.hlo", 1)


def _same(a, b) -> None:
    if isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    else:
        assert a == b


def _same_rows(a: TileRows, b: TileRows) -> None:
    for f in dataclasses.fields(TileRows):
        _same(getattr(a, f.name), getattr(b, f.name))


def test_shared_pieces_equal_a_cold_build(kernels):
    tiles.clear_caches()
    shared = [tiles.tiling_info(k, "tpu") for k in kernels]
    heroes = [i for i in shared if i.hero in ("dot", "conv")]
    assert {i.hero for i in heroes} == {"dot", "conv"}
    # the heroes' per-dim arrays are shared between kernels of the same hero and tiled shape
    assert len({id(i._row_parts[0]) for i in heroes}) < len(heroes)
    for k, info in zip(kernels, shared):
        tiles.clear_caches()
        cold = TilingInfo.of(k, "tpu")
        for f in dataclasses.fields(TilingInfo):
            if not f.name.startswith("_"):
                _same(getattr(info, f.name), getattr(cold, f.name))
        _same_rows(info.row, cold.row)
        assert info.row is info.row  # made once
        with pytest.raises(ValueError):  # shared arrays are read-only
            info.row.D[0] = 2.0
    tiles.clear_caches()


def test_stack_rows_is_tile_rows_stack(kernels):
    tiles.clear_caches()
    infos = [tiles.tiling_info(k, "tpu") for k in kernels]
    _same_rows(tiles.stack_rows(infos), TileRows.stack([i.row for i in infos]))
    _same_rows(tiles.stack_rows(infos[:1] * 3), TileRows.stack([infos[0].row] * 3))
    with pytest.raises(ValueError, match="no tiling descriptions"):
        tiles.stack_rows([])


def test_batch_tile_rows_are_tile_array(kernels):
    tiles.clear_caches()
    rng = np.random.default_rng(1)
    ks, tl = [], []
    for k in kernels[:120]:
        space = TileSpace(k, "tpu")
        info = tiles.tiling_info(k, "tpu")
        ks += [k, k, k]
        tl += [None, space.random(rng), TileConfig((1,) * (info.rank + 1))]  # default, random, wrong rank
    b, T, _, _, infos = tiles.batch_inputs(ks, tl, "tpu")
    ref = np.array([inf.tile_array(t if t is not None else tiles.default_tile(k, "tpu"))
                    for k, t, inf in zip(ks, tl, infos)])[:, :T.shape[1]]
    _same(T, ref)
    _same_rows(b, TileRows.stack([inf.row for inf in infos]).first_dims(T.shape[1]).take(np.arange(len(ks))))


def test_geometry_columns_are_their_definitions(kernels):
    from costmodels import features
    from costmodels.features.schema import _GCOL, _fold, _l2
    tiles.clear_caches()
    V = features.geometry_matrix(kernels, "tpu").astype(np.float64)
    for k, row in zip(kernels, V):
        info = tiles.tiling_info(k, "tpu")
        want = np.zeros(len(row))
        want[_GCOL["geo_rank"]] = info.rank
        for j, d in enumerate(_fold(info.dims)):
            want[_GCOL[f"geo_dim_{j}"]] = _l2(d)
        t = tiles.tiles_to_array([info], [tiles.default_tile(k, "tpu")])[0]
        for j, x in enumerate(_fold([int(x) for x in t[:min(info.rank, tiles.R_MAX)]])):
            want[_GCOL[f"geo_tile_{j}"]] = _l2(x)
        if info.rank >= 2:
            want[_GCOL["geo_second_minor_extent"]] = _l2(info.dims[info.mtm[1]])
        want[_GCOL["geo_n_inputs"]] = len(k.inputs)
        if info.hero is not None:
            want[_GCOL["geo_has_hero"]] = 1.0
            want[_GCOL["geo_m_scale"]] = math.log2(max(float(info.m_scale), 1e-30))
            want[_GCOL["geo_hero_flops"]] = _l2(info.hero_flops)
        want[_GCOL["geo_vector_flops"]] = _l2(info.vec_flops)
        want[_GCOL["geo_rhs_producer_flops"]] = _l2(info.rhs_vec)
        for name in ("geo_rank", "geo_second_minor_extent", "geo_n_inputs", "geo_has_hero", "geo_m_scale",
                     "geo_hero_flops", "geo_vector_flops", "geo_rhs_producer_flops"):
            assert row[_GCOL[name]] == np.float32(want[_GCOL[name]]), name
        for j in range(features.R):
            for name in (f"geo_dim_{j}", f"geo_tile_{j}"):
                assert row[_GCOL[name]] == np.float32(want[_GCOL[name]]), name


def test_target_names_are_cached_until_a_spec_is_registered():
    from autotune.compiler.targets import base
    specs, aliases = dict(base._SPECS), dict(base._SPEC_ALIASES)
    try:
        assert tiles.canonical_target_name("tpu") == tiles.canonical_target_name("tpu-v3") == "tpu-v3"
        assert tiles.specs._TARGET_NAMES["tpu"][1] == "tpu-v3" == tiles.specs._spec("tpu").name
        base.register_spec("test-spec", lambda: base.get_spec("cpu"), aliases=("tpu",))  # takes the alias over
        assert tiles.canonical_target_name("tpu") == base.get_spec("cpu").name == tiles.specs._spec("tpu").name
    finally:
        base._SPECS.clear()
        base._SPECS.update(specs)
        base._SPEC_ALIASES.clear()
        base._SPEC_ALIASES.update(aliases)
        base.SPEC_GENERATION[0] += 1
    assert tiles.canonical_target_name("tpu") == "tpu-v3"


def test_computation_caches_are_weak_and_accept_duck_typed_computations(kernels):
    import gc
    import types

    tiles.clear_caches()
    tiles.tiling_info(kernels[0], "tpu")
    assert kernels[0].computation in tiles.info._TILED_SHAPES
    # a computation that cannot be weakly referenced is priced, just not cached
    k = kernels[0]
    comp = types.SimpleNamespace(instructions=k.computation.instructions, operands=k.computation.operands)
    duck = types.SimpleNamespace(hash="duck", output_shape=k.output_shape, computation=comp, members=k.members,
                                 root=k.root, inputs=k.inputs, input_shapes=k.input_shapes, cost=k.cost,
                                 space=k.space, comp=k.comp, fusion_kind=k.fusion_kind, is_trivial=False)
    info = TilingInfo.of(duck, "tpu")
    assert info.dims == tiles.tiling_info(k, "tpu").dims
    # entries go with their computation
    space = FusionSpace(Program.from_file(str(ROOT / "examples/hlo/bert_small_infer.hlo")), "tpu")
    ks = [x for x in space.kernels(space.default()) if not x.is_trivial]
    tiles.tiling_info(ks[0], "tpu")
    n = len(tiles.info._TILED_SHAPES)
    del space, ks
    gc.collect()  # (the cached descriptions and shared pieces hold no computation)
    assert len(tiles.info._TILED_SHAPES) == n - 1
    tiles.clear_caches()
