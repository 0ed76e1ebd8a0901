"""Smoke tests of benchmarks/formulation_choices and benchmarks/formulation_model on synthetic timings:
the agreement metrics count what they say, and the features read a real convolution signature."""
from __future__ import annotations

import math

import numpy as np

from benchmarks.formulation_choices import summarize, wilson
from benchmarks.formulation_model import geometry_features, rows_of, score

SIG = ("f32[4,16,16,16]{3,2,1,0} convolution(f32[4,16,16,16]{3,2,1,0}, f32[3,3,1,16]{3,2,1,0}), "
       "dim_labels=b01f_01io->b01f, feature_group_count=16, window={size=3x3 pad=1_1x1_1}")


def _row(program, hw, pred, corpus="hlo"):
    return {"program": program, "corpus": corpus, "instruction": "c", "opcode": "convolution", "signature": SIG,
            "hardware_s": hw, "predicted_s": {"m": pred}}


def test_agreement_counts_the_picks_where_the_choices_differ():
    rows = [_row("a", {"original": 1.0, "shifted_multiply_add": 0.1}, {"original": 1.0, "shifted_multiply_add": 0.5}),
            _row("b", {"original": 1.0, "shifted_multiply_add": 0.1}, {"original": 0.5, "shifted_multiply_add": 1.0}),
            _row("c", {"original": 1.0, "im2col_dot": 0.9}, {"original": 1.0, "im2col_dot": 0.5})]
    s = summarize(rows, ["m"])["m"]
    assert s["instances"] == 3 and s["agree"] == 2 and s["instances_differing_1.5x"] == 2 and s["agree_differing"] == 1
    assert s["geomean_slowdown_of_picks"] == round(math.exp(math.log(10) / 3), 4) and not s["adopted"]
    lo, hi = wilson(1, 2)
    assert 0 < lo < 0.5 < hi < 1


def test_the_model_features_read_the_convolution_and_the_score_counts_sites():
    f = geometry_features(SIG)
    assert len(f) == 12 and f[4] == 4.0 and f[5] == 0.0 and f[6] == math.log2(9)  # 16 groups, 1 per group, 3x3
    data = {"rows": [_row("a_infer", {"original": 1.0, "shifted_multiply_add": 0.1, "im2col_dot": 0.5}, {}),
                     _row("b_infer", {"original": 1.0, "shifted_multiply_add": 2.0}, {}, corpus="hlo_heldout")]}
    rows = rows_of(data)
    assert [(r[0], r[1], r[3]) for r in rows] == [("a", False, "shifted_multiply_add"), ("a", False, "im2col_dot"),
                                                   ("b", True, "shifted_multiply_add")]
    s = score(rows, np.array([-1.0, -0.5, 0.5]))  # picks shifted for a (right), the original for b (right)
    assert s["sites"] == 2 and s["agreement"] == 1.0
