import os, sys
os.environ.setdefault("JAX_PLATFORMS", "cpu")
import runpy
ns = runpy.run_path("/tmp/user23/gen3.py", run_name="gen3")
import jax
os.makedirs("/tmp/user23/opt", exist_ok=True)
for name in sys.argv[1:]:
    fn, args, donate = ns["P"][name]
    text = jax.jit(fn, donate_argnums=donate).lower(*args).compile().as_text()
    open(f"/tmp/user23/opt/{name}_opt.hlo", "w").write(text)
    print("wrote", name, text.count("\n"))
