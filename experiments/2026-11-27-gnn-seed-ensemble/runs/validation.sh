set -x
cd /work/wt/gnnens
export PYTHONPATH=/work/wt/gnnens OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
D=/work/wt/gnn17-data
R=benchmarks/results/gnn_ensemble/runs
nice -n 19 python -m autotune.cli ensemble $D/P0.pt $D/P1.pt $D/P2.pt --out $D/E012.pt
nice -n 19 python -m autotune.cli evaluate --data $D/fusion_attn --split validation --cost-model $D/E012.pt --json > $R/validation_E012.json 2> $R/validation_E012.err
echo validationdone
# the members and the ensemble side by side in one run (same code, same process)
nice -n 19 python -m autotune.cli evaluate --data $D/fusion_attn --split validation --cost-model $D/P0.pt --cost-model $D/P1.pt --cost-model $D/P2.pt --cost-model $D/E012.pt --json > $R/validation_members_and_E012.json 2> $R/validation_members_and_E012.err
echo validation2done
