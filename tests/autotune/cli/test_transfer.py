"""`--transfer store` (AutoTVM's transfer learning) on tiny programs with the simulator: the first run
records history, the second learns from it and says so; machine keys keep other machines out unless
asked for; options that cannot apply are one-line errors."""
from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner

pytest.importorskip("xgboost")

from autotune.cli.app import main  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
HISTORY_PROG = os.path.join(ROOT, "examples", "hlo", "vae_small_infer.hlo")
PROG = os.path.join(ROOT, "examples", "hlo", "autoencoder_small_infer.hlo")
FAST = ["--cost-model", "hardware", "--strategy", "model-based", "--max-evals", "24", "--batch-size", "8",
        "--budget", "60s", "--no-progress", "--strategy-param", "sa_chains=8", "--strategy-param", "sa_steps=8"]


def fusion(tmp_path, prog: str, name: str, *extra: str):
    r = CliRunner().invoke(main, ["fusion", prog, *FAST, "--store", str(tmp_path / "s.sqlite"),
                                  "--out", str(tmp_path / name), *extra])
    report = json.loads((tmp_path / name / "report.json").read_text()) if r.exit_code == 0 else None
    return r, report


def test_fusion_transfer_store_learns_from_other_programs(tmp_path):
    r, first = fusion(tmp_path, HISTORY_PROG, "first", "--transfer", "store")
    assert r.exit_code == 0, r.output
    assert first["transfer"]["source"] is None and first["transfer"]["history"]["rows"] == 0
    assert any("--transfer store: 0 usable history rows" in w for w in first["warnings"])
    r, second = fusion(tmp_path, PROG, "second", "--transfer", "store")
    assert r.exit_code == 0, r.output
    t = second["transfer"]
    assert t["source"] == "store" and t["programs"] == 1 and t["program_names"] == ["vae_small_infer.hlo"]
    assert t["rows"] >= 20 and t["machines"] == {second["machine"]: t["rows"]}
    assert 0.0 <= t["prior_weight_last_fit"] <= 1.0
    assert "transfer: global model on" in r.output and "from 1 other program," in r.output
    # the program being tuned is never its own history: a rerun of the first program sees only the second
    r, again = fusion(tmp_path, HISTORY_PROG, "again")
    assert r.exit_code == 0, r.output
    assert again["transfer"]["program_names"] == ["autoencoder_small_infer.hlo"]


def test_history_of_another_machine_only_when_asked(tmp_path):
    """Rows of another machine (copied in under another machine key) are left out by default."""
    import sqlite3
    fusion(tmp_path, HISTORY_PROG, "first", "--transfer", "none")
    db = sqlite3.connect(tmp_path / "s.sqlite")
    assert db.execute("UPDATE measurements SET machine = 'Other CPU (64 cores)'").rowcount > 0
    db.commit()
    db.close()
    r, rep = fusion(tmp_path, PROG, "mine")
    assert r.exit_code == 0 and rep["transfer"]["source"] is None and "history" in rep["transfer"]
    r, rep = fusion(tmp_path, PROG, "any", "--history-any-machine")
    assert r.exit_code == 0, r.output
    assert rep["transfer"]["source"] == "store"
    assert rep["transfer"]["machines"] == {"Other CPU (64 cores)": rep["transfer"]["rows"]}
    assert rep["transfer"]["machine_filter"] == "any machine (asked for)"


def test_tile_transfer_and_strategy_params(tmp_path):
    store = str(tmp_path / "t.sqlite")
    base = ["--strategy", "model-based", "--trials", "8", "--repeats", "1", "--store", store]
    r = CliRunner().invoke(main, ["tile", HISTORY_PROG, *base, "--out", str(tmp_path / "a")])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, ["tile", PROG, *base, "--out", str(tmp_path / "b"), "--strategy-param",
                                  "diversity=1.5", "--strategy-param", "objective=reg"])
    assert r.exit_code == 0, r.output
    rep = json.loads((tmp_path / "b" / "report.json").read_text())
    assert rep["strategy_params"] == {"diversity": 1.5, "objective": "reg"}
    assert rep["transfer"]["source"] == "store" and rep["transfer"]["program_names"] == ["vae_small_infer.hlo"]


@pytest.mark.parametrize("args, message", [
    (["--strategy", "annealing", "--transfer", "store"], "needs --strategy model-based"),
    (["--strategy", "model-based", "--cost-model", "analytical", "--transfer", "store"], "measures on hardware"),
    (["--strategy", "model-based", "--strategy-param", "divrsity=1"], "not a parameter of strategy model-based"),
    (["--strategy", "model-based", "--strategy-param", "diversity"], "expected KEY=VALUE"),
    (["--strategy", "model-based", "--strategy-param", "epsilon=2"], "epsilon must be in [0, 1]"),
])
def test_options_that_cannot_apply_are_one_line_errors(tmp_path, args, message):
    r = CliRunner().invoke(main, ["fusion", PROG, "--store", "none", "--max-evals", "8", "--no-progress",
                                  "--out", str(tmp_path / "x"), *(["--cost-model", "hardware"] if
                                                                  "--cost-model" not in args else []), *args])
    assert r.exit_code == 2, r.output
    assert message in r.output and "Traceback" not in r.output


def test_resume_checks_transfer_and_strategy_params(tmp_path):
    """A checkpoint records the transfer (the history's programs) and the strategy parameters: resuming
    with other ones is a one-line error naming the option, with the same ones it continues."""
    r, _ = fusion(tmp_path, HISTORY_PROG, "history", "--transfer", "none")
    assert r.exit_code == 0, r.output
    r, first = fusion(tmp_path, PROG, "run", "--transfer", "none")
    assert r.exit_code == 0, r.output
    assert first["fingerprint"]["transfer"] == "none"
    assert first["fingerprint"]["strategy_params"] == "sa_chains=8.0,sa_steps=8.0"
    resume = ["--resume", str(tmp_path / "run")]
    r, _ = fusion(tmp_path, PROG, "run", "--transfer", "store", *resume)
    assert r.exit_code == 2, r.output
    assert "checkpoint was made with --transfer none, not store (history of 1 program" in r.output
    assert "Traceback" not in r.output
    r, _ = fusion(tmp_path, PROG, "run", "--transfer", "none", "--strategy-param", "diversity=1.0", *resume)
    assert r.exit_code == 2 and "checkpoint was made with --strategy-param" in r.output, r.output
    r, again = fusion(tmp_path, PROG, "run", "--transfer", "none", *resume)
    assert r.exit_code == 0, r.output
    assert again["resumed_from"]["evaluations"] == first["evaluations"]


def test_transfer_fingerprint_names_the_history_not_its_rows():
    from autotune.api import transfer_fingerprint
    store = {"source": "store", "programs": 2, "programs_sha256": "ab" * 32, "namespace": "sim/1",
             "machine_filter": "m", "rows": 100}
    assert transfer_fingerprint(store) == transfer_fingerprint({**store, "rows": 90})
    assert transfer_fingerprint(store) != transfer_fingerprint({**store, "programs_sha256": "cd" * 32})
    assert transfer_fingerprint(store) != transfer_fingerprint({**store, "machine_filter": "any machine (asked for)"})
    assert transfer_fingerprint({"source": None, "reason": "--transfer none"}) == "none"
    assert transfer_fingerprint({"source": "model", "model": "analytical"}) == "model analytical"


def test_fusion_with_the_fine_tuned_gnn_as_local_model(tmp_path):
    r, rep = fusion(tmp_path, PROG, "gnn", "--transfer", "none", "--strategy-param", "model=gnn")
    assert r.exit_code == 0, r.output
    assert rep["strategy_params"]["model"] == "gnn" and rep["evaluations"] == 24
    assert "model='gnn'" in rep["fingerprint"]["strategy_params"]


def test_trial_cost_paired_needs_hardware_trials_on_xla(tmp_path):
    """--trial-cost paired times whole programs side by side: a one-line error without --cost-model
    hardware or on an evaluator that cannot (the simulator)."""
    r = CliRunner().invoke(main, ["fusion", PROG, "--cost-model", "analytical", "--trial-cost", "paired",
                                  "--budget", "10s", "--no-progress", "--store", "none", "--out", str(tmp_path / "a")])
    assert r.exit_code == 2 and "--trial-cost paired: applies with --cost-model hardware" in r.output
    r = CliRunner().invoke(main, ["fusion", PROG, "--cost-model", "hardware", "--trial-cost", "paired",
                                  "--budget", "10s", "--no-progress", "--store", "none", "--out", str(tmp_path / "b")])
    assert r.exit_code == 2 and "--evaluator xla on the cpu backend" in r.output
