#!/bin/bash
# The commands idiom_sweep.py does not run, per program: tile, layout, fusion --target cpu with the
# XLA:CPU evaluator and its output verification (--hw-budget 5s), emit with that best config.
# usage: run_extra.sh WORKTREE OUTDIR file.hlo   (appends one line per command to OUTDIR/results.txt)
wt=$1; out=$2; f=$3; n=$(basename $f .hlo); d=$out/$n; rm -rf $d; mkdir -p $d
cd $wt
export PYTHONPATH=$wt OMP_NUM_THREADS=1
run() { tag=$1; shift; s=$(date +%s.%N); nice -n 19 timeout 300 python -m autotune.cli "$@" >$d/$tag.out 2>$d/$tag.err; rc=$?; e=$(date +%s.%N); printf "%s %s rc=%d %.1fs | %s\n" $n $tag $rc $(echo "$e-$s"|bc) "$(grep -v '^WARNING\|^I0000\|^$' $d/$tag.err | tail -1 | cut -c1-200)" >> $out/results.txt; }
run tile tile $f --budget 10s --store none --out $d/tl
run layout layout $f --budget 10s --store none --no-progress --out $d/ly
run fus_cpu_xla fusion $f --target cpu --budget 10s --evaluator xla --hw-budget 5s --store none --no-progress --out $d/fc
run emit_cpu_best emit $f --target cpu --config $d/fc/best_config.json -o $d/emit_cpu.hlo
