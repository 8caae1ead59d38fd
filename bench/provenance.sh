#!/usr/bin/env bash
# The provenance header of a raw file in bench/results/ (docs/PERFORMANCE.md, "Adding or
# refreshing a row"): tools/check_performance.py reads a row's commit, date, machine and peer
# versions from it, so every bench and peer script that writes bench/results/ writes it first.
#   source bench/provenance.sh
#   provenance_text [PEERS] [NOTE]   -> # dtrain-provenance: {"commit": ..., ...}   (text files)
#   provenance_json [PEERS] [NOTE]   -> {"provenance": {...}}                      (JSON-lines files)
#   bench/provenance.sh [--json] [PEERS] [NOTE]   the same from the command line
# commit: the short hash of HEAD, "-dirty" when the tree differs from it (bench/results/ and
# docs/ left out: a run rewrites its own results); date: UTC day; machine: "Intel Xeon" or
# "AMD EPYC" (else the CPU's model name), N vCPUs; PEERS: versions, e.g. "torch 2.15.0".
provenance_fields() {
  local root commit cpu family
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo "")
  if [ -n "$commit" ] && ! git -C "$root" diff --quiet HEAD -- . ':!bench/results' ':!docs' 2>/dev/null; then
    commit="$commit-dirty"
  fi
  cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
  case "$cpu" in
    *Xeon*) family="Intel Xeon" ;;
    *EPYC*) family="AMD EPYC" ;;
    *) family=$cpu ;;
  esac
  python3 - "$commit" "$(date -u +%Y-%m-%d)" "$family, $(nproc) vCPUs" "${1:-}" "${2:-}" <<'PY'
import json, sys
commit, date, machine, peers, note = sys.argv[1:6]
fields = {"commit": commit or None, "date": date, "machine": machine}
if peers:
    fields["peers"] = peers
if note:
    fields["note"] = note
print(json.dumps(fields, ensure_ascii=False))
PY
}
provenance_text() { echo "# dtrain-provenance: $(provenance_fields "$@")"; }
provenance_json() { echo "{\"provenance\": $(provenance_fields "$@")}"; }

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  if [ "${1:-}" = "--json" ]; then shift; provenance_json "$@"; else provenance_text "$@"; fi
fi
