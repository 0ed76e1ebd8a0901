# the single shipped GNN (P2) and the 3-seed ensemble, interleaved, two rounds, one process at a time
cd /work/wt/gnnens
export PYTHONPATH=/work/wt/gnnens
D=/work/wt/gnn17-data
R=benchmarks/results/gnn_ensemble/runs
for round in 1 2; do
  uptime > $R/speed_single_$round.txt
  nice -n 19 python benchmarks/gnn_speed.py --quick --model costmodels/shipped/gnn_fusion_tpu.pt --json $R/speed_single_$round.json >> $R/speed_single_$round.txt 2>&1
  uptime > $R/speed_E012_$round.txt
  nice -n 19 python benchmarks/gnn_speed.py --quick --model $D/E012.pt --json $R/speed_E012_$round.json >> $R/speed_E012_$round.txt 2>&1
done
echo speeddone
