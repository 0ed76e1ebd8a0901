#!/bin/bash
# issue 21: scale_search on a quiet 16-core machine, runs of one (program, model, seed) in parallel, 6 at a time.
# Run from the repository root with OUT set; examples/scale/transformer_L200.hlo generated beforehand
# (`python examples/scale/generate.py transformer 200 --out examples/scale/transformer_L200.hlo`).
#   bash device_scale.sh               seeds 0-2: 200 layers at 60 s, 200 layers at 30 s, 48 layers at 30 s
#   SEEDS="3 4 5" L48=0 WATCHDOG=200 bash device_scale.sh      the second call: seeds 3-5, 200 layers only
set -u
SEEDS=${SEEDS:-0 1 2}; L48=${L48:-1}; WATCHDOG=${WATCHDOG:-320}
export PYTHONPATH=$PWD OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONUNBUFFERED=1
R=$OUT/res; mkdir -p $R
{ nproc; uptime; python3 -c "import torch,sys; print(sys.version.split()[0], torch.__version__)"; lscpu | grep "Model name"; } > $R/env.txt 2>&1
run(){ python3 benchmarks/scale_search.py --programs $1 --models $2 --seeds $3 --budget $4 --hw-budget $5 --md $R/$6.md --json $R/$6.json > $R/$6.log 2>&1 & PIDS="$PIDS $!"; }
phase(){  # phase NAME PROGRAM BUDGET HW_BUDGET: both models for every seed at once, then wait
  for s in $SEEDS; do for m in default analytical; do run $2 $m $s $3 $4 $1_B$3_${m}_s$s; done; done
  wait $PIDS; PIDS=""; echo "$1 B=$3 done at $(( $(date +%s) - T0 )) s; $(uptime)" >> $R/env.txt
}
T0=$(date +%s); PIDS=""
( sleep $WATCHDOG; pkill -9 -f scale_search; pkill -9 -f autotune.cli ) &
WD=$!
phase L200 examples/scale/transformer_L200.hlo 60 10
phase L200 examples/scale/transformer_L200.hlo 30 5
[ "$L48" = 1 ] && phase L48 examples/scale/transformer_L48.hlo 30 5
kill $WD 2>/dev/null; cd $OUT && tar czf scale_device.tgz res && rm -rf res
