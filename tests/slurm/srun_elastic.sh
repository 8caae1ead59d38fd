#!/usr/bin/env bash
# Elastic relaunch under Slurm (docs/ELASTIC.md): starts the one-node Slurm
# (scripts/slurm/one-node-slurm.sh) in DIR and runs `dtrain-launch --launcher srun --np 2:4
# --hosts a:2,b:2 --fake-hosts` over TRAINER ARGS, with host b's ranks (DTRAIN_HOST_ID 1)
# killed at update 25: each attempt is an srun step; the launcher must read the lost tasks from
# srun's report, relaunch on host a's 2 ranks, and finish (exit 0) with every sample of the
# epoch in exactly one applied update (tools/check_sample_log.py). Stops Slurm whatever
# happens (one_node_session.sh). Exit 77 (skipped) where Slurm cannot start.
#   usage: srun_elastic.sh ONE_NODE_SLURM_SH DIR SOURCE_DIR TRAINER [ARGS...]
set -uo pipefail
[ $# -ge 4 ] || { echo "usage: $0 ONE_NODE_SLURM_SH DIR SOURCE_DIR TRAINER [ARGS...]" >&2; exit 2; }
one_node=$1 dir=$2 source_dir=$3
shift 3
source "$(dirname "$0")/one_node_session.sh"
one_node_session "$one_node" "$dir"

job=$dir/job
rm -rf "$job"
out=$dir/elastic.out
(
  timeout -s TERM 400 env DTRAIN_FAULT=kill-host-at-step:1:25 "$source_dir/scripts/dtrain-launch" --launcher srun \
    --mpirun-args=--time=5 --np 2:4 --hosts a:2,b:2 --fake-hosts --cooldown 600 --restart-delay 0 --max-restarts 1 \
    -- "$@" --checkpoint-dir "$job/ckpt" --sample-log "$job/samples" 2>&1 | tee "$out"
  exit "${PIPESTATUS[0]}"
) &
run_pid=$!
wait "$run_pid"
rc=$?
run_pid=

fail() { echo "FAILED: $*"; exit 1; }
[ "$rc" -eq 0 ] || fail "the elastic job exited $rc"
grep -q "srun: error: .*tasks\? [0-9,-]*: Killed" "$out" || fail "srun did not report the killed tasks"
grep -q "dtrain-launch: host b failed (rank [23]" "$out" || fail "the launcher did not name host b from srun's report"
grep -q "dtrain-launch: attempt 1: 2 rank(s) on a:2$" "$out" || fail "no relaunch on host a's 2 ranks"
grep -q "the global batch of 96 is kept on 2 data-parallel shard(s) instead of the checkpoint's 4" "$out" ||
  fail "the resumed job did not say how it keeps the global batch"
python3 "$source_dir/tools/check_sample_log.py" "$job/samples" | tee -a "$out"
[ "${PIPESTATUS[0]}" -eq 0 ] || fail "the sample log's audit failed"
echo "PASSED: under Slurm the job lost host b, went on with host a's 2 ranks, and took every sample once"
