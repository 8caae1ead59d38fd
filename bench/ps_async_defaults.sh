#!/usr/bin/env bash
# bench/ps_async_defaults.sh: the default asynchronous parameter-server command as a new user
# types it (issue 55), at np 3 (2 workers) and np 4 (3 workers), one server, --reps times
# each with the defaults (momentum 0.9 less the asynchrony's implicit momentum:
# dist::asynchronous_momentum, 0.8 and 0.7) and with the old default --momentum 0.9, the two
# alternating so that both see the same machine. Prints one row per run (final test
# accuracy; "diverged" when the run ended with the guard's message or at chance) and, per
# case, the runs, how many reached --floor, the minimum and the median.
#
#   bench/ps_async_defaults.sh [--reps 10] [--np "3 4"] [--floor 85] [--out FILE]
#       [-- extra train_mnist flags]
#
# The command: train_mnist --model cnn --epochs 1 --limit-train 30000 --limit-test 2000
# --batch-size 64 --threads 1 --seed 7 --parallel ps=1,mode=async (--progress none).
# Old runs go with --no-rollback as well: the old code had no guard, and a guard's rollback
# would hide what the defaults alone do.
set -euo pipefail
cd "$(dirname "$0")/.."

reps=10 nps="3 4" floor=85 out="" extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --reps) reps="$2"; shift 2 ;;
    --np) nps="$2"; shift 2 ;;
    --floor) floor="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) echo "ps_async_defaults.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
binary=build/release/examples/train_mnist
[ -x "$binary" ] || { echo "ps_async_defaults.sh: build first ($binary is missing)" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
source bench/provenance.sh
[ -n "$out" ] && exec > >(tee "$out")
provenance_text "" "train_mnist CNN, 30000 examples, 1 epoch, async parameter servers, defaults vs --momentum 0.9"
args=(--model cnn --epochs 1 --limit-train 30000 --limit-test 2000 --batch-size 64 --threads 1 --seed 7
      --parallel ps=1,mode=async --progress none "${extra[@]}")
echo "# command: mpirun -np N $binary ${args[*]} [--momentum 0.9 --no-rollback]"
results=$(mktemp)
trap 'rm -f "$results"' EXIT
for np in $nps; do
  for rep in $(seq 1 "$reps"); do
    for case in default old; do
      flags=()
      [ "$case" = old ] && flags=(--momentum 0.9 --no-rollback)
      start=$(date +%s.%N)
      log=$(mpirun -np "$np" "$binary" "${args[@]}" "${flags[@]}" 2>&1) && rc=0 || rc=$?
      seconds=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')
      accuracy=$(sed -n 's/^final test accuracy: \([0-9.]*\)%.*/\1/p' <<<"$log" | tail -1)
      momentum=$(sed -n 's/.*, momentum \([0-9.]*\) (.*/\1/p' <<<"$log" | head -1)
      rollbacks=$(grep -c "rolled back to" <<<"$log" || true)
      verdict=ok
      if [ -z "$accuracy" ] || awk -v a="$accuracy" 'BEGIN { exit !(a < 20) }'; then verdict=diverged; fi
      printf 'np %s  %-7s  rep %2d  exit %3d  momentum %-4s  accuracy %6s%%  rollbacks %s  %-8s  %5.1f s\n' \
        "$np" "$case" "$rep" "$rc" "${momentum:-0.9}" "${accuracy:--}" "$rollbacks" "$verdict" "$seconds"
      echo "$np $case ${accuracy:-0}" >>"$results"
    done
  done
done
echo "# summary (floor $floor%)"
python3 - "$results" "$floor" <<'PY'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
floor = float(sys.argv[2])
for key in sorted({(r[0], r[1]) for r in rows}):
    acc = [float(r[2]) for r in rows if (r[0], r[1]) == key]
    print(f"np {key[0]}  {key[1]:7s}  runs {len(acc):2d}  at or above {floor:g}%: {sum(a >= floor for a in acc):2d}"
          f"  diverged (<20%): {sum(a < 20 for a in acc):2d}  min {min(acc):6.2f}%  median {statistics.median(acc):6.2f}%")
PY
