import sys, os
os.environ["JAX_PLATFORMS"]="cpu"
sys.path.insert(0, "/work/wt/user22")
from hardware.xla import compile_hlo, parse_hlo_text
for p in sys.argv[1:]:
    t = open(p).read()
    try:
        parse_hlo_text(t); print("parse ok", p)
        compile_hlo(t); print("compile ok", p)
    except Exception as e:
        print("FAIL", p, str(e)[:1500])
