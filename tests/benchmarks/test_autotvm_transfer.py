"""benchmarks/autotvm_transfer.py in its quick form on tile spaces: every arm measures its trials
(the default first), curves never rise, nothing beats the exhaustive optimum, the transfer arm's
history never holds the family it tunes, and the tables and plot are written."""
from __future__ import annotations

import math
import os

import pytest

from hardware.base import ProgramEvaluator

pytest.importorskip("xgboost")
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import autotvm_transfer as B  # noqa: E402


@pytest.mark.slow
def test_quick_tile_run(tmp_path, capsys):
    out = B.main(["--quick", "--spaces", "tile", "--json", str(tmp_path / "r.json"),
                  "--plot", str(tmp_path / "p.png")])
    res = out["tile"]
    assert set(res["arms"]) == set(B.ARMS)
    for arm, v in res["arms"].items():
        curve = v["median_curve"]
        assert len(curve) == res["trials"] and all(a >= b for a, b in zip(curve, curve[1:]))
        assert min(curve) >= 1.0 - 1e-12 and v["runs"] == 2 * len(res["problems"])
        assert 1 <= v["median_trials"] <= res["trials"] or math.isinf(v["median_trials"])
    for fam, hist in res["history"].items():  # leave-family-out
        assert not any(name.startswith(fam) for name in hist["program_names"]) and hist["rows"] > 0
    assert (tmp_path / "p.png").stat().st_size > 10_000
    printed = capsys.readouterr().out
    assert "| model-based + transfer |" in printed and "transfer / random" in printed
    again = B.main(["--load", str(tmp_path / "r.json")])
    assert again["tile"]["arms"]["random"]["median_trials"] == res["arms"]["random"]["median_trials"]


def test_trials_to_near_and_censored_median():
    assert B.trials_to_near([3.0, 2.1, 2.03], 2.0) == 3 and B.trials_to_near([2.0], 2.0) == 1
    assert B.trials_to_near([3.0, 2.5], 2.0) is None
    assert math.isinf(B.median_trials([None, None, 4], 10)) and B.median_trials([1, None, 4], 10) == 4


@pytest.mark.slow
def test_arms_and_slow_arms_on_fusion_spaces():
    """run_space with a chosen set of arms; the GNN arm only on the program it is given."""
    probs = B.fusion_problems(["vae_small_infer", "autoencoder_small_infer"])
    res = B.run_space("fusion", probs, 1, 10, lambda m: None,
                      arms=("random", "model-based (gnn)", "model-based (gnn) + transfer"),
                      slow_arms=("model-based (gnn)", "model-based (gnn) + transfer"),
                      slow_problems={"vae_small_infer"})
    assert set(res["arms"]) == {"random", "model-based (gnn)", "model-based (gnn) + transfer"}
    assert res["arms"]["random"]["runs"] == 2
    for arm in ("model-based (gnn)", "model-based (gnn) + transfer"):
        assert [r["problem"] for r in res["arms"][arm]["per_run"]] == ["vae_small_infer"]
    assert res["history"]["vae"]["program_names"] == ["autoencoder_small_infer"]


class _RemeasureMachine(ProgramEvaluator):
    """measure_paired answers a fixed ratio per emitted text (its re-measurement), with 40 block ratios
    around it; measure_program fails the texts in `wrong` (outputs that differ)."""

    def _measure_batch(self, kernels, tiles):
        raise AssertionError("a whole-program fake measures no kernels")

    def __init__(self, ratio_of_text: dict, wrong: set = frozenset()):
        super().__init__(target="cpu")
        self.ratio_of_text, self.wrong = ratio_of_text, wrong
        self.paired = 0

    def measure_program(self, text, reference=None, **opts):
        from hardware.base import Measurement
        return Measurement.failure("output_mismatch: differ") if text in self.wrong else Measurement(1e-3)

    def measure_paired(self, ref, text, seconds, **opts):
        from hardware.base import Measurement
        self.paired += 1
        r = self.ratio_of_text[text]
        return Measurement(r, extra={"ratios": [r * (1 + 0.001 * ((i % 5) - 2)) for i in range(40)]})


def test_best_known_paired_follows_the_rule():
    """The best known is the lowest *re-measured* ratio among the lowest trial ratios (a lucky trial does
    not set it; a configuration whose outputs differ never does); a configuration is judged by its
    re-measured ratio when it has one; the program is open only when the best's interval is below 1/1.02."""
    import numpy as np
    from autotune.compiler.fusion import FusionSpace
    from autotune.compiler.emission import emit_fused_text
    from autotune.compiler.program import Program
    prog = os.path.join(REPO, "tests", "fixtures", "hlo", "small", "two_outputs.hlo")
    space = FusionSpace(Program.from_file(prog), "cpu")
    p = B.Problem("fusion", "two_outputs", "two_outputs", space, None, "sha")
    rng = np.random.default_rng(0)
    cfgs = {}
    while len(cfgs) < 4:
        c = space.random(rng)
        if space.config_digest(c) != space.config_digest(space.default()):
            cfgs[space.config_digest(c)] = c
    keys = list(cfgs)
    trial = dict(zip(keys, [0.80, 0.90, 0.95, 1.10]))     # the 0.80 was a lucky trial ...
    again = dict(zip(keys, [0.97, 0.91, 0.93, 1.10]))     # ... re-measured at 0.97
    texts = {k: emit_fused_text(space, c, header=True) for k, c in cfgs.items()}
    cache = {"configs": cfgs, "default_s": 1e-3, **{k: (trial[k] * 1e-3, {"status": "ok", "ratio": trial[k]}) for k in keys}}
    ev = _RemeasureMachine({texts[k]: again[k] for k in keys}, wrong={texts[keys[1]]})
    best = B.best_known_paired(p, ev, cache, "orig", log=lambda m: None)
    assert best["best_ratio"] == pytest.approx(0.93)  # keys[1] (0.91) computes something else: never the best
    assert best["final"][keys[0]] == pytest.approx(0.97) and best["final"][keys[2]] == pytest.approx(0.93)
    assert best["open"] and best["best_interval"][1] < 1 / B.NEAR
    assert math.isinf(best["final"][keys[1]])  # wrong outputs: never within 2%, whatever its trial said
    final = [best["final"][k] for k in (keys[0], keys[1], keys[2])]
    assert B.trials_to_near([1.0] + final, best["best_ratio"]) == 4  # the lucky trial's 0.80 does not count
    assert B.trials_to_near([1.0] + [trial[k] for k in keys[:3]], min(trial.values())) == 2  # as it would raw


class _CountingMachine(ProgramEvaluator):
    """measure_program: the default's 1 ms; measure_paired: a ratio from the text's length; both counted."""

    def _measure_batch(self, kernels, tiles):
        raise AssertionError("a whole-program fake measures no kernels")

    def __init__(self):
        super().__init__(target="cpu")
        self.calls = 0

    def measure_program(self, text, reference=None, **opts):
        from hardware.base import Measurement
        self.calls += 1
        return Measurement(1e-3)

    def measure_paired(self, ref, text, seconds, **opts):
        from hardware.base import Measurement
        self.calls += 1
        r = 0.5 + (len(text) % 97) / 97
        return Measurement(r, extra={"ratios": [r] * 8, "candidate_s": r * 1e-3, "reference_s": 1e-3})


def test_trial_cache_restores_a_killed_run_without_timing_again(tmp_path):
    """--cache: trials, configurations and finished runs written as they come are read back after a kill
    (a last line cut short is dropped): the restored pricer answers the same costs with no measurement;
    a cache of another run is refused in one line."""
    import numpy as np
    from autotune.compiler.fusion import FusionSpace
    from autotune.compiler.program import Program
    from autotune.tuning.paired_cost import PairedProgramCost
    space = FusionSpace(Program.from_file(os.path.join(REPO, "tests", "fixtures", "hlo", "small", "two_outputs.hlo")), "cpu")
    path = str(tmp_path / "trials.jsonl")
    meta = {"programs": ["two_outputs"], "paired_trial_s": 0.3}
    rng = np.random.default_rng(1)
    cfgs = [space.default()] + [space.random(rng) for _ in range(4)]
    j = B.TrialJournal(path, meta)
    cache = B.JournaledCache(j, "two_outputs", space)
    ev = _CountingMachine()
    costs = PairedProgramCost(space, ev, 0.3, cache=cache)(cfgs)
    assert ev.calls >= 2
    keys = [space.config_digest(c) for c in cfgs]
    for k, c in zip(keys, cfgs):
        if k not in cache["configs"]:
            cache.add_config(k, c)
    j.add("run", arm="random", p="two_outputs", seed=0, trials=5, keys=keys, prior_weight=None)
    j.close()
    with open(path, "a") as f:
        f.write('{"t": "trial", "p": "two_ou')  # killed mid-write
    j2 = B.TrialJournal(path, meta)
    restored = B.JournaledCache(j2, "two_outputs", space)
    assert {k: space.encode(c) for k, c in restored["configs"].items()} == \
        {k: space.encode(c) for k, c in cache["configs"].items()}
    assert [e["keys"] for e in j2.of("run")] == [keys]
    ev2 = _CountingMachine()
    again = PairedProgramCost(space, ev2, 0.3, cache=restored)(cfgs)
    assert ev2.calls == 0 and np.allclose(again, costs)
    j2.add("best", p="two_outputs", best={"final": {keys[1]: 0.9}})
    j2.close()
    assert B.TrialJournal(path, meta).of("best")[0]["best"]["final"] == {str(keys[1]): 0.9}  # the cut line is gone
    with pytest.raises(ValueError, match="another run"):
        B.TrialJournal(path, dict(meta, paired_trial_s=1.0))
