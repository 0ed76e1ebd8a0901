"""benchmarks/xla_cpu_options.py: the structure of a short run (1 tiny program, 2 options), the settings'
flags, and the rule's verdicts on made-up summaries (no timing values are checked)."""
import json

import pytest

from benchmarks import xla_cpu_options as xo


def test_settings_are_well_formed_and_combine():
    for name, (group, flags, numerics, doc) in xo.SETTINGS.items():
        assert group in ("control", "library", "math", "codegen", "scheduler") and isinstance(flags, dict)
        assert isinstance(numerics, bool) and doc
        assert all(k.startswith("xla_") for k in flags), name
    assert xo.setting_flags("default") == {}
    both = xo.setting_flags("vector_width_512+fast_math")
    assert both == {"xla_cpu_prefer_vector_width": 512, "xla_cpu_enable_fast_math": True}
    with pytest.raises(ValueError):
        xo.setting_flags("ynn_off+ynn_dot_only")  # one option, two values
    with pytest.raises(ValueError):
        xo.setting_flags("no_such_setting")
    assert xo.declared_numerics("vector_width_512+fast_math") and not xo.declared_numerics("vector_width_512")


def test_programs_come_from_the_two_corpora_never_the_held_out_set():
    assert xo.program_path("recommender_small_infer").parent.name == "hlo"
    assert xo.program_path("hf_gpt2_infer").parent.name == "hlo_library"
    with pytest.raises(ValueError):
        xo.program_path("no_such_program")
    heldout = sorted((xo.ROOT / "examples" / "hlo_heldout").glob("*.hlo"))
    if heldout:  # only its path is looked at: the file is not read
        with pytest.raises(ValueError):
            xo.program_path(str(heldout[0]))
        with pytest.raises(ValueError):
            xo.program_path(heldout[0].stem)  # a bare name is looked up in the two corpora only


def _summary(**kw):
    s = {"timed": 12, "failed": {}, "median_speedup_interval": [0.99, 1.01], "accurate_outputs": 12,
         "checked_outputs": 12, "improved_5pct": [], "confirmed_5pct": [], "slowed_5pct": [], "confirm": False}
    s.update(kw)
    return s


def test_the_rule():
    assert xo.verdict(_summary()) == "no effect"
    assert xo.verdict(_summary(median_speedup_interval=[1.03, 1.1])) == "matters"
    assert xo.verdict(_summary(median_speedup_interval=[1.03, 1.1], accurate_outputs=11)) == "matters (numerics)"
    assert xo.verdict(_summary(improved_5pct=["a"])) == "matters"
    assert xo.verdict(_summary(improved_5pct=["a"], confirm=True)) == "no effect"  # not confirmed
    assert xo.verdict(_summary(improved_5pct=["a"], confirmed_5pct=["a"], confirm=True)) == "matters"
    assert xo.verdict(_summary(slowed_5pct=["a"])) == "hurts"
    assert xo.verdict(_summary(timed=0, failed={"a": "crash: worker killed by signal SIGILL"})) == "crashes"
    assert xo.verdict(_summary(timed=0, failed={"a": "compile_error: No such compile option"})) == "refused"


def test_combinations_follow_the_rule():
    def s(name, gm, acc=2):
        return {"option": name, "geomean_speedup": gm, "accurate_outputs": acc, "checked_outputs": 2}
    combos = xo.choose_combinations([s("vector_width_512", 1.05), s("opt_level_2", 1.03), s("ynn_off", 1.02),
                                     s("ynn_dot_only", 1.04), s("fast_math_all", 1.2, acc=1),
                                     s("max_isa_avx2", 0.9)], 3)
    # ynn_dot_only clashes with ynn_off (one option): the third is the next compatible one
    assert combos == ["vector_width_512+ynn_dot_only", "vector_width_512+opt_level_2", "ynn_dot_only+opt_level_2",
                      "vector_width_512+ynn_dot_only+opt_level_2", "vector_width_512+fast_math_all"]


def test_quick_run_structure(tmp_path):
    pytest.importorskip("jax")
    out_json, out_md = tmp_path / "r.json", tmp_path / "r.md"
    res = xo.main(["--quick", "--seconds", "0.1", "--json", str(out_json), "--md", str(out_md)])
    raw = json.loads(out_json.read_text())
    assert raw["programs"] == list(xo.QUICK_PROGRAMS) and raw["options"] == list(xo.QUICK_OPTIONS)
    assert len(raw["rows"]) == len(xo.QUICK_PROGRAMS) * len(xo.QUICK_OPTIONS) == len(res["rows"])
    for row in raw["rows"]:
        assert row["status"] == "ok", row["status"]
        assert row["speedup"] > 0 and len(row["speedup_interval"]) == 2
        out = row["outputs"]
        assert {"identical", "error", "accurate"} <= set(out) and isinstance(out["identical"], bool)
        assert isinstance(row["hlo_changed"], bool) and row["flags"] == xo.setting_flags(row["option"])
    assert row["declared_numerics"] is True
    for s in raw["summary"]:
        assert {"median_speedup", "median_speedup_interval", "geomean_speedup", "improved", "slowed",
                "changes_numerics", "verdict", "max_error"} <= set(s)
        assert s["timed"] == 1 and s["verdict"] in ("matters", "matters (numerics)", "hurts", "no effect")
    assert "load_average_start" in raw and raw["meta"]["jaxlib"]
    md = out_md.read_text()
    assert "## Summary" in md and all(f"`{o}`" in md for o in xo.QUICK_OPTIONS)
