"""Per-kernel measurement overhead: the hand-written supervisors that hardware/xla.py and
hardware/pool.py had before the pebble pool (commit 1cc8967, read from git history) against the
pebble MeasurementPool, side by side in one run, alternating order. Needs jax and a git checkout.

    python experiments/2026-11-25-measurement-pool-overhead/pool_overhead.py [--rev 1cc8967]
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
os.chdir(ROOT)
# At import, not in main(): the pools' spawn workers re-import this module (as __mp_main__) and need the old
# modules on their path before unpickling anything of them.
_ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
_ap.add_argument("--rev", default="1cc8967", help="commit whose hardware/xla.py and pool.py are the old ones")
_args = _ap.parse_args()
_old = tempfile.mkdtemp(prefix="autotune-oldpool-")
for _name in ("xla", "pool"):
    with open(os.path.join(_old, f"old_{_name}.py"), "w") as _f:
        _f.write(subprocess.run(["git", "show", f"{_args.rev}:hardware/{_name}.py"], cwd=ROOT, check=True,
                                capture_output=True, text=True).stdout)
sys.path.insert(1, _old)

import old_pool  # noqa: E402
import old_xla  # noqa: E402
from autotune.compiler.fusion import FusionSpace  # noqa: E402
from autotune.compiler.program import Program  # noqa: E402
from hardware import pool as new_pool  # noqa: E402
from hardware import xla as new_xla  # noqa: E402
from hardware.base import Measurement  # noqa: E402


def noop(x):
    return Measurement(1e-6)


def main() -> None:
    prog = Program.from_file("examples/hlo/bert_small_infer.hlo")
    space = FusionSpace(prog, "cpu")
    uniq = {}
    for k in space.kernels(space.default()):
        uniq.setdefault(k.hash, k)
    kernels = list(uniq.values())
    n = len(kernels)
    timing = dict(number=1, repeat=1, min_repeat_ms=0.0, warmup=0)
    print(f"# {n} distinct kernels of bert_small_infer (default fusion), timing number=1 repeat=1 warmup=0;"
          f" {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}")
    rows = {"old": [], "new": []}
    evs = {"old": old_xla.XlaEvaluator(target="cpu", timing=old_xla.TimingOptions(**timing)),
           "new": new_xla.XlaEvaluator(target="cpu", timing=new_xla.TimingOptions(**timing))}
    for ev in evs.values():  # start-up (jax import in the worker) outside the timed rounds
        assert ev.measure(kernels[:1])[0].ok
    for rnd in range(3):
        for name in (("old", "new") if rnd % 2 == 0 else ("new", "old")):
            t0 = time.perf_counter()
            ms = evs[name].measure(kernels)
            dt = time.perf_counter() - t0
            assert all(m.ok for m in ms), [m.status for m in ms if not m.ok][:3]
            inside = sum(m.extra["compile_s"] + m.seconds for m in ms)
            rows[name].append((dt / n, (dt - inside) / n))
    for ev in evs.values():
        ev.close()
    for name, r in rows.items():
        print(f"xla kernels  {name}: {statistics.median(a for a, _ in r) * 1e3:7.2f} ms/kernel wall, "
              f"{statistics.median(b for _, b in r) * 1e3:6.2f} ms/kernel outside compile+run "
              f"(rounds: {', '.join(f'{a * 1e3:.2f}' for a, _ in r)})")
    items = 300
    for width in (1, 2):
        res = {}
        pools = {"old": old_pool.MeasurementPool(n_workers=width, timeout=60),
                 "new": new_pool.MeasurementPool(n_workers=width, timeout=60)}
        for p in pools.values():
            p.map(noop, range(width * 2))
        for rnd in range(3):
            for name in (("old", "new") if rnd % 2 == 0 else ("new", "old")):
                t0 = time.perf_counter()
                out = pools[name].map(noop, range(items))
                res.setdefault(name, []).append((time.perf_counter() - t0) / items)
                assert all(m.ok for m in out)
        for p in pools.values():
            p.close()
        for name, r in res.items():
            print(f"no-op items  {name}, {width} worker(s): {statistics.median(r) * 1e6:7.0f} us/item "
                  f"(rounds: {', '.join(f'{x * 1e6:.0f}' for x in r)})")


if __name__ == "__main__":
    main()
