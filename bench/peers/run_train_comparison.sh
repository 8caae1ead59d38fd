#!/usr/bin/env bash
# One process's training throughput, dtrain against PyTorch, in one go on this machine:
# bench_train, pytorch_train.py under the virtualenv's torch and under Debian's torch 1.13
# on mlp and cnn (batch 64 and 256), resnet18_cifar (batch 128) and resnet18_224 (batch
# 16) at 1 and 2 threads; then the time to 90% Fashion-MNIST test accuracy of
# train_mnist --model cnn against pytorch_mnist_tta.py at 1 and 2 threads. Prints the
# machine's description and the tables (stdout), the JSON lines as they come.
#   bench/peers/run_train_comparison.sh [BUILD_DIR] [--quick] [--raw FILE] [--case "MODEL BATCH STEPS WARMUP"]...
#                                       [--reps N] [--no-tta] [--precision LIST]
# BUILD_DIR: the CMake build directory holding bench/bench_train and examples/train_mnist
# (default build/release; --build DIR works too). --raw: also write the JSON lines to FILE.
# --case (repeatable): measure these throughput cases instead of the default list, e.g.
# --case "resnet50_224 8 4 1". --reps N: N alternating repetitions of the throughput part
# (default 1), each JSON line tagged with its "rep"; the table gives medians and the spread.
# --no-tta: skip the time-to-accuracy part (train_mnist is then not needed).
# --precision LIST: the throughput cases in each of these precisions (comma-separated:
# fp32, bf16, f16; default fp32), both sides alike: bench_train and pytorch_train.py run
# forward under autocast for bf16 and f16, so a repetition compares dtrain's bf16 step
# with its f32 step and with torch's CPU autocast in the same minutes.
# --no-tune: run each peer with this script's former fixed settings (OMP_WAIT_POLICY=PASSIVE,
# the system allocator, contiguous tensors, no compilation) instead of tuning it first.
# --no-compile: tune without torch.compile (it costs minutes per ResNet case on 2 vCPUs).
#
# The peers at their best: before the measured repetitions, each peer (torch in the
# virtualenv, Debian's torch) is tuned per case and thread count as its users would tune
# it, one setting at a time, keeping what is faster: OMP_WAIT_POLICY (passive, active or
# the runtime's default; with 2+ threads only, one thread has no team to wait on), jemalloc
# from Debian (libjemalloc2) through LD_PRELOAD, channels_last for the convolutional
# models, and torch.compile (torch >= 2). The tuning runs are shorter, their lines carry
# "tune": true, and the measured repetitions then run each peer with its best settings,
# which the table names. Every peer's BLAS gets the one thread count (OMP_NUM_THREADS,
# MKL_NUM_THREADS and OPENBLAS_NUM_THREADS), and each peer's torch.__config__.show() goes
# to the --raw file's .config.txt beside it. bench_train and pytorch_train.py both exit 1
# for a case whose loss is not finite or does not fall, and the run stops there.
# --quick: a step or two per case and a short training, to check the script rather than
# to measure. About 30 minutes on 2 vCPUs otherwise; do not run it while anything else
# loads the machine.
# PYTHON selects the virtualenv's interpreter (default .venv/bin/python, from
# setup-venv.sh); the Debian peer is /usr/bin/python3 with python3-torch, skipped if
# that cannot import torch.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
peers=$root/bench/peers
build=$root/build/release
quick=0
raw=
custom_cases=()
reps=1
tta=1
tune=1
try_compile=1
precisions=fp32
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1; shift ;;
    --raw) raw=$2; shift 2 ;;
    --build) build=$(cd "$2" && pwd); shift 2 ;;
    --case) custom_cases+=("$2"); shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --no-tta) tta=0; shift ;;
    --no-tune) tune=0; shift ;;
    --no-compile) try_compile=0; shift ;;
    --precision) precisions=$2; shift 2 ;;
    -*) echo "run_train_comparison: unknown argument '$1' (expected BUILD_DIR, --quick, --raw FILE, --case SPEC," \
             "--reps N, --no-tta, --no-tune, --no-compile or --precision LIST)" >&2
        exit 2 ;;
    *) build=$(cd "$1" && pwd); shift ;;
  esac
done
venv_python=${PYTHON:-$root/.venv/bin/python}
debian_python=/usr/bin/python3
bench_train=$build/bench/bench_train
train_mnist=$build/examples/train_mnist
[ -x "$bench_train" ] || { echo "run_train_comparison: $bench_train not found (build the bench_train target)" >&2; exit 1; }
[ -x "$venv_python" ] || { echo "run_train_comparison: $venv_python not found (run bench/peers/setup-venv.sh)" >&2; exit 1; }
[[ "$reps" =~ ^[1-9][0-9]*$ ]] || { echo "run_train_comparison: --reps expects a positive integer, got '$reps'" >&2; exit 2; }
IFS=, read -ra precision_list <<< "$precisions"
for prec in "${precision_list[@]}"; do
  case $prec in fp32|bf16|f16) ;; *) echo "run_train_comparison: --precision expects fp32, bf16 or f16 (comma-separated)," \
                                          "got '$precisions'" >&2; exit 2 ;; esac
done
if [ "$tta" = 1 ]; then
  [ -x "$train_mnist" ] || { echo "run_train_comparison: $train_mnist not found (build train_mnist)" >&2; exit 1; }
  # Checked up front: finding out after half an hour of throughput cases would waste them.
  "$train_mnist" --help | grep -q -- --target-accuracy \
    || { echo "run_train_comparison: $train_mnist has no --target-accuracy flag (rebuild it)" >&2; exit 1; }
fi
# Debian's torch links the generic libblas.so.3: OpenBLAS when that is the alternative
# installed, the reference BLAS otherwise, which the machine line names. Some machine
# images set OPENBLAS_CORETYPE (Haswell) for older OpenBLAS builds; that is not an AVX-512
# CPU's best, so there SkylakeX is named, and elsewhere OpenBLAS picks for itself.
if grep -q -w avx512f /proc/cpuinfo; then
  debian_env=(env -u OPENBLAS_L2_SIZE OPENBLAS_CORETYPE=SkylakeX)
else
  debian_env=(env -u OPENBLAS_L2_SIZE -u OPENBLAS_CORETYPE)
fi
debian=1
case "$(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3)" in
  *openblas*) ;;
  *) echo "run_train_comparison: Debian's torch would run on the reference BLAS, far from its best" \
          "(apt-get install libopenblas0-pthread)" >&2 ;;
esac
if ! "${debian_env[@]}" "$debian_python" -c 'import torch' 2>/dev/null; then
  debian=0
  echo "run_train_comparison: skipping the Debian torch 1.13 peer: $debian_python cannot import torch" \
       "(apt-get install python3-torch)" >&2
fi
# train_mnist is an MPI program even in one process; as root Open MPI wants these.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
jsonl=${raw:-$work/raw.jsonl}  # written as the results come: a failure late keeps the earlier ones
. "$root/bench/provenance.sh"  # the raw files' first line (docs/PERFORMANCE.md)
provenance_json > "$jsonl"

# model batch steps warm-up. A ResNet-18 step takes seconds at these batches (torch 2 here:
# about 45 samples/s at 32x32, 12 at 224x224), hence fewer steps.
cases=("mlp 64 30 5" "mlp 256 20 3" "cnn 64 20 3" "cnn 256 20 3" "resnet18_cifar 128 10 2" "resnet18_224 16 10 2")
target=0.9
tta_limits=()
if [ "$quick" = 1 ]; then
  cases=("mlp 64 2 1" "mlp 256 2 1" "cnn 64 2 1" "cnn 256 2 1" "resnet18_cifar 8 1 1" "resnet18_224 2 1 1")
  target=0.3
  tta_limits=(--epochs 1 --limit-train 1280 --limit-test 500)
fi
[ ${#custom_cases[@]} -gt 0 ] && cases=("${custom_cases[@]}")

torch_versions="torch $("$venv_python" -c 'import torch; print(torch.__version__)') ($venv_python)"
if [ "$debian" = 1 ]; then
  torch_versions+=", torch $("${debian_env[@]}" "$debian_python" -c 'import torch; print(torch.__version__)') \
($debian_python, BLAS $(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3))"
fi
machine="$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $(nproc) hardware threads, \
$(free -g | awk '/^Mem:/ {print $2}') GB; $(uname -sr); load average at start $(cut -d' ' -f1-3 /proc/loadavg); \
dtrain $(git -C "$root" describe --always --dirty 2>/dev/null || echo unknown); $torch_versions; \
$(date -u +%Y-%m-%dT%H:%MZ)"
echo "machine: $machine"

json_lines() { sed -n '/^{/p' | tee -a "$jsonl"; }
# The throughput part's lines carry their repetition (bench_train's machine line too: harmless).
rep_lines() { sed -n "/^{/s/^{/{\"rep\": $1, /p" | tee -a "$jsonl"; }

jemalloc=$(ls /usr/lib/*/libjemalloc.so.2 2>/dev/null | head -1 || true)
[ -n "$jemalloc" ] || echo "run_train_comparison: jemalloc not tried: no libjemalloc.so.2 (apt-get install libjemalloc2)" >&2
peer_kinds=(venv)
[ "$debian" = 1 ] && peer_kinds+=(debian)
# peer_python KIND ARGS...: pytorch_train.py under that peer's interpreter and environment.
peer_python() {
  local kind=$1; shift
  if [ "$kind" = venv ]; then "$venv_python" "$peers/pytorch_train.py" "$@"
  else "${debian_env[@]}" "$debian_python" "$peers/pytorch_train.py" "$@"; fi
}

# run_peer KIND VARIANT ARGS...: one run of a peer in the settings VARIANT names (the
# "variant" string pytorch_train.py reports, e.g. wait=active,alloc=jemalloc,channels_last).
run_peer() {
  local kind=$1 variant=$2; shift 2
  local preload= flags=() part
  IFS=, read -ra parts <<< "$variant"
  for part in "${parts[@]}"; do
    case $part in
      wait=*) flags+=(--wait-policy "${part#wait=}") ;;
      alloc=jemalloc) preload=$jemalloc ;;
      channels_last) flags+=(--channels-last) ;;
      compile) flags+=(--compile) ;;
    esac
  done
  (if [ -n "$preload" ]; then export LD_PRELOAD=$preload; fi; peer_python "$kind" "$@" "${flags[@]}")
}

# Each peer's build, for the record.
config_file=${raw:+$raw.config.txt}
config_file=${config_file:-$work/config.txt}
: > "$config_file"
for kind in "${peer_kinds[@]}"; do
  echo "== $kind peer" >> "$config_file"
  peer_python "$kind" --show-config >> "$config_file"
done

# The samples/s in a run's JSON line; 0 when the run failed, so that a setting the peer
# cannot run (torch.compile without a compiler, say) simply loses.
rate_of() { python3 -c 'import json,sys; print(max([json.loads(l)["samples_per_s"] for l in sys.stdin if l.startswith("{")] or [0]))'; }

# tune_peer KIND MODEL THREADS ARGS...: the fastest variant, one setting at a time.
tune_peer() {
  local kind=$1 model=$2 threads=$3; shift 3
  local best="wait=passive,alloc=system" best_rate candidates=() c rate
  best_rate=$(set +o pipefail; run_peer "$kind" "$best" "$@" | sed 's/^{/{"tune": true, /' | tee -a "$jsonl" | rate_of)
  if [ "$best_rate" = 0 ]; then
    echo "run_train_comparison: the $kind torch peer failed in its plain settings ($*)" >&2
    return 1
  fi
  [ "$threads" -gt 1 ] && candidates+=("wait=active" "wait=default")
  [ -n "$jemalloc" ] && candidates+=("alloc=jemalloc")
  [ "$model" != mlp ] && candidates+=("+channels_last")
  if [ "$try_compile" = 1 ] && [ "$kind" = venv ]; then candidates+=("+compile"); fi
  for c in "${candidates[@]}"; do
    local variant
    case $c in
      wait=*) variant=$(sed "s/wait=[a-z]*/$c/" <<< "$best") ;;
      alloc=*) variant=$(sed "s/alloc=[a-z]*/$c/" <<< "$best") ;;
      +*) variant="$best,${c#+}" ;;
    esac
    rate=$(set +o pipefail; run_peer "$kind" "$variant" "$@" 2>/dev/null | sed 's/^{/{"tune": true, /' | tee -a "$jsonl" \
      | rate_of)
    if python3 -c "import sys; sys.exit(0 if $rate > $best_rate else 1)"; then best=$variant best_rate=$rate; fi
  done
  echo "$best"
}

# Tuning: per case, thread count and peer, the variant its measured runs use.
declare -A best_variant
for c in "${cases[@]}"; do
  read -r model batch steps warmup <<< "$c"
  for threads in 1 2; do
   for prec in "${precision_list[@]}"; do
    for kind in "${peer_kinds[@]}"; do
      key="$model $batch $threads $prec $kind"
      if [ "$tune" = 1 ]; then
        echo "== tuning $kind torch for $model batch $batch, $threads thread(s), $prec" >&2
        # Shorter runs; compilation happens in the first warm-up step, hence 2 of them.
        # A peer that cannot run a case at all (Debian's torch has no torchvision for
        # resnet50_224) sits that case out; the table then lacks its column there.
        if best_variant[$key]=$(tune_peer "$kind" "$model" "$threads" --model "$model" --batch "$batch" \
             --steps "$(( (steps + 1) / 2 ))" --warmup 2 --threads "$threads" --precision "$prec" --json); then
          echo "   best: ${best_variant[$key]}" >&2
        else
          best_variant[$key]=skip
          echo "   the $kind torch peer sits out $model batch $batch at $threads thread(s)" >&2
        fi
      else
        best_variant[$key]="wait=passive,alloc=system"
      fi
    done
   done
  done
done

# Per case and thread count all three in a row, so that they see similar machine load;
# each in a fresh process, as OpenMP sizes its pool once per process. Repetitions go round
# all the cases, so that each case's are spread over the run.
for rep in $(seq 1 "$reps"); do
  for c in "${cases[@]}"; do
    read -r model batch steps warmup <<< "$c"
    args=(--model "$model" --batch "$batch" --steps "$steps" --warmup "$warmup" --json)
    for threads in 1 2; do
     for prec in "${precision_list[@]}"; do
      echo "== $model batch $batch, $threads thread(s), $prec, repetition $rep of $reps: dtrain, ${peer_kinds[*]} torch" >&2
      "$bench_train" "${args[@]}" --threads "$threads" --precision "$prec" | rep_lines "$rep"
      for kind in "${peer_kinds[@]}"; do
        variant=${best_variant[$model $batch $threads $prec $kind]}
        [ "$variant" = skip ] && continue
        run_peer "$kind" "$variant" "${args[@]}" --threads "$threads" --precision "$prec" | rep_lines "$rep"
      done
     done
    done
  done
done

[ "$tta" = 1 ] && for threads in 1 2; do
  echo "== time to $target test accuracy, $threads thread(s): dtrain, then torch (venv)" >&2
  # The progress bar redraws with \r; keep the finished lines.
  "$train_mnist" --model cnn --threads "$threads" --target-accuracy "$target" "${tta_limits[@]}" | tr '\r' '\n' \
    | grep -a -E '^(train_mnist:|epoch [0-9]+/[0-9]+:|reached|did not reach)' | tee "$work/dtrain_tta.log" >&2
  python3 "$peers/train_table.py" dtrain-tta --threads "$threads" --target "$target" < "$work/dtrain_tta.log" \
    | json_lines
  "$venv_python" "$peers/pytorch_mnist_tta.py" --threads "$threads" --target-accuracy "$target" "${tta_limits[@]}" \
    --json | json_lines
done

echo
python3 "$peers/train_table.py" table "$jsonl" --machine "$machine; load average at end $(cut -d' ' -f1-3 /proc/loadavg)"
