# round 3 adopted by rules_round3.txt on validation: test split, the shipped P2 and R0-R2 in one run (before any copy)
cd /work/wt/gnnple
export PYTHONPATH=/work/wt/gnnple OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
D=/work/wt/gnn17-data; O=/work/wt/gnnple-data
nice -n 19 python -m autotune.cli evaluate --data $D/fusion_attn --split test --cost-model gnn --cost-model $O/R0.pt --cost-model $O/R1.pt --cost-model $O/R2.pt --json > $O/test_P2shipped_R0_R1_R2.json 2> $O/test.err
echo testdone $(date -u)
