"""benchmarks/cpu_cost_models.py: the end-to-end split-half agreement and the paired reference (no jax needed)."""
import json
import math
import os
from pathlib import Path

import numpy as np
import pytest

from benchmarks import cpu_cost_models

ROOT = Path(__file__).resolve().parents[2]



def test_split_half_kendall_agrees_on_stable_times_and_not_on_swapped_ones():
    stable = [[1.0, 1.1, 1.0, 1.1], [2.0, 2.1, 2.0, 2.1], [3.0, 3.1, 3.0, 3.1], [4.0, 4.1, 4.0, 4.1]]
    assert cpu_cost_models.split_half_kendall(stable) == 1.0
    # odd rounds rank the configurations in reverse: the measurement disagrees with itself completely
    swapped = [[1.0, 4.0, 1.0, 4.0], [2.0, 3.0, 2.0, 3.0], [3.0, 2.0, 3.0, 2.0], [4.0, 1.0, 4.0, 1.0]]
    assert cpu_cost_models.split_half_kendall(swapped) == -1.0


def test_split_half_kendall_needs_two_rounds_and_three_configurations():
    assert math.isnan(cpu_cost_models.split_half_kendall([[1.0], [2.0], [3.0]]))
    assert math.isnan(cpu_cost_models.split_half_kendall([[1.0, 2.0], [2.0, 3.0]]))


class _Clock:
    t = 0


class _FakeRun:
    """A PreparedRun stand-in on a machine whose speed drifts by up to 2x over a few rounds: every
    block advances one clock tick and takes base x speed(tick)."""

    def __init__(self, base):
        self.base, self.number = base, 1

    def calibrate(self, min_block_ms):
        return 1

    def block(self, n=None, warmup=0):
        _Clock.t += 1
        return self.base * (1.5 + 0.5 * math.sin(_Clock.t / 60.0))


def test_paired_reference_cancels_drift_and_agrees_with_itself():
    import numpy as np
    true = [1.0, 1.15, 1.3, 1.45, 1.6]
    runs = [_FakeRun(1e-4 * t) for t in true] + [None]  # the last configuration did not compile
    p = cpu_cost_models.paired_reference(runs, rounds=8, pairs=3, block_ms=0.5)
    assert p["rounds"] == 8 and p["reference"] == 0 and math.isnan(p["ratio"][-1])
    absolute = [b for t in p["blocks"][0] for b in t[1]]
    assert max(absolute) / min(absolute) > 1.5  # the drift: the same program's blocks differ by > 1.5x
    np.testing.assert_allclose(p["ratio"][:5], true, rtol=0.03)  # local ratio: the drift cancels
    np.testing.assert_allclose(p["pair_ratio"][:5], true, rtol=0.01)
    row = {"paired": p, "measured_s": [1e-4 * t for t in true] + [float("nan")],
           "predicted_s": {"right": true + [0.0], "reversed": true[::-1] + [0.0]},
           "origin": ["default", "random", "random", "searched:xgboost", "searched:gnn", "random"]}
    cpu_cost_models.paired_summary(row)
    assert row["split_half_by_reference"]["local ratio"] == pytest.approx(1.0)
    assert row["split_half_by_reference"]["pair ratio"] == pytest.approx(1.0)
    assert row["kendall_paired"]["right"] == pytest.approx(1.0)
    assert row["kendall_paired"]["reversed"] == pytest.approx(-1.0)
    assert abs(row["paired_spread"] - 1.6) < 0.05
    by = row["by_origin"]  # the configuration that did not compile counts in neither subset
    assert by["default and random"]["configurations"] == 3 and by["searched"]["configurations"] == 2
    assert by["default and random"]["kendall"]["right"] == pytest.approx(1.0)
    assert by["default and random"]["kendall"]["reversed"] == pytest.approx(-1.0)
    assert math.isnan(by["searched"]["split_half"])  # too few configurations to rank


def test_cross_program_floor_is_the_best_single_value_per_shared_kernel(monkeypatch):
    """A kernel measured at 10 us in one program and 20 us in another: no single value does better than
    MAPE 0.25 (10 us: 0 and 0.5; 20 us: 1 and 0); kernels in one program only, or all faster than 5 us,
    do not count."""
    from types import SimpleNamespace
    from autotune.tuning import dataset as dataset_mod

    def program(pairs):
        graphs = [SimpleNamespace(hash=h) for h, _ in pairs]
        return SimpleNamespace(graph=np.arange(len(pairs)), runtime=np.array([y for _, y in pairs]), graphs=graphs)

    progs = {"a": program([("k", 10e-6), ("tiny", 1e-6), ("only_a", 30e-6)]),
             "b": program([("k", 20e-6), ("tiny", 2e-6)])}
    fake = SimpleNamespace(programs={n: {} for n in progs}, load_program=lambda n: progs[n])
    monkeypatch.setattr(dataset_mod.Dataset, "open", classmethod(lambda cls, root: fake))
    fl = cpu_cost_models.cross_program_floor("x")
    assert fl["kernels"] == 1 and fl["labels"] == 2
    assert fl["floor_mape_mean"] == pytest.approx(0.25) and fl["ratio_median"] == pytest.approx(2.0)
    assert fl["pairs"] == [{"programs": ["a", "b"], "kernels": 1, "ratio_median": pytest.approx(2.0)}]


def test_saved_configurations_are_repriced_exactly():
    """A run records each configuration's encoding; re-pricing them from the record gives the prices of the
    configurations themselves (any model can join a saved run's tables without measuring again)."""
    from autotune.compiler.fusion import FusionSpace
    from autotune.compiler.program import Program
    from autotune.tuning.pricing import space_cost
    from costmodels.analytical import AnalyticalCostModel
    path = "examples/hlo/vae_small_infer.hlo"
    space = FusionSpace(Program.from_file(str(ROOT / path)), "cpu")
    rng = np.random.default_rng(3)
    cfgs = [space.default()] + [space.random(rng) for _ in range(3)]
    texts = [cpu_cost_models.encode_config(space, c) for c in cfgs]
    assert all(set(t) <= {"0", "1"} and len(t) == space.n_edges for t in texts) and len(set(texts)) == 4
    assert [space.encode(cpu_cost_models.decode_config(space, t)) for t in texts] == [space.encode(c) for c in cfgs]
    model = AnalyticalCostModel("cpu")
    rows = cpu_cost_models.reprice([{"program": "vae_small_infer", "path": path, "configs": texts,
                                     "predicted_s": {}}], {"analytical": model})
    np.testing.assert_allclose(rows[0]["predicted_s"]["analytical"], space_cost(space, model)(cfgs))
    with pytest.raises(SystemExit, match="no configuration encodings"):
        cpu_cost_models.reprice([{"program": "old", "predicted_s": {}}], {"analytical": model})


def test_label_retest_compares_the_same_configurations_of_two_builds(monkeypatch):
    """Two builds of one program: configurations matched by their kernel sets (in either order, a searched one
    left out); a kernel at 10 us in one build and 20 us in the other has symmetric APE (1 + 0.5) / 2; kernels
    under 5 us in both do not count; end-to-end times in the same order give Kendall 1."""
    from types import SimpleNamespace
    from autotune.tuning import dataset as dataset_mod

    def build(cfgs, searched=None):
        hashes = sorted({h for c in cfgs for h in c})
        cid, g, rt, e2e = [], [], [], []
        for i, c in enumerate(cfgs):
            for h, y in c.items():
                cid.append(i), g.append(hashes.index(h)), rt.append(y)
            e2e.append(sum(c.values()))
        return SimpleNamespace(graphs=[SimpleNamespace(hash=h) for h in hashes], config={
            "cfg": np.array(cid), "graph": np.array(g), "runtime": np.array(rt), "end_to_end": np.array(e2e),
            "searched": np.array(searched if searched is not None else [False] * len(cfgs))})

    a = build([{"k": 10e-6, "tiny": 1e-6}, {"m": 30e-6}, {"n": 40e-6}, {"s": 50e-6}], [False, False, False, True])
    b = build([{"n": 40e-6}, {"k": 20e-6, "tiny": 3e-6}, {"m": 30e-6}, {"s": 5e-6}], [False, False, False, False])
    fakes = {"A": SimpleNamespace(programs={"p": {}}, load_program=lambda n: a, programs_in=lambda split: ["p"]),
             "B": SimpleNamespace(programs={"p": {}}, load_program=lambda n: b, programs_in=lambda split: ["p"])}
    monkeypatch.setattr(dataset_mod.Dataset, "open", classmethod(lambda cls, root: fakes[root]))
    r = cpu_cost_models.label_retest("A", "B")
    p = r["programs"]["p"]
    assert p["configurations"] == 3 and p["kernel_times"] == 3 and p["kernels"] == 3
    assert p["mape"] == pytest.approx(0.75 / 3) and r["median_mape_mean"] == pytest.approx(0.75 / 3)
    assert p["end_to_end_kendall"] == pytest.approx(1.0)
    assert p["mape_program_scaled"] == pytest.approx(p["mape"])  # median ratio 1: nothing to scale
    # several builds on a side: their times' geometric mean (a build averaged with itself changes nothing)
    assert cpu_cost_models.label_retest(["A", "A"], "B")["programs"]["p"]["mape"] == pytest.approx(p["mape"])
    labels = cpu_cost_models.averaged_labels("A,B")["p"]
    assert labels["k"] == pytest.approx(np.sqrt(10e-6 * 20e-6)) and labels["m"] == pytest.approx(30e-6)
    assert "s" not in labels  # searched in A: not a configuration both builds hold as sampled


def test_the_mapping_guard_refuses_in_one_line_before_the_kernel_limit():
    """A process past vm.max_map_count is aborted by LLVM mid-compile (a 12-program run lost every result on
    the tenth); the guard refuses the program first, naming the limit and the fix."""
    import pathlib

    from benchmarks import cpu_cost_models as ccm
    if not pathlib.Path("/proc/sys/vm/max_map_count").exists():
        pytest.skip("no /proc/sys/vm/max_map_count (not Linux): nothing is checked")
    ccm.check_mapping_headroom("p", 3, 51)  # this process is far below the limit
    with pytest.raises(ccm.MappingLimitError, match=r"^p: 3 of 51 configurations .* vm\.max_map_count") as err:
        ccm.check_mapping_headroom("p", 3, 51, margin=0.0)
    assert "\n" not in str(err.value)


def test_a_run_is_written_after_each_program_and_resumed(tmp_path, monkeypatch):
    """--json is rewritten after every program; --resume keeps the programs of an interrupted run of the same
    arguments and measures the rest; other arguments are refused."""
    import sys

    from benchmarks import cpu_cost_models as ccm
    out = tmp_path / "run.json"
    measured = []

    def fake(path, *a, **k):
        measured.append(os.path.basename(path))
        if len(measured) == 2 and not resumed:
            raise KeyboardInterrupt  # the run is killed while measuring the second program
        return {"program": os.path.basename(path)[:-4], "path": os.path.relpath(path, ccm.ROOT), "configurations": 2,
                "origins": {}, "spread": 1.0, "kendall": {}, "kendall_vs_min": {}, "end_to_end_split_half_kendall": 1.0,
                "end_to_end_over_charged_sum": 1.0}
    monkeypatch.setattr(ccm, "program_ranking", fake)
    monkeypatch.setattr(ccm, "print_paired", lambda *a: None)
    progs = ["examples/hlo/vae_small_infer.hlo", "examples/hlo/lstm_small_infer.hlo"]
    argv = ["cpu_cost_models", "--data", "none", "--skip-kernels", "--models", "--programs",
            *[os.path.join(ccm.ROOT, p) for p in progs], "--json", str(out)]
    resumed = False
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(KeyboardInterrupt):
        ccm.main()
    first = json.loads(out.read_text())
    assert [r["program"] for r in first["programs"]] == ["vae_small_infer"]
    resumed = True
    monkeypatch.setattr(sys, "argv", argv + ["--resume"])
    ccm.main()
    assert measured == ["vae_small_infer.hlo", "lstm_small_infer.hlo", "lstm_small_infer.hlo"]
    assert [r["program"] for r in json.loads(out.read_text())["programs"]] == ["vae_small_infer", "lstm_small_infer"]
    monkeypatch.setattr(sys, "argv", argv + ["--resume", "--rounds", "3"])
    with pytest.raises(SystemExit, match="other arguments \\(rounds\\)"):
        ccm.main()
