set -x
cd /work/wt/gnn17
export PYTHONPATH=/work/wt/gnn17 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
D=/work/wt/gnn17-data
# the shipped GNN (B0) and XGBoost, before anything is replaced
nice -n 19 python -m autotune.cli evaluate --data $D/fusion_attn --split test --cost-model gnn --cost-model xgboost --json > $D/test_shipped_B0_and_xgboost.json 2> $D/test_shipped.err
for S in 0 1 2; do
  nice -n 19 python -m autotune.cli evaluate --data $D/fusion_attn --split test --cost-model $D/P$S.pt --json > $D/test_P$S.json 2> $D/test_P$S.err
done
# by kernel class, test split: the new model P2, the shipped B0 (and XGBoost in both)
nice -n 19 python experiments/2026-11-27-gnn-head-piecewise-linear/diagnose.py $D/fusion_attn test $D/P2.pt > $D/diagnose_test_P2.txt 2>&1
nice -n 19 python experiments/2026-11-27-gnn-head-piecewise-linear/diagnose.py $D/fusion_attn test > $D/diagnose_test_B0.txt 2>&1
nice -n 19 python experiments/2026-11-27-gnn-head-piecewise-linear/diagnose.py $D/fusion_attn validation $D/P2.pt > $D/diagnose_validation_P2.txt 2>&1
echo testdone
