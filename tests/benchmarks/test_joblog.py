"""benchmarks/joblog.py: finished jobs survive a restart, keyed by every parameter; a torn last line
(a kill mid-write) is skipped and does not corrupt the next one."""
import math

import numpy as np

from benchmarks.joblog import JobLog


def test_rows_survive_a_restart_and_keys_hold_every_parameter(tmp_path):
    path = tmp_path / "jobs" / "s.jsonl"
    log = JobLog(path)
    job = {"program": "a.hlo", "seed": 0, "budget": 120.0}
    assert log.get(job) is None and len(log) == 0
    log.put(job, {"speedup": np.float32(1.5), "times": np.array([1.0, 2.0]), "failed": math.inf})
    again = JobLog(path)
    row = again.get({"budget": 120.0, "seed": 0, "program": "a.hlo"})  # key order does not matter
    assert row == {"speedup": 1.5, "times": [1.0, 2.0], "failed": math.inf}
    assert log.get(job) == row  # what put returns to the same process is what a restart reads
    assert again.get(dict(job, seed=1)) is None and again.get(dict(job, budget=60.0)) is None
    again.clear()
    assert not path.exists() and JobLog(path).get(job) is None


def test_a_torn_last_line_is_skipped_and_the_next_put_is_whole(tmp_path):
    path = tmp_path / "s.jsonl"
    JobLog(path).put({"k": 1}, {"v": 1})
    with open(path, "a") as f:
        f.write('{"key": "{\\"k\\": 2}", "row": {"v"')  # killed mid-write
    log = JobLog(path)
    assert log.get({"k": 1}) == {"v": 1} and log.get({"k": 2}) is None
    log.put({"k": 3}, {"v": 3})
    fresh = JobLog(path)
    assert fresh.get({"k": 3}) == {"v": 3} and len(fresh) == 2
