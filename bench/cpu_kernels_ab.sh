#!/usr/bin/env bash
# What the CPU kernel switches (dtrain/tensor/cpu_kernels.h) are worth in a training step:
# bench_train in three settings, five alternating repetitions, 1 and 2 threads.
# --set conv (the default): ResNet-18 (CIFAR stem, batch 32) and the LeNet-style CNN
# (batch 64) in f32, with
#   before        DTRAIN_CPU_BLOCKED=0 DTRAIN_CONV_WEIGHT_GRAD=direct (NCHW between layers,
#                 oneDNN's direct weight gradients: the kernels before issue 16)
#   blocked       the blocked layout, direct weight gradients
#   blocked+gemm  the defaults (weight gradients by im2col + GEMM where Auto picks it)
#   (all three with direct convolutions, DTRAIN_CPU_CONV_ALGO=direct)
# --set winograd: ResNet-18 (CIFAR, batch 32) and ResNet-50 (224x224, batch 8) in f32, with
#   direct        DTRAIN_CPU_CONV_ALGO=direct: oneDNN's direct convolutions only
#   auto          the default: Winograd kernels where ConvAlgorithm::Auto picks them
# --set bf16: ResNet-18 (CIFAR, batch 32), the CNN (batch 64) and the MLP (batch 256) in
#   fp32          f32 products
#   bf16-emulated bf16 autocast, products emulated exactly in f32 (DTRAIN_CPU_BF16=emulate)
#   bf16-native   bf16 autocast on oneDNN's bf16 kernels (DTRAIN_CPU_BF16=native; needs
#                 AVX-512 BF16)
# Prints the JSON lines, then a table of medians (min-max) and ratios over the first setting.
#   bench/cpu_kernels_ab.sh [BUILD_DIR] [--set conv|bf16|winograd] > bench/results/cpu_conv_kernels.jsonl
# About 8 minutes on 2 vCPUs per set (winograd: 12); run it on a quiet machine.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build/release
set_name=conv
while [ $# -gt 0 ]; do
  case "$1" in
    --set) set_name=$2; shift 2 ;;
    *) build=$1; shift ;;
  esac
done
bench_train=$build/bench/bench_train
[ -x "$bench_train" ] || { echo "cpu_kernels_ab: $bench_train not found (build bench_train)" >&2; exit 1; }
out=$(mktemp)
trap 'rm -f "$out"' EXIT
echo "# $(date -u +%Y-%m-%dT%H:%MZ) dtrain $(git -C "$root" describe --always --dirty); $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $(nproc) cores; load at start $(cut -d' ' -f1-3 /proc/loadavg)"
# Each setting: name, precision, environment.
case $set_name in
  conv) configs=("before fp32 DTRAIN_CPU_BLOCKED=0 DTRAIN_CONV_WEIGHT_GRAD=direct DTRAIN_CPU_CONV_ALGO=direct"
                 "blocked fp32 DTRAIN_CPU_BLOCKED=1 DTRAIN_CONV_WEIGHT_GRAD=direct DTRAIN_CPU_CONV_ALGO=direct"
                 "blocked+gemm fp32 DTRAIN_CPU_BLOCKED=1 DTRAIN_CONV_WEIGHT_GRAD=auto DTRAIN_CPU_CONV_ALGO=direct")
        cases=("resnet18_cifar 32 5 1" "cnn 64 20 3") ;;
  winograd) grep -q -w avx512f /proc/cpuinfo \
              || { echo "cpu_kernels_ab: --set winograd needs a CPU with AVX-512" >&2; exit 1; }
            configs=("direct fp32 DTRAIN_CPU_CONV_ALGO=direct" "auto fp32 DTRAIN_CPU_CONV_ALGO=auto")
            cases=("resnet18_cifar 32 5 1" "resnet50_224 8 3 1") ;;
  bf16) grep -q -w avx512_bf16 /proc/cpuinfo \
          || { echo "cpu_kernels_ab: --set bf16 needs a CPU with AVX-512 BF16" >&2; exit 1; }
        configs=("fp32 fp32 DTRAIN_CPU_BF16=auto" "bf16-emulated bf16 DTRAIN_CPU_BF16=emulate"
                 "bf16-native bf16 DTRAIN_CPU_BF16=native")
        cases=("resnet18_cifar 32 5 1" "cnn 64 20 3" "mlp 256 30 3") ;;
  *) echo "cpu_kernels_ab: --set expects conv, bf16 or winograd, got '$set_name'" >&2; exit 2 ;;
esac
for rep in 1 2 3 4 5; do
  for cfg in "${configs[@]}"; do
    read -r name precision envs <<< "$cfg"
    for c in "${cases[@]}"; do
      read -r model batch steps warmup <<< "$c"
      for t in 1 2; do
        # shellcheck disable=SC2086  # envs is a list of NAME=VALUE words
        line=$(env $envs "$bench_train" --model "$model" --batch "$batch" --steps "$steps" --warmup "$warmup" \
                 --threads "$t" --precision "$precision" --json | tail -1)
        echo "{\"rep\": $rep, \"setting\": \"$name\", ${line#\{}" | tee -a "$out"
      done
    done
  done
done
echo "# load at end $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
cases = list(dict.fromkeys((r["model"], r["batch"], r["threads"]) for r in rows))
settings = list(dict.fromkeys(r["setting"] for r in rows))
print(f"# samples/s, medians of 5 alternating repetitions (min-max); x = over '{settings[0]}'")
print("# " + f"{'case':<24}" + "".join(f"{s:>28}" for s in settings))
for m, b, t in cases:
    line, base = f"{f'{m} b{b} t{t}':<24}", None
    for s in settings:
        v = [r["samples_per_s"] for r in rows if (r["model"], r["batch"], r["threads"], r["setting"]) == (m, b, t, s)]
        med = statistics.median(v)
        base = base or med
        line += f"{med:>10.1f} ({min(v):.1f}-{max(v):.1f}) {med / base:4.2f}x".rjust(28)
    print("# " + line)
PY
