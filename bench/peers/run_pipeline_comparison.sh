#!/usr/bin/env bash
# Pipeline parallelism, dtrain against PyTorch's torch.distributed.pipelining (gloo), in one
# go on this machine: an MLP 784-W-W-W-W-10 (--hidden, default 784 wide, whose best cut
# splits the parameters, and so the work, into halves within 1%) at --batch (default 256),
# cut into 2 stages on 2 ranks x 1 thread, 8 micro-batches, the schedules of --schedules
# (default gpipe,1f1b,zb-h1,zb-v) on each side, and on each side the unpipelined model in
# one process (1 thread), the reference for the pipeline's speedup. Each repetition runs,
# in turn: bench_pipeline in one process, two of it at once (what the machine gives two
# processes: the ceiling of any 2-rank speedup), bench_pipeline on 2 ranks (every schedule), then
# pytorch_pipeline.py with each schedule (each of which first times its own one-process
# reference), so that all of them see similar machine load; PyTorch gets dtrain's cut for
# each schedule (zb-v's has 2K-1 cuts). Writes the JSON lines, each tagged with its
# repetition ("rep"), to bench/results/pipeline_np2<suffix>.jsonl and the table
# (pipeline_table.py), headed by the machine's description, to
# bench/results/pipeline_np2<suffix>.txt (and stdout); the suffix is _b<batch> when the
# batch is not 256.
#   bench/peers/run_pipeline_comparison.sh [--build DIR] [--reps N] [--hidden W,W,W,W] [--batch B]
#       [--schedules S,S] [--steps N] [--np4] [--quick]
# --build: the CMake build directory holding bench/bench_pipeline (default build/release).
# --reps: repetitions (default 5). --steps: measured steps per case (default 50, after 5).
# --np4: also the 4-stage sweep (oversubscribed on 2 vCPUs: for the bubble and memory
# columns, not the step times): every schedule, 1 to 16 micro-batches, bench_pipeline's
# table to bench/results/pipeline_np4.txt.
# --quick: one repetition of a few steps (and of the sweep with --np4), to check the script
# rather than to measure (results go to a temporary directory).
# PYTHON selects the peer's interpreter (default .venv/bin/python, from setup-venv.sh).
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
build=$root/build/release
reps=5
np4=0
quick=0
hidden=784,784,784,784
batch=256
schedules=gpipe,1f1b,zb-h1,zb-v
steps=50
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$(cd "$2" && pwd); shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --hidden) hidden=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    --schedules) schedules=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --np4) np4=1; shift ;;
    --quick) quick=1; shift ;;
    *) echo "run_pipeline_comparison: unknown argument '$1' (expected --build DIR, --reps N, --hidden W,..., --batch B, --schedules S,..., --steps N, --np4 or --quick)" >&2
       exit 2 ;;
  esac
done
python=${PYTHON:-$root/.venv/bin/python}
bench=$build/bench/bench_pipeline
peer=$root/bench/peers/pytorch_pipeline.py
[ -x "$bench" ] || { echo "run_pipeline_comparison: $bench not found (build the bench_pipeline target)" >&2; exit 1; }
[ -x "$python" ] || { echo "run_pipeline_comparison: $python not found (run bench/peers/setup-venv.sh)" >&2; exit 1; }
[[ "$reps" =~ ^[1-9][0-9]*$ ]] \
  || { echo "run_pipeline_comparison: --reps needs a positive integer, got '$reps'" >&2; exit 2; }

results=$root/bench/results
warmup=5
if [ "$quick" = 1 ]; then  # a check must not overwrite measured results
  results=$(mktemp -d)
  trap 'rm -rf "$results"' EXIT
  reps=1
  steps=2
  warmup=1
fi
mkdir -p "$results"
suffix=$([ "$batch" = 256 ] || echo "_b$batch")
jsonl=$results/pipeline_np2$suffix.jsonl
table=$results/pipeline_np2$suffix.txt
# The commit before this run rewrites its own (tracked) results files, which would read as dirty.
commit=$(git -C "$root" describe --always --dirty 2>/dev/null || echo unknown)
. "$root/bench/provenance.sh"  # the raw files' first line (docs/PERFORMANCE.md)
provenance_json > "$jsonl"

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
# The peer sets its own threads and OMP_WAIT_POLICY=PASSIVE (peer_models.py); said here too.
export OMP_WAIT_POLICY=PASSIVE
model=(--model mlp --hidden "$hidden" --batch "$batch" --threads 1 --steps "$steps" --warmup "$warmup")
micro=8

machine="$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $(nproc) hardware threads, \
$(free -g | awk '/^Mem:/ {print $2}') GB; $(uname -sr); load average at start $(cut -d' ' -f1-3 /proc/loadavg); \
dtrain $commit; \
torch $("$python" -c 'import torch; print(torch.__version__)'); $(date -u +%Y-%m-%dT%H:%MZ)"
echo "machine: $machine"

# The JSON lines of one run, each tagged with the repetition (and with "concurrent": N for
# the N one-process runs started together).
json_lines() { sed -n "s/^{/{\"rep\":$1,${2:+\"concurrent\":$2,}/p" | tee -a "$jsonl"; }

for rep in $(seq 1 "$reps"); do
  echo "== repetition $rep/$reps: dtrain 1 process, dtrain 2 stages ($schedules), torch ($schedules)" >&2
  mpirun -np 1 "$bench" "${model[@]}" --json | json_lines "$rep"
  # The machine's parallel capacity: two one-process runs at once, one on each core (two
  # separate mpiruns would both bind their rank to core 0). Where the two vCPUs share one
  # core's throughput, each runs at half speed, and no 2-rank pipeline can pass one process.
  pair=$(mktemp)
  mpirun -np 1 --cpu-set 0 --bind-to core "$bench" "${model[@]}" --json > "$pair" &
  mpirun -np 1 --cpu-set 1 --bind-to core "$bench" "${model[@]}" --json | json_lines "$rep" 2
  wait $!
  json_lines "$rep" 2 < "$pair"
  rm -f "$pair"
  mpirun -np 2 "$bench" "${model[@]}" --micro-batches "$micro" --schedules "$schedules" --json | json_lines "$rep"
  for schedule in ${schedules//,/ }; do
    # dtrain's balanced cut for this schedule, the same flat layer list on both sides.
    cuts=$(python3 -c 'import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
print(",".join(map(str, next(r["cuts"] for r in rows if r.get("impl") == "dtrain" and r.get("schedule") == sys.argv[2]))))' \
      "$jsonl" "$schedule")
    "$python" "$peer" "${model[@]}" --stages 2 --micro-batches "$micro" --schedule "$schedule" --cuts "$cuts" --json \
      | json_lines "$rep"
  done
done

echo
python3 "$root/bench/peers/pipeline_table.py" "$jsonl" \
  --machine "$machine; load average at end $(cut -d' ' -f1-3 /proc/loadavg)" | { provenance_text; cat; } | tee "$table"

if [ "$np4" = 1 ]; then
  echo "== 4 stages on $(nproc) hardware threads (oversubscribed): every schedule, 1 to 16 micro-batches" >&2
  {
    echo "machine: $machine"
    mpirun --oversubscribe -np 4 "$bench" "${model[@]}" --micro-batches 1,2,4,8,16 \
      --schedules gpipe,1f1b,interleaved
  } | tee "$results/pipeline_np4.txt"
fi
