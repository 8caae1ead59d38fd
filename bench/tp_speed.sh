#!/usr/bin/env bash
# Tensor parallelism's speed on this machine: train_gpt --parallel tp=N against PyTorch's DTensor
# tensor parallelism (bench/peers/pytorch_tp.py, gloo) on the same GPT and data, 1 thread per
# process. Model (--model): small = gpt_speed.sh's (4 layers, 4 heads, width 128, block 64,
# global batch 12, bytes of the fortunes); wide = 4 layers, 8 heads, width 256 (TP splits
# bigger matmuls). REPS alternating repetitions (default 5) of every side; medians over them,
# ratios taken within a repetition (the same machine load) and their median printed.
#
# Sides (every process has 1 intra-op thread; the machine's vCPUs bound what N processes get):
#   dtrain tp1     train_gpt --threads 1 (one process)
#   dtrain pair    two one-process train_gpt runs at once: the machine's two-process capacity
#                  = their summed tokens/s over "dtrain tp1" of the same repetition (2.0 on two
#                  free cores)
#   dtrain tp2     mpirun --allow-run-as-root --oversubscribe -np 2 train_gpt --parallel tp=2
#   dtrain tp2sp   the same with --parallel tp=2,sp (sequence parallelism)
#   dtrain tp4     -np 4 --bind-to none, --parallel tp=4 (oversubscribed when the machine has
#                  fewer than 4 vCPUs: recorded, not a scaling figure; --no-tp4 leaves it out)
#   torch tp1/tp2/tp2sp/tp4   pytorch_tp.py --tp N [--sp] (spawned processes over gloo), eager,
#                  and each again under torch.compile (sides ending in _c; --no-compile leaves
#                  them out): PyTorch's figure at a point is the better of the two in each
#                  repetition (the table says which won more often)
# Reported per side: median tokens/s (global: all ranks together) and peak RSS per rank; then
# speedup = tokens/s(tp=N) / tokens/s(tp=1) per side ("TP efficiency" at tp=2: 2.0 is
# perfect on two free cores), its ratio to the two-process capacity of the same repetition
# (the target: >= 0.8 at tp=2, and at least PyTorch's), and dtrain/PyTorch tokens/s at each
# point: all medians over the repetitions of ratios within one.
# dtrain's tokens/s: the median of train_gpt's "step N: ... tokens/s" lines after step 20 of 60
# (rank 0 prints them under mpirun; each repetition's line also shows the global batch over the
# median ms/step, a check that tokens/s counts the one batch the tp ranks share); PyTorch's: the median step of 40 timed after 5 untimed,
# each step as long as its slowest rank. Peak RSS: PyTorch's per rank from getrusage in each
# rank; dtrain's from train_gpt's output if it prints one ("peak RSS ... MB" per rank), else
# getrusage(RUSAGE_CHILDREN) of the launcher: for one process its maximum resident set, for
# an mpirun job the largest of the whole launched tree (mpirun itself or any rank), so a bound
# on the largest rank, not a per-rank figure.
# Validation (at the timed sizes): each tp run's logged losses (dtrain: steps 1, 10, 20, 30;
# PyTorch: steps 1-5) must agree with its tp=1 run of the same repetition (same seed, same
# windows): |difference| <= 2e-3 for dtrain's 4-decimal lines, 1e-4 relative for PyTorch;
# a mismatch is printed as such, and the script exits 1 at the end.
# The peer: eager and torch.compile (the compiled model after parallelize_module; ~30 s of
# compilation per run, outside the timed steps), OMP_NUM_THREADS=1 and --threads 1, so the
# OpenMP waiting policy has no worker threads to act on; gloo's threads are its own.
# If the build's train_gpt does not take --parallel tp=2 yet (an 8-step preflight fails), the
# dtrain tp sides are left out with a message and the rest runs.
#   bench/tp_speed.sh [BUILD_DIR] [--reps N] [--model small|wide] [--raw FILE] [--no-tp4]
#                     [--no-dtrain] [--no-peer] [--no-compile] [--quick]
# --quick: 1 repetition of short runs (checks the script; its figures mean little).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build/release
reps=5
model=small
raw=
tp4=1
run_dtrain=1
run_peer=1
peer_compile=1
quick=0
while [ $# -gt 0 ]; do
  case "$1" in
    --reps) reps=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    --raw) raw=$2; shift 2 ;;
    --no-tp4) tp4=0; shift ;;
    --no-dtrain) run_dtrain=0; shift ;;
    --no-peer) run_peer=0; shift ;;
    --no-compile) peer_compile=0; shift ;;
    --quick) quick=1; reps=1; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) build=$(cd "$1" && pwd); shift ;;
  esac
done
case $model in
  small) layers=4; heads=4; embd=128 ;;
  wide) layers=4; heads=8; embd=256 ;;
  *) echo "tp_speed.sh: --model small or wide" >&2; exit 2 ;;
esac
block=64
batch=12
[ -n "$raw" ] || raw=$root/bench/results/tp_speed$([ "$model" = small ] || echo "_$model").txt
dsteps=60; dskip=20; tsteps=40
if [ "$quick" = 1 ]; then dsteps=30; dskip=10; tsteps=8; fi
python=${PYTHON:-$root/.venv/bin/python}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tok=$work/bytes.tok
"$build/examples/dtrain-tokenize" encode --tokenizer bytes --out "$tok" /usr/share/games/fortunes > /dev/null
source "$root/bench/provenance.sh"
peer=$("$python" -c 'import torch; print(f"torch {torch.__version__}")')
mkdir -p "$(dirname "$raw")"
provenance_text "$peer" "bench/tp_speed.sh --model $model --reps $reps$([ "$quick" = 1 ] && echo ' --quick')" > "$raw"
echo "# model $model: $layers layers, $heads heads, width $embd, block $block, global batch $batch; 1 thread per process; $(nproc) vCPUs" | tee -a "$raw"
runs=$work/runs.jsonl
: > "$runs"

mpi=(mpirun --allow-run-as-root --oversubscribe)
gpt=("$build/examples/train_gpt" --data "$tok" --tokenizer bytes --layers "$layers" --heads "$heads" --embd "$embd"
     --block-size "$block" --global-batch-size "$batch" --bias false --dropout 0 --warmup-steps 5
     --eval-windows 1 --log-every 10 --sample 0 --threads 1)
long=(--steps "$dsteps" --eval-every "$dsteps")
# Runs a command; prints its stdout and stderr, then "maxrss_kb N" (getrusage of the children).
measured() { python3 -c '
import resource, subprocess, sys
r = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
sys.stdout.write(r.stdout)
print("maxrss_kb", resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
print("exit", r.returncode)' "$@"; }
# Reads train_gpt output on stdin: one JSON object (tokens/s median after step dskip, losses of
# the logged steps, rss).
dtrain_json() { python3 -c '
import json, re, statistics, sys
side, rep, skip, tokens = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
text = sys.stdin.read()
tps, losses, step_ms = [], {}, []
for m in re.finditer(r"^step (\d+): train loss ([0-9.naninf]+).*?(?:(\d+) ms/step, )?(\d+) tokens/s", text, re.M):
    step = int(m.group(1))
    losses[step] = float(m.group(2))
    if step > skip:
        tps.append(float(m.group(4)))
        if m.group(3):
            step_ms.append(float(m.group(3)))
rss = [float(x) for x in re.findall(r"peak (?:RSS|resident)[^0-9\n]*([0-9.]+) ?MB", text, re.I)]
maxrss = re.search(r"^maxrss_kb (\d+)", text, re.M)
code = re.search(r"^exit (-?\d+)", text, re.M)
rec = {"side": side, "rep": rep, "tokens_per_s": statistics.median(tps) if tps else None, "losses": losses,
       "rss_mb": rss or None, "maxrss_mb": int(maxrss.group(1)) / 1024 if maxrss else None,
       "exit": int(code.group(1)) if code else None}
if tps and step_ms:  # tokens/s must be the global batch over the step (tensor-parallel ranks share one batch)
    rec["tokens_per_s_from_step_ms"] = tokens / (statistics.median(step_ms) / 1e3)
if not tps:
    rec["tail"] = text.strip().splitlines()[-3:]
print(json.dumps(rec))' "$@"; }
torch_json() { python3 -c '
import json, re, sys
side, rep = sys.argv[1], int(sys.argv[2])
text = sys.stdin.read()
rec = {"side": side, "rep": rep, "tokens_per_s": None}
for line in text.splitlines():
    if line.startswith("{\"peer\""):
        r = json.loads(line)
        rec.update(tokens_per_s=r["tokens_per_s"], rss_mb=r["peak_rss_mb"], losses=dict(enumerate(r["losses"], 1)),
                   tied=r["tied"], step_ms_median=r["step_ms_median"])
if rec["tokens_per_s"] is None:
    rec["tail"] = text.strip().splitlines()[-3:]
print(json.dumps(rec))' "$@"; }

dtrain_sides=()
torch_sides=()
if [ "$run_dtrain" = 1 ]; then
  dtrain_sides=(dtrain_tp1 dtrain_pair)
  if "${mpi[@]}" -np 2 "${gpt[@]}" --steps 8 --eval-every 8 --parallel tp=2 > "$work/preflight.txt" 2>&1; then
    dtrain_sides+=(dtrain_tp2 dtrain_tp2sp)
    [ "$tp4" = 1 ] && dtrain_sides+=(dtrain_tp4)
  else
    echo "# dtrain tp sides left out: 'train_gpt --parallel tp=2' failed in an 8-step preflight: $(grep -m1 -i error "$work/preflight.txt" || tail -1 "$work/preflight.txt")" | tee -a "$raw"
  fi
fi
if [ "$run_peer" = 1 ]; then
  torch_sides=(torch_tp1 torch_tp2 torch_tp2sp)
  [ "$tp4" = 1 ] && torch_sides+=(torch_tp4)
  if [ "$peer_compile" = 1 ]; then
    for s in "${torch_sides[@]}"; do torch_sides+=("${s}_c"); done
  fi
fi

for rep in $(seq 1 "$reps"); do
  for side in "${dtrain_sides[@]}" "${torch_sides[@]}"; do
    case $side in
      dtrain_tp1)
        measured "${gpt[@]}" "${long[@]}" | dtrain_json "$side" "$rep" "$dskip" "$((batch * block))" >> "$runs" ;;
      dtrain_pair)
        measured "${gpt[@]}" "${long[@]}" > "$work/pair0.txt" &
        p0=$!
        measured "${gpt[@]}" "${long[@]}" > "$work/pair1.txt"
        wait "$p0"
        a=$(dtrain_json pair0 "$rep" "$dskip" "$((batch * block))" < "$work/pair0.txt")
        b=$(dtrain_json pair1 "$rep" "$dskip" "$((batch * block))" < "$work/pair1.txt")
        python3 -c '
import json, sys
a, b = json.loads(sys.argv[1]), json.loads(sys.argv[2])
ok = a["tokens_per_s"] is not None and b["tokens_per_s"] is not None
print(json.dumps({"side": "dtrain_pair", "rep": a["rep"], "tokens_per_s": a["tokens_per_s"] + b["tokens_per_s"] if ok else None,
                  "each": [a["tokens_per_s"], b["tokens_per_s"]], "maxrss_mb": max(a["maxrss_mb"] or 0, b["maxrss_mb"] or 0),
                  "losses": a["losses"]}))' "$a" "$b" >> "$runs" ;;
      dtrain_tp2)
        measured "${mpi[@]}" -np 2 "${gpt[@]}" "${long[@]}" --parallel tp=2 | dtrain_json "$side" "$rep" "$dskip" "$((batch * block))" >> "$runs" ;;
      dtrain_tp2sp)
        measured "${mpi[@]}" -np 2 "${gpt[@]}" "${long[@]}" --parallel tp=2,sp | dtrain_json "$side" "$rep" "$dskip" "$((batch * block))" >> "$runs" ;;
      dtrain_tp4)
        measured "${mpi[@]}" --bind-to none -np 4 "${gpt[@]}" "${long[@]}" --parallel tp=4 | dtrain_json "$side" "$rep" "$dskip" "$((batch * block))" >> "$runs" ;;
      torch_*)
        n=${side#torch_tp}
        flags=()
        if [ "${n%_c}" != "$n" ]; then n=${n%_c}; flags+=(--compile); fi
        flags+=(--tp "${n%sp}")
        [ "${n%sp}" != "$n" ] && flags+=(--sp)
        env OMP_NUM_THREADS=1 "$python" "$root/bench/peers/pytorch_tp.py" --tokens "$tok" --vocab 256 --layers "$layers" \
            --heads "$heads" --embd "$embd" --block-size "$block" --global-batch-size "$batch" --threads 1 \
            --time-steps "$tsteps" --untimed-steps 5 "${flags[@]}" 2>&1 | torch_json "$side" "$rep" >> "$runs" || true ;;
    esac
    tail -1 "$runs" | python3 -c '
import json, sys
r = json.loads(sys.stdin.read())
t = "failed: " + " | ".join(r.get("tail", [])) if r["tokens_per_s"] is None else "tokens/s %.0f" % r["tokens_per_s"]
if r.get("each"): t += " (%s)" % " + ".join("%.0f" % x for x in r["each"])
if r.get("tokens_per_s_from_step_ms"): t += " [batch / ms/step: %.0f]" % r["tokens_per_s_from_step_ms"]
if r.get("rss_mb"): t += ", peak RSS per rank %s MB" % "/".join("%.0f" % x for x in r["rss_mb"])
elif r.get("maxrss_mb"): t += ", maxrss of the launched tree %.0f MB" % r["maxrss_mb"]
print("rep %d %s: %s" % (r["rep"], r["side"], t))' | tee -a "$raw"
  done
done

python3 - "$runs" "$(nproc)" <<'PY' | tee -a "$raw"
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
vcpus = int(sys.argv[2])
sides = []
for r in runs:
    if r["side"] not in sides:
        sides.append(r["side"])
by = {(r["side"], r["rep"]): r for r in runs}
reps = sorted({r["rep"] for r in runs})


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(x, f="%.0f"):
    return "-" if x is None else f % x


print("\nside            tokens/s median  (min-max)        peak RSS per rank (MB)")
for s in sides:
    v = [by[s, k]["tokens_per_s"] for k in reps if (s, k) in by and by[s, k]["tokens_per_s"] is not None]
    rss = [by[s, k].get("rss_mb") for k in reps if (s, k) in by and by[s, k].get("rss_mb")]
    if rss:
        mem = "/".join("%.0f" % med([r[i] for r in rss if i < len(r)]) for i in range(max(len(r) for r in rss)))
    else:
        m = med([by[s, k].get("maxrss_mb") for k in reps if (s, k) in by])
        mem = "-" if m is None else "%.0f (maxrss of the launched tree)" % m
    print("%-15s %9s        (%s-%s)   %s" % (s, fmt(med(v)), fmt(min(v) if v else None), fmt(max(v) if v else None), mem))


# PyTorch at a point: the better of eager and torch.compile in each repetition.
wins = {}
for p in ("tp1", "tp2", "tp2sp", "tp4"):
    for k in reps:
        cands = [by.get(("torch_" + p + suffix, k)) for suffix in ("", "_c")]
        cands = [r for r in cands if r and r["tokens_per_s"]]
        if cands:
            best = max(cands, key=lambda r: r["tokens_per_s"])
            by["torch_best_" + p, k] = best
            wins.setdefault(p, []).append("compile" if best["side"].endswith("_c") else "eager")


def ratio(a, b):
    """Median over the repetitions of side a's tokens/s over side b's (the same repetition)."""
    xs = []
    for k in reps:
        ra, rb = by.get((a, k)), by.get((b, k))
        if ra and rb and ra["tokens_per_s"] and rb["tokens_per_s"]:
            xs.append(ra["tokens_per_s"] / rb["tokens_per_s"])
    return med(xs)


cap = ratio("dtrain_pair", "dtrain_tp1")


def over_capacity(a, b):
    """Median over the repetitions of (a / b) / capacity, all of the same repetition: the
    machine's load moves both the speedup and the capacity."""
    xs = []
    for k in reps:
        ra, rb, p2, p1 = by.get((a, k)), by.get((b, k)), by.get(("dtrain_pair", k)), by.get(("dtrain_tp1", k))
        if all(r and r["tokens_per_s"] for r in (ra, rb, p2, p1)):
            xs.append(ra["tokens_per_s"] / rb["tokens_per_s"] / (p2["tokens_per_s"] / p1["tokens_per_s"]))
    return med(xs)
print("\ntwo-process capacity (two one-process dtrain runs at once, summed, over one alone): %s" % fmt(cap, "%.3f"))
print("\npoint     speedup over tp1: dtrain  torch   / capacity: dtrain  torch   dtrain/torch tokens/s"
      "   (torch: the better of eager and compile per repetition)")
for p in ("tp1", "tp2", "tp2sp", "tp4"):
    d, t = "dtrain_" + p, "torch_best_" + p
    if d not in sides and p not in wins:
        continue
    sd, st = ratio(d, "dtrain_tp1"), ratio(t, "torch_best_tp1")
    cd = over_capacity(d, "dtrain_tp1") if p != "tp1" else None
    ct = over_capacity(t, "torch_best_tp1") if p != "tp1" else None
    note = "  (%d processes on %d vCPUs)" % (4, vcpus) if p == "tp4" and vcpus < 4 else ""
    won = wins.get(p, [])
    if won:
        note += "  (torch: compile best in %d of %d)" % (won.count("compile"), len(won))
    print("%-9s %29s %6s %17s %6s   %s%s" % (p, fmt(sd, "%.3f"), fmt(st, "%.3f"), fmt(cd, "%.3f"), fmt(ct, "%.3f"),
                                          fmt(ratio(d, t), "%.3f"), note))

bad = 0
print("\nvalidation: logged losses of each tp run against tp1 of the same repetition")
for s in sides:
    if s.endswith("tp1") or s.endswith("pair") or s.startswith("torch_best"):
        continue
    base = ("dtrain_tp1" if s.startswith("dtrain") else "torch_tp1")
    tol_abs = s.startswith("dtrain")
    worst = None
    for k in reps:
        r, b = by.get((s, k)), by.get((base, k))
        if not r or not b or not r.get("losses") or not b.get("losses"):
            continue
        for step, x in r["losses"].items():
            y = b["losses"].get(step)
            if y is None or int(step) > 30:
                continue
            d = abs(x - y) if tol_abs else abs(x - y) / abs(y)
            worst = d if worst is None else max(worst, d)
    if worst is None:
        print("  %-12s no losses to compare" % s)
        continue
    ok = worst <= (2e-3 if tol_abs else 1e-4)
    bad += not ok
    print("  %-12s max %s difference %.2e  %s" % (s, "absolute" if tol_abs else "relative", worst, "ok" if ok else "MISMATCH"))
tied = {r.get("tied") for r in runs if r["side"].startswith("torch") and "tied" in r}
if False in tied:
    print("note: PyTorch ran with the embedding and lm_head untied")
sys.exit(1 if bad else 0)
PY
