#!/usr/bin/env bash
# Reruns the command of one row of docs/PERFORMANCE.md into a new raw file.
#   bench/reproduce.sh ID          run row ID's command from the repository root
#   bench/reproduce.sh --dry-run ID  print what would run and where its output would go
#   bench/reproduce.sh --list      the row ids and their raw files
# The command comes from the row's definition (docs/performance/rows.toml, read by
# tools/check_performance.py --command), so that stays the one place that says how a
# figure was made. The output (stdout and stderr, after the provenance line of
# bench/provenance.sh and a header with the command and the load) goes to bench/results/reproduce/ID-<UTC time>.txt; a command that takes
# a raw-file path gets the same name through its {out} placeholder ({out}.jsonl). Nothing
# already in bench/results/ is overwritten by this script, but the peer drivers
# run_ddp_comparison.sh, run_pipeline_comparison.sh and run_tf_comparison.sh write their own
# fixed files there (git shows the difference), with the same provenance line. Then point the
# row's raw file at the new file (docs/performance/rows.toml), commit, and run
# python3 tools/check_performance.py --write (docs/PERFORMANCE.md, "Adding or refreshing a row").
# Benchmarks want a quiet machine: on 2 shared vCPUs anything else running moves the figures.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
checker=(python3 "$root/tools/check_performance.py" --root "$root")
dry=0
case "${1:-}" in
  --list) exec "${checker[@]}" --list ;;
  --dry-run) dry=1; shift ;;
  -h|--help|"") sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; [ -n "${1:-}" ]; exit $? ;;
esac
[ $# -eq 1 ] || { echo "reproduce: expected one row id (bench/reproduce.sh --list lists them)" >&2; exit 2; }
id=$1
command=$("${checker[@]}" --command "$id") || exit $?

stamp=$(date -u +%Y%m%dT%H%M%SZ)
out_dir=$root/bench/results/reproduce
out=$out_dir/$id-$stamp
command=${command//\{out\}/$out}
if [[ $command == *'$BEFORE_BUILD'* ]]; then
  # A before/after row: the caller names the build of the commit before.
  if [ $dry -eq 0 ] && [ -z "${BEFORE_BUILD:-}" ]; then
    echo "reproduce: row $id compares two builds: set BEFORE_BUILD to a release build of the commit before" >&2
    exit 2
  fi
  command=${command//\$BEFORE_BUILD/${BEFORE_BUILD:-\$BEFORE_BUILD}}
fi

if [ $dry -eq 1 ]; then
  echo "row:     $id"
  echo "command: $command"
  echo "output:  $out.txt"
  exit 0
fi

mkdir -p "$out_dir"
cd "$root"
{
  bash "$root/bench/provenance.sh" "" "bench/reproduce.sh $id"  # first line: what tools/check_performance.py reads
  echo "# bench/reproduce.sh $id"
  echo "# command: $command"
  echo "# commit: $(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet HEAD -- 2>/dev/null || echo -dirty); date: $(date -u +%Y-%m-%dT%H:%MZ)"
  echo "# machine: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $(nproc) hardware threads; load $(cut -d' ' -f1-3 /proc/loadavg)"
} > "$out.txt"
echo "reproduce: running row $id; output in ${out#"$root"/}.txt" >&2
status=0
bash -c "$command" >> "$out.txt" 2>&1 || status=$?
echo "# exit $status" >> "$out.txt"
echo "reproduce: exit $status; now compare row $id of docs/PERFORMANCE.md with ${out#"$root"/}.txt" >&2
exit $status
