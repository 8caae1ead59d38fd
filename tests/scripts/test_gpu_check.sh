#!/usr/bin/env bash
# The control flow of scripts/gpu-check.sh run (issue 34), without a GPU and without
# building: stub programs stand in for test_cuda, train_mnist, train_imagenet, train_gpt, the benches,
# their PyTorch peers and nvidia-smi, in a stub build folder (--dry-run builds nothing).
# Checks that
#   - without a GPU every phase reports, the device phases as skipped with the reason;
#   - a test_cuda that aborts (DTRAIN_GPU_CHECK_CRASH_TEST_CUDA=1) or hangs (killed at its
#     timeout) is a FAILED line, and the later phases still run and the summary still comes;
#   - the full e2e phase runs train_imagenet (synthetic, CUDA, ResNet-18, batch 64, 2 epochs
#     of 5 steps) and reports its second epoch's images/s, which the benches line and the
#     table put beside PyTorch's ResNet-18 fp32; --quick does not run it; a run that prints
#     no epoch line is a FAILED e2e line;
#   - --multi-gpu with fewer than 2 GPUs lists the multi-GPU tests as unverified;
#   - a run cut short (as when the lease ends) has already written the finished phases' lines.
# Usage: tests/scripts/test_gpu_check.sh [REPO_ROOT]; a few seconds.
set -uo pipefail

repo=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
script=$repo/scripts/gpu-check.sh
work=$(mktemp -d "${TMPDIR:-/tmp}/test_gpu_check.XXXXXX") || exit 1
hang_pid_file=$work/hang.pid
cleanup() {
  # The hanging stub of the cut-short run, by its own id.
  [ -s "$hang_pid_file" ] && kill "$(cat "$hang_pid_file")" 2> /dev/null
  rm -rf "$work"
}
trap cleanup EXIT

failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

# $1: the summary file; $2: phase; $3: a regular expression for the rest of its line.
expect_line() {
  if ! grep -qE "^$2 +$3" "$1"; then
    fail "$(basename "$(dirname "$1")"): no line '$2 $3' in the summary:"
    sed 's/^/    /' "$1"
  fi
}

expect_every_phase() {
  local p
  for p in preflight build tests e2e benches multi-gpu; do
    grep -qE "^$p +(ok|FAILED|skipped) +[0-9]+ s  " "$1" || fail "$1: no result line for phase $p"
  done
}

# ---- the stubs ------------------------------------------------------------------------
stub() {  # path, body
  mkdir -p "$(dirname "$1")"
  printf '#!/bin/sh\n%s\n' "$2" > "$1"
  chmod +x "$1"
}
bin=$work/bin
build=$work/build
deps=$work/deps
stub "$bin/nvidia-smi" 'exit 0'  # lists no GPU
# shellcheck disable=SC2016  # expanded by the stub, not here
stub "$build/tests/test_cuda" '
case "${STUB_TEST_CUDA:-pass}" in
  hang) echo $$ > "$STUB_HANG_PID_FILE"; exec sleep 20 ;;
  *) echo "All tests passed (10 assertions in 3 test cases)" ;;
esac'
stub "$build/examples/train_mnist" '
case " $* " in *" --device cuda "*|*" --device cpu "*) ;; *) echo "no --device" >&2; exit 2 ;; esac
echo "final test accuracy: 81.25%"'
# The Trainer's epoch lines (the second with a loader wait), or nothing with STUB_TRAIN_IMAGENET=silent.
# shellcheck disable=SC2016
stub "$build/examples/train_imagenet" '
for flag in "--synthetic " "--device cuda " "--model resnet18 " "--batch-size 64 " "--limit-train 320 " "--epochs 2 "; do
  case " $* " in *" $flag"*) ;; *) echo "train_imagenet stub: no $flag" >&2; exit 2 ;; esac
done
[ "${STUB_TRAIN_IMAGENET:-}" = silent ] && exit 0
echo "train_imagenet: resnet18 (11689512 parameters, 1000 classes) at 224x224, 320 train / 0 val images"
echo "epoch 1/2: train loss 6.9512, train accuracy 0.00%, 812 samples/s, 0.4 s"
echo "epoch 2/2: train loss 6.9377, train accuracy 0.31%, 2468 samples/s, 0.1 s, waited 0.2 s for data"
echo "trained 2 epoch(s) in 0.6 s (training 1207 samples/s); the steps waited 0.2 s for the loader"'
stub "$build/examples/train_gpt" '
case " $* " in *" --device cuda "*|*" --device cpu "*) ;; *) echo "no --device" >&2; exit 2 ;; esac
echo "step 30: val loss 3.1234 (20 windows)"'
stub "$build/bench/bench_gpu_ops" 'echo "{\"case\":\"gemm 1024\",\"group\":\"gemm\",\"tflops\":1,\"cublas_tflops\":1}"'
stub "$build/bench/bench_train" 'echo "{\"case\":\"stub\",\"samples_per_s\":1}"'
# pytorch_train.py's line for ResNet-18 at 224, batch 64, fp32 (as json.dumps writes it).
stub "$bin/peer-python" '
case " $* " in
  *pytorch_train.py*" --model resnet18_224 --precision fp32 --batch 64 "*)
    echo "{\"bench\": \"train\", \"framework\": \"pytorch\", \"model\": \"resnet18_224\", \"batch\": 64, \"samples_per_s\": 3000.0, \"samples_per_s_min\": 2900.0, \"device\": \"cuda\", \"precision\": \"fp32\"}" ;;
  *) echo "{\"case\":\"stub\"}" ;;
esac'
mkdir -p "$deps/usr/lib/x86_64-linux-gnu" "$deps/data/fashion-mnist"
: > "$deps/data/fashion-mnist/train-images-idx3-ubyte.gz"

export PATH=$bin:$PATH
export TMPDIR=$work  # the script's own temporary folder, which a killed run leaves behind
export DTRAIN_GPU_CHECK_BUILD_DIR=$build DTRAIN_GPU_CHECK_DEPS=$deps DTRAIN_GPU_CHECK_PYTHON=$bin/peer-python
unset DTRAIN_GPU_CHECK_CRASH_TEST_CUDA DTRAIN_GPU_CHECK_ASSUME_GPU DTRAIN_GPU_CHECK_BUDGET_S

# ---- 1. no GPU: every phase, the device ones skipped with the reason --------------------
mkdir -p "$work/no_gpu"
OUT=$work/no_gpu bash "$script" run > "$work/no_gpu.out" 2>&1
s=$work/no_gpu/summary.txt
expect_every_phase "$s"
expect_line "$s" build "skipped +[0-9]+ s  no GPU: nvidia-smi lists none"
for p in tests e2e benches; do
  expect_line "$s" "$p" "skipped +[0-9]+ s  no GPU"
done
grep -q "== dtrain GPU check" "$work/no_gpu.out" || fail "no GPU: no summary printed"

# ---- 2. test_cuda aborts: FAILED, and the later phases run ------------------------------
mkdir -p "$work/crash"
DTRAIN_GPU_CHECK_CRASH_TEST_CUDA=1 DTRAIN_GPU_CHECK_ASSUME_GPU=1 OUT=$work/crash \
  bash "$script" run --dry-run > "$work/crash.out" 2>&1
rc=$?
s=$work/crash/summary.txt
expect_every_phase "$s"
expect_line "$s" build "skipped +[0-9]+ s  --dry-run"
expect_line "$s" tests "FAILED +[0-9]+ s  test_cuda \(deliberately crashed\): killed by SIGABRT"
expect_line "$s" e2e "ok +[0-9]+ s  test accuracy: cuda fp32 81.25%; cuda bf16 81.25%; cuda f16 81.25%; cpu fp32 81.25%; \
cuda->cpu resume 81.25%; train_imagenet resnet18 224x224 b64 fp32 2468 images/s \(epoch 2, 5 steps; \
epoch 1 with start-up 812; waited 0.2 s for data\); train_gpt val loss: cuda 3.1234, cpu 3.1234$"
expect_line "$s" benches "ok +[0-9]+ s  10 runs, 10 JSON lines, TF32 [01]; \
train_imagenet \(e2e\) 2468 images/s, PyTorch resnet18_224 b64 fp32 3000 \(0.82x\)$"
grep -qE "^e2e resnet18_224 b64 fp32 +2468.00 +3000.00 +0.82$" "$work/crash.out" \
  || fail "crash: no table row of train_imagenet beside PyTorch"
[ "$rc" -ne 0 ] || fail "crash: the run exited 0 with a FAILED phase"
grep -q "== dtrain GPU check" "$work/crash.out" || fail "crash: no summary printed"
n=$(find "$work/crash" -type f | wc -l)
[ "$n" -le 8 ] || fail "crash: $n files in the output folder (the device tool brings back 8)"

# ---- 3. test_cuda hangs: killed at its timeout; --quick; a missing program is a skip ---
mkdir -p "$work/hang"
mv "$build/bench/bench_train" "$work/bench_train.away"
STUB_TEST_CUDA=hang STUB_HANG_PID_FILE=$work/hang3.pid DTRAIN_GPU_CHECK_TEST_TIMEOUT_S=1 \
  DTRAIN_GPU_CHECK_ASSUME_GPU=1 OUT=$work/hang bash "$script" run --dry-run --quick > "$work/hang.out" 2>&1
mv "$work/bench_train.away" "$build/bench/bench_train"
s=$work/hang/summary.txt
expect_every_phase "$s"
expect_line "$s" tests "FAILED +[0-9]+ s  test_cuda: timed out after 1 s"
expect_line "$s" e2e "ok +[0-9]+ s  test accuracy: cuda fp32 81.25%$"
expect_line "$s" benches "ok +[0-9]+ s  2 runs, 2 JSON lines, TF32 [01]$"
grep -q "^e2e resnet18_224" "$work/hang.out" && fail "hang: --quick ran train_imagenet (a table row)"

# ---- 4. --multi-gpu with fewer than 2 GPUs: the list, as unverified ----------------------
mkdir -p "$work/multi"
DTRAIN_GPU_CHECK_ASSUME_GPU=1 OUT=$work/multi bash "$script" run --dry-run --quick --multi-gpu \
  > "$work/multi.out" 2>&1
expect_line "$work/multi/summary.txt" multi-gpu "skipped +[0-9]+ s  0 GPU\(s\): the list above stays unverified"
grep -q "dist.np2_nccl" "$work/multi.out" || fail "multi-gpu: dist.np2_nccl not listed"

# ---- 5. cut short while test_cuda runs: the finished phases are already on file ----------
# The script is killed outright (as when the lease ends) once the stub test_cuda has started.
mkdir -p "$work/cut"
(
  export STUB_TEST_CUDA=hang STUB_HANG_PID_FILE=$hang_pid_file DTRAIN_GPU_CHECK_ASSUME_GPU=1 OUT=$work/cut
  exec bash "$script" run --dry-run > "$work/cut.out" 2>&1
) &
script_pid=$!
for _ in $(seq 1 300); do
  [ -s "$hang_pid_file" ] && break
  sleep 0.1
done
[ -s "$hang_pid_file" ] || fail "cut short: the stub test_cuda did not start within 30 s"
kill -KILL "$script_pid" 2> /dev/null
wait "$script_pid" 2> /dev/null
s=$work/cut/summary.txt
expect_line "$s" preflight "(ok|FAILED)"
expect_line "$s" build "skipped"
grep -qE "^tests " "$s" && fail "cut short: a tests line, though test_cuda was still running"

# ---- 6. train_imagenet prints no epoch line: a FAILED e2e line, no figure anywhere -------
mkdir -p "$work/silent"
STUB_TRAIN_IMAGENET=silent DTRAIN_GPU_CHECK_ASSUME_GPU=1 OUT=$work/silent \
  bash "$script" run --dry-run > "$work/silent.out" 2>&1
s=$work/silent/summary.txt
expect_every_phase "$s"
expect_line "$s" e2e "FAILED +[0-9]+ s  train_imagenet: no epoch line with samples/s in its output \(check.log\); \
accuracy: cuda fp32 81.25%; .*cuda->cpu resume 81.25%; train_gpt val loss: cuda 3.1234, cpu 3.1234$"
expect_line "$s" benches "ok +[0-9]+ s  10 runs, 10 JSON lines, TF32 [01]$"
grep -q "^e2e resnet18_224" "$work/silent.out" && fail "silent: a table row without a figure"

if [ "$failures" -ne 0 ]; then
  echo "test_gpu_check: $failures failure(s); the runs' output:"
  for f in "$work"/*.out; do
    echo "== $f"
    cat "$f"
  done
  exit 1
fi
echo "test_gpu_check: every check passed"
