"""Parity of every program of a folder: hardware.parity.check_program, default and random:0..2, cpu (xla + measure options) and tpu."""
import sys, glob
from hardware.parity import check_program
for p in sorted(glob.glob(sys.argv[1])):
    for tgt in ("cpu", "tpu"):
        for r in check_program(p, tgt, specs=("default", "random:0", "random:1", "random:2"), modes=("xla", "measure") if tgt == "cpu" else ("xla",), timeout=300):
            if r.status != "ok":
                print("BAD", p.split("/")[-1], tgt, r.config, r.mode, r.status, flush=True)
    print("done", p.split("/")[-1], flush=True)
