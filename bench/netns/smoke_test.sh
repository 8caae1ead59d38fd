#!/usr/bin/env bash
# smoke_test.sh BENCH_DIR IMPL,IMPL,...: the ctest netns.two_hosts_allreduce_smoke. Runs
# run_netns.sh with 2 hosts x 1 rank on one 1gbit link, tiny sizes and few iterations, and
# checks that a JSON line with the link fields came back for every implementation. Exit 77
# (skipped) when run_netns.sh cannot run here.
set -uo pipefail
bench_dir=${1:?usage: smoke_test.sh BENCH_DIR IMPL,IMPL,...}
impls=${2:?usage: smoke_test.sh BENCH_DIR IMPL,IMPL,...}
out=$("$(dirname "$0")/run_netns.sh" --hosts 2 --ranks-per-host 1 --links 1gbit --bench-dir "$bench_dir" \
  --timeout 50 -- bench_allreduce --json --impls "$impls" --max-bytes 65536 --iters 3)
status=$?
((status == 0)) || exit "$status"
echo "$out"
IFS=, read -r -a wanted <<<"$impls"
for impl in "${wanted[@]}"; do
  grep -q "^{\"link\":\"1gbit[_0-9a-z]*\",\"hosts\":2,\"ranks_per_host\":1,.*\"impl\":\"$impl\"" <<<"$out" ||
    { echo "smoke_test.sh: no JSON line for $impl" >&2; exit 1; }
done
