#!/usr/bin/env bash
# A model too big for plain data parallelism on this machine, trained under ZeRO stage 3.
#
# mlp_1b (0.94B parameters: 14 layers of 8192x8192 and a head) with Adam in f32 takes 16
# bytes per parameter, 15 GB per replica: plain data parallelism on 2 ranks would need 30 GB
# of a 24 GiB machine; stage 3 needs 16/2 = 7.5 GB per rank, plus two gathered layers.
# Each rank runs under an address-space limit (ulimit -v, CAP_MB, 10752 by default: the two
# ranks together stay below the machine's memory), so that
# running out hits the rank that allocates, with dtrain's message ("out of CPU memory
# allocating N bytes") and the job ended by run_program, and cannot reach other work on
# the machine. Prints, per spec, every update's loss and time, then bench_zero_memory's
# table (per-rank peak and in-use bytes); plain data parallelism is expected to stop with
# the allocation error. Takes about 5 minutes on 2 cores. Not a CI test: a bench.
#
#   bash bench/zero_billion.sh [build dir] > bench/results/zero_billion_<date>.txt
set -u
build=${1:-build/release}
cap_mb=${CAP_MB:-10752}
steps=${STEPS:-4}
export OMP_NUM_THREADS=1
# The freed blocks of gathered layers go back to the system instead of a per-rank cache.
export DTRAIN_CPU_CACHE_MB=${DTRAIN_CPU_CACHE_MB:-256}
export OMPI_ALLOW_RUN_AS_ROOT=${OMPI_ALLOW_RUN_AS_ROOT:-1} OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}

echo "# zero_billion.sh at $(git rev-parse --short HEAD 2>/dev/null), $(date -u +%Y-%m-%dT%H:%MZ)," \
  "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc --all) cores," \
  "$(free -g | awk '/Mem:/ {print $2}') GiB; each rank limited to ${cap_mb} MB of address space"
for spec in dp zero=3; do
  echo "## $spec: mpirun -np 2 bench_zero_memory --model mlp_1b --batch 16 --specs $spec --warmup $((steps - 1)) --show-loss"
  start=$(date +%s)
  timeout 1800 mpirun -np 2 sh -c "ulimit -v $((cap_mb * 1024)) && exec $build/bench/bench_zero_memory \
    --model mlp_1b --batch 16 --specs $spec --warmup $((steps - 1)) --show-loss" 2>&1 |
    grep -v -e '^--------' -e 'MPI_ABORT was invoked' -e 'NOTE: invoking MPI_ABORT' -e 'You may or may not see' \
      -e 'exactly when Open MPI' -e 'with errorcode' -e '^$' -e 'help message' -e 'orte_base_help_aggregate'
  echo "## $spec: exit code ${PIPESTATUS[0]}, $(($(date +%s) - start)) s"
done
