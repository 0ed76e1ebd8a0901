#!/bin/bash
# Issue 17, the padding-only-mask training family (roberta, examples/hlo_encoder): one device call on a
# lent machine's CPU (16 cores; the GPU is unused, the GNN trains on the CPU, one thread a training).
#
#   cd <copy of the enc17 worktree> && OUT=/some/dir bash experiments/2026-11-27-padding-masked-encoder/device_sweep.sh
#
# 1. builds, in parallel (two chains; the builds of one chain write one directory, which a build locks):
#      DS/fusion_enc  = examples/hlo + examples/hlo_attention + examples/hlo_encoder, split
#                       fusion_split_attention_enc.json (roberta in training)
#      DS/fusion_attn = examples/hlo + examples/hlo_attention, split fusion_split_attention.json (the corpus and
#                       commands of B0-B2, for the extra seeds B3, B4)
# 2. trains at once, `timeout 420` each, less if the builds took more than 30 s (the recipe = `autotune train`'s
#    defaults):
#      E0-E4  the recipe on DS/fusion_enc, seeds 0-4
#      W0-W2  the recipe with --weight-decay 1e-4 on DS/fusion_enc, seeds 0-2
#      B3, B4 the recipe on DS/fusion_attn, seeds 3, 4 (pairs for E3, E4; B0-B2 exist:
#             benchmarks/results/gnn_attention_corpus/validation_B*.json)
# 3. evaluates every model on the validation split (resnet, vae, vit, t5; the same 18 programs and 4,023 kernels
#    >= 5 us in both datasets), never on test: adoption is decided on validation first (rules.txt).
# Everything that must come back (logs, .pt files, validation JSON) is written under $OUT.
#
# For a local dry run: SWEEP_TINY=1 OUT=/tmp/x bash ... (5 programs, 1 epoch, 3 trainings); SWEEP_BUILD_ONLY=1
# stops after the dataset builds.
set -u
: "${OUT:?set OUT to the directory whose files come back}"
cd "$(dirname "$0")/../.."
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 PYTHONPATH=$PWD
PY=${PY:-python3}
L=$OUT/logs
P=$OUT/P
mkdir -p "$L" "$P"
T0=$(date +%s)
{ echo "host: $(nproc) cores, $(date -u)"; cat CARRY_COMMIT 2>/dev/null
  $PY -c "import sys, torch, numpy; print(sys.version.split()[0], 'torch', torch.__version__, 'numpy', numpy.__version__)"
} 2>&1 | tee "$L/env.log"

if [ "${SWEEP_TINY:-0}" = 1 ]; then
  SEL_hlo="--program mlp_mixer_small_infer --program resnet_small_infer"
  SEL_hlo_attention="--program gpt_small_infer --program t5_small_infer"
  SEL_hlo_encoder="--program roberta_small_infer"
  TRAIN_EXTRA="--epochs 1"; TLIMIT=120
else
  SEL_hlo=""; SEL_hlo_attention=""; SEL_hlo_encoder=""; TRAIN_EXTRA=""; TLIMIT=420
fi

build() {  # build DIR SPLITFILE FOLDER...: the folders' programs into DIR, one after the other (a build locks DIR)
  local dir=$1 split=$2 d sel; shift 2
  for d in "$@"; do
    sel=SEL_$d
    $PY -m autotune.cli dataset build --programs examples/$d ${!sel} --task fusion --evaluator sim \
        --configs-per-program 8 --split-file "$split" --out "$dir" || return 1
  done
}
rm -rf DS/fusion_enc DS/fusion_attn
build DS/fusion_enc benchmarks/results/fusion_split_attention_enc.json hlo hlo_attention hlo_encoder \
    > "$L/build_enc.log" 2>&1 &
PID_ENC=$!
build DS/fusion_attn benchmarks/results/fusion_split_attention.json hlo hlo_attention > "$L/build_attn.log" 2>&1 &
PID_ATTN=$!
wait $PID_ENC; RC_ENC=$?
wait $PID_ATTN; RC_ATTN=$?
echo "datasets built in $(( $(date +%s) - T0 )) s (exit $RC_ENC, $RC_ATTN)"; tail -2 "$L/build_enc.log"; tail -2 "$L/build_attn.log"
[ $RC_ENC = 0 ] || { echo "DS/fusion_enc build failed"; exit 1; }
[ $RC_ATTN = 0 ] || echo "DS/fusion_attn build failed: B3, B4 skipped"
[ "${SWEEP_BUILD_ONLY:-0}" = 1 ] && exit 0     # local check of the full builds

# each training stops at the earlier of 420 s and 450 s after the start, leaving time to evaluate within 8 min
[ "${SWEEP_TINY:-0}" = 1 ] || { left=$(( 450 - ($(date +%s) - T0) )); [ $left -lt $TLIMIT ] && TLIMIT=$left; }
echo "training time limit: $TLIMIT s"
train() {  # train NAME ARGS...: one training in the background, one thread, its log under $L
  local name=$1; shift
  ( time timeout $TLIMIT $PY -m autotune.cli train --model gnn --task fusion --out "$P/$name.pt" $TRAIN_EXTRA "$@" ) \
      > "$L/train_$name.log" 2>&1 &
}
if [ "${SWEEP_TINY:-0}" = 1 ]; then
  train E0 --data DS/fusion_enc --seed 0
  train W0 --data DS/fusion_enc --seed 0 --weight-decay 1e-4
  [ $RC_ATTN = 0 ] && train B3 --data DS/fusion_attn --seed 3
else
  for s in 0 1 2 3 4; do train E$s --data DS/fusion_enc --seed $s; done
  for s in 0 1 2; do train W$s --data DS/fusion_enc --seed $s --weight-decay 1e-4; done
  [ $RC_ATTN = 0 ] && for s in 3 4; do train B$s --data DS/fusion_attn --seed $s; done
fi
wait
echo "trainings done at $(( $(date +%s) - T0 )) s"
ls -la "$P"

for f in "$P"/*.pt; do
  [ -e "$f" ] || continue
  m=$(basename "$f" .pt)
  case $m in B*) ds=DS/fusion_attn ;; *) ds=DS/fusion_enc ;; esac
  $PY -m autotune.cli evaluate --data $ds --split validation --cost-model "$f" --json \
      > "$OUT/validation_$m.json" 2> "$L/eval_$m.log" &
done
wait
echo "all done in $(( $(date +%s) - T0 )) s"
for f in "$L"/train_*.log; do echo "== $f"; tail -6 "$f"; done
if ls "$OUT"/validation_*.json > /dev/null 2>&1; then
  $PY experiments/2026-11-27-subnormals-weight-decay/summarize.py "$OUT"/validation_*.json 2>&1 | tee "$L/summary.log"
else
  echo "no model finished: nothing to evaluate"
fi
