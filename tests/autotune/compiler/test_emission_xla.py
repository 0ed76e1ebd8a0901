"""Whole-program emission on XLA:CPU: fused programs compute what the originals compute.

For each program of a subset of the corpora, and each target: the default configuration and one
random valid configuration are emitted with one `fusion` per kernel, re-read by our parser and
XLA's, compiled by XLA:CPU with XLA's default options or with the evaluator's (the two option sets
alternate over programs and targets, so that every program meets both and the fixture compiles half as
much; the idiom programs other than the regression ones are checked on one target each, alternating in
pairs, so that they meet every (target, option set) pairing; AUTOTUNE_FULL_XLA_TESTS=1 and the benchmark
run every program on both targets under both option sets), and run on the same random inputs
as the original (hardware/parity.py: metric, tolerance, and how `tpu`
configurations are checked on XLA:CPU). Every (program, target) runs in its own subprocess (an XLA
`Check failed` aborts the process), two at a time.

The subset: one small inference program of every model family (training steps come from the
idiom corpus), and the
smallest idiom programs that together carry every idiom of examples/idioms (greedy set cover,
smallest first). AUTOTUNE_FULL_XLA_TESTS=1 runs every program;
`python -m benchmarks.emission_parity` is the full sweep with more configurations (docs/lab-notes/2026-11-25-emission-parity-xla-cpu.md).
"""
from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytest.importorskip("jax")

from hardware.parity import MODES, check_program  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
MODELS = ROOT / "examples" / "hlo"
IDIOMS = ROOT / "examples" / "idioms"
SPECS = ["default", "random:0"]
TARGETS = ["cpu", "tpu"]
FULL = os.environ.get("AUTOTUNE_FULL_XLA_TESTS") == "1"


def _manifest(folder: Path) -> list[dict]:
    path = folder / "manifest.json"
    return json.loads(path.read_text()) if path.exists() else []


def _programs() -> list[Path]:
    models = [m["name"] for m in _manifest(MODELS)]
    if not FULL:
        keep = {n for n in models if n.endswith("_small_infer")}
        models = [n for n in models if n in keep]
    return [MODELS / f"{n}.hlo" for n in models] + [IDIOMS / f"{n}.hlo" for n in _idiom_cover(FULL)]


# Programs on which emission once failed (each a pattern XLA's simplifier rewrites around fusions).
REGRESSIONS = {"sort_quantiles", "cox_survival_train", "matrix_decompositions", "dropout_rbg_train",
               "donated_adam_train"}


def _idiom_cover(full: bool) -> list[str]:
    """Idiom programs, smallest first, each kept when it carries an idiom not yet covered, and the
    regression programs."""
    manifest = sorted(_manifest(IDIOMS), key=lambda m: (m["instructions"], m["name"]))
    covered: set = set()
    names = []
    for m in manifest:
        if full or set(m["idioms"]) - covered or m["name"] in REGRESSIONS:
            names.append(m["name"])
            covered |= set(m["idioms"])
    return names


PROGRAMS = _programs()


def _targets(program: Path, index: int) -> list:
    """Both targets for the model programs and the regression programs; one for each other idiom program,
    alternating in pairs (so that, with `modes_of`, the idiom programs meet every target and option set
    pairing); both everywhere with AUTOTUNE_FULL_XLA_TESTS=1."""
    if FULL or program.parent == MODELS or program.stem in REGRESSIONS:
        return TARGETS
    return [TARGETS[(index // 2) % len(TARGETS)]]


CASES = [(p, t) for i, p in enumerate(PROGRAMS) for t in _targets(p, i)]


def modes_of(case_index: int) -> tuple:
    """The XLA option sets a case is checked under: both with AUTOTUNE_FULL_XLA_TESTS=1, else one,
    alternating over programs and targets: a program's cpu and tpu cases use different ones, and each
    target meets both over the programs."""
    path, target = CASES[case_index]
    program = PROGRAMS.index(path)
    return tuple(MODES) if FULL else (MODES[(program + TARGETS.index(target)) % len(MODES)],)


@pytest.fixture(scope="module")
def results() -> dict:
    """All (program, target) cases checked once, two subprocesses at a time."""
    def one(indexed):
        i, (path, target) = indexed
        return (path.stem, target), check_program(str(path), target, SPECS, modes=modes_of(i), timeout=900)
    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(one, enumerate(CASES)))


@pytest.mark.xla
@pytest.mark.parametrize("path,target", CASES, ids=[f"{p.stem}-{t}" for p, t in CASES])
def test_emitted_program_matches_original(results: dict, path: Path, target: str) -> None:
    res = results[(path.stem, target)]
    assert len(res) == len(SPECS) * len(modes_of(CASES.index((path, target))))
    bad = [f"{r.config}/{r.mode}: {r.status}" + (f" (error {r.error:.3g})" if r.error is not None else "")
           for r in res if not r.ok]
    assert not bad, f"{path.stem} [{target}]: " + "; ".join(bad)


def test_subset_covers_every_family_and_idiom_program() -> None:
    manifest = _manifest(MODELS)
    families = {m["family"] for m in manifest}
    covered = {m["family"] for m in manifest if MODELS / f"{m['name']}.hlo" in PROGRAMS}
    assert families == covered
    assert any(p.stem.endswith("_train") for p in PROGRAMS)
    idioms = {t for m in _manifest(IDIOMS) for t in m["idioms"]}
    checked = {t for m in _manifest(IDIOMS) if IDIOMS / f"{m['name']}.hlo" in PROGRAMS for t in m["idioms"]}
    assert idioms and idioms == checked


def test_idiom_cases_meet_every_target_and_option_set() -> None:
    idiom_cases = [(t, modes_of(i)) for i, (p, t) in enumerate(CASES) if p.parent == IDIOMS]
    assert {(t, m) for t, ms in idiom_cases for m in ms} == {(t, m) for t in TARGETS for m in MODES}
