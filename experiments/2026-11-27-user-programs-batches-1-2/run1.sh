#!/bin/bash
# usage: run1.sh file.hlo
f=$1; n=$(basename $f .hlo); d=/tmp/user22/out/$n; rm -rf $d; mkdir -p $d
cd /work/wt/user22
export PYTHONPATH=/work/wt/user22 OMP_NUM_THREADS=1
run() { tag=$1; shift; s=$(date +%s.%N); nice -n 19 timeout 300 python -m autotune.cli "$@" >$d/$tag.out 2>$d/$tag.err; rc=$?; e=$(date +%s.%N); printf "%s %s rc=%d %.1fs | %s\n" $n $tag $rc $(echo "$e-$s"|bc) "$(tail -1 $d/$tag.err | cut -c1-200)" >> /tmp/user22/results.txt; }
run show show $f
run fus_tpu fusion $f --target tpu --budget 10s --store none --no-progress --out $d/ft
run fus_cpu fusion $f --target cpu --budget 10s --evaluator xla --hw-budget 5s --store none --no-progress --out $d/fc
run tile tile $f --budget 10s --store none --out $d/tl
run layout layout $f --budget 10s --store none --no-progress --out $d/ly
run emit_tpu emit $f --target tpu -o $d/emit_tpu.hlo
run emit_cpu emit $f --target cpu --config $d/fc/best_config.json -o $d/emit_cpu.hlo
