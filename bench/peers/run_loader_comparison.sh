#!/usr/bin/env bash
# The JPEG loader, dtrain against torchvision, in one go on this machine: images/s per loader
# thread of decode + RandomResizedCrop(224) + flip + normalize, batch 32, one worker, on
# ImageNet-sized JPEGs made from real photographs (make_loader_images.py). --reps alternating
# repetitions (default 5) of bench_loader (class folders, tar shards, and for context the
# pipeline and full decodes from memory) and torchvision_loader.py (its three pipelines and
# PIL's and torchvision.io's full decodes). Target: dtrain >= 2x torchvision's fastest
# pipeline per thread.
# Writes the JSON lines, each tagged with its repetition, to bench/results/loader_comparison.jsonl
# and the table (loader_table.py), headed by the date and commit, to
# bench/results/loader_comparison.txt (and stdout).
#   bench/peers/run_loader_comparison.sh [--build DIR] [--reps N] [--data DIR] [--photos DIR] [--count N] [--quick]
# --data: where the JPEG tree (DIR/images/train) and its shards (DIR/shards/train) are made
# when missing and reused (default /tmp/dtrain-loader-data); --count images in 10 classes
# (default 1000). --photos: skimage's sample photos (see make_loader_images.py --help; by
# default /tmp/skimage-deb/... as unpacked there, else python3-skimage's install path).
# --quick: one repetition on 100 images, results to a temporary directory: checks the script.
# PYTHON selects the peer's interpreter (default .venv/bin/python, from setup-venv.sh, with
# torchvision). About 5 minutes on 2 vCPUs; do not run it while anything else loads the machine.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
peers=$root/bench/peers
build=$root/build/release
reps=5
data=/tmp/dtrain-loader-data
photos=/tmp/skimage-deb/usr/lib/python3/dist-packages/skimage/data
[ -d "$photos" ] || photos=/usr/lib/python3/dist-packages/skimage/data
count=1000
quick=0
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$(cd "$2" && pwd); shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --data) data=$2; shift 2 ;;
    --photos) photos=$2; shift 2 ;;
    --count) count=$2; shift 2 ;;
    --quick) quick=1; shift ;;
    *) echo "run_loader_comparison: unknown argument '$1' (expected --build DIR, --reps N, --data DIR, --photos DIR," \
            "--count N or --quick)" >&2
       exit 2 ;;
  esac
done
python=${PYTHON:-$root/.venv/bin/python}
bench=$build/bench/bench_loader
make_shards=$build/examples/dtrain-make-shards
[ -x "$bench" ] || { echo "run_loader_comparison: $bench not found (build the bench_loader target)" >&2; exit 1; }
[ -x "$make_shards" ] || { echo "run_loader_comparison: $make_shards not found (build dtrain-make-shards)" >&2; exit 1; }
[ -x "$python" ] || { echo "run_loader_comparison: $python not found (run bench/peers/setup-venv.sh)" >&2; exit 1; }
"$python" -c 'import torchvision, PIL' 2>/dev/null \
  || { echo "run_loader_comparison: $python cannot import torchvision and PIL (run bench/peers/setup-venv.sh)" >&2; exit 1; }
for n in "$reps" "$count"; do
  [[ "$n" =~ ^[1-9][0-9]*$ ]] || { echo "run_loader_comparison: expected a positive integer, got '$n'" >&2; exit 2; }
done

results=$root/bench/results
if [ "$quick" = 1 ]; then  # a check must not overwrite measured results
  results=$(mktemp -d)
  data=$results/data
  trap 'rm -rf "$results"' EXIT
  reps=1
  count=100
fi
# The tree is made once per --count and reused: a different count gets its own.
images=$data/$count/images
shards=$data/$count/shards
if [ ! -d "$images/train" ]; then
  "$python" "$peers/make_loader_images.py" "$images" --photos "$photos" --count "$count" >&2
fi
[ -d "$shards/train" ] || "$make_shards" "$images" "$shards" --shard-size 256MB >&2

mkdir -p "$results"
out=$results/loader_comparison.jsonl
: >"$out"

# Appends stdin's JSON lines to the results, tagged with the repetition.
tag() { "$python" -c 'import json, sys
extra = json.loads(sys.argv[1])
for line in sys.stdin:
    line = line.strip()
    if line.startswith("{"):
        print(json.dumps({**json.loads(line), **extra}), flush=True)' "$1" >>"$out"; }

load_start=$(cut -d' ' -f1-3 /proc/loadavg)
for rep in $(seq 1 "$reps"); do
  echo "repetition $rep of $reps: dtrain, torchvision" >&2
  "$bench" --json --images "$images" --shards "$shards" | tag "{\"rep\": $rep}"
  "$python" "$peers/torchvision_loader.py" --json --images "$images" | tag "{\"rep\": $rep}"
done

{
  echo "# $(date -u +%Y-%m-%dT%H:%MZ), commit $(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet || echo ' (dirty)');" \
       "load average at start $load_start, at end $(cut -d' ' -f1-3 /proc/loadavg)"
  "$python" "$peers/loader_table.py" "$out"
} | tee "$results/loader_comparison.txt"
