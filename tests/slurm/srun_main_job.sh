#!/usr/bin/env bash
# The main job through Slurm: starts the one-node Slurm (scripts/slurm/one-node-slurm.sh) in
# DIR, runs `srun -n 2 --mpi=pmix TRAINER ARGS...`, stops Slurm whatever happens, and checks
# that the job really ran as 2 ranks of one Slurm job step that found each other through PMIx:
#   - each task reports its SLURM_JOB_ID / SLURM_PROCID / SLURM_LOCALID / PMIX_RANK (the same job
#     id, procid = local id = PMIx rank 0 and 1),
#   - the trainer's layout line says "2 rank(s) x T thread(s)" with T = nproc / 2 (the ranks on
#     this host taken from Slurm's step layout: 1 rank would mean two singletons),
#   - every epoch ended with the replicas equal ("replica max diff 0": run the trainer with
#     --check-replicas) and the final test accuracy passed SRUN_MAIN_JOB_MIN_ACCURACY percent
#     (default 85; 10 classes, so chance is 10%; slurm_tests.cmake's short CNN job ends near 89%).
# Exit 77 (ctest: skipped) with the reason when Slurm cannot start here; a failure instead
# with DTRAIN_REQUIRE_SLURM=1 in the environment where slurmctld is installed (CI machines).
#   usage: srun_main_job.sh ONE_NODE_SLURM_SH DIR TRAINER [ARGS...]
set -uo pipefail
[ $# -ge 3 ] || { echo "usage: $0 ONE_NODE_SLURM_SH DIR TRAINER [ARGS...]" >&2; exit 2; }
one_node=$1
dir=$2
shift 2

source "$(dirname "$0")/one_node_session.sh"
one_node_session "$one_node" "$dir"

out=$dir/srun.out
# shellcheck disable=SC2016 # the tasks expand these, not this script
cmd=(srun -n 2 --mpi=pmix --time=5 --kill-on-bad-exit=1 bash -c
  'echo "slurm task: job ${SLURM_JOB_ID:-none} procid ${SLURM_PROCID:-none} localid ${SLURM_LOCALID:-none} pmix_rank ${PMIX_RANK:-none} of ${SLURM_NTASKS:-none} on $(hostname -s)"; exec "$@"'
  task "$@")
echo "+ ${cmd[*]}"
# srun's own limit (--time) and this timeout both end well before ctest's, so that the trap
# above always stops the daemons. In the background and waited for, so that a signal to this
# script is handled at once, not after srun returns.
(
  timeout -s TERM 400 "${cmd[@]}" 2>&1 | tee "$out"
  exit "${PIPESTATUS[0]}"
) &
run_pid=$!
wait "$run_pid"
rc=$?
run_pid=

fail() { echo "FAILED: $*"; exit 1; }
[ "$rc" -eq 0 ] || fail "srun exited $rc"
job=$(grep -o 'slurm task: job [0-9]*' "$out" | head -n 1 | grep -o '[0-9]*$')
[ -n "$job" ] || fail "no task printed a numeric SLURM_JOB_ID"
for r in 0 1; do
  grep -q "^slurm task: job $job procid $r localid $r pmix_rank $r of 2 on " "$out" ||
    fail "no line 'slurm task: job $job procid $r localid $r pmix_rank $r of 2' (task $r of the same job)"
done
threads=$(($(nproc) / 2))
[ "$threads" -ge 1 ] || threads=1
grep -q " 2 rank(s) x $threads thread(s)" "$out" ||
  fail "the layout line does not say '2 rank(s) x $threads thread(s)' (2 ranks sharing this host's $(nproc) CPUs)"
epochs=$(grep -c '^epoch [0-9]*/[0-9]*: .*test accuracy' "$out")
[ "$epochs" -ge 1 ] || fail "no epoch summary line"
[ "$(grep '^epoch [0-9]*/[0-9]*: .*test accuracy' "$out" | grep -c 'replica max diff 0$')" -eq "$epochs" ] ||
  fail "not every epoch line ends with 'replica max diff 0' (the 2 replicas differ, or no --check-replicas)"
min=${SRUN_MAIN_JOB_MIN_ACCURACY:-85}
acc=$(sed -n 's/^final test accuracy: \([0-9.]*\)%.*/\1/p' "$out" | tail -n 1)
[ -n "$acc" ] || fail "no 'final test accuracy' line"
awk -v a="$acc" -v m="$min" 'BEGIN { exit !(a + 0 >= m + 0) }' ||
  fail "final test accuracy $acc% is below $min%"
echo "PASSED: srun -n 2 ran the main job as 2 ranks of Slurm job $job: $epochs epoch(s), replicas equal, final test accuracy $acc% (>= $min%)"
