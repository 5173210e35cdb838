#!/usr/bin/env bash
# Several GPUs on one node: one process per GPU, each screening one shard, then one merge.
# Usage: GPUS=4 OUT=runs/qwen3b MODEL=... bash one_node_multi_gpu.sh [extra celtk screen flags]
# On a CPU machine, DEVICE=cpu runs the same layout with GPUS processes (the tests do this).
set -euo pipefail
GPUS="${GPUS:-$(nvidia-smi -L 2>/dev/null | wc -l)}"
OUT="${OUT:?set OUT}"
pids=()
for ((i = 0; i < GPUS; i++)); do
  CUDA_VISIBLE_DEVICES="$i" celtk screen --model "${MODEL:-smollm2-135m}" --device "${DEVICE:-cuda}" \
    --shard "$i/$GPUS" --out "$OUT" "$@" > "$OUT.shard-$i.log" 2>&1 &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
if [ "$status" != 0 ]; then echo "a shard failed; rerun this script to resume it (finished layers are kept)" >&2; exit 1; fi
celtk merge "$OUT"
