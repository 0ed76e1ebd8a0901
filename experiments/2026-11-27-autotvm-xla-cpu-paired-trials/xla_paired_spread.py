"""Which programs' fusion choices matter end to end on XLA:CPU (issue 19): per program, the default paired
with itself twice, 8 configurations 1-4 neighbour moves from the default and one uniformly random one, each a
paired end-to-end trial against the default (XlaEvaluator.measure_paired, SECONDS each; ratio < 1 = faster).

    nice -n -10 python experiments/2026-11-27-autotvm-xla-cpu-paired-trials/xla_paired_spread.py mlp_mixer_small_infer,bert_small_infer,gnn_small_infer [SECONDS]
"""
import sys, time, os, statistics
import numpy as np
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from autotune.compiler.fusion import FusionSpace
from autotune.compiler.program import Program
from autotune.compiler.emission import EMITTED_CPU_COMPILE_OPTIONS, emit_fused_text
from hardware.xla import XlaEvaluator
def main():
    progs = sys.argv[1].split(",")
    sec = float(sys.argv[2]) if len(sys.argv) > 2 else 0.3
    ev = XlaEvaluator("cpu")
    for p in progs:
        t0 = time.time()
        space = FusionSpace(Program.from_file(f"examples/hlo/{p}.hlo"), "cpu")
        rng = np.random.default_rng(0)
        d = space.default()
        dt = emit_fused_text(space, d, header=True)
        cfgs = []
        for i in range(8):
            c = d
            for _ in range(int(rng.integers(1, 5))):
                c = space.neighbor(c, rng)
            cfgs.append(("walk", c))
        cfgs.append(("random", space.random(rng)))
        rs = []
        selfr = []
        for name, c in [("self", d), ("self", d)] + cfgs:
            t = emit_fused_text(space, c, header=True)
            t1 = time.time()
            m = ev.measure_paired(dt, t, sec, **EMITTED_CPU_COMPILE_OPTIONS)
            if not m.ok:
                print(p, name, m.status[:100]); continue
            (selfr if name == "self" else rs).append(m.seconds)
            print(f"  {p} {name} ratio {m.seconds:.3f} ref {m.extra['reference_s']*1e3:.3f} ms n={len(m.extra['ratios'])} {time.time()-t1:.2f}s", flush=True)
        walks = rs[:-1]
        print(f"{p}: n_edges {space.n_edges} self {selfr} walks min {min(walks):.3f} max {max(walks):.3f} median {statistics.median(walks):.3f} random {rs[-1]:.3f}  {time.time()-t0:.0f}s", flush=True)
    ev.close()

if __name__ == '__main__':
    main()
