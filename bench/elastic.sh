#!/usr/bin/env bash
# bench/elastic.sh: the elastic launcher's matrix (issue 60; docs/ELASTIC.md). For each layout
# (data parallel, ZeRO-2, a 2-stage pipeline, tensor parallel 2), 4 ranks on 2 fake hosts
# (DTRAIN_HOST_ID; one machine), --reps times each:
#   whole:   the job under the launcher, undisturbed;
#   elastic: host b's ranks killed (SIGKILL, DTRAIN_FAULT=kill-host-at-step) mid-epoch; the
#            launcher relaunches on host a's 2 ranks from the newest checkpoint; host b
#            comes back once the job has applied 10 updates on a (the discovery script
#            tests/examples/elastic_hosts.sh, a condition on progress) and the job grows
#            back to 4 ranks at its next checkpoint.
# Prints one row per run: exit status, the final figure (test accuracy, or train_gpt's
# validation loss) and its distance to the median of the whole runs, the sample-log audit
# (every sample of every epoch in exactly one applied update), the updates redone, and the
# times from the failure to the first update at 2 ranks and from the stop for growing to
# the first update at 4 (the launcher's records against the sample log's clock).
#
# --netns: the 2 hosts are network namespaces joined by a 10 Gbit/s link with 50 us latency
# (bench/netns/run_netns.sh --controller: the launcher places each host's ranks in its
# namespace; every byte between ranks goes over TCP), instead of labels on one machine.
#
#   bench/elastic.sh [--reps R] [--layouts "dp zero2 pp2 tp2"] [--netns] [--out FILE]
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

reps=3 layouts="dp zero2 pp2 tp2" out="" netns=()
while [ $# -gt 0 ]; do
  case "$1" in
    --reps) reps="$2"; shift 2 ;;
    --layouts) layouts="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --netns) netns=(bench/netns/run_netns.sh --hosts 2 --ranks-per-host 2 --links 10gbit --controller --); shift ;;
    *) echo "elastic.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
bin=build/release/examples
[ -x $bin/train_mnist ] && [ -x $bin/train_gpt ] || { echo "elastic.sh: build first (cmake --build --preset release)" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
source bench/provenance.sh
[ -n "$out" ] && exec > >(tee "$out")
provenance_text "" "4 ranks on 2 $([ ${#netns[@]} -gt 0 ] && echo "network namespaces (10gbit, 50us)" || echo "fake hosts (one machine)"), checkpoints every 20 updates"

# Fashion-MNIST's MLP on all 60000 images (625 updates of 96 per epoch, 3 epochs) and the
# whole test set; train_gpt's small model on the fortunes, 300 steps.
mnist=($bin/train_mnist --model mlp --hidden 256,256 --epochs 3 --batch-size 96 --threads 1 --timeout 60
       --no-rollback --progress none)
gpt=($bin/train_gpt --data /usr/share/games/fortunes --layers 2 --heads 4 --embd 64 --block-size 64
     --global-batch-size 12 --dropout 0 --steps 300 --warmup-steps 20 --eval-every 300 --eval-windows 200
     --log-every 100 --sample 0 --threads 1 --timeout 60 --no-rollback --progress none)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

run() {  # layout kind rep
  local layout=$1 kind=$2 rep=$3 dir="$work/$1-$2-$3"
  local program=() multiple=1 kill_step=200
  case "$layout" in
    dp) program=("${mnist[@]}") ;;
    zero2) program=("${mnist[@]}" --optimizer adam --parallel zero=2) ;;
    pp2) program=("${mnist[@]}" --parallel pp=2,micro=2); multiple=2 ;;
    tp2) program=("${gpt[@]}" --parallel tp=2); multiple=2; kill_step=50 ;;
  esac
  program+=(--checkpoint-dir "$dir/ckpt" --checkpoint-every 20 --sample-log "$dir/samples")
  local fault=(env) launch=(scripts/dtrain-launch --np 2:4 --np-multiple $multiple --fake-hosts --cooldown 0
                          --restart-delay 0 --discovery-interval 0.2 --max-restarts 1)
  if [ "$kind" = elastic ]; then
    fault=(env DTRAIN_FAULT=kill-host-at-step:1:$kill_step)
    launch+=(--host-discovery "sh $root/tests/examples/elastic_hosts.sh $dir/ckpt/launch $dir/samples")
  else
    launch+=(--hosts a:2,b:2)
  fi
  local start status=0
  start=$(date +%s.%N)
  "${netns[@]}" "${fault[@]}" "${launch[@]}" -- "${program[@]}" >"$dir.log" 2>&1 || status=$?
  python3 - "$layout" "$kind" "$rep" "$status" "$start" "$dir" <<'PY'
import json, pathlib, re, subprocess, sys, time
layout, kind, rep, status, start, d = sys.argv[1:7]
wall = time.time() - float(start)
d = pathlib.Path(d)
log = pathlib.Path(str(d) + ".log").read_text(errors="replace")
acc = re.findall(r"final test accuracy: ([0-9.]+)%", log)
val = re.findall(r"val loss ([0-9.]+)", log)
figure = float(acc[-1]) if acc else (float(val[-1]) if val else None)
audit = subprocess.run([sys.executable, "tools/check_sample_log.py", str(d / "samples")], capture_output=True, text=True)
redone = re.search(r"([0-9]+) redone", audit.stdout)
records = {int(p.stem.split("-")[1]): json.loads(p.read_text()) for p in (d / "ckpt/launch").glob("attempt-*.json")}
def first_update(attempt):
    times = []
    for p in (d / "samples").glob(f"attempt-{attempt}-rank-*.txt"):
        lines = [l for l in p.read_text().splitlines() if not l.startswith("#")]
        if lines:
            times.append(float(lines[0].split()[3]))
    return min(times) if times else None
def gap(a):
    t = first_update(a + 1)
    return round(t - records[a]["ended"], 2) if a in records and "ended" in records[a] and t else None
row = {"layout": layout, "kind": kind, "rep": int(rep), "exit": int(status), "figure": figure,
       "figure_kind": "test accuracy %" if acc else "val loss", "audit_ok": audit.returncode == 0,
       "redone": int(redone.group(1)) if redone else None, "attempts": len(records),
       "ranks": [len(records[a]["ranks"]) for a in sorted(records)],
       "failure_to_first_update_s": gap(0) if kind == "elastic" else None,
       "stop_to_first_update_grown_s": gap(1) if kind == "elastic" else None, "wall_s": round(wall, 1)}
print(json.dumps(row), flush=True)
PY
  rm -rf "$dir"
}

for layout in $layouts; do
  for ((rep = 1; rep <= reps; rep++)); do
    # Alternating, so that drift of the machine falls on both kinds alike.
    run "$layout" whole "$rep"
    run "$layout" elastic "$rep"
  done
done | tee "$work/rows.jsonl"
python3 - "$work/rows.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
print("layout  whole (median)  elastic (median)  delta  audits  redone  failure->2 ranks s  stop->4 ranks s  exits")
for layout in dict.fromkeys(r["layout"] for r in rows):
    w = [r["figure"] for r in rows if r["layout"] == layout and r["kind"] == "whole" and r["figure"] is not None]
    e = [r for r in rows if r["layout"] == layout and r["kind"] == "elastic"]
    ef = [r["figure"] for r in e if r["figure"] is not None]
    med = lambda v: statistics.median(v) if v else float("nan")
    gaps = lambda k: med([r[k] for r in e if r[k] is not None])
    print(f"{layout:6}  {med(w):14.3f}  {med(ef):16.3f}  {med(ef) - med(w):+.3f}  "
          f"{sum(r['audit_ok'] for r in e)}/{len(e)}  {med([r['redone'] for r in e if r['redone'] is not None]):6}  "
          f"{gaps('failure_to_first_update_s'):18.2f}  {gaps('stop_to_first_update_grown_s'):15.2f}  "
          f"{sorted(set(r['exit'] for r in rows if r['layout'] == layout))}")
PY
