#!/usr/bin/env python3
"""Checks the structure of a timeline written by a trainer's --trace, in the Chrome
trace-event format that Perfetto and chrome://tracing load (the "JSON Object Format": a
traceEvents list; complete events "X" with ts and dur in microseconds, instant events "i",
metadata "M"; dtrain writes no begin/end pairs), and that it holds what a data-parallel
training step is made of. Perfetto's own loader is not run: PyPI's perfetto package
downloads its trace processor at run time.

usage: check_trace.py FILE --ranks N --updates K [--collective NAME] [--overlapped]

Structure: valid JSON whose events have their phase's fields with the right types and
times >= 0; one process per rank 0..N-1 (pid = rank, named once, "... <rank>"), and no
events outside them; every thread with events named, one of them "training" per rank; on
each thread (pid, tid) the events in file order end in time order (each is recorded as it
ends), and spans nest (Perfetto draws overlapping siblings wrongly). Content: K of each of
data, forward, backward, optimizer and the gradient all-reduce wait on each training
thread, and at least K of the gradients' collective (all_reduce, or NAME: reduce_scatter
under sharded data parallelism) on a communication thread or inline on the training
thread; with --overlapped, in each update at least one of them starts before that update's
backward ends (the exchange overlaps backward). Standard library only."""
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
    if ph == "M" and not isinstance(e["args"], dict):
        fail(f"event {i}: metadata arguments must be an object, got {e['args']!r}")
    if ph == "M" and e["name"] == "thread_name" and not isinstance(e.get("tid"), int):
        fail(f"event {i}: thread_name without an integer tid")


def check_tracks(events, ranks):
    """One named process per rank, a name for every thread with events, and on each thread
    events that end in file order: the writer records each event as it ends."""
    names = defaultdict(list)
    for e in events:
        if e["ph"] == "M" and e["name"] == "process_name":
            names[e["pid"]].append(str(e["args"].get("name")))
    if sorted(names) != list(range(ranks)):
        fail(f"processes {sorted(names)}, expected one per rank 0..{ranks - 1}")
    for pid, named in names.items():
        if len(named) != 1 or not named[0].endswith(f" {pid}"):
            fail(f"pid {pid}: process names {named}, expected one ending in its rank")
    threads = defaultdict(list)
    for e in events:
        if e["ph"] == "M" and e["name"] == "thread_name":
            threads[(e["pid"], e["tid"])].append(e["args"].get("name"))
    for rank in range(ranks):
        training = [key for key, named in threads.items() if key[0] == rank and "training" in named]
        if len(training) != 1:
            fail(f"rank {rank}: {len(training)} threads named 'training', expected one")
    last_end = {}
    for i, e in enumerate(events):
        if e["ph"] == "M":
            continue
        key = (e["pid"], e["tid"])
        if e["pid"] not in names:
            fail(f"event {i} ('{e['name']}'): pid {e['pid']} is no rank's process")
        if len(threads.get(key, [])) != 1:
            fail(f"event {i} ('{e['name']}'): pid {e['pid']} tid {e['tid']} has thread names {threads.get(key, [])}, "
                 "expected one")
        end = e["ts"] + e.get("dur", 0)
        # ts and dur are each rounded to the nanosecond: allow two of that.
        if key in last_end and end < last_end[key][0] - 2e-3:
            fail(f"pid {key[0]} tid {key[1]}: event {i} ('{e['name']}') ends at {end}, before event "
                 f"{last_end[key][1]} that precedes it on the thread ({last_end[key][0]})")
        last_end[key] = (end, i)


def check_nesting(spans):
    # Sorted by start, longest first: each span must end within the one that encloses it.
    for key, items in spans.items():
        stack = []
        for start, end, name in sorted(items, key=lambda s: (s[0], -s[1])):
            while stack and stack[-1][1] <= start + 1e-3:  # times are printed to the nanosecond
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
    check_tracks(events, args.ranks)

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
          "well-formed Chrome trace events on one process per rank")
    return 0


if __name__ == "__main__":
    sys.exit(main())
