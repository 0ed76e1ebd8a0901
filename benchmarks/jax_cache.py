"""`autotune.jax.tune` on a cached function: the time of the call (imports apart) in fresh processes,
and whether the outputs are identical to the first call's (issue 33: < 1 s, identical outputs).

    python -m benchmarks.jax_cache [--runs 5] [--budget 30s] [--json OUT.json]

The first process tunes a small MLP block (a real search, `--budget`) into a temporary cache; each
of the next `runs` processes calls `tune` again on the same function and arguments and times it.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = r'''
import os, sys, time, json, warnings
os.environ["JAX_PLATFORMS"] = "cpu"
import jax, jax.numpy as jnp, numpy as np
import autotune.jax as aj
def block(params, x):
    h = jnp.tanh(x @ params["w1"] + params["b1"])
    return jax.nn.gelu(h @ params["w2"]).sum(axis=-1)
k = jax.random.PRNGKey(0)
params = {"w1": jax.random.normal(k, (64, 128)), "b1": jnp.zeros(128), "w2": jax.random.normal(k, (128, 64))}
x = jax.random.normal(k, (32, 64))
warnings.simplefilter("ignore")
t0 = time.perf_counter()
f = aj.tune(block, params, x, budget=sys.argv[1])
seconds = time.perf_counter() - t0
out = np.asarray(f(params, x))
print(json.dumps({"seconds": seconds, "tuned": f.tuned, "out": out.tobytes().hex()}))
'''


def run(budget: str, cache: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "AUTOTUNE_JAX_CACHE": cache}
    r = subprocess.run([sys.executable, "-c", SCRIPT, budget], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise RuntimeError(r.stderr.strip().splitlines()[-1:])
    return json.loads(r.stdout.strip().splitlines()[-1])


def _snapshot(cache: str) -> dict:
    """Every file of the cache with its size and modification time: a search would rewrite the entry."""
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in Path(cache).rglob("*") if p.is_file()}


def measure(runs: int, budget: str) -> dict:
    with tempfile.TemporaryDirectory() as cache:
        first = run(budget, cache)
        filled = _snapshot(cache)
        hits = [run(budget, cache) for _ in range(runs)]
        untouched = _snapshot(cache) == filled
    return {"first_s": first["seconds"], "tuned": first["tuned"], "hit_s": [h["seconds"] for h in hits],
            "cache_untouched_by_hits": untouched,
            "median_hit_s": statistics.median(h["seconds"] for h in hits),
            "identical_outputs": all(h["out"] == first["out"] for h in hits),
            "load_average": os.getloadavg(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--budget", default="30s")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args(argv)
    res = measure(a.runs, a.budget)
    print(f"first tune (search) {res['first_s']:.1f} s; cached tune median {res['median_hit_s']:.3f} s over "
          f"{a.runs} processes (goal < 1 s); identical outputs: {res['identical_outputs']}; "
          f"load average {', '.join(f'{x:.2f}' for x in res['load_average'])}")
    if a.json:
        a.json.write_text(json.dumps(res, indent=1) + "\n")
    return 0 if res["identical_outputs"] else 1


if __name__ == "__main__":
    sys.exit(main())
