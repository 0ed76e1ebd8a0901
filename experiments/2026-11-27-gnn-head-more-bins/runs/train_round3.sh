# round 3 (issue 17): seeds 0-2 of --ple-bins 32 --patience 25, three processes in parallel, one thread each, nice 19
cd /work/wt/gnnple
export PYTHONPATH=/work/wt/gnnple OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
D=/work/wt/gnn17-data; O=/work/wt/gnnple-data
one() {
  S=$1
  /usr/bin/time -v nice -n 19 python -m autotune.cli train --model gnn --task fusion --data $D/fusion_attn --out $O/R$S.pt --seed $S --ple-bins 32 --patience 25 > $O/train_R$S.log 2>&1
  nice -n 19 python -m autotune.cli evaluate --data $D/fusion_attn --split validation --cost-model $O/R$S.pt --json > $O/validation_R$S.json 2> $O/validation_R$S.err
  echo "seed $S done $(date -u)"
}
one 0 & one 1 & one 2 &
wait
echo alldone
