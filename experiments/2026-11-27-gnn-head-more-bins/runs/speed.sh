# inference speed, the previous shipped file (P2) and the new (R2) interleaved, two rounds, 2 threads, nice 19
cd /work/wt/gnnple
export PYTHONPATH=/work/wt/gnnple
O=/work/wt/gnnple-data; G=benchmarks/results/gnn_head_features/round2/runs
for r in 1 2; do
  nice -n 19 python benchmarks/gnn_speed.py --quick --model $O/shipped_P2_before.pt --json $G/speed_old_$r.json > $G/speed_old_$r.txt 2>&1
  nice -n 19 python benchmarks/gnn_speed.py --quick --model costmodels/shipped/gnn_fusion_tpu.pt --json $G/speed_new_$r.json > $G/speed_new_$r.txt 2>&1
done
uptime
