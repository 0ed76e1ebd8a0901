"""CLI misuse: every bad flag, path, budget, store, configuration or checkpoint is exactly one line
on stderr starting with "autotune: error:", exit status 2, and never a traceback.

A matrix of known misuses, checkpoints of other runs, and a seeded fuzz test (hypothesis,
derandomized, bounded) over random combinations of bad and good flags.
"""
from __future__ import annotations

import os
import shutil

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autotune.cli.app import main

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SMALL = os.path.join(ROOT, "tests", "fixtures", "hlo", "small")
EXP_ADD = os.path.join(SMALL, "exp_add.hlo")
DOT_ADD = os.path.join(SMALL, "dot_add.hlo")


def assert_one_line_error(result, fragment: str = "") -> None:
    assert result.exit_code == 2, (result.exit_code, result.output)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("autotune: error:"), result.stderr
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)  # no uncaught exception
    assert fragment in lines[0], (fragment, lines[0])


def invoke(*args: str):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    """Bad paths and files, and one finished run (with its checkpoint) of exp_add."""
    d = tmp_path_factory.mktemp("misuse")
    p = {"dir": d}
    p["file"] = d / "a_file"
    p["file"].write_text("x")
    p["corrupt_store"] = d / "corrupt.sqlite"
    p["corrupt_store"].write_bytes(b"this is not an sqlite database" * 40)
    p["empty_dir"] = d / "empty"
    p["empty_dir"].mkdir()
    p["corrupt_ckpt"] = d / "corrupt_run"
    p["corrupt_ckpt"].mkdir()
    (p["corrupt_ckpt"] / "checkpoint.pkl").write_bytes(b"\x80\x04garbage")
    p["bad_json"] = d / "bad.json"
    p["bad_json"].write_text("{not json")
    p["run"] = d / "run"
    r = invoke("fusion", EXP_ADD, "--budget", "30s", "--max-evals", "50", "--hw-budget", "0", "--cost-model",
               "analytical", "--store", "none", "--no-progress", "--out", p["run"])
    assert r.exit_code == 0, r.output
    p["other_config"] = d / "dot_add_config.json"
    r = invoke("fusion", DOT_ADD, "--budget", "30s", "--max-evals", "50", "--hw-budget", "0", "--cost-model",
               "analytical", "--store", "none", "--no-progress", "--out", d / "dot_run")
    assert r.exit_code == 0, r.output
    shutil.copy(d / "dot_run" / "best_config.json", p["other_config"])
    # a program with the same fusible edges as exp_add but other arithmetic (a resume must notice)
    p["twin"] = d / "exp_add_twin.hlo"
    p["twin"].write_text(open(EXP_ADD).read().replace("exponential(", "tanh("))
    return p


def _cases(p: dict) -> list:
    fus = ["fusion", EXP_ADD, "--store", "none", "--no-progress"]
    run = str(p["run"])
    return [
        # stores
        (fus + ["--store", p["dir"]], "is a directory"),
        (fus + ["--store", p["corrupt_store"]], "corrupt or not an SQLite file"),
        (fus + ["--store", p["file"] / "sub" / "m.sqlite"], "cannot create its directory"),
        (["measure", EXP_ADD, "--store", p["corrupt_store"]], "corrupt"),
        (["tile", EXP_ADD, "--store", p["dir"], "--out", p["dir"] / "t"], "is a directory"),
        (["dataset", "build", "--programs", SMALL, "--task", "fusion", "--store", p["corrupt_store"],
          "--out", p["dir"] / "ds"], "corrupt"),
        (["dataset", "build", "--programs", SMALL, "--task", "fusion", "--search-model", "analytical",
          "--out", p["dir"] / "ds"], "give --searched too"),
        # resume
        (fus + ["--resume", p["empty_dir"]], "no checkpoint"),
        (fus + ["--resume", p["corrupt_ckpt"]], "unreadable checkpoint"),
        (fus + ["--resume", p["dir"] / "missing"], "does not exist"),
        (["fusion", p["twin"], "--store", "none", "--resume", run, "--cost-model", "analytical"], "another program"),
        (["fusion", DOT_ADD, "--store", "none", "--resume", run, "--cost-model", "analytical"], "another program"),
        (fus + ["--resume", run, "--cost-model", "analytical", "--strategy", "genetic"], "--strategy annealing, not genetic"),
        (fus + ["--resume", run, "--cost-model", "analytical", "--seed", "7"], "--seed 0, not 7"),
        (fus + ["--resume", run], "--cost-model analytical, not"),
        # counts
        (["tile", EXP_ADD, "--top-k", "0"], "--top-k"),
        (fus + ["--top-k", "0"], "--top-k"),
        (fus + ["--workers", "0"], "--workers"),
        (["measure", EXP_ADD, "--workers", "0"], "--workers"),
        (fus + ["--workers", "2"], "apply to the xla evaluator"),
        (fus + ["--max-evals", "0"], "--max-evals"),
        (fus + ["--batch-size", "0"], "--batch-size"),
        (fus + ["--batch-size", "many"], "--batch-size"),
        (fus + ["--seed", "-1"], "--seed"),
        # budgets
        (fus + ["--budget", "0"], "too small"),
        (fus + ["--budget", "-5s"], "cannot parse duration"),
        (fus + ["--budget", "soon"], "cannot parse duration"),
        (fus + ["--budget", "5s", "--hw-budget", "-1"], "--hw-budget"),
        (fus + ["--budget", "5s", "--hw-budget", "lots"], "--hw-budget"),
        (fus + ["--budget", "5s", "--hw-budget", "inf"], "must be finite"),
        (fus + ["--budget", "5s", "--hw-budget", "6s"], "leaves nothing"),
        (["tile", EXP_ADD, "--budget", "0"], "too small"),
        (["tile", EXP_ADD, "--budget", "x1"], "cannot parse"),
        # names
        (fus + ["--strategy", "nope"], "unknown strategy"),
        (fus + ["--strategy", "no_such_module:Cls"], ""),
        (fus + ["--cost-model", "nope"], "unknown cost model"),
        (fus + ["--evaluator", "gpu"], "--evaluator"),
        (fus + ["--target", "tpu9"], "--target"),
        (fus + ["--evaluator", "sim", "--target", "cpu"], "simulates a TPU"),
        (["measure", EXP_ADD, "--end-to-end"], "needs the xla evaluator"),
        (fus + ["--bogus"], "No such option"),
        (["fusion"], "Missing argument"),
        (["nosuch"], "No such command"),
        (["fusion", p["dir"] / "missing.hlo"], "does not exist"),
        (["show", p["bad_json"]], "bad.json:1:"),
        # configurations and outputs
        (["emit", EXP_ADD, "--config", p["other_config"], "-o", p["dir"] / "o.hlo"], "configuration is for"),
        (["measure", EXP_ADD, "--config", p["other_config"]], "configuration is for"),
        (["emit", EXP_ADD, "--config", p["bad_json"], "-o", p["dir"] / "o.hlo"], "invalid JSON"),
        (["emit", EXP_ADD, "-o", p["dir"] / "missing" / "o.hlo"], "does not exist"),
        (["emit", EXP_ADD, "-o", p["dir"]], ""),
        (fus + ["--out", p["file"]], ""),
        (fus + ["--out", p["file"] / "sub"], "cannot create it"),
        (["tile", EXP_ADD, "--out", p["file"] / "sub"], "cannot create it"),
        (["train", "--model", "gnn", "--task", "fusion", "--data", p["empty_dir"], "--out", p["dir"] / "m.pt",
          "--epochs", "0"], "--epochs"),
        (["evaluate", "--model", "gnn", "--data", p["dir"] / "missing"], "does not exist"),
    ]


def test_cli_misuse_matrix(paths):
    for args, fragment in _cases(paths):
        r = invoke(*args)
        try:
            assert_one_line_error(r, fragment)
        except AssertionError as e:
            raise AssertionError(f"{[str(a) for a in args]}: {e}") from None
    # nothing of the refused runs was written
    assert not (paths["file"] / "sub").exists() and not (paths["dir"] / "missing").exists()


def test_resume_mismatch_leaves_the_run_untouched(paths):
    before = (paths["run"] / "checkpoint.pkl").read_bytes()
    r = invoke("fusion", paths["twin"], "--store", "none", "--resume", paths["run"], "--cost-model", "analytical")
    assert_one_line_error(r, "another program")
    assert (paths["run"] / "checkpoint.pkl").read_bytes() == before


# ---- seeded fuzz: random combinations of misuses and valid flags, the same property -----------------
BAD = [
    ("--budget", "0"), ("--budget", "abc"), ("--budget", "-1m"), ("--hw-budget", "-3"), ("--hw-budget", "x"),
    ("--workers", "0"), ("--workers", "-2"), ("--workers", "two"), ("--max-evals", "0"), ("--max-evals", "-1"),
    ("--batch-size", "0"), ("--top-k", "0"), ("--seed", "-4"), ("--seed", "1.5"), ("--strategy", "sideways"),
    ("--cost-model", "oracle"), ("--evaluator", "tpu"), ("--target", "abacus"), ("--no-such-flag", None),
]
GOOD = [("--budget", "3s"), ("--seed", "3"), ("--max-evals", "20"), ("--batch-size", "8"), ("--top-k", "2"),
        ("--strategy", "random"), ("--cost-model", "analytical"), ("--hw-budget", "0"), ("--no-progress", None)]


def _flags(items: list) -> list:
    out: list = []
    for flag, value in items:
        out += [flag] if value is None else [flag, value]
    return out


@settings(max_examples=40, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(bad=st.lists(st.sampled_from(BAD), min_size=1, max_size=3),
       good=st.lists(st.sampled_from(GOOD), max_size=4), order=st.randoms(use_true_random=False))
def test_cli_fuzz_misuse_is_one_line(tmp_path, bad, good, order):
    # a later flag overrides an earlier one: good flags that a bad one names are left out, so that
    # every bad value is in effect; the rest come in a random order
    bad_flags = {f for f, _ in bad}
    items = [(f, v) for f, v in good if f not in bad_flags] + bad
    order.shuffle(items)
    out = tmp_path / "never"
    r = invoke("fusion", EXP_ADD, "--store", "none", "--out", out, *_flags(items))
    assert_one_line_error(r)
    assert not out.exists()
