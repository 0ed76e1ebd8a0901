import sys, os, json
sys.path.insert(0, "/work/wt/user22")
from hardware.parity import check_program
for p in sys.argv[1:]:
    for tgt in ("cpu", "tpu"):
        rs = check_program(p, tgt, specs=("default", "random:0"), modes=("xla",), timeout=300)
        for r in rs:
            print(os.path.basename(p), tgt, r.config, r.mode, r.status, r.error, f"{r.fusions_checked}/{r.fusions_total}", flush=True)
