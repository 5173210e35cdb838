#!/usr/bin/env bash
# Usage: N=16 OUT=/shared/runs/qwen3b-2da MODEL=/shared/models/Qwen2.5-3B-Instruct bash submit.sh [sbatch options]
# Queues N screen tasks as one array and the merge/select/test job after all of them succeed
# (afterok: a requeued shard goes back to the queue and the merge waits for its new attempt; if a shard
# fails, the merge never starts, even if that task is later requeued and succeeds: Slurm marks the
# dependency failed for good, and keeps the array's failed exit code, so afterok on the array cannot be
# satisfied again. Fix the cause, rerun that shard with `sbatch --array=i screen_array.sbatch` (it
# resumes), queue merge_select_test.sbatch again after it, and scancel the merge that waits in vain).
# Options given here (e.g. --partition=gpu --account=lab, or --gres/--mem/--time) go to both sbatch
# calls and override the scripts' #SBATCH lines. Prints the two job ids as "array=ID merge=ID".
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
N="${N:?set N}"; OUT="${OUT:?set OUT}"; export N OUT
array=$(sbatch --parsable --array="0-$((N - 1))" --export=ALL "$@" "$here/screen_array.sbatch")
merge=$(sbatch --parsable --dependency="afterok:${array}" --export=ALL "$@" "$here/merge_select_test.sbatch")
echo "array=${array} merge=${merge}"
echo "screen array $array; merge $merge queued after it" >&2
