"""benchmarks/heldout_seeds.py: the smoke run trains and scores on validation programs only and records nothing;
a full run trains the shipped recipe with the other seeds, scores them on the held-out test split as
benchmarks.heldout does, records each seed once in the ledger's seed_spread list, and reports the spread."""
import json
import shutil

import pytest

from benchmarks import heldout, heldout_seeds


def test_quick_run_reads_no_test_program_and_records_nothing(tmp_path, capsys):
    before = heldout.LEDGER.read_text() if heldout.LEDGER.exists() else None
    results = sorted(heldout.RESULTS.iterdir()) if heldout.RESULTS.exists() else []
    assert heldout_seeds.main(["--quick", "--seed", "1", "--work", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "hlo_heldout" not in out and "hlo_library" in out
    assert "--n-estimators 5" in out and "| xgb_fusion_tpu_seed1.json |" in out
    assert (heldout.LEDGER.read_text() if heldout.LEDGER.exists() else None) == before
    assert (sorted(heldout.RESULTS.iterdir()) if heldout.RESULTS.exists() else []) == results


def test_shipped_seeds_and_same_model():
    files = heldout.shipped_files("fusion", "tpu")
    assert heldout_seeds.shipped_seed(files["xgboost"]) == 0
    assert heldout_seeds.shipped_seed(files["gnn"]) == 2  # the best of seeds 0-2 on validation was shipped
    assert heldout_seeds.same_model(files["gnn"], files["gnn"])
    assert not heldout_seeds.same_model(files["gnn"], heldout.shipped_files("tile", "tpu")["gnn"])


def test_spread_is_mean_and_sample_sd():
    s = heldout_seeds.spread({"a": {"mape": 3.0, "n_kernels": 5}, "b": {"mape": 5.0}, "c": {"mape": 4.0}})
    assert s["mean"] == {"mape": 4.0} and s["sd"]["mape"] == pytest.approx(1.0) and s["n"] == 3
    assert heldout_seeds.spread({"a": {"mape": 3.0}})["sd"]["mape"] is None


@pytest.fixture
def fake(monkeypatch, tmp_path):
    """`autotune` replaced: train writes a copy of a shipped file (or the shipped file itself), evaluate answers
    fixed figures and the recorded analytical ones; the ledger and results go to tmp_path."""
    ledger = json.loads(heldout.LEDGER.read_text())
    ledger.pop("seed_spread", None)  # the recorded seeds aside: every seed is new here
    results = tmp_path / "results"
    results.mkdir()
    monkeypatch.setattr(heldout, "RESULTS", results)
    monkeypatch.setattr(heldout, "LEDGER", results / "ledger.json")
    heldout.LEDGER.write_text(json.dumps(ledger))
    shipped = {t: heldout.shipped_files(t, "tpu")["xgboost"] for t in ("fusion", "tile")}
    analytical = {t: heldout_seeds.shipped_entry(ledger, f"{t}-tpu", shipped[t])["summary"]["analytical"]
                  for t in shipped}
    calls = []

    class Done:
        stdout, stderr = "", ""

    def cli(*args):
        calls.append(list(args))
        done = Done()
        if args[0] == "train":
            out = args[args.index("--out") + 1]
            seed = int(args[args.index("--seed") + 1])
            text = shipped[args[args.index("--task") + 1]].read_text()
            out_text = text if seed == 0 else text.replace('"seed": 0', f'"seed": {seed}', 1)
            open(out, "w").write(out_text)
        elif args[0] == "evaluate":
            task = "tile" if "tile-tpu" in args[args.index("--data") + 1] else "fusion"
            labels = [a.split("/")[-1] for a in args[1:] if a.endswith(".json")]
            figs = {lab: {"mape": 4.0 + i, "kendall": 0.9} for i, lab in enumerate(labels)}
            figs["analytical"] = analytical[task]
            pooled = figs if task == "fusion" else {"analytical": analytical[task]}  # tiles: no pooled figures
            done.stdout = json.dumps({"summary": figs, "median": figs, "pooled": pooled,
                                      "programs": {"p": figs, "q": figs}})
        return done
    monkeypatch.setattr(heldout, "cli", cli)
    return calls


def test_a_full_run_trains_the_recipe_scores_on_the_test_split_and_records_each_seed_once(fake, tmp_path, capsys):
    recipe = heldout_seeds.RECIPES[("fusion-tpu", "xgboost")]
    assert heldout_seeds.main(["--work", str(tmp_path / "w"), "--jobs", "2"]) == 0
    builds = [c for c in fake if c[:2] == ["dataset", "build"]]
    assert builds[0][2:2 + len(recipe.builds[0])] == list(recipe.builds[0])
    trains = [c for c in fake if c[0] == "train"]
    assert sorted(int(c[c.index("--seed") + 1]) for c in trains) == [1, 2]
    assert all(c[c.index("--data") + 2:c.index("--seed")] == list(recipe.train) for c in trains)
    heldout_build, evaluate = builds[-1], next(c for c in fake if c[0] == "evaluate")
    assert str(heldout.HELDOUT) in heldout_build and "--split-file" in heldout_build
    for option, value in zip(heldout.recipe("fusion-tpu")[::2], heldout.recipe("fusion-tpu")[1::2]):
        assert heldout_build[heldout_build.index(option) + 1] == value
    assert evaluate[evaluate.index("--split") + 1] == "test"
    ledger = json.loads(heldout.LEDGER.read_text())
    seeds = ledger["seed_spread"]
    assert sorted(e["seed"] for e in seeds) == [1, 2] and all(e["model"] == "xgboost" for e in seeds)
    assert len(ledger["scores"]) == len(json.loads((heldout.ROOT / "benchmarks/results/heldout/ledger.json")
                                                   .read_text())["scores"])  # no shipped entry added
    raw = json.loads((heldout.ROOT / seeds[0]["raw"]).read_text())  # an absolute path here (tmp_path)
    assert raw["analytical_matches_recorded"] is True and raw["spread"]["spread"]["summary"]["n"] == 3
    assert "mean of 3" in capsys.readouterr().out
    # asked again: nothing trained or scored, the recorded figures reported
    fake.clear()
    assert heldout_seeds.main(["--work", str(tmp_path / "w2")]) == 0
    out = capsys.readouterr().out
    assert fake == [] and "already scored" in out and "mean of 3" in out
    # a seed's file is scored once, also by benchmarks.heldout
    trained = tmp_path / "w" / "models" / "xgb_fusion_tpu_seed1.json"
    assert heldout.already_scored(ledger, "fusion-tpu", {"xgboost": trained})


def test_the_shipped_seed_is_a_reproduction_check_never_scored(fake, tmp_path, capsys):
    assert heldout_seeds.main(["--seed", "0", "--work", str(tmp_path / "w")]) == 0
    assert not [c for c in fake if c[0] == "evaluate"]
    assert "seed 0 retrained reproduces the shipped xgb_fusion_tpu.json" in capsys.readouterr().out
    assert "seed_spread" not in json.loads(heldout.LEDGER.read_text())
    shutil.rmtree(tmp_path / "w")


def test_a_task_without_pooled_figures_is_recorded(fake, tmp_path):
    """Tile results have pooled figures for the analytical model only (a run of 2026-11-29 stopped on it)."""
    assert heldout_seeds.main(["--task", "tile-tpu", "--work", str(tmp_path / "w")]) == 0
    seeds = json.loads(heldout.LEDGER.read_text())["seed_spread"]
    assert sorted(e["seed"] for e in seeds) == [1, 2] and all("pooled" not in e for e in seeds)
