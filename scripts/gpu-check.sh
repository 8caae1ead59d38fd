#!/usr/bin/env bash
# The one-call GPU check (issue 5), in two halves:
#
#   scripts/gpu-check.sh prepare   here, on the Debian 12 development machine (after
#                                  scripts/install-deps.sh): copies the headers, CMake
#                                  packages and shared libraries of dtrain's dependencies,
#                                  which the GPU machine's image lacks and cannot fetch, into
#                                  .gpu-deps/ (git-ignored, about 55 MB)
#   scripts/gpu-check.sh run       on the GPU machine: builds against .gpu-deps with CUDA
#                                  (sm_90) and without MPI, runs the tests (the CUDA ones no
#                                  longer skip), the GPU benches beside their PyTorch peers
#                                  (the image's python3 has torch), and prints a summary last
#
# Through the device tool, one call: run(command="scripts/gpu-check.sh run",
# carry=[".gpu-deps"], timeout_s=480). The run writes its logs to $OUT when that is set.
# The image has nvcc, CMake, ninja and g++, but no Debian development packages; the
# carried libraries are Debian 12's, so the first line of the run prints what would explain
# a loader error (glibc and compiler versions). cuDNN and NCCL come from the toolkit when it
# has them, else from the image's Python packages (nvidia/cudnn, nvidia/nccl).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
deps=$root/.gpu-deps
build=$root/build/gpu
libdir=usr/lib/x86_64-linux-gnu

# What CMakeLists.txt finds with MPI off: formatting and logging, Eigen, JSON, flags,
# Catch2, zlib, libjpeg-turbo, xxhash (header-only), libarchive (with the compression
# libraries it links; not libxml2, whose ICU data alone would break the carry's 64 MiB, and
# which CUDA images ship), oneDNN and the OpenCL pieces its CMake package insists on.
packages=(
  libfmt-dev libfmt9 libspdlog-dev libspdlog1.10 libeigen3-dev nlohmann-json3-dev libcli11-dev catch2
  zlib1g-dev zlib1g libjpeg62-turbo-dev libjpeg62-turbo libarchive-dev libarchive13 libnettle8
  liblz4-1 libzstd1 libdnnl-dev libdnnl2 ocl-icd-opencl-dev ocl-icd-libopencl1 opencl-c-headers
  opencl-clhpp-headers libxxhash-dev
)

die() {
  echo "gpu-check: $*" >&2
  exit 1
}

prepare() {
  command -v dpkg-query > /dev/null || die "prepare runs on the Debian development machine (no dpkg here)"
  rm -rf "$deps"
  mkdir -p "$deps/usr"
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2> /dev/null | grep -q "install ok installed" \
      || die "package $p is not installed: run scripts/install-deps.sh first"
    # Files and symbolic links, never documentation; /lib/... lands in usr/lib/... (merged /usr).
    while IFS= read -r f; do
      case "$f" in /usr/share/doc/* | /usr/share/man/* | /usr/share/lintian/*) continue ;; esac
      [ -d "$f" ] && continue  # folders, and the merged-/usr links to them (/lib)
      [ -f "$f" ] || [ -L "$f" ] || continue
      rel=${f#/}
      rel=usr/${rel#usr/}
      mkdir -p "$deps/$(dirname "$rel")"
      cp -a "$f" "$deps/$rel"
    done < <(dpkg -L "$p")
  done
  # An absolute link (libz.so -> /lib/...) would point outside the carried tree there.
  while IFS= read -r link; do
    local target
    target=$(readlink "$link")
    target=${target#/}
    ln -sfr "$deps/usr/${target#usr/}" "$link"
  done < <(find "$deps" -type l -lname '/*')
  echo "gpu-check: prepared $(du -sh "$deps" | cut -f1) in .gpu-deps from ${#packages[@]} Debian packages;" \
       "carry .gpu-deps with: scripts/gpu-check.sh run"
}

# When the CUDA toolkit lacks <name>.h: the prefix (include/, lib/) that holds it among the
# image's Python packages of NVIDIA's libraries (nvidia/cudnn, nvidia/nccl or similar).
python_package_dir() {
  [ -e "/usr/local/cuda/include/$1.h" ] && return 1
  python3 - "$1" 2> /dev/null << 'PY'
import os, sys
import nvidia
for base in nvidia.__path__:
    for root, _, files in os.walk(base):
        if os.path.basename(root) == "include" and sys.argv[1] + ".h" in files:
            print(os.path.dirname(root))
            sys.exit(0)
sys.exit(1)
PY
}

run() {
  [ -d "$deps/usr" ] || die "no .gpu-deps: run 'scripts/gpu-check.sh prepare' on the development machine and carry .gpu-deps"
  command -v nvcc > /dev/null || die "nvcc is not on PATH"
  local logs=${OUT:-$build}
  mkdir -p "$build" "$logs"
  local gpu
  gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2> /dev/null | head -1) || true
  echo "gpu-check: GPU ${gpu:-none found}; $(nvcc --version | tail -1); $(g++ --version | head -1);" \
       "$(ldd --version | head -1); $(cmake --version | head -1)"
  export LD_LIBRARY_PATH=$deps/$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  local roots=() lib
  lib=$(python_package_dir cudnn) && roots+=("-DCUDNN_ROOT=$lib") && LD_LIBRARY_PATH=$lib/lib:$LD_LIBRARY_PATH
  lib=$(python_package_dir nccl) && roots+=("-DNCCL_ROOT=$lib") && LD_LIBRARY_PATH=$lib/lib:$LD_LIBRARY_PATH
  echo "gpu-check: cuDNN and NCCL: ${roots[*]:-from the CUDA toolkit}"

  local start=$SECONDS status=ok
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$deps/usr" \
    -DDTRAIN_USE_CUDA=ON -DDTRAIN_USE_MPI=OFF -DDTRAIN_BUILD_EXAMPLES=OFF -DCMAKE_CUDA_ARCHITECTURES=90 \
    "${roots[@]}" > "$logs/build.log" 2>&1 \
    && cmake --build "$build" -j "$(nproc)" >> "$logs/build.log" 2>&1 || status=failed
  local build_s=$((SECONDS - start))
  if [ "$status" != ok ]; then
    tail -n 40 "$logs/build.log"
    printf '\n%-10s %s\n' "build" "FAILED after ${build_s} s (logs above)"
    exit 1
  fi

  # The examples are not built: their end-to-end tests need Debian's Fashion-MNIST package.
  start=$SECONDS
  ctest --test-dir "$build" -j "$(nproc)" --output-on-failure > "$logs/ctest.log" 2>&1 || true
  local test_s=$((SECONDS - start))
  grep -E "Failed|\*\*\*" "$logs/ctest.log" | head -30 || true
  # The CUDA tests once more, directly: ctest hides the output of passing tests, and a
  # test that skipped for want of a device also passes.
  "$build/tests/test_cuda" > "$logs/test_cuda.log" 2>&1 || true
  local cuda_result cuda_skipped
  cuda_result=$(grep -E "All tests passed|test cases?:|failed" "$logs/test_cuda.log" | tail -1)
  cuda_skipped=$(grep -c "skipped, no CUDA device" "$logs/test_cuda.log" || true)

  # The benches, each beside its PyTorch peer: GEMM and convolution, then training steps in
  # fp32 and bf16 (autocast).
  start=$SECONDS
  local peers=$root/bench/peers
  # At most 8 files come back from the device tool: the errors of every bench share one.
  local errors=$logs/bench.err
  : > "$errors"
  timeout 120 "$build/bench/bench_gpu_ops" --json > "$logs/gpu_ops.jsonl" 2>> "$errors" || true
  timeout 120 python3 "$peers/pytorch_gpu_ops.py" --json > "$logs/torch_gpu_ops.jsonl" 2>> "$errors" || true
  : > "$logs/train.jsonl"
  : > "$logs/torch_train.jsonl"
  local model precision
  for model in resnet18_224 resnet50_224; do
    for precision in fp32 bf16; do
      timeout 60 "$build/bench/bench_train" --device cuda --model "$model" --batch 64 --steps 10 \
        --precision "$precision" --json >> "$logs/train.jsonl" 2>> "$errors" || true
      timeout 60 python3 "$peers/pytorch_train.py" --device cuda --model "$model" --batch 64 --steps 10 \
        --precision "$precision" --json >> "$logs/torch_train.jsonl" 2>> "$errors" || true
    done
  done
  local bench_s=$((SECONDS - start))
  tail -n 12 "$errors"

  printf '\n== dtrain GPU check ==\n'
  printf '%-10s %s\n' "GPU" "${gpu:-none found}"
  printf '%-10s %s\n' "build" "ok in ${build_s} s (sm_90, CUDA on, MPI off)"
  printf '%-10s %s\n' "tests" "$(grep -E 'tests passed' "$logs/ctest.log" || echo 'no summary (see ctest.log)') in ${test_s} s"
  printf '%-10s %s\n' "cuda" "test_cuda: ${cuda_result:-no summary (see test_cuda.log)}; ${cuda_skipped} test case(s) skipped for want of a device"
  printf '%-10s %s\n' "benches" "in ${bench_s} s, TF32 ${DTRAIN_ALLOW_TF32:-0} (logs: gpu_ops, train)"
  python3 "$peers/gpu_table.py" "$logs/gpu_ops.jsonl" "$logs/torch_gpu_ops.jsonl" "$logs/train.jsonl" \
    "$logs/torch_train.jsonl" || true
}

case "${1:-}" in
  prepare) prepare ;;
  run) run ;;
  *) die "usage: scripts/gpu-check.sh prepare|run (see the comment at the top)" ;;
esac
