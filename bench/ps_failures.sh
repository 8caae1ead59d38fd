#!/usr/bin/env bash
# bench/ps_failures.sh: the parameter servers' failure matrix (issue 37). For each mode
# (async, ssp:4) and job size (np 3: 2 workers, np 4: 3 workers; one server), trains for 2
# epochs undisturbed (--reps times, since asynchronous runs are not deterministic), then with
# worker 1 killed (SIGKILL) and with it stopped (SIGSTOP) for twice --timeout, each in the
# middle of its first epoch (DTRAIN_FAULT), all under
# `dtrain-launch --max-restarts 0 --survive-lost-workers`. Prints one row per run: exit
# status, final test accuracy and its distance to the median of the undisturbed runs of the
# same case, the workers lost, the batches handed out again and those left untrained, and
# the wall time.
#
#   bench/ps_failures.sh [--trainer mnist|imagenet] [--data DIR] [--model M] [--limit-train N]
#                        [--reps R] [--timeout S] [--momentum M] [--np "3 4"] [--out FILE]
#
# Defaults: train_mnist's CNN on all 60000 Fashion-MNIST images, 3 repetitions, --timeout 20
# (a lost worker is dropped after 10 s), momentum 0.7 (at np 4, 3 asynchronous workers
# pushing 96 samples each diverged in 2 of 10 runs with it: bench/results/ps_failures.txt), np 3 and 4. train_imagenet needs --data (an ImageNet-style
# folder, e.g. made by mnist_to_images) and trains --model resnet20 at 28x28.
set -euo pipefail
cd "$(dirname "$0")/.."

trainer=mnist data="" model="" limit=0 reps=3 timeout=20 out="" momentum=0.7 nps="3 4"
while [ $# -gt 0 ]; do
  case "$1" in
    --trainer) trainer="$2"; shift 2 ;;
    --data) data="$2"; shift 2 ;;
    --model) model="$2"; shift 2 ;;
    --limit-train) limit="$2"; shift 2 ;;
    --reps) reps="$2"; shift 2 ;;
    --timeout) timeout="$2"; shift 2 ;;
    --momentum) momentum="$2"; shift 2 ;;
    --np) nps="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    *) echo "ps_failures.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
case "$trainer" in
  mnist)
    binary=build/release/examples/train_mnist
    # Momentum 0.7, as bench_ps: at 0.9, asynchronous staleness adds momentum of its own and
    # the CNN can diverge (PARAMETER_SERVERS.md).
    args=(--model "${model:-cnn}" --momentum "$momentum")
    [ -n "$data" ] && args+=(--data "$data")
    examples=60000 ;;
  imagenet)
    binary=build/release/examples/train_imagenet
    [ -n "$data" ] || { echo "ps_failures.sh: --trainer imagenet needs --data DIR" >&2; exit 2; }
    args=(--data "$data" --model "${model:-resnet20}" --image-size 28 --momentum "$momentum")
    examples=$(find "$data/train" -type f | wc -l) ;;
  *) echo "ps_failures.sh: --trainer must be mnist or imagenet" >&2; exit 2 ;;
esac
[ -x "$binary" ] || { echo "ps_failures.sh: build first ($binary is missing)" >&2; exit 2; }
if [ "$limit" -gt 0 ]; then
  args+=(--limit-train "$limit")
  examples=$((limit < examples ? limit : examples))
fi
args+=(--epochs 2 --timeout "$timeout" --strategy ps)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
[ -n "$out" ] && exec > >(tee "$out")

commit=$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src include examples scripts || echo "-dirty")
echo "# bench/ps_failures.sh --trainer $trainer${data:+ --data $data}${model:+ --model $model} --limit-train $limit --reps $reps --timeout $timeout --momentum $momentum --np \"$nps\""
echo "# commit $commit, $(date -u +%Y-%m-%d), $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cpus"
echo "# ${trainer} ${args[*]}; batch 64 at np 3, 96 at np 4 (a multiple of 3 workers); a lost worker is dropped after $((timeout / 2)) s"
printf '%-6s %-3s %-10s %-4s %-5s %-8s %-7s %-5s %-7s %-6s %s\n' \
  mode np run exit acc_% vs_median lost again missed secs note

log=$(mktemp)
trap 'rm -f "$log"' EXIT
median() { sort -g | awk '{a[NR]=$1} END {if (NR == 0) print "nan"; else if (NR % 2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

# One run: prints its row; $1 mode, $2 np, $3 label, $4 DTRAIN_FAULT (or ""), $5 median.
run() {
  local mode=$1 np=$2 label=$3 fault=$4 med=$5 start status acc lost again missed note
  start=$(date +%s.%N)
  set +e
  env ${fault:+DTRAIN_FAULT=$fault} scripts/dtrain-launch --max-restarts 0 --survive-lost-workers --finish-grace 60 -- \
    mpirun -np "$np" "$binary" "${args[@]}" --batch-size "$batch" --ps-mode "$mode" > "$log" 2>&1
  status=$?
  set -e
  local secs
  secs=$(echo "$(date +%s.%N) - $start" | bc)
  acc=$(sed -n 's/^final test accuracy: \([0-9.]*\)%.*/\1/p' "$log" | tail -1 || true)
  lost=$( (grep -o 'worker(s) [0-9 and]* lost' "$log" || true) | tail -1 | sed 's/worker(s) \(.*\) lost/\1/; s/ and /+/g')
  again=$( (grep '^parameter servers (' "$log" || true) | (grep -o '[0-9]* batch(es) handed out again' || true) | grep -o '^[0-9]*' || true)
  missed=$( (grep '^parameter servers (' "$log" || true) | (grep -o '([0-9]* left untrained' || true) | grep -o '[0-9]*' || true)
  note=""
  grep -q 'dropped this worker' "$log" && note="worker left when it woke"
  local delta="-"
  if [ -n "$acc" ] && [ "$med" != "-" ]; then delta=$(printf '%+.2f' "$(echo "$acc - $med" | bc -l)"); fi
  printf '%-6s %-3s %-10s %-4s %-5s %-8s %-7s %-5s %-7s %-6.1f %s\n' "$mode" "$np" "$label" "$status" \
    "${acc:--}" "$delta" "${lost:--}" "${again:-0}" "${missed:-0}" "$secs" "$note"
  if [ "$status" -ne 0 ]; then
    grep -v 'PMIX ERROR' "$log" | tail -15 | sed 's/^/#   /'  # what went wrong, for the record
  fi
  LAST_ACC=$acc
}

for np in $nps; do
  workers=$((np - 1))
  batch=$((32 * workers))
  # Worker 1's step in the middle of its first epoch: it takes about 1/workers of the batches.
  middle=$(( (examples + batch - 1) / batch / workers / 2 ))
  for mode in async ssp:4; do
    accs=()
    for r in $(seq 1 "$reps"); do
      run "$mode" "$np" "clean-$r" "" "-"
      [ -n "$LAST_ACC" ] && accs+=("$LAST_ACC")
    done
    med=$(printf '%s\n' "${accs[@]}" | median)
    echo "# $mode np $np: median of the undisturbed runs $med%"
    run "$mode" "$np" "kill" "kill-at-step:1:$middle" "$med"
    run "$mode" "$np" "stop" "stop-at-step:1:$middle:$((2 * timeout))" "$med"
  done
done
