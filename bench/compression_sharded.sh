#!/bin/bash
# Sharded data parallelism with and without 16-bit reduce-scatters between two emulated
# hosts at 1 Gbit/s (PERFORMANCE.md comp-zero2-bf16): 5 repetitions of bench_zero_speed
# (plain and sharded, each f32 and bf16) into bench/results/compression_sharded_netns.jsonl,
# and the medians into compression_sharded_netns.txt. Root (bench/netns).
#   sudo bench/compression_sharded.sh
set -euo pipefail
cd "$(dirname "$0")/.."
commit=$(git rev-parse --short HEAD)
cmd="sudo bench/netns/run_netns.sh --hosts 2 --ranks-per-host 1 --links 1gbit -- bench_zero_speed --json --model cnn --batch 64 --threads 1 --steps 20 --warmup 3 --specs dp dp,exchange=bf16 zero=2 zero=2,exchange=bf16"
note="for r in 1..5: $cmd; commit $commit, $(date -u +%Y-%m-%dT%H:%MZ), $(lscpu | sed -n "s/^Model name: *//p" | head -1), $(nproc) vCPUs, 2 emulated hosts x 1 rank, 1 Gbit/s (tbf)"
out=bench/results/compression_sharded_netns.jsonl
python3 -c 'import json,sys; print(json.dumps({"note": sys.argv[1]}))' "$note" > $out.tmp
for r in 1 2 3 4 5; do
  bench/netns/run_netns.sh --hosts 2 --ranks-per-host 1 --links 1gbit -- bench_zero_speed --json --model cnn --batch 64 --threads 1 --steps 20 --warmup 3 --specs dp dp,exchange=bf16 zero=2 zero=2,exchange=bf16 2>/dev/null | grep '^{' | python3 -c '
import json,sys
for l in sys.stdin:
    d=json.loads(l); d={"rep": int(sys.argv[1]), **d}; print(json.dumps(d, separators=(",",":")))' $r >> $out.tmp
done
mv $out.tmp $out
python3 - "$out" "$note" > bench/results/compression_sharded_netns.txt <<'PY'
import json, sys, statistics as st
rows=[json.loads(l) for l in open(sys.argv[1])]
rows=[r for r in rows if r.get("spec")]
print(sys.argv[2])
print("medians over 5 repetitions of samples/s (slowest rank per update); ratio = median of the per-repetition ratios of the spec to its uncompressed twin")
specs=["dp","dp,exchange=bf16","zero=2","zero=2,exchange=bf16"]
for s in specs:
    base=s.split(",")[0]
    sps=[r["samples_per_s"] for r in rows if r["spec"]==s]
    ratios=[]
    for rep in sorted({r["rep"] for r in rows}):
        a=[r["samples_per_s"] for r in rows if r["spec"]==s and r["rep"]==rep]
        b=[r["samples_per_s"] for r in rows if r["spec"]==base and r["rep"]==rep]
        if a and b: ratios.append(a[0]/b[0])
    print(f"{s:24} samples/s {st.median(sps):8.1f}  over {base}: {st.median(ratios):.2f}")
PY
cat bench/results/compression_sharded_netns.txt
