#!/usr/bin/env bash
# Usage: N=16 OUT=/shared/runs/qwen3b-2da MODEL=/shared/models/Qwen2.5-3B-Instruct bash submit.sh
# Queues N screen tasks as one array and the merge/select/test job after all of them succeed.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
N="${N:?set N}"; export N OUT
array=$(sbatch --parsable --array="0-$((N - 1))" --export=ALL "$here/screen_array.sbatch")
sbatch --dependency="afterok:${array}" --export=ALL "$here/merge_select_test.sbatch"
echo "screen array $array; merge queued after it"
