#!/usr/bin/env bash
# Before/after figures for a change to the distribution core (issue 32's acceptance): two
# builds of the release preset, run alternately on the same machine.
#   1. the README's main job (mpirun -np 2 train_mnist --model cnn --epochs 3), once each:
#      the printed losses and accuracies must be the same;
#   2. five alternating repetitions of
#      - train_mnist -np 2, CNN, one epoch on 12,000 examples (samples/s),
#      - bench_ddp -np 2, CNN and MLP (scaling efficiency),
#      - bench_ps_data -np 3 (two async workers, one server; 300 us per sample read, 4 loader
#        threads, 3 repetitions inside): the chief worker's data wait.
# Prints the raw lines (JSON where the binary has it), then medians per side.
#   bench/core_ab.sh [--trainer-only | --mesh] BEFORE_BUILD AFTER_BUILD > bench/results/core2_before_after.txt
# BEFORE_BUILD needs bench_ps_data too: the file builds against 11555e7 unchanged. About 25
# minutes on 2 vCPUs; run it on a quiet machine. --trainer-only: for a change to the
# Trainer's loop alone, the main job and train_mnist (neither bench_ddp nor bench_ps_data,
# which do not run the Trainer; only train_mnist is needed in the builds), about 8 minutes.
# --mesh: for a change to how the strategies are laid out and composed (issue 56): the
# main job, train_mnist and bench_ddp's CNN, and instead of bench_ps_data bench_zero_speed
# -np 2 on the CNN under dp, zero=1, zero=2 and zero=3 (update time; each
# spec's samples/s and its ratio to dp's in the same run), about 20 minutes.
set -euo pipefail
trainer_only=0 mesh=0
if [ "${1:-}" = "--trainer-only" ]; then trainer_only=1; shift; fi
if [ "${1:-}" = "--mesh" ]; then mesh=1; shift; fi
[ $# -eq 2 ] || { echo "usage: core_ab.sh [--trainer-only | --mesh] BEFORE_BUILD AFTER_BUILD" >&2; exit 2; }
before=$1 after=$2
binaries=(examples/train_mnist)
if [ "$mesh" = 1 ]; then binaries+=(bench/bench_ddp bench/bench_zero_speed)
elif [ "$trainer_only" = 0 ]; then binaries+=(bench/bench_ddp bench/bench_ps_data); fi
for b in "$before" "$after"; do
  for t in "${binaries[@]}"; do
    [ -x "$b/$t" ] || { echo "core_ab: $b/$t not found (build it)" >&2; exit 1; }
  done
done
mpi=(mpirun --allow-run-as-root --oversubscribe)
raw=$(mktemp)
trap 'rm -f "$raw"' EXIT
# The build's commit, "-dirty" when its tree differs (bench/results/ and docs/ left out, as
# bench/provenance.sh does: this run's own output lands there).
describe() {
  local commit
  commit=$(git -C "$1" rev-parse --short HEAD 2>/dev/null) || { echo "?"; return; }
  git -C "$1" diff --quiet HEAD -- ':(top)' ':(top,exclude)bench/results' ':(top,exclude)docs' 2>/dev/null \
    || commit="$commit-dirty"
  echo "$commit"
}
source "$(dirname "$0")/provenance.sh"
provenance_text "" "before/after: $before ($(describe "$before")) and $after ($(describe "$after"))"
echo "# $(date -u +%Y-%m-%dT%H:%MZ); $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $(nproc) cores"
echo "# before: $before ($(describe "$before")); after: $after ($(describe "$after")); load at start $(cut -d' ' -f1-3 /proc/loadavg)"

echo "## 1. the README's main job"
for side in before after; do
  build=${!side}
  "${mpi[@]}" -np 2 "$build/examples/train_mnist" --model cnn --epochs 3 | grep -E '^(epoch [0-9]+/[0-9]+:|final|test)' \
    | sed "s/^/$side: /"
done

echo "## 2. alternating repetitions (raw)"
for rep in 1 2 3 4 5; do
  for side in before after; do
    build=${!side}
    tag="{\"side\": \"$side\", \"rep\": $rep, "
    line=$("${mpi[@]}" -np 2 "$build/examples/train_mnist" --model cnn --epochs 1 --limit-train 12000 \
             | grep -E '^epoch 1/1:')
    rate=$(sed -E 's/.* ([0-9.]+) samples\/s.*/\1/' <<< "$line")
    echo "${tag}\"bench\": \"train_mnist\", \"samples_per_s\": $rate, \"line\": \"$line\"}" | tee -a "$raw"
    [ "$trainer_only" = 1 ] && continue
    if [ "$mesh" = 1 ]; then
      "${mpi[@]}" -np 2 "$build/bench/bench_ddp" --model cnn --json | grep '"efficiency"' \
        | sed "s/^{/$tag/" | tee -a "$raw"
      "${mpi[@]}" -np 2 "$build/bench/bench_zero_speed" --model cnn --steps 10 --json \
        --specs dp zero=1 zero=2 zero=3 | grep '"spec"' | sed "s/^{/$tag/" | tee -a "$raw"
      continue
    fi
    for model in cnn mlp; do
      "${mpi[@]}" -np 2 "$build/bench/bench_ddp" --model "$model" --json | grep '"efficiency"' \
        | sed "s/^{/$tag/" | tee -a "$raw"
    done
    "${mpi[@]}" -np 3 "$build/bench/bench_ps_data" --delay-us 300 --loader-threads 4 --reps 3 --json \
      | grep '"ps_data"' | sed "s/^{/$tag/" | tee -a "$raw"
  done
done
echo "# load at end $(cut -d' ' -f1-3 /proc/loadavg)"

echo "## medians (min-max) over the repetitions"
python3 - "$raw" <<'PY'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
def figure(name, pick, key):
    out = []
    for side in ("before", "after"):
        v = [r[key] for r in rows if r["side"] == side and pick(r)]
        if not v:
            return
        out.append((statistics.median(v), min(v), max(v), len(v)))
    (b, bl, bh, bn), (a, al, ah, an) = out
    print(f"{name:<36} before {b:10.3f} ({bl:.3f}-{bh:.3f}, n={bn})  after {a:10.3f} ({al:.3f}-{ah:.3f}, n={an})"
          f"  after/before {a / b:.3f}")
figure("train_mnist np2 cnn samples/s", lambda r: r.get("bench") == "train_mnist", "samples_per_s")
for model in ("cnn", "mlp"):
    figure(f"bench_ddp np2 {model} efficiency", lambda r, m=model: r.get("model") == m and "efficiency" in r,
           "efficiency")
for spec in ("dp", "zero=1", "zero=2", "zero=3"):
    figure(f"bench_zero_speed np2 cnn {spec} samples/s", lambda r, s=spec: r.get("spec") == s, "samples_per_s")
    if spec != "dp":
        figure(f"bench_zero_speed np2 cnn {spec} / dp", lambda r, s=spec: r.get("spec") == s, "vs_first")
figure("bench_ps_data np3 data wait (s)", lambda r: r.get("bench") == "ps_data", "data_wait_s")
figure("bench_ps_data np3 epoch (s)", lambda r: r.get("bench") == "ps_data", "epoch_s")
figure("bench_ps_data np3 samples/s", lambda r: r.get("bench") == "ps_data", "samples_per_s")
PY
