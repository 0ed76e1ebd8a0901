"""Diagnostic: time epochs of the recipe with weight decay and count subnormal floats in weights and Adam state."""
import sys, time, torch
torch.set_num_threads(1)
flush = sys.argv[1] == "flush"
wd = float(sys.argv[2]); epochs = int(sys.argv[3])
if flush:
    assert torch.set_flush_denormal(True)
import costmodels.gnn.train as T
from autotune.tuning.dataset import Dataset
from autotune.api import train_model
OPT = []
_Adam = torch.optim.Adam
class Adam(_Adam):
    def __init__(self, *a, **k):
        super().__init__(*a, **k); OPT.append(self)
torch.optim.Adam = Adam
TINY = torch.finfo(torch.float32).tiny
def sub(t):
    return int(((t != 0) & (t.abs() < TINY)).sum())
last = [time.monotonic()]
def log(rec):
    now = time.monotonic(); dt = now - last[0]; last[0] = now
    opt = OPT[-1]
    ps = [p for g in opt.param_groups for p in g["params"]]
    n = sum(p.numel() for p in ps)
    sp = sum(sub(p.data) for p in ps)
    sm = sum(sub(opt.state[p]["exp_avg"]) for p in ps if p in opt.state)
    sv = sum(sub(opt.state[p]["exp_avg_sq"]) for p in ps if p in opt.state)
    sg = sum(sub(p.grad) for p in ps if p.grad is not None)
    z = sum(int((opt.state[p]["exp_avg"] == 0).sum()) for p in ps if p in opt.state)
    print(f"{sys.argv[1]} wd={wd} epoch {rec['epoch']}: {dt:.0f} s, val {rec['val']:.4g}, train {rec['train_loss']:.4g}; "
          f"of {n} params subnormal: weights {sp}, grads {sg}, exp_avg {sm}, exp_avg_sq {sv}; exp_avg==0: {z}", flush=True)
    if rec["epoch"] >= epochs:
        raise SystemExit(0)
ds = Dataset.open(sys.argv[4])
train_model("gnn", ds, seed=0, epochs=25, weight_decay=wd or None, log=log)
