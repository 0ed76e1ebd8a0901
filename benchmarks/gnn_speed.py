"""GNN cost model speed: inference (kernels/s at a batch size) and training (samples/s).

    python -m benchmarks.gnn_speed [--programs resnet_small_train bert_small_infer ...] [--batch 256]
                                   [--threads 2] [--seconds 3] [--model MODEL.pt] [--json out.json]

Measures, on the unique kernels of the default and a few random fusion configurations of the
programs:
* featurization: kernels -> KernelGraphs (`kernel_graphs`, cold: no cache), kernels/s
  (benchmarks/pricing_speed.py measures it on a large program against a baseline revision);
* inference: `GnnCostModel.predict_graphs` at the batch size, features cached (the tuner's steady
  state: kernels are memoized by hash), kernels/s, per encoder x reduction;
* inference through `predict(kernels)` (graph cache warm), kernels/s;
  with --model, both inference rates are of that saved model (e.g. costmodels/shipped/gnn_fusion_tpu.pt)
  instead of untrained models of the default configuration;
* training: optimizer steps on random log-runtime targets (fusion, MSE) and on groups of tiles
  (rank loss), samples/s.
The target in the issue is >= 5,000 kernels/s inference at batch 256 on 2 cores.
"""
from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np



def _rate(fn, n_items: int, seconds: float) -> float:
    fn()  # warm-up
    t0 = time.perf_counter()
    reps = 0
    while True:
        fn()
        reps += 1
        dt = time.perf_counter() - t0
        if dt >= seconds:
            return reps * n_items / dt


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--programs", nargs="*", default=["resnet_small_train", "bert_small_infer", "lstm_small_infer"])
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2, help="torch threads (process-wide)")
    ap.add_argument("--model-threads", type=int, default=1,
                    help="GnnCostModel(threads=...): threads while it predicts/trains (0: leave as set)")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="Only the default configuration (column, sage).")
    ap.add_argument("--model", default=None, help="Measure this saved GNN's inference (instead of every encoder x "
                    "reduction of the default configuration).")
    ap.add_argument("--json", dest="json_out", default=None)
    a = ap.parse_args(argv)

    import torch
    torch.set_num_threads(a.threads)
    from costmodels import features as F
    from autotune.compiler.fusion import FusionSpace
    from autotune.compiler.program import Program
    from costmodels.gnn import GnnCostModel
    from costmodels.gnn.layers import collate
    from costmodels.gnn.train import pairwise_rank_loss

    root = Path(__file__).resolve().parents[1] / "examples" / "hlo"
    rng = np.random.default_rng(0)
    kernels: dict = {}
    for p in a.programs:
        space = FusionSpace(Program.from_file(str(root / f"{p}.hlo")), "tpu")
        for cfg in [space.default()] + [space.random(rng) for _ in range(3)]:
            for k in space.kernels(cfg):
                if not k.is_trivial:
                    kernels.setdefault(k.hash, k)
    ks = list(kernels.values())
    results: dict = {"kernels": len(ks), "batch": a.batch, "threads": a.threads, "model_threads": a.model_threads, "hidden": a.hidden,
                     "layers": a.layers, "python": platform.python_version(), "torch": torch.__version__,
                     "cpu": platform.processor() or platform.machine()}

    # featurization (cold: graphs, instruction tables, tiling infos and default tiles all recomputed)
    from autotune.compiler import tiles as T
    F.clear_cache()
    T.clear_caches()
    t0 = time.perf_counter()
    graphs = F.kernel_graphs(ks)
    results["featurize_kernels_per_s"] = len(ks) / (time.perf_counter() - t0)
    nodes = np.array([g.num_nodes for g in graphs])
    results["nodes_per_kernel_mean"] = float(nodes.mean())
    results["nodes_per_kernel_max"] = int(nodes.max())

    batch = [graphs[i % len(graphs)] for i in range(a.batch)]
    tf = np.zeros((a.batch, F.TILE_DIM), np.float32)
    combos = [("sage", "column")] if a.quick else [("sage", "column"), ("sage", "node"), ("sage", "lstm"),
                                                      ("sage", "transformer"), ("gat", "column"), ("none", "column")]
    inf: dict = {}
    if a.model:
        m = GnnCostModel.load(a.model)
        m.threads = a.model_threads or None
        results["model"] = a.model
        inf[f"{Path(a.model).name} ({m.config['encoder']}/{m.config['reduction']}, hidden {m.config['hidden']})"] = \
            _rate(lambda: m.predict_graphs(batch), a.batch, a.seconds)
    else:
        for enc, red in combos:
            m = GnnCostModel("fusion", encoder=enc, reduction=red, hidden=a.hidden, layers=a.layers,
                             threads=a.model_threads or None)
            m.fit_scalers(graphs, tf)
            inf[f"{enc}/{red}"] = _rate(lambda: m.predict_graphs(batch), a.batch, a.seconds)
        m = GnnCostModel("fusion", hidden=a.hidden, layers=a.layers, threads=a.model_threads or None)
        m.fit_scalers(graphs, tf)
    results["inference_kernels_per_s"] = inf

    kb = [ks[i % len(ks)] for i in range(a.batch)]
    results["predict_kernels_per_s"] = _rate(lambda: m.predict(kb), a.batch, a.seconds)

    # training steps
    tr: dict = {}
    for loss in ("mse", "rank"):
        m = GnnCostModel("fusion" if loss == "mse" else "tile", hidden=a.hidden, layers=a.layers, loss=loss,
                         threads=a.model_threads or None)
        m.fit_scalers(graphs, tf)
        opt = torch.optim.Adam(m.net_.parameters(), lr=1e-3)
        bs = 64
        preps = [m.prepare_graph(batch[i]) for i in range(bs)]
        y = torch.from_numpy(rng.normal(size=bs).astype(np.float32))
        grp = torch.arange(bs) // 16
        b = collate([p[0] for p in preps], [p[1] for p in preps], [p[2] for p in preps], tf[:bs],
                    np.concatenate([np.stack([p[3] for p in preps]), tf[:bs]], axis=1))

        def step():
            m.net_.train()
            out = m.net_(b)
            lo = torch.nn.functional.mse_loss(out, y) if loss == "mse" else pairwise_rank_loss(out, y, grp)
            opt.zero_grad()
            lo.backward()
            opt.step()
        from costmodels.gnn.model import torch_threads
        with torch_threads(m.threads):
            tr[loss] = _rate(step, bs, a.seconds)
    results["train_samples_per_s"] = tr

    print(f"{len(ks)} kernels ({results['nodes_per_kernel_mean']:.1f} nodes mean, "
          f"{results['nodes_per_kernel_max']} max), torch {torch.__version__}, {a.threads} threads")
    print(f"featurization (cold):        {results['featurize_kernels_per_s']:10,.0f} kernels/s")
    for k, v in inf.items():
        print(f"inference {k:<18} {v:10,.0f} kernels/s (batch {a.batch}, features cached)")
    print(f"predict(kernels), warm:      {results['predict_kernels_per_s']:10,.0f} kernels/s")
    for k, v in tr.items():
        print(f"training ({k}):              {v:10,.0f} samples/s (batch 64)")
    if a.json_out:
        Path(a.json_out).write_text(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    main()
