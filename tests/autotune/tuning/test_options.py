"""TunerOptions and VerifyOptions (autotune/tuning/options.py): the defaults a bare Tuner runs with,
frozen, and invalid values refused when an options object is made, in one line."""
from __future__ import annotations

import dataclasses

import pytest

from autotune.tuning.options import TunerOptions, VerifyOptions
from autotune.tuning.result import TuningError


def test_defaults():
    assert TunerOptions() == TunerOptions(batch_size=64, max_evaluations=None, include_default=True, out_dir=None,
                                          checkpoint_every_s=5.0, progress=True, fingerprint=None, overhead_s=0.0)
    assert VerifyOptions() == VerifyOptions(hw_budget=None, top_k=10, rounds=5, finalists=2, paired_share=0.4,
                                            paired_confidence=0.95, reference_text=None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        TunerOptions().batch_size = 8


@pytest.mark.parametrize("field, value", [("paired_share", 1.0), ("paired_share", 0), ("paired_confidence", 1.5)])
def test_invalid_verification_options_fail_in_one_line(field, value):
    with pytest.raises(TuningError, match=rf"^{field} must be in \(0, 1\), got {value}$"):
        VerifyOptions(**{field: value})
    with pytest.raises(TuningError, match=field):  # a copy with one field changed is checked too
        dataclasses.replace(VerifyOptions(), **{field: value})
