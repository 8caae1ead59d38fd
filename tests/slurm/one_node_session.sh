# Sourced by the Slurm test scripts (srun_main_job.sh, srun_elastic.sh): starts the one-node
# Slurm (scripts/slurm/one-node-slurm.sh) in a directory for the rest of the script and stops it
# whatever happens. Exits 77 (skipped) with the reason where Slurm cannot start here, or 1
# where DTRAIN_REQUIRE_SLURM is set and slurmctld is installed. On INT/TERM it ends the
# script's running command (its pid in run_pid), then the EXIT trap stops the daemons.
#   one_node_session ONE_NODE_SLURM_SH DIR      (exports SLURM_CONF)
one_node_session() {
  local one_node=$1 dir=$2 rc
  # An outer Slurm job (ctest run inside an allocation) must not leak into this cluster's srun.
  for v in $(env | grep -o '^SLURM_[A-Za-z0-9_]*'); do unset "$v"; done
  "$one_node" start "$dir"
  rc=$?
  if [ $rc -eq 77 ]; then
    # Required only where Slurm is installed: install-deps leaves it out, saying why, where
    # munge's installation cannot run (some sandboxes), and there it can only be skipped.
    if [ -n "${DTRAIN_REQUIRE_SLURM:-}" ] && command -v "${SLURMCTLD:-slurmctld}" > /dev/null; then
      echo "FAILED: one-node Slurm cannot start here (reason above), and DTRAIN_REQUIRE_SLURM is set"
      exit 1
    fi
    echo "SKIPPED: one-node Slurm cannot start here (reason above)"
    exit 77
  fi
  [ $rc -eq 0 ] || { echo "FAILED: one-node-slurm.sh start exited $rc"; exit 1; }
  run_pid=
  # shellcheck disable=SC2064 # the paths are fixed now
  trap "\"$one_node\" stop \"$dir\"" EXIT
  trap '[ -n "$run_pid" ] && kill -TERM "$run_pid" 2>/dev/null; exit 143' INT TERM
  export SLURM_CONF=$dir/slurm.conf
}
