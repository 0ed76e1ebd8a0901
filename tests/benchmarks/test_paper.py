"""benchmarks/paper.py: the random-split view of a dataset and the assembly of docs/paper.md."""
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from autotune.tuning.dataset import DatasetOptions, build_dataset

from benchmarks import paper

ROOT = Path(__file__).resolve().parents[2]

PROGRAMS = ["vae_small_infer", "lstm_small_infer", "autoencoder_small_infer", "recommender_small_infer",
            "wavernn_small_infer", "gnn_small_infer"]


@pytest.fixture(scope="module")
def tile_ds(tmp_path_factory):
    progs = tmp_path_factory.mktemp("progs")
    for p in PROGRAMS:
        shutil.copy(ROOT / "examples" / "hlo" / f"{p}.hlo", progs / f"{p}.hlo")
    return build_dataset(progs, "tile", "sim", configs_per_program=1, out_dir=tmp_path_factory.mktemp("t"),
                         options=DatasetOptions(max_tiles_per_kernel=4))


def test_random_split_view_reassigns_programs_not_samples(tile_ds, tmp_path):
    view = paper._random_split_view(tile_ds, tmp_path / "random", seed=3)
    assert sorted(view.programs) == sorted(tile_ds.programs)
    assert {s: len(view.programs_in(s)) for s in ("train", "validation", "test")} == \
        {"train": len(PROGRAMS) - 2, "validation": 1, "test": 1}
    for name in PROGRAMS:  # same samples through the linked shards
        a, b = tile_ds.load_program(name), view.load_program(name)
        np.testing.assert_array_equal(a.runtime, b.runtime)
    # the original dataset keeps its family split; a second view with the same seed is identical
    assert json.loads((tile_ds.root / "manifest.json").read_text())["programs"] == tile_ds.manifest["programs"]
    again = paper._random_split_view(tile_ds, tmp_path / "random", seed=3)
    assert {p: r["split"] for p, r in again.programs.items()} == {p: r["split"] for p, r in view.programs.items()}


def test_paper_md_orders_saved_sections(tmp_path):
    res = tmp_path / "results"
    res.mkdir()
    for name, body in (("calibration", "CAL-BODY"), ("fusion_sim", "FUSION-BODY"), ("ablations", "## Own title\n\nABL")):
        (res / f"{name}.json").write_text(json.dumps({
            "name": name, "title": paper.TITLES[name], "markdown": body, "quick": True, "date": "2026-01-01",
            "machine": "m", "seconds": 1.0}))
    text = paper.write_paper_md(tmp_path).read_text()
    assert text.index("FUSION-BODY") < text.index("CAL-BODY")  # the order: Table 2 first
    assert text.index("FUSION-BODY") < text.index("ABL") < text.index("CAL-BODY")
    assert text.count("## ") == 3 and "Own title" not in text and "quick mode" in text


def test_md_table_and_formats():
    t = paper.md_table(["a", "b"], [["x", paper._f(0.123, "mape")], ["y", paper._f(float("nan"), "kendall")]])
    assert t.splitlines() == ["| a | b |", "|---|---:|", "| x | 0.1% |", "| y | - |"]
    assert paper._f(1.23456, "x") == "1.235x" and paper._f(0.05, "top1") == "5.00%"
    assert paper._f(12.345, "mape_all") == "12.3%" and paper._f(0.5, "kendall_all") == "0.500"


def test_no_format_field_in_a_plain_string_literal():
    # a "{x['a']:.1f}" piece of an implicitly concatenated report line that lost its f prefix prints
    # the braces into docs/paper.md instead of the number
    import io
    import re
    import tokenize
    field = re.compile(r"\{[A-Za-z_][\w\[\]'\"\.]*(![rsa])?(:[^{}]*)?\}")
    bad = []
    for name in ("paper.py", "paper_ablations.py", "paper_tile_online.py"):
        src = (Path(paper.__file__).parent / name).read_text()
        for tok in tokenize.generate_tokens(io.StringIO(src).readline):
            if tok.type != tokenize.STRING:
                continue
            prefix = re.match(r"[A-Za-z]*", tok.string).group(0).lower()
            docstring = tok.string[len(prefix):].startswith(('"""', "'''"))
            if "f" not in prefix and not docstring and field.search(tok.string):
                bad.append(f"{name}:{tok.start[0]}: {tok.string[:60]}")
    assert not bad, bad


def test_xla_search_section_resumes_at_its_first_unfinished_job(tmp_path, monkeypatch):
    ctx = paper.Ctx(True, tmp_path / "work", tmp_path / "out", 0, lambda s: None)
    (ctx.results / "fusion_xla.json").write_text(json.dumps({"best_model": "m.json", "beats_analytical": False}))
    calls = []

    def fake_job(job):
        calls.append(job)
        if len(calls) == 4:
            raise KeyboardInterrupt  # the run is stopped during its fourth search
        return {"program": Path(job["program"]).stem, "seed": job["seed"], "start": job["start"],
                "times_s": {"default": 1.0, "hw_only": 1.0, "guided": 0.9}, "hw_only_configs": 3,
                "guided_verified": 2, "hw_only_speedup": 1.0, "guided_speedup": 1 / 0.9}

    monkeypatch.setattr(paper.guided_search, "run_xla_job", fake_job)
    with pytest.raises(KeyboardInterrupt):
        paper.section_fusion_search_xla(ctx)
    assert len(calls) == 4 and all(j["cost_model"] == "analytical" and j["hw_chains"] == 8 for j in calls)
    res = paper.section_fusion_search_xla(ctx)  # resumed: the three finished searches are not run again
    assert len(calls) == 4 + 3 and calls[4] == calls[3]
    assert len(res["data"]) == 6 and "in 2 of 2 cases" in res["markdown"]  # (program, start) cases


def test_split_move_calls_small_changes_level():
    assert paper._split_move(2.27, 2.35) == "about level"  # 0.08 points
    assert paper._split_move(1.0, 2.3) == "worse on unseen families"
    assert paper._split_move(18.4, 8.2) == "better on unseen families"
    assert paper._split_move(10.0, 12.0) == "about level"  # 2 points, but under a quarter of 10
    assert paper._split_move(None, 2.0) == "-"
