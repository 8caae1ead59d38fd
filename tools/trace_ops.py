#!/usr/bin/env python3
"""Where a training step's time goes, per op, from dtrain's own trace.

  tools/trace_ops.py TRACE.json [--pid N] [--top K]

TRACE.json is a timeline from --trace FILE --trace-steps A-B (train_gpt, train_mnist, ...).
While recording, autograd writes one event per forward op ("op forward": from the previous
op's end to the moment the op made its graph node, so glue code between ops counts to the
op after it) and one per backward node ("op backward": the node's gradient function). Their
names are the functions that wrote the ops' gradients (matmul, fused_layer_norm, ...). The
optimizer, data and communication phases come from the phase spans. Prints a Markdown table
of milliseconds per traced step, forward and backward, and each row's share of the steps'
time (the phase spans' sum), largest first; the rest of the forward and backward phases
(work outside any op: the loss's reduction, the engine's bookkeeping) is its own row.
"""
import argparse
import collections
import json
import sys

PHASES = ("data", "forward", "backward", "communication", "optimizer")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("trace")
    p.add_argument("--pid", type=int, default=None, help="the rank to tabulate (default: the first in the file)")
    p.add_argument("--top", type=int, default=25, help="rows before the rest are summed into one")
    a = p.parse_args()
    try:
        with open(a.trace) as f:
            events = json.load(f)["traceEvents"]
    except (OSError, ValueError, KeyError) as e:
        sys.exit(f"trace_ops: {a.trace}: not a Chrome trace-event document ({e})")
    spans = [e for e in events if e.get("ph") == "X"]
    if a.pid is None:
        if not spans:
            sys.exit(f"trace_ops: {a.trace}: no spans recorded")
        a.pid = spans[0]["pid"]
    spans = [e for e in spans if e["pid"] == a.pid]
    ops = [e for e in spans if e.get("cat") in ("op forward", "op backward")]
    if not ops:
        sys.exit(f"trace_ops: {a.trace}: rank {a.pid} has no op events (a trace from before per-op recording?)")

    # The training thread: the one with the forward spans. Phase time from its outermost spans.
    train_tid = next(e["tid"] for e in ops if e["cat"] == "op forward")
    phase_ms = collections.Counter()
    steps = 0
    for e in spans:
        if e["tid"] == train_tid and e.get("cat") in PHASES:
            phase_ms[e["cat"]] += e["dur"] / 1e3
            steps += e["cat"] == "forward" and e["name"] == "forward"
    steps = max(steps, 1)
    total = sum(phase_ms.values())

    fwd, bwd = collections.Counter(), collections.Counter()
    for e in ops:
        if e["tid"] != train_tid:
            continue
        (fwd if e["cat"] == "op forward" else bwd)[e["name"]] += e["dur"] / 1e3
    rows = [(n, fwd[n], bwd[n]) for n in set(fwd) | set(bwd)]
    rows.sort(key=lambda r: -(r[1] + r[2]))
    if len(rows) > a.top:
        rest = rows[a.top:]
        rows = rows[:a.top] + [(f"{len(rest)} other ops", sum(r[1] for r in rest), sum(r[2] for r in rest))]
    outside = ("forward and backward outside ops", max(phase_ms["forward"] - sum(fwd.values()), 0.0),
               max(phase_ms["backward"] - sum(bwd.values()), 0.0))
    rows.append(outside)
    print(f"{a.trace}: rank {a.pid}, {steps} traced steps, {total / steps:.1f} ms per step")
    print()
    print("| op | forward ms | backward ms | total ms | share |")
    print("|---|---|---|---|---|")
    share = lambda ms: f"{100 * ms / max(total, 1e-9):.1f}%"
    for name, f, b in rows:
        print(f"| {name} | {f / steps:.1f} | {b / steps:.1f} | {(f + b) / steps:.1f} | {share(f + b)} |")
    for phase in ("optimizer", "communication", "data"):
        if phase_ms[phase] > 0:
            print(f"| {phase} (phase) | | | {phase_ms[phase] / steps:.1f} | {share(phase_ms[phase])} |")


if __name__ == "__main__":
    main()
