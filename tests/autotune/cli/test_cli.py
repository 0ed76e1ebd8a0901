"""The `autotune` CLI: show/emit contracts and one-line errors with exit status 2."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from click.testing import CliRunner

from autotune.cli.app import main
from autotune.compiler.hlo import parse_hlo_file

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
PROG = os.path.join(ROOT, "examples", "hlo", "bert_small_infer.hlo")


def test_show_json_contract():
    r = CliRunner().invoke(main, ["show", PROG, "--json"])
    assert r.exit_code == 0, r.output
    info = json.loads(r.output)
    for key in ("instructions", "computations", "fusible_edges", "kernels_default", "flops",
                "transcendentals", "bytes_accessed"):
        assert key in info
    assert info["instructions"] > 100 and info["kernels_default"] > 0 and info["flops"] > 0


def test_show_table():
    r = CliRunner().invoke(main, ["show", PROG, "--target", "cpu"])
    assert r.exit_code == 0 and "fusible edges" in r.output


def test_emit_default_and_config_roundtrip(tmp_path):
    from autotune.tuning.config_io import save_config
    from autotune.compiler.fusion import FusionSpace
    from autotune.compiler.program import Program
    import numpy as np

    out = tmp_path / "fused.hlo"
    r = CliRunner().invoke(main, ["emit", PROG, "-o", str(out)])
    assert r.exit_code == 0, r.output
    m = parse_hlo_file(str(out))
    assert any(i.opcode == "fusion" for i in m.entry.instructions)

    sp = FusionSpace(Program.from_file(PROG), "tpu")
    cfg = sp.random(np.random.default_rng(0))
    save_config(sp, cfg, tmp_path / "cfg.json")
    out2 = tmp_path / "fused2.hlo"
    r = CliRunner().invoke(main, ["emit", PROG, "--config", str(tmp_path / "cfg.json"), "-o", str(out2)])
    assert r.exit_code == 0, r.output
    n_kernels = len(sp.state(cfg).refs())
    assert f"{n_kernels} kernels" in r.output


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autotune.cli", *args], capture_output=True, text=True, cwd=ROOT)


def test_malformed_hlo_is_one_line_exit_2(tmp_path):
    bad = tmp_path / "bad.hlo"
    bad.write_text("HloModule m\nENTRY e {\n  a = f32[2] parameter(0)\n  b = f32[2] frobnicate(a)\n}\n")
    r = _run("show", str(bad))
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and f"{bad}:4:14" in lines[0] and "unknown opcode 'frobnicate'" in lines[0]
    assert "Traceback" not in r.stderr


def test_bad_config_is_one_line_exit_2(tmp_path):
    cfg = tmp_path / "cfg.json"
    cfg.write_text('{"format": "autotune-fusion-config", "version": 1, "fused": [["main", "nope", "x"]]}')
    r = _run("emit", PROG, "--config", str(cfg), "-o", str(tmp_path / "o.hlo"))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert "not a fusible edge" in r.stderr
    cfg.write_text("{not json")
    r = _run("emit", PROG, "--config", str(cfg), "-o", str(tmp_path / "o.hlo"))
    assert r.returncode == 2 and "invalid JSON" in r.stderr and "Traceback" not in r.stderr


def test_fusion_scheduler_needs_the_xla_evaluator(tmp_path):
    r = CliRunner().invoke(main, ["fusion", PROG, "--budget", "5s", "--scheduler", "tcp://127.0.0.1:1",
                                  "--out", str(tmp_path / "run")])
    assert r.exit_code == 2
    assert "--scheduler/--workers apply to the xla evaluator" in r.output
    assert not (tmp_path / "run").exists()  # refused before anything was written


def test_tile_on_cpu_says_xla_cpu_has_no_tile_knob():
    r = CliRunner().invoke(main, ["tile", PROG, "--target", "cpu"])
    assert r.exit_code == 2 and "Traceback" not in r.output
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "no tile knob" in lines[0]


def test_dataset_build_takes_several_search_models(tmp_path):
    """`dataset build --searched N --search-model A --search-model B`: N picks of each model's own search,
    named in the manifest; --searched without a model is a one-line error."""
    from click.testing import CliRunner
    from autotune.cli.app import main
    small = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "hlo", "small", "exp_add.hlo")
    out = tmp_path / "ds"
    r = CliRunner().invoke(main, ["dataset", "build", "--programs", small, "--task", "fusion", "--evaluator", "sim",
                                  "--configs-per-program", "2", "--searched", "2", "--search-model", "analytical",
                                  "--search-model", "analytical", "--search-evals", "50", "--out", str(out)])
    assert r.exit_code == 0, r.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["searched"] == {"n": 2, "evaluations": 50, "model": "analytical+analytical"}
    r = CliRunner().invoke(main, ["dataset", "build", "--programs", small, "--task", "fusion", "--searched", "2",
                                  "--out", str(tmp_path / "x")])
    assert r.exit_code == 2 and "--search-model" in r.output
