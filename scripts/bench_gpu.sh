#!/usr/bin/env bash
# The project's checks on a CUDA GPU, full Fashion-MNIST, bf16 (what --precision auto picks there):
#
#   scripts/bench_gpu.sh step       # training throughput: bare loop, pipeline, pipeline with
#                                   # --compile true --compile-mode reduce-overhead (CUDA graphs);
#                                   # then 12-epoch static and dynamic runs, eager and compiled
#   scripts/bench_gpu.sh frontier   # static-12, dynamic-12 and dynamic at static-12's seconds
#                                   # that trained (a seconds budget on CUDA), test split via evaluate
#
# Results go under $OUT (default reports/gpu); runs to $MLFLOW_TRACKING_URI (default a store in
# /tmp/gpu). Seeds: $SEEDS (default 130,131: never used to choose anything). Fashion-MNIST is read
# from $GCNN_DATA_CACHE/fashion-mnist when the machine has no copy of its own; DATASET=folder:PATH
# runs the frontier on another dataset (CIFAR-10's archive, say). SUBSET=N and DEVICE=cpu make a
# quick dry run of the same commands on a machine without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
part=${1:?say step or frontier}
OUT=${OUT:-reports/gpu}
SEEDS=${SEEDS:-130,131}
SUBSET=${SUBSET:-0}
DATASET=${DATASET:-fashion-mnist}
DEVICE=${DEVICE:-cuda}
PY=${PYTHON:-python3}
mkdir -p "$OUT" /tmp/gpu
export MLFLOW_TRACKING_URI=${MLFLOW_TRACKING_URI:-sqlite:////tmp/gpu/mlflow.db}
export PYTHONUNBUFFERED=1
first_seed=${SEEDS%%,*}
common=(--subset "$SUBSET" --device "$DEVICE" --seed "$first_seed" --experiment-name gpu)

case "$part" in
step)
    "$PY" scripts/bench_train_static.py --device "$DEVICE" --subset "$SUBSET" --specs default,minimal \
        --precisions auto --epochs 2 --repeats 2 --compile --compile-mode reduce-overhead \
        --output "$OUT/train_static.json" 2>&1 | grep "^trial" | tee "$OUT/train_static.log"
    if [ -z "${SCORED:-}" ]; then  # SCORED=1: the store has a score_difficulty run (frontier's)
        "$PY" -m pipeline.score_difficulty --subset "$SUBSET" --device "$DEVICE" --experiment-name gpu \
            --run-name gpu-scores 2>&1 | tail -3
    fi
    for compiled in false true; do
        mode=default
        [ "$compiled" = true ] && mode=reduce-overhead
        "$PY" -m pipeline.train_static "${common[@]}" --compile "$compiled" --compile-mode "$mode" \
            --run-name "gpu-static-compile-$compiled" 2>&1 | tail -2
        "$PY" -m pipeline.train_dynamic "${common[@]}" --compile "$compiled" --compile-mode "$mode" \
            --run-name "gpu-dynamic-compile-$compiled" 2>&1 | tail -2
    done
    "$PY" scripts/bench_gpu_runs.py --experiment gpu --output "$OUT/runs.md" | tee "$OUT/runs.log"
    ;;
frontier)
    "$PY" scripts/bench_frontier.py --dataset "$DATASET" --seeds "$SEEDS" --subset "$SUBSET" --fractions 1 \
        --dynamic-fractions none --output-dir "$OUT/frontier" 2>&1 | tee "$OUT/frontier.log" | tail -40
    ;;
*)
    echo "say step or frontier, not $part" >&2
    exit 2
    ;;
esac
