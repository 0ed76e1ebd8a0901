set -x
cd /work/wt/gnn17
export PYTHONPATH=/work/wt/gnn17 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
D=/work/wt/gnn17-data
for S in 3 4; do
  /usr/bin/time -v nice -n 19 python -m autotune.cli train --model gnn --task fusion --data $D/fusion_attn --out $D/P$S.pt --seed $S --ple-bins 8 > $D/train_P$S.log 2>&1
  nice -n 19 python -m autotune.cli evaluate --data $D/fusion_attn --split validation --cost-model $D/P$S.pt --json > $D/validation_P$S.json 2> $D/validation_P$S.err
  nice -n 19 python -m autotune.cli evaluate --data $D/fusion_attn --split test --cost-model $D/P$S.pt --json > $D/test_P$S.json 2> $D/test_P$S.err
done
echo alldone
