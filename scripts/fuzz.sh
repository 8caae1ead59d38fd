#!/usr/bin/env bash
# Fuzzing (issue 14): runs each libFuzzer target of fuzz/ (one per reader of outside files:
# IDX/gzip, JPEG, tar shards, the cluster spec, safetensors, checkpoint manifests) for a
# bounded time, and keeps what breaks a reader.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]      default 60 s; every target
#
# Builds build/fuzz with clang (Debian's, whose libFuzzer is in libclang_rt.fuzzer), ASan and
# UBSan, -DDTRAIN_FUZZ=ON, then fuzzes each target from its kept inputs (fuzz/regressions/
# <name>/, read only) and the corpus it grew in earlier runs (build/fuzz/corpus/<name>/).
# A crash, sanitizer report, leak, timeout (-timeout) or out-of-memory (-rss_limit_mb) stops
# that target; the input is copied to fuzz/regressions/<name>/<kind>-<sha1> and the script
# exits 1 naming it. Reproduce one with
#   build/fuzz/fuzz/fuzz_<name> fuzz/regressions/<name>/crash-<sha1>
# fix the reader so that the input is a dtrain::Error, and rename the file
# invalid-<what>-<kind>-<sha1>: the replay test fuzz.<name> of every build (`ctest -L fuzz`)
# then checks that it stays rejected (files named valid-* must be accepted).
# Environment: FUZZ_BUILD_DIR (default build/fuzz), CXX (default clang++), FUZZ_JOBS (build
# parallelism, default 2), FUZZ_RSS_MB (default 2048), FUZZ_TIMEOUT_S (per input, default 10).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
seconds=${1:-60}
[[ $seconds =~ ^[0-9]+$ ]] || { echo "usage: scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]" >&2; exit 2; }
shift || true
build=${FUZZ_BUILD_DIR:-$root/build/fuzz}
jobs=${FUZZ_JOBS:-2}
rss_mb=${FUZZ_RSS_MB:-2048}
timeout_s=${FUZZ_TIMEOUT_S:-10}

launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
# -O1 -g without NDEBUG: assertions stay on, and reports have line numbers.
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_CXX_COMPILER="${CXX:-clang++}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" -DDTRAIN_FUZZ=ON -DDTRAIN_SANITIZE=ON -DDTRAIN_USE_CUDA=OFF \
  -DDTRAIN_USE_MPI=OFF -DDTRAIN_BUILD_TESTS=OFF -DDTRAIN_BUILD_EXAMPLES=OFF -DDTRAIN_BUILD_BENCH=OFF \
  "${launcher[@]}" >"$build.configure.log" 2>&1 || { cat "$build.configure.log"; exit 1; }

# The targets fuzz/CMakeLists.txt defines.
mapfile -t defined < <(cmake --build "$build" --target help | sed -n 's/^\([a-z_]*\): .*/\1/p' | grep '^fuzz_' |
  grep -v '^fuzz_make_seeds$' | sed 's/^fuzz_//' | sort)
targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=("${defined[@]}")
for t in "${targets[@]}"; do
  [[ " ${defined[*]} " == *" $t "* ]] || { echo "fuzz.sh: no target '$t' (have: ${defined[*]})" >&2; exit 2; }
done
cmake --build "$build" -j "$jobs" --target "${targets[@]/#/fuzz_}"

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=0}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$root/tools/lsan.supp:print_suppressions=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# The targets' scratch files (the readers that take a path), in memory where there is a
# tmpfs: three times the executions per second of a disk-backed folder.
scratch_root=$build
[[ -d /dev/shm && -w /dev/shm ]] && scratch_root=/dev/shm
TMPDIR=$(mktemp -d "$scratch_root/dtrain-fuzz.XXXXXX")
export TMPDIR
trap 'rm -rf "$TMPDIR"' EXIT

found=()
summary=()
for t in "${targets[@]}"; do
  corpus=$build/corpus/$t
  artifacts=$build/artifacts/$t
  seeds=$root/fuzz/regressions/$t
  mkdir -p "$corpus" "$artifacts" "$seeds"
  rm -f "$artifacts"/*
  # Inputs long enough for a few tar blocks or a small JPEG; the readers' own size fields
  # still claim far more than that.
  case $t in
    tar_shards) max_len=16384 ;;
    jpeg | safetensors) max_len=8192 ;;
    *) max_len=4096 ;;
  esac
  args=(-max_total_time="$seconds" -rss_limit_mb="$rss_mb" -timeout="$timeout_s" -max_len="$max_len"
        -artifact_prefix="$artifacts/" -print_final_stats=1)
  [[ -f $root/fuzz/$t.dict ]] && args+=(-dict="$root/fuzz/$t.dict")
  log=$build/fuzz_$t.log
  echo "== fuzz_$t: $seconds s (log: $log)"
  status=0
  "$build/fuzz/fuzz_$t" "${args[@]}" "$corpus" "$seeds" >"$log" 2>&1 || status=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]* ft: [0-9]* corp: [0-9]*/[^ ]*' "$log" | tail -1)
  result=ok
  if [[ $status -ne 0 ]]; then
    result="FAILED (exit $status)"
    for a in "$artifacts"/*; do
      [[ -e $a ]] || continue
      cp "$a" "$seeds/"
      found+=("fuzz/regressions/$t/$(basename "$a")")
      result="FOUND $(basename "$a")"
    done
    grep -m4 -E '^(terminate called|  what\(\)|==[0-9]+== ?ERROR|SUMMARY|.*runtime error)' "$log" || tail -5 "$log"
  fi
  summary+=("$(printf '%-14s %5ss  %10s execs  %-32s %s' "$t" "$seconds" "${execs:-?}" "${cov:-cov: ?}" "$result")")
done

echo
printf '%s\n' "${summary[@]}"
if [[ ${#found[@]} -gt 0 ]]; then
  echo "fuzz.sh: kept as regression cases (fix the reader, then ctest -L fuzz):"
  printf '  %s\n' "${found[@]}"
  exit 1
fi
for t in "${targets[@]}"; do
  if ! grep -q '^Done [0-9]* runs' "$build/fuzz_$t.log"; then
    echo "fuzz.sh: fuzz_$t failed without an input to keep; see $build/fuzz_$t.log" >&2
    exit 1
  fi
done
