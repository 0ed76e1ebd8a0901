#!/bin/bash
# issue-17 GNN sweep: build the two fusion datasets, then 14 trainings in parallel (one thread each).
set -u
cd "$(dirname "$0")"
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONPATH=$PWD
PY=python3
L=$OUT/logs; mkdir -p $L P
nproc; $PY -c "import torch, numpy; print(torch.__version__, numpy.__version__)"
T0=$(date +%s)
$PY -m autotune.cli dataset build --programs examples/hlo --task fusion --evaluator sim --configs-per-program 8 --out DS/fusion > $L/build_fusion.log 2>&1 &
( $PY -m autotune.cli dataset build --programs examples/hlo --task fusion --evaluator sim --configs-per-program 8 --split-file benchmarks/results/fusion_split_attention.json --out DS/fusion_attn && \
  $PY -m autotune.cli dataset build --programs examples/hlo_attention --task fusion --evaluator sim --configs-per-program 8 --split-file benchmarks/results/fusion_split_attention.json --out DS/fusion_attn ) > $L/build_attn.log 2>&1 &
wait
echo "datasets built in $(( $(date +%s) - T0 )) s"; tail -1 $L/build_fusion.log; tail -1 $L/build_attn.log
run() { name=$1; shift; ( time timeout 470 $PY -m autotune.cli train --model gnn --task fusion --out P/$name.pt "$@" ) > $L/$name.log 2>&1 & }
for s in 0 1 2; do
  run A$s --data DS/fusion --seed $s
  run B$s --data DS/fusion_attn --seed $s
  run C$s --data DS/fusion_attn --seed $s --weight-decay 1e-4 --patience 25
  run D$s --data DS/fusion_attn --seed $s --weight-decay 1e-3 --patience 25
done
run E0 --data DS/fusion_attn --seed 0 --weight-decay 1e-4 --patience 25 --head-hidden 512
run E1 --data DS/fusion_attn --seed 1 --weight-decay 1e-4 --patience 25 --head-hidden 512
wait
echo "all done in $(( $(date +%s) - T0 )) s"
ls -la P
tar czf $OUT/pt_abc.tar.gz P/A*.pt P/B*.pt P/C*.pt 2>/dev/null
tar czf $OUT/pt_de.tar.gz P/D*.pt P/E*.pt 2>/dev/null
for f in $L/*.log; do echo "== $f"; tail -3 $f; done
