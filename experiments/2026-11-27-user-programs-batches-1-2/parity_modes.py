import sys, os
sys.path.insert(0, "/work/wt/user22")
from hardware.parity import check_program
p, tgt = sys.argv[1:3]
for r in check_program(p, tgt, specs=("default", "random:0", "unfused"), timeout=300):
    print(os.path.basename(p), tgt, r.config, r.mode, r.status, r.error, f"{r.fusions_checked}/{r.fusions_total}", flush=True)
