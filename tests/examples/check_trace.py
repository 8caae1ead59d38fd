#!/usr/bin/env python3
"""Checks a timeline written by a trainer's --trace against the Chrome trace-event format
that Perfetto and chrome://tracing load (the "JSON Object Format": a traceEvents list;
complete events "X" with ts and dur in microseconds, instant events "i", metadata "M"),
and that it holds what a data-parallel training step is made of.

usage: check_trace.py FILE --ranks N --updates K [--collective NAME] [--overlapped]

Every rank 0..N-1 must have a process name and a named training thread, and K of each of
data, forward, backward, optimizer and the gradient all-reduce wait on it, and at least K
of the gradients' collective (all_reduce, or NAME: reduce_scatter under sharded data
parallelism) on a communication thread or inline on the training thread; with
--overlapped, in each update at least one of them starts before that update's backward
ends (the exchange overlaps backward). Spans on one thread must nest (Perfetto draws
overlapping siblings wrongly). Standard library only."""
import argparse
import json
import sys
from collections import Counter, defaultdict

REQUIRED = {"X": {"name", "ph", "pid", "tid", "ts", "dur", "cat"},
            "i": {"name", "ph", "pid", "tid", "ts", "s"},
            "M": {"name", "ph", "pid", "args"}}
STEP_PARTS = ["data", "forward", "backward", "optimizer", "gradient all-reduce wait"]


def fail(message):
    print(f"check_trace: {message}")
    sys.exit(1)


def check_event(i, e):
    if not isinstance(e, dict):
        fail(f"event {i} is not an object")
    ph = e.get("ph")
    if ph not in REQUIRED:
        fail(f"event {i}: phase {ph!r}, expected one of {sorted(REQUIRED)}")
    missing = REQUIRED[ph] - e.keys()
    if missing:
        fail(f"event {i} ({ph}): missing {sorted(missing)}")
    if not isinstance(e["name"], str) or not isinstance(e["pid"], int):
        fail(f"event {i}: name must be a string and pid an integer")
    if ph in ("X", "i"):
        if not isinstance(e["tid"], int) or not isinstance(e["ts"], (int, float)) or e["ts"] < 0:
            fail(f"event {i}: tid must be an integer and ts a number >= 0, got {e['tid']!r}, {e['ts']!r}")
    if ph == "X" and (not isinstance(e["dur"], (int, float)) or e["dur"] < 0):
        fail(f"event {i}: dur must be a number >= 0, got {e['dur']!r}")
    if ph == "i" and e["s"] not in ("t", "p", "g"):
        fail(f"event {i}: instant scope {e['s']!r}, expected t, p or g")


def check_nesting(spans):
    # Sorted by start, longest first: each span must end within the one that encloses it.
    for key, items in spans.items():
        stack = []
        for start, end, name in sorted(items, key=lambda s: (s[0], -s[1])):
            while stack and stack[-1][1] <= start:
                stack.pop()
            if stack and end > stack[-1][1] + 1e-3:
                fail(f"pid {key[0]} tid {key[1]}: '{name}' [{start}, {end}] overlaps '{stack[-1][2]}' "
                     f"[{stack[-1][0]}, {stack[-1][1]}] without nesting")
            stack.append((start, end, name))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("file")
    parser.add_argument("--ranks", type=int, required=True)
    parser.add_argument("--updates", type=int, required=True)
    parser.add_argument("--collective", default="all_reduce")
    parser.add_argument("--overlapped", action="store_true")
    args = parser.parse_args()
    try:
        with open(args.file) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        fail(f"{args.file}: not readable JSON ({e})")
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        fail(f"{args.file}: expected an object with a traceEvents list")
    events = doc["traceEvents"]
    for i, e in enumerate(events):
        check_event(i, e)

    process_names = {e["pid"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"].get("name") for e in events
               if e["ph"] == "M" and e["name"] == "thread_name"}
    counts = Counter()
    reduces = Counter()
    starts = defaultdict(list)  # rank -> start times of the gradients' collective
    backwards = defaultdict(list)  # rank -> (start, end) of each backward on the training thread
    spans = defaultdict(list)
    for e in events:
        if e["ph"] != "X":
            continue
        spans[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"], e["name"]))
        thread = threads.get((e["pid"], e["tid"]))
        if thread == "training":
            counts[(e["pid"], e["name"])] += 1
            if e["name"] == "backward":
                backwards[e["pid"]].append((e["ts"], e["ts"] + e["dur"]))
        if e["name"] == args.collective:
            reduces[e["pid"]] += 1
            starts[e["pid"]].append(e["ts"])
    for rank in range(args.ranks):
        if rank not in process_names:
            fail(f"rank {rank} has no process_name event")
        if "training" not in {name for (pid, _), name in threads.items() if pid == rank}:
            fail(f"rank {rank} has no thread named 'training'")
        for part in STEP_PARTS:
            if counts[(rank, part)] != args.updates:
                fail(f"rank {rank}: {counts[(rank, part)]} '{part}' spans on the training thread, "
                     f"expected {args.updates}")
        if reduces[rank] < args.updates:
            fail(f"rank {rank}: {reduces[rank]} {args.collective} spans, expected at least {args.updates}")
        if args.overlapped:
            for begin, end in backwards[rank]:
                if not any(begin <= t < end for t in starts[rank]):
                    fail(f"rank {rank}: no {args.collective} starts inside the backward at [{begin}, {end}]: "
                         "the exchange does not overlap backward")
    check_nesting(spans)
    print(f"check_trace: {args.file}: {len(events)} events of {args.ranks} rank(s), {args.updates} update(s) each, "
          "in the Chrome trace-event format")
    return 0


if __name__ == "__main__":
    sys.exit(main())
