#!/bin/bash
# issue 21: scale_search on a quiet 16-core machine, runs of one (program, model, seed) in parallel, 6 at a time.
set -u
export PYTHONPATH=$PWD OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONUNBUFFERED=1
R=$OUT/res; mkdir -p $R
{ nproc; uptime; python3 -c "import torch,sys; print(sys.version.split()[0], torch.__version__)"; lscpu | grep "Model name"; } > $R/env.txt 2>&1
run(){ python3 benchmarks/scale_search.py --programs $1 --models $2 --seeds $3 --budget $4 --hw-budget $5 --md $R/$6.md --json $R/$6.json > $R/$6.log 2>&1 & PIDS="$PIDS $!"; }
T0=$(date +%s); PIDS=""
( sleep 200; pkill -9 -f scale_search; pkill -9 -f autotune.cli ) &
WD=$!
for s in 3 4 5; do for m in default analytical; do run examples/scale/transformer_L200.hlo $m $s 60 10 L200_B60_${m}_s$s; done; done
wait $PIDS; PIDS=""; echo "phase 1 $(( $(date +%s) - T0 )) s; $(uptime)" >> $R/env.txt
for s in 3 4 5; do for m in default analytical; do run examples/scale/transformer_L200.hlo $m $s 30 5 L200_B30_${m}_s$s; done; done
wait $PIDS; PIDS=""; echo "phase 2 $(( $(date +%s) - T0 )) s; $(uptime)" >> $R/env.txt
kill $WD 2>/dev/null; cd $OUT && tar czf scale_device.tgz res && rm -rf res
