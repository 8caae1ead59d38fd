#!/usr/bin/env bash
# The one-call GPU check (issues 5 and 34), in two halves:
#
#   scripts/gpu-check.sh prepare   here, on the Debian 12 development machine (after
#                                  scripts/install-deps.sh): copies the headers, CMake
#                                  packages and shared libraries of dtrain's dependencies,
#                                  which the GPU machine's image lacks and cannot fetch, and a
#                                  small Fashion-MNIST subset into .gpu-deps/ (git-ignored,
#                                  about 59 MB, under the device tool's 64 MiB with the tree)
#   scripts/gpu-check.sh run [--quick] [--multi-gpu] [--build] [--dry-run]
#                                  on the GPU machine, in phases that each append their
#                                  result line to summary.txt as soon as they end:
#                                    preflight  versions; ldd of the carried libraries
#                                    build      only test_cuda, bench_gpu_ops, bench_train,
#                                               train_mnist, train_imagenet and train_gpt (sm_90, CUDA
#                                               on, MPI off)
#                                    tests      test_cuda, under timeout
#                                    e2e        train_mnist on CUDA (fp32, bf16, f16) against
#                                               the CPU, a CUDA checkpoint resumed on the CPU,
#                                               train_imagenet for 10 steps of ResNet-18
#                                               at 224x224 on synthetic images (its images/s),
#                                               and 30 steps of train_gpt against the CPU
#                                    benches    GPU benches beside PyTorch, under timeout
#                                    multi-gpu  what one GPU cannot show (--multi-gpu runs it)
#
# Through the device tool, one call: run(command="scripts/gpu-check.sh run",
# carry=[".gpu-deps"], timeout_s=330). docs/GPU.md has the phases, the modes and the times.
#
# No phase can stop the ones after it: there is no `set -e`, each phase runs in a subshell
# and reports ok, FAILED (reason) or skipped (reason); a crash, a hang (every program runs
# under `timeout`, within DTRAIN_GPU_CHECK_BUDGET_S for the whole run), a grep that finds
# nothing or a missing file all end in a result line. The logs go to $OUT when that is set,
# else to build/gpu/logs: at most 8 files (what the device tool brings back), listed in
# docs/GPU.md.
#
# Environment:
#   DTRAIN_GPU_CHECK_BUDGET_S        seconds for the whole run (default 300; --quick 240)
#   DTRAIN_GPU_CHECK_CRASH_TEST_CUDA=1  the tests phase runs a command that aborts itself
#                                    (SIGABRT) in place of test_cuda: the summary and the
#                                    later phases must still come (tests/scripts/test_gpu_check.sh)
#   DTRAIN_GPU_CHECK_BUILD_DIR       the build folder (default build/gpu)
#   DTRAIN_GPU_CHECK_DEPS            the carried dependencies (default .gpu-deps)
#   DTRAIN_GPU_CHECK_ASSUME_GPU=1    run the device phases without nvidia-smi seeing a GPU
#                                    (the control-flow test, with stub programs)
#   DTRAIN_GPU_CHECK_PYTHON          the interpreter of the PyTorch peers (default python3)
#   DTRAIN_GPU_CHECK_TEST_TIMEOUT_S  test_cuda's own limit (default 180; --quick 120)
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
deps=${DTRAIN_GPU_CHECK_DEPS:-$root/.gpu-deps}
build=${DTRAIN_GPU_CHECK_BUILD_DIR:-$root/build/gpu}
libdir=usr/lib/x86_64-linux-gnu
fashion_mnist=/usr/share/datasets/fashion-mnist  # Debian's dataset-fashion-mnist
subset_train=4000                                 # the carried subset (about 2.1 MB gzipped)
subset_test=1000

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

# The first N examples of MNIST-format IDX files (gzipped), with their headers' counts.
write_mnist_subset() {
  python3 - "$fashion_mnist" "$1" "$subset_train" "$subset_test" << 'PY'
import gzip, os, struct, sys
src, dst, n_train, n_test = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
os.makedirs(dst, exist_ok=True)
for split, n in (("train", n_train), ("t10k", n_test)):
    for kind, header, size in (("images-idx3-ubyte", 16, 784), ("labels-idx1-ubyte", 8, 1)):
        with gzip.open(f"{src}/{split}-{kind}.gz") as f:
            data = f.read()
        head = bytearray(data[:header])
        head[4:8] = struct.pack(">I", n)
        with gzip.GzipFile(f"{dst}/{split}-{kind}.gz", "wb", compresslevel=9, mtime=0) as f:
            f.write(bytes(head) + data[header:header + n * size])
PY
}

prepare() {
  set -e
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
  # Static archives, which the build never links (find_package picks the shared libraries),
  # except those a CMake package names (Catch2's targets check that their files exist):
  # about 3 MB of the carry's 64 MiB, which the working tree shares.
  local a
  while IFS= read -r a; do
    grep -rqF "${a##*/}" "$deps/usr/lib/cmake" "$deps/usr/share" 2> /dev/null || rm -f "$a"
  done < <(find "$deps" -name '*.a')
  # Eigen's unsupported modules (2.7 MB), which nothing in dtrain includes.
  rm -rf "$deps/usr/include/eigen3/unsupported"
  # The end-to-end phase's data: the first examples of Fashion-MNIST's two splits.
  if [ -f "$fashion_mnist/train-images-idx3-ubyte.gz" ]; then
    write_mnist_subset "$deps/data/fashion-mnist"
  else
    echo "gpu-check: no $fashion_mnist (dataset-fashion-mnist): the end-to-end phase will skip"
  fi
  echo "gpu-check: prepared $(du -sh --apparent-size "$deps" | cut -f1) in .gpu-deps from ${#packages[@]} Debian packages;" \
       "carry .gpu-deps with: scripts/gpu-check.sh run"
}

# When the CUDA toolkit lacks <name>.h: the prefix (include/, lib/) that holds it among the
# image's Python packages of NVIDIA's libraries (nvidia/cudnn, nvidia/nccl or similar).
python_package_dir() {
  [ -e "/usr/local/cuda/include/$1.h" ] && return 1
  timeout 60 python3 - "$1" 2> /dev/null << 'PY'
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

# ---- run: the phases -------------------------------------------------------------------
# Each phase is a function run in a subshell; it reports through `result STATUS DETAIL`
# (ok, FAILED or skipped), and run_phase appends "phase status seconds detail" to the
# summary the moment it ends. A phase that dies without a result is recorded as FAILED.

quick=0
multi_gpu=0
force_build=0
dry_run=0
logs=
state=
summary=
deadline=0
gpu=
gpu_count=0
run_ld=
roots=()
reserve_s=15  # kept back from every phase for the summary

result() {
  printf '%s|%s\n' "$1" "$2" > "$state/result"
}

# The arguments joined by "; ".
joined() {
  local out='' x
  for x in "$@"; do out+="${out:+; }$x"; done
  echo "$out"
}

run_phase() {
  local name=$1 fn=$2 start=$SECONDS rc status detail line
  : > "$state/result"
  echo "gpu-check: -- $name"
  ("$fn")
  rc=$?
  line=$(head -n 1 "$state/result" 2> /dev/null)
  if [ -z "$line" ]; then
    status=FAILED
    detail="the phase ended without a result ($(describe_exit "$rc"))"
  else
    status=${line%%|*}
    detail=${line#*|}
  fi
  line=$(printf '%-9s %-7s %4d s  %s' "$name" "$status" $((SECONDS - start)) "$detail")
  echo "$line" >> "$summary"
  echo "gpu-check: $line"
}

# "exit 3", "timed out after 60 s", "killed by SIGABRT (exit 134)".
describe_exit() {
  local rc=$1 limit=${2:-}
  if [ "$rc" -eq 124 ] && [ -n "$limit" ]; then
    echo "timed out after $limit s"
  elif [ "$rc" -eq 137 ] && [ -n "$limit" ]; then
    echo "killed by SIGKILL (exit 137: 5 s past its $limit s limit, or out of memory)"
  elif [ "$rc" -gt 128 ] && [ "$rc" -lt 160 ]; then
    echo "killed by SIG$(kill -l $((rc - 128)) 2> /dev/null || echo "?") (exit $rc)"
  else
    echo "exit $rc"
  fi
}

# Seconds a program may run: its own cap, or what the budget has left (0: none left).
limit() {
  local left=$((deadline - SECONDS - reserve_s))
  [ "$left" -lt 5 ] && left=0
  [ "$1" -lt "$left" ] && left=$1
  echo "$left"
}

# timeout, with a kill 5 s after the TERM; exit 124 on the limit, the program's otherwise.
bounded() {
  local t=$1
  shift
  timeout -k 5 "$t" "$@"
}

# The programs that need the carried libraries run through the wrapper that adds them; the
# compilers, CMake and python3 do not (the carried libz/zstd/lz4 stay out of their way).
# CMake gets the same wrapper as CMAKE_CROSSCOMPILING_EMULATOR, which Catch's
# catch_discover_tests uses to list test_cuda's cases after linking it.
write_wrapper() {
  mkdir -p "$build"
  cat > "$build/with-libs.sh" << EOF
#!/bin/sh
# Written by scripts/gpu-check.sh: runs a program with the carried libraries on its path.
LD_LIBRARY_PATH='$run_ld'\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}
export LD_LIBRARY_PATH
exec "\$@"
EOF
  chmod +x "$build/with-libs.sh"
}

# with_libs SECONDS PROGRAM ARGS...: the program under timeout, with the carried libraries.
with_libs() {
  local t=$1
  shift
  bounded "$t" "$build/with-libs.sh" "$@"
}

# "name (needed by a, b)" for each library that ldd finds nowhere, one per line.
missing_libs() {
  local f
  for f in "$@"; do
    LD_LIBRARY_PATH=$run_ld ldd "$f" 2> /dev/null | awk -v by="${f##*/}" '/not found/ { print $1 "\t" by }'
  done | sort -u | awk -F '\t' '{ need[$1] = need[$1] (need[$1] ? ", " : "") $2 }
    END { for (n in need) print n " (needed by " need[n] ")" }' | sort
}

# version_of head|tail PROGRAM ARGS...: the first or last line of its output, or "none".
version_of() {
  local end=$1 v
  shift
  v=$("$@" 2> /dev/null | "$end" -n 1)
  echo "${v:-none}"
}

have_gpu() {
  [ "${DTRAIN_GPU_CHECK_ASSUME_GPU:-0}" = 1 ] || [ "$gpu_count" -gt 0 ]
}

no_gpu_reason() {
  if command -v nvidia-smi > /dev/null; then
    echo "no GPU: nvidia-smi lists none"
  else
    echo "no GPU: no nvidia-smi on this machine"
  fi
}

phase_preflight() {
  {
    echo "== preflight"
    echo "GPU: ${gpu:-none found} ($gpu_count)"
    echo "nvcc: $(version_of tail nvcc --version)"
    echo "g++: $(version_of head g++ --version)"
    echo "glibc: $(version_of head ldd --version)"
    echo "cmake: $(version_of head cmake --version); ninja $(version_of head ninja --version)"
    echo "python3: $(version_of head python3 --version); torch $(version_of head timeout 30 python3 -c \
      'import importlib.metadata as m; print(m.version("torch"))')"
    echo "cuDNN and NCCL: ${roots[*]:-from the CUDA toolkit}"
    echo "LD_LIBRARY_PATH of the programs run: $run_ld"
  } | tee -a "$logs/check.log"
  local problems=()
  command -v nvcc > /dev/null || problems+=("nvcc is not on PATH")
  command -v cmake > /dev/null || problems+=("no cmake")
  command -v ninja > /dev/null || problems+=("no ninja")
  if [ ! -d "$deps/usr" ]; then
    problems+=("no ${deps##*/}: run 'scripts/gpu-check.sh prepare' on the development machine and carry it")
  fi
  local libs=() f
  if [ -d "$deps/$libdir" ]; then
    while IFS= read -r f; do libs+=("$f"); done < <(find "$deps/$libdir" -maxdepth 1 -type f -name '*.so*' | sort)
  fi
  local dir
  for dir in "${roots[@]}"; do
    dir=${dir#*=}/lib
    [ -d "$dir" ] || continue
    while IFS= read -r f; do libs+=("$f"); done < <(find "$dir" -maxdepth 1 -type f -name '*.so*' | sort)
  done
  local missing
  missing=$(missing_libs "${libs[@]}")
  if [ -n "$missing" ]; then
    echo "libraries that ldd finds nowhere:" | tee -a "$logs/check.log"
    echo "$missing" | sed 's/^/  /' | tee -a "$logs/check.log"
    problems+=("missing: $(echo "$missing" | paste -sd ';' - | sed 's/;/; /g')")
  fi
  if [ ${#problems[@]} -eq 0 ]; then
    result ok "${#libs[@]} carried libraries load; ${gpu:-no GPU}"
  else
    result FAILED "$(joined "${problems[@]}")"
  fi
}

check_targets=(test_cuda bench_gpu_ops bench_train train_mnist train_imagenet train_gpt)
target_path() {
  case "$1" in
    test_cuda | test_dist) echo "$build/tests/$1" ;;
    bench_*) echo "$build/bench/$1" ;;
    *) echo "$build/examples/$1" ;;
  esac
}

phase_build() {
  if [ "$dry_run" = 1 ]; then
    result skipped "--dry-run: using what $build holds"
    return
  fi
  if ! have_gpu && [ "$force_build" != 1 ]; then
    result skipped "$(no_gpu_reason) (nothing would run what it builds; --build builds anyway)"
    return
  fi
  [ -d "$deps/usr" ] || { result skipped "no ${deps##*/} (see preflight)"; return; }
  command -v nvcc > /dev/null || { result skipped "nvcc is not on PATH"; return; }
  local t mpi=OFF targets=("${check_targets[@]}")
  if [ "$multi_gpu" = 1 ] && command -v mpiexec > /dev/null; then
    mpi=ON
    targets+=(test_dist)
  fi
  t=$(limit 300)
  [ "$t" -gt 0 ] || { result skipped "the budget is spent"; return; }
  # The examples are built for train_mnist and train_imagenet (both link dtrain_train,
  # dtrain_dist and the examples' support library: without MPI, dist's nompi entry).
  # No install tests, no CPU suite: the check runs test_cuda, the benches and the examples.
  local start=$SECONDS rc
  bounded "$t" cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$deps/usr" -DDTRAIN_USE_CUDA=ON -DDTRAIN_USE_MPI=$mpi -DDTRAIN_BUILD_EXAMPLES=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_CROSSCOMPILING_EMULATOR="$build/with-libs.sh" \
    -DCMAKE_EXE_LINKER_FLAGS="-Wl,-rpath-link,$deps/$libdir" "${roots[@]}" \
    > "$logs/build.log" 2>&1
  rc=$?
  if [ "$rc" -ne 0 ]; then
    tail -n 30 "$logs/build.log"
    result FAILED "configure: $(describe_exit "$rc" "$t") (build.log)"
    return
  fi
  local configure_s=$((SECONDS - start))
  t=$(limit 300)
  [ "$t" -gt 0 ] || { result FAILED "configured in ${configure_s} s, then the budget was spent"; return; }
  # -k 0: a target that fails does not stop the others.
  bounded "$t" cmake --build "$build" -j "$(nproc)" --target "${targets[@]}" -- -k 0 >> "$logs/build.log" 2>&1
  rc=$?
  local built=() failed=() x
  for x in "${targets[@]}"; do
    # Up to date after the build: ninja has no work left for it.
    if [ -x "$(target_path "$x")" ] && { [ "$rc" -eq 0 ] || ninja -C "$build" -n "$x" 2> /dev/null | grep -q "no work to do"; }; then
      built+=("$x")
    else
      failed+=("$x")
    fi
  done
  if [ "$rc" -eq 0 ] && [ ${#failed[@]} -eq 0 ]; then
    result ok "${built[*]} (configure ${configure_s} s; sm_90, CUDA on, MPI $mpi; -j$(nproc))"
  else
    grep -E "error|FAILED" "$logs/build.log" | head -n 20
    result FAILED "$(describe_exit "$rc" "$t"); not built: ${failed[*]:-none} (build.log)"
  fi
}

phase_tests() {
  local log=$logs/test_cuda.log bin
  bin=$(target_path test_cuda)
  if [ "${DTRAIN_GPU_CHECK_CRASH_TEST_CUDA:-0}" = 1 ]; then
    # The deliberate crash of the control-flow test: in place of test_cuda, GPU or not.
    echo "DTRAIN_GPU_CHECK_CRASH_TEST_CUDA=1: aborting in place of test_cuda" > "$log"
    bounded 10 bash -c 'ulimit -c 0; kill -ABRT $$' >> "$log" 2>&1
    local rc=$?
    result FAILED "test_cuda (deliberately crashed): $(describe_exit "$rc" 10)"
    return
  fi
  have_gpu || { result skipped "$(no_gpu_reason)"; return; }
  [ -x "$bin" ] || { result skipped "no $bin (see build)"; return; }
  local missing
  missing=$(missing_libs "$bin")
  local default_t=180
  [ "$quick" = 1 ] && default_t=120
  local t
  t=$(limit "${DTRAIN_GPU_CHECK_TEST_TIMEOUT_S:-$default_t}")
  [ "$t" -gt 0 ] || { result skipped "the budget is spent"; return; }
  # -d yes: each case's seconds in the log, to choose what --quick leaves out next time.
  with_libs "$t" "$bin" --use-colour no -d yes > "$log" 2>&1
  local rc=$?
  local summary_line skipped
  summary_line=$(grep -E "All tests passed|test cases?:" "$log" | tail -n 1)
  skipped=$(grep -c "skipped, no CUDA device" "$log")
  local what="${summary_line:-no Catch summary}; ${skipped:-0} case(s) skipped for want of a device"
  if [ "$rc" -eq 0 ]; then
    result ok "$what"
  elif [ "$rc" -eq 77 ]; then
    result FAILED "every case skipped (no device visible to CUDA?): $what"
  else
    tail -n 20 "$log"
    result FAILED "test_cuda: $(describe_exit "$rc" "$t"); $what${missing:+; missing libraries: $missing} (test_cuda.log)"
  fi
}

# train_mnist's "final test accuracy: NN.NN%" of a log, or "-".
accuracy_of() {
  local a
  a=$(grep -oE "final test accuracy: [0-9.]+" "$1" 2> /dev/null | tail -n 1 | grep -oE "[0-9.]+$")
  echo "${a:--}"
}

# The e2e phase's train_imagenet run: 2 epochs of 5 steps (--limit-train 320, batch 64) of
# ResNet-18 at 224x224 on synthetic images, the example's whole path (loader threads, Trainer,
# optimizer) on the GPU. Its images/s is the second epoch's: the first one's steps include
# the start-up (CUDA context, cuBLAS and cuDNN handles, each kernel's first load, the
# convolution plans, which dtrain takes from cuDNN's heuristics without trial runs, and the
# block cache filling). A smoke figure, not a benchmark (bench_train is the benchmark).
imagenet_batch=64
imagenet_steps=5  # per epoch
imagenet_args=(--synthetic --device cuda --model resnet18 --precision fp32 --batch-size "$imagenet_batch"
  --limit-train $((imagenet_batch * imagenet_steps)) --epochs 2 --loader-threads 4 --seed 3 --progress none)

# "EPOCH RATE" for each of the Trainer's epoch lines in a log
# ("epoch 2/2: train loss 6.9, train accuracy 0.00%, 2468 samples/s, 0.1 s[, notes]").
epoch_rates() {
  sed -nE 's|^epoch ([0-9]+)/[0-9]+: .*, ([0-9.]+) samples/s, [0-9.]+ s.*|\1 \2|p' "$1" 2> /dev/null
}

# A number field of the last JSON line of a file that holds every pattern after the field's
# name ("-" when none): json_number FILE FIELD PATTERN...
json_number() {
  local file=$1 field=$2 line
  shift 2
  line=$(grep -s '^{' "$file")
  local p
  for p in "$@"; do line=$(grep -E "$p" <<< "$line"); done
  line=$(tail -n 1 <<< "$line" | grep -oE "\"$field\": ?[0-9.eE+-]+" | head -n 1 | grep -oE '[0-9.eE+-]+$')
  echo "${line:--}"
}

# train_mnist's runs (in phase_e2e's scope: $bin, $data, $log; adds to failures and accs).
e2e_mnist() {
  # One process (the image has no MPI); the CNN, 2 epochs of the carried subset.
  local common=(--data "$data" --model cnn --seed 3 --progress none)
  local runs=("cuda fp32")
  [ "$quick" = 1 ] || runs+=("cuda bf16" "cuda f16" "cpu fp32")
  local run device precision t rc acc ref=
  for run in "${runs[@]}"; do
    device=${run% *}
    precision=${run#* }
    t=$(limit 90)
    if [ "$t" -eq 0 ]; then
      failures+=("$run: the budget is spent")
      continue
    fi
    echo "== e2e: train_mnist --device $device --precision $precision" >> "$log"
    with_libs "$t" "$bin" "${common[@]}" --epochs 2 --device "$device" --precision "$precision" \
      > "$state/e2e.log" 2>&1
    rc=$?
    cat "$state/e2e.log" >> "$log"
    acc=$(accuracy_of "$state/e2e.log")
    accs+=("$run $acc%")
    [ "$run" = "cpu fp32" ] && ref=$acc
    [ "$rc" -eq 0 ] || failures+=("$run: $(describe_exit "$rc" "$t")")
  done
  # A checkpoint saved on CUDA, resumed on the CPU for the second epoch.
  if [ "$quick" != 1 ]; then
    local ckpt=$state/ckpt
    rm -rf "$ckpt"
    t=$(limit 120)
    if [ "$t" -eq 0 ]; then
      failures+=("cuda->cpu resume: the budget is spent")
    else
      echo "== e2e: checkpoint on cuda (epoch 1), resumed on cpu (epoch 2)" >> "$log"
      with_libs "$t" "$bin" "${common[@]}" --epochs 1 --device cuda --checkpoint-dir "$ckpt" \
        --sync-checkpoint > "$state/e2e.log" 2>&1 \
        && with_libs "$t" "$bin" "${common[@]}" --epochs 2 --device cpu --checkpoint-dir "$ckpt" --resume auto \
          >> "$state/e2e.log" 2>&1
      rc=$?
      cat "$state/e2e.log" >> "$log"
      accs+=("cuda->cpu resume $(accuracy_of "$state/e2e.log")%")
      [ "$rc" -eq 0 ] || failures+=("cuda->cpu resume: $(describe_exit "$rc" "$t")")
    fi
  fi
  # Each CUDA run within 5 points of the CPU's (same data, seed and epochs).
  if [ -n "$ref" ] && [ "$ref" != - ]; then
    local entry value
    for entry in "${accs[@]}"; do
      value=${entry##* }
      value=${value%\%}
      [ "$value" = - ] && continue
      awk -v a="$value" -v b="$ref" 'BEGIN { d = a - b; exit !(d > 5 || d < -5) }' \
        && failures+=("${entry% *}: more than 5 points from the CPU's $ref%")
    done
  fi
}

# train_gpt on CUDA against the CPU (in phase_e2e's scope: $gpt, $log; sets gpt_line, adds to
# failures): the same 30 steps of a small GPT on the repository's docs (text that every checkout
# carries), whose final validation losses must agree within 0.5% (f32 sums in other orders).
e2e_gpt() {
  local common=(--data "$root/docs" --layers 2 --heads 4 --embd 64 --block-size 64 --steps 30 --warmup-steps 5
                --eval-every 30 --eval-windows 20 --sample 0 --seed 3)
  local device t rc loss cuda_loss= cpu_loss=
  for device in cuda cpu; do
    t=$(limit 60)
    if [ "$t" -eq 0 ]; then
      failures+=("train_gpt $device: the budget is spent")
      continue
    fi
    echo "== e2e: train_gpt --device $device" >> "$log"
    with_libs "$t" "$gpt" "${common[@]}" --device "$device" > "$state/e2e.log" 2>&1
    rc=$?
    cat "$state/e2e.log" >> "$log"
    loss=$(sed -n 's/^step [0-9]*: val loss \([0-9.]*\).*/\1/p' "$state/e2e.log" | tail -n 1)
    if [ "$device" = cuda ]; then cuda_loss=$loss; else cpu_loss=$loss; fi
    [ "$rc" -eq 0 ] || failures+=("train_gpt $device: $(describe_exit "$rc" "$t")")
  done
  gpt_line="train_gpt val loss: cuda ${cuda_loss:--}, cpu ${cpu_loss:--}"
  if [ -n "$cuda_loss" ] && [ -n "$cpu_loss" ]; then
    awk -v a="$cuda_loss" -v b="$cpu_loss" 'BEGIN { d = (a - b) / b; exit !(d > 0.005 || d < -0.005) }' \
      && failures+=("train_gpt: CUDA's val loss $cuda_loss is more than 0.5% from the CPU's $cpu_loss")
  fi
}

# train_imagenet's run (in phase_e2e's scope: $imagenet, $log; sets ips, adds to failures):
# its images/s in the result line and, as a JSON line in $state, beside PyTorch's in the
# benches phase and the table.
e2e_imagenet() {
  local t rc rates first last waited
  t=$(limit 90)
  if [ "$t" -eq 0 ]; then
    failures+=("train_imagenet: the budget is spent")
    return
  fi
  echo "== e2e: train_imagenet ${imagenet_args[*]}" >> "$log"
  with_libs "$t" "$imagenet" "${imagenet_args[@]}" > "$state/e2e.log" 2>&1
  rc=$?
  cat "$state/e2e.log" >> "$log"
  rates=$(epoch_rates "$state/e2e.log")
  first=$(head -n 1 <<< "$rates")
  last=$(tail -n 1 <<< "$rates")
  if [ -n "$last" ]; then
    waited=$(grep -E "^epoch ${last% *}/" "$state/e2e.log" | grep -oE "waited [0-9.]+ s for data" | tail -n 1)
    ips="train_imagenet resnet18 224x224 b$imagenet_batch fp32 ${last#* } images/s"
    ips+=" (epoch ${last% *}, $imagenet_steps steps"
    [ "$first" != "$last" ] && ips+="; epoch ${first% *} with start-up ${first#* }"
    ips+="${waited:+; $waited})"
  fi
  # The table's row: a finished run's last epoch, past the start-up.
  if [ "$rc" -eq 0 ] && [ -n "$last" ] && [ "${last% *}" -gt 1 ]; then
    {
      printf '{"bench":"train","framework":"dtrain","program":"train_imagenet","model":"resnet18_224",'
      printf '"batch":%s,"precision":"fp32","epochs":%s,"steps":%s,"samples_per_s":%s}\n' \
        "$imagenet_batch" "${last% *}" "$imagenet_steps" "${last#* }"
    } > "$state/train_imagenet.jsonl"
  fi
  if [ "$rc" -ne 0 ]; then
    failures+=("train_imagenet: $(describe_exit "$rc" "$t")")
  elif [ -z "$last" ]; then
    failures+=("train_imagenet: no epoch line with samples/s in its output (check.log)")
  fi
}

phase_e2e() {
  have_gpu || { result skipped "$(no_gpu_reason)"; return; }
  [ "$(limit 1)" -gt 0 ] || { result skipped "the budget is spent"; return; }
  local bin imagenet data=$deps/data/fashion-mnist log=$logs/check.log no_mnist='' no_imagenet=''
  bin=$(target_path train_mnist)
  imagenet=$(target_path train_imagenet)
  if [ ! -x "$bin" ]; then
    no_mnist="no $bin (see build)"
  elif [ ! -f "$data/train-images-idx3-ubyte.gz" ]; then
    no_mnist="no carried data in $data (prepare found no $fashion_mnist)"
  fi
  # train_imagenet only in the full run.
  [ "$quick" = 1 ] || [ -x "$imagenet" ] || no_imagenet="no $imagenet (see build)"
  if [ -n "$no_mnist" ] && { [ "$quick" = 1 ] || [ -n "$no_imagenet" ]; }; then
    result skipped "$(joined "$no_mnist" ${no_imagenet:+"$no_imagenet"})"
    return
  fi
  local failures=() accs=() notes=() ips= gpt_line=
  if [ -z "$no_mnist" ]; then
    e2e_mnist
  else
    notes+=("train_mnist skipped: $no_mnist")
  fi
  if [ "$quick" != 1 ]; then
    if [ -z "$no_imagenet" ]; then
      e2e_imagenet
    else
      notes+=("train_imagenet skipped: $no_imagenet")
    fi
    local gpt
    gpt=$(target_path train_gpt)
    if [ -x "$gpt" ]; then
      e2e_gpt
    else
      notes+=("train_gpt skipped: no $gpt (see build)")
    fi
  fi
  local label="test accuracy" parts=()
  [ ${#failures[@]} -eq 0 ] || label=accuracy
  [ ${#accs[@]} -eq 0 ] || parts+=("$label: $(joined "${accs[@]}")")
  [ -z "$ips" ] || parts+=("$ips")
  [ -z "$gpt_line" ] || parts+=("$gpt_line")
  parts+=("${notes[@]}")
  if [ ${#failures[@]} -eq 0 ]; then
    result ok "$(joined "${parts[@]}")"
  else
    result FAILED "$(joined "${failures[@]}" "${parts[@]}")"
  fi
}

# "train_imagenet (e2e) N images/s, PyTorch resnet18_224 b64 fp32 M (R x)" when both exist:
# the same model, batch and precision (PyTorch's figure is a fixed batch's median step).
imagenet_beside_pytorch() {
  local ours theirs
  ours=$(json_number "$state/train_imagenet.jsonl" samples_per_s)
  theirs=$(json_number "$logs/torch_train.jsonl" samples_per_s '"model": ?"resnet18_224"' \
    "\"batch\": ?${imagenet_batch}[,}]" '"precision": ?"fp32"')
  [ "$ours" != - ] && [ "$theirs" != - ] || return 0
  awk -v a="$ours" -v b="$theirs" -v n="$imagenet_batch" 'BEGIN {
    printf "train_imagenet (e2e) %.0f images/s, PyTorch resnet18_224 b%d fp32 %.0f", a, n, b
    if (b > 0) printf " (%.2fx)", a / b
  }'
}

phase_benches() {
  have_gpu || { result skipped "$(no_gpu_reason)"; return; }
  [ "$(limit 1)" -gt 0 ] || { result skipped "the budget is spent"; return; }
  local ops train peers=$root/bench/peers py=${DTRAIN_GPU_CHECK_PYTHON:-python3}
  ops=$(target_path bench_gpu_ops)
  train=$(target_path bench_train)
  [ -x "$ops" ] || [ -x "$train" ] || { result skipped "no bench_gpu_ops or bench_train (see build)"; return; }
  local errors=$logs/check.log failures=() ran=0 t rc filter=() cases
  : > "$logs/gpu_ops.jsonl"
  : > "$logs/torch_gpu_ops.jsonl"
  : > "$logs/train.jsonl"
  : > "$logs/torch_train.jsonl"
  echo "== benches (stderr)" >> "$errors"
  # name|output|command...: each bench beside its PyTorch peer.
  [ "$quick" = 1 ] && filter=(--filter gemm)
  local jobs=()
  [ -x "$ops" ] && jobs+=("bench_gpu_ops|gpu_ops|$ops --json ${filter[*]}"
    "pytorch_gpu_ops|torch_gpu_ops|$py $peers/pytorch_gpu_ops.py --json ${filter[*]}")
  cases=("resnet18_224 fp32" "resnet18_224 bf16" "resnet50_224 fp32" "resnet50_224 bf16")
  [ "$quick" = 1 ] && cases=("resnet18_224 bf16")
  local c args
  for c in "${cases[@]}"; do
    args="--device cuda --model ${c% *} --precision ${c#* } --batch 64 --steps 10 --json"
    [ -x "$train" ] && jobs+=("bench_train ${c}|train|$train $args" "pytorch_train ${c}|torch_train|$py $peers/pytorch_train.py $args")
  done
  local job name out cmd
  for job in "${jobs[@]}"; do
    name=${job%%|*}
    out=${job#*|}
    cmd=${out#*|}
    out=${out%%|*}
    case "$name" in *gpu_ops) t=$(limit 90) ;; *) t=$(limit 60) ;; esac
    if [ "$t" -eq 0 ]; then
      failures+=("$name: the budget is spent")
      continue
    fi
    echo "-- $name" >> "$errors"
    # The paths hold no spaces (the repository's and build folder's names are checked below).
    # shellcheck disable=SC2086
    case "$cmd" in
      "$py "*) bounded "$t" $cmd >> "$logs/$out.jsonl" 2>> "$errors" ;;
      *) with_libs "$t" $cmd >> "$logs/$out.jsonl" 2>> "$errors" ;;
    esac
    rc=$?
    ran=$((ran + 1))
    [ "$rc" -eq 0 ] || failures+=("$name: $(describe_exit "$rc" "$t")")
  done
  local lines beside
  lines=$(cat "$logs"/gpu_ops.jsonl "$logs"/torch_gpu_ops.jsonl "$logs"/train.jsonl "$logs"/torch_train.jsonl \
    | grep -c '^{')
  beside=$(imagenet_beside_pytorch)
  if [ ${#failures[@]} -eq 0 ]; then
    result ok "$ran runs, $lines JSON lines, TF32 ${DTRAIN_ALLOW_TF32:-0}${beside:+; $beside}"
  else
    result FAILED "$(joined "${failures[@]}"); $ran runs, $lines JSON lines (errors: check.log)${beside:+; $beside}"
  fi
}

# What one GPU cannot show, and the commands that would show it.
unverified() {
  cat << 'EOF'
NCCL across ranks (DataParallel's all-reduce) and the rank-to-device mapping:
    ctest dist.np2_nccl (mpiexec -n 2 test_dist "[nccl]"); needs MPI and 2 GPUs
pipeline point-to-point over NCCL:
    mpiexec -n 2 train_mnist --device cuda --model mlp --hidden 512,512 --parallel pp=2,micro=4 --epochs 1
reduce_scatter and all_gather over NCCL across ranks (sharded data parallelism, and a pipeline's
sharded optimizer): the [nccl] cases of test_zero.cpp and test_pipeline_sharded.cpp in
    ctest dist.np2_nccl; needs MPI and 2 GPUs
EOF
}

phase_multi_gpu() {
  unverified | sed 's/^/  /'
  {
    echo "== multi-gpu: unverified with one GPU"
    unverified
  } >> "$logs/check.log"
  if [ "$multi_gpu" != 1 ]; then
    result skipped "not asked (--multi-gpu); unverified: NCCL across ranks, rank-to-device mapping, pipeline p2p over NCCL"
    return
  fi
  if [ "${gpu_count:-0}" -lt 2 ]; then
    result skipped "${gpu_count:-0} GPU(s): the list above stays unverified"
    return
  fi
  command -v mpiexec > /dev/null || { result skipped "$gpu_count GPUs but no mpiexec (the build has MPI off)"; return; }
  [ -x "$(target_path test_dist)" ] || { result skipped "no test_dist (see build)"; return; }
  local t rc
  t=$(limit 300)
  [ "$t" -gt 0 ] || { result skipped "the budget is spent"; return; }
  with_libs "$t" ctest --test-dir "$build" -R '^dist\.np[12]_nccl$' --output-on-failure \
    >> "$logs/check.log" 2>&1
  rc=$?
  if [ "$rc" -eq 0 ]; then
    result ok "dist.np1_nccl, dist.np2_nccl on $gpu_count GPUs"
  else
    result FAILED "ctest dist.np*_nccl: $(describe_exit "$rc" "$t") (check.log)"
  fi
}

run() {
  local arg
  for arg in "$@"; do
    case "$arg" in
      --quick) quick=1 ;;
      --multi-gpu) multi_gpu=1 ;;
      --build) force_build=1 ;;
      --dry-run) dry_run=1 ;;
      *) die "run: unknown option $arg (--quick, --multi-gpu, --build, --dry-run)" ;;
    esac
  done
  local budget=300
  [ "$quick" = 1 ] && budget=240
  budget=${DTRAIN_GPU_CHECK_BUDGET_S:-$budget}
  deadline=$((SECONDS + budget))
  logs=${OUT:-$build/logs}
  mkdir -p "$logs" "$build" || die "cannot make $logs and $build"
  state=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX") || die "no temporary folder"
  # shellcheck disable=SC2064  # expand now: $state is fixed
  trap "rm -rf '$state'" EXIT
  summary=$logs/summary.txt
  : > "$summary"
  : > "$logs/check.log"
  # No bench figure of an earlier run in the same folder reaches this run's table.
  local f
  for f in gpu_ops torch_gpu_ops train torch_train; do [ ! -e "$logs/$f.jsonl" ] || : > "$logs/$f.jsonl"; done
  case "$root$build$deps" in *" "*) die "the repository, build and deps paths must hold no spaces" ;; esac

  # What every phase needs, found once: the GPU, cuDNN and NCCL, the programs' library path.
  if command -v nvidia-smi > /dev/null; then
    gpu=$(timeout 30 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2> /dev/null | head -n 1)
    gpu_count=$(timeout 30 nvidia-smi -L 2> /dev/null | grep -c '^GPU')
  fi
  gpu_count=${gpu_count:-0}
  [ "${DTRAIN_GPU_CHECK_ASSUME_GPU:-0}" = 1 ] && gpu=${gpu:-assumed (DTRAIN_GPU_CHECK_ASSUME_GPU=1)}
  run_ld=$deps/$libdir
  local lib
  if command -v nvcc > /dev/null; then
    lib=$(python_package_dir cudnn) && roots+=("-DCUDNN_ROOT=$lib") && run_ld=$lib/lib:$run_ld
    lib=$(python_package_dir nccl) && roots+=("-DNCCL_ROOT=$lib") && run_ld=$lib/lib:$run_ld
  fi
  write_wrapper
  local mode="full"
  [ "$quick" = 1 ] && mode="quick"
  [ "$dry_run" = 1 ] && mode="$mode, dry run"
  echo "gpu-check: run ($mode), budget ${budget} s, logs in $logs"

  run_phase preflight phase_preflight
  run_phase build phase_build
  run_phase tests phase_tests
  run_phase e2e phase_e2e
  run_phase benches phase_benches
  run_phase multi-gpu phase_multi_gpu

  printf '\n== dtrain GPU check (%s) ==\n' "$mode"
  printf '%-9s %s\n' "GPU" "${gpu:-none found}"
  cat "$summary"
  printf '%-9s %s\n' "total" "$SECONDS s; logs in $logs"
  # The e2e phase's train_imagenet figure (kept in $state: the output folder's 8 files are
  # taken) is the table's last row, beside PyTorch's ResNet-18 fp32.
  if [ -s "$logs/gpu_ops.jsonl" ] || [ -s "$logs/train.jsonl" ] || [ -s "$state/train_imagenet.jsonl" ]; then
    timeout 30 python3 "$root/bench/peers/gpu_table.py" "$logs/gpu_ops.jsonl" "$logs/torch_gpu_ops.jsonl" \
      "$logs/train.jsonl" "$logs/torch_train.jsonl" "$state/train_imagenet.jsonl"
  fi
  ! grep -qE '^[a-z-]+ +FAILED' "$summary"
}

case "${1:-}" in
  prepare) prepare ;;
  run)
    shift
    run "$@"
    ;;
  *) die "usage: scripts/gpu-check.sh prepare | run [--quick] [--multi-gpu] [--build] [--dry-run] (see the top)" ;;
esac
