"""Whole-program emission on XLA:CPU: fused programs compute what the originals compute.

For each program: the default configuration and two random valid ones are emitted with one
`fusion` per kernel, re-parsed by our parser and by XLA's, compiled by jaxlib (with the options the
emitted programs are meant for, `autotune.kernel.EMITTED_CPU_COMPILE_OPTIONS`) and run on the same
random inputs as the original. Error metric and tolerance: `hardware.xla.output_error` (relative
error, elements ~0 measured against 1% of their array's magnitude; <= 1e-4 for f32; integers/bools
exact), on `hardware.xla.verification_inputs`.

Every program runs in its own subprocess (an XLA `Check failed` aborts the process), two at a time
(CI machines have 2 cores). By default a representative subset runs: one small inference program of
every model family plus a few small training steps (~1-1.5 min on 2 cores). With
AUTOTUNE_FULL_XLA_TESTS=1 every corpus program runs (the full sweep takes much longer; see
benchmarks/emission_parity.py for a table).
"""
from __future__ import annotations

import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytest.importorskip("jax")

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "examples" / "hlo"
sys.path.insert(0, str(ROOT))

from benchmarks.emission_parity import run_check_program  # noqa: E402

SPECS = ["default", "random:0", "random:1"]
FULL = os.environ.get("AUTOTUNE_FULL_XLA_TESTS") == "1"

# Programs whose emitted forms are known to fail, with why (see the emission report).
KNOWN_FAILURES: dict[str, str] = {
    # Only in the full sweep (not in the default subset). Measured 2026-11-22: random:1 reaches
    # 1.43e-4 on a bias gradient (a per-channel sum with cancellation); XLA's own compile of the
    # original program with its fusion pass disabled differs from its default compile by 1.38e-4 on
    # the same output, so the difference is f32 summation order inside XLA, not our emission.
    "ssd_medium_train": "XLA:CPU itself differs by 1.38e-4 between its fused and unfused compiles "
                        "of this program (f32 summation order); see BENCHMARKS.md, emission parity",
}


def _programs() -> list[str]:
    manifest = json.loads((CORPUS / "manifest.json").read_text())
    names = [m["name"] for m in manifest]
    if FULL:
        return names
    subset = [n for n in names if n.endswith("_small_infer")]
    subset += ["mlp_mixer_small_train", "lstm_small_train", "gnn_small_train"]
    return [n for n in names if n in subset]


PROGRAMS = _programs()


@pytest.fixture(scope="module")
def results() -> dict:
    """All programs checked once, two subprocesses at a time."""
    def one(name: str) -> tuple[str, dict]:
        return name, run_check_program(str(CORPUS / f"{name}.hlo"), SPECS, timeout=900)
    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(one, PROGRAMS))


@pytest.mark.xla
@pytest.mark.parametrize("name", PROGRAMS)
def test_emitted_program_matches_original(results: dict, name: str) -> None:
    if name in KNOWN_FAILURES:
        pytest.xfail(KNOWN_FAILURES[name])
    res = results[name]
    assert res["status"] == "ok", f"{name}: {res['status']}"
    for spec in SPECS:
        r = res["results"][spec]
        assert r["reparse"], f"{name} {spec}: fused text does not re-parse"
        assert r["ok"], f"{name} {spec}: outputs differ from the original (max error {r['err']:.3g})"


def test_subset_covers_every_family() -> None:
    manifest = json.loads((CORPUS / "manifest.json").read_text())
    families = {m["family"] for m in manifest}
    covered = {m["family"] for m in manifest if m["name"] in PROGRAMS}
    assert families == covered
    assert any(n.endswith("_train") for n in PROGRAMS)
