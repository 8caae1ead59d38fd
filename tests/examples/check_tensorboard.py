#!/usr/bin/env python3
"""Reads a directory of TensorBoard event files with TensorBoard's own reader (the
EventAccumulator behind `tensorboard --logdir`) and checks that it holds exactly the
expected scalars: the tags, and per tag the (step, value) points in order, values compared
as the float32 that event files store.

usage: check_tensorboard.py DIR TAG@STEP=VALUE...
       check_tensorboard.py --has DIR TAG...   (each tag holds at least one finite point;
                                                 other tags may be there too)
Exits 77 (skipped) when the tensorboard package is missing, saying so, or 1 instead when
DTRAIN_REQUIRE_INTEROP is set (CI: scripts/install-deps.sh --tests installs it)."""
import math
import os
import struct
import sys


def as_float32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def parse(point):
    tag_step, value = point.rsplit("=", 1)
    tag, step = tag_step.rsplit("@", 1)
    return tag, int(step), as_float32(float(value))


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    has_only = sys.argv[1] == "--has"
    args = sys.argv[2:] if has_only else sys.argv[1:]
    directory = args[0]
    points = [] if has_only else [parse(p) for p in args[1:]]
    try:
        from tensorboard.backend.event_processing import event_accumulator
    except ImportError as e:
        if os.environ.get("DTRAIN_REQUIRE_INTEROP"):
            print(f"{sys.executable} cannot import tensorboard ({e}), and DTRAIN_REQUIRE_INTEROP is set: "
                  "run scripts/install-deps.sh --tests")
            return 1
        print(f"skipped: {sys.executable} cannot import tensorboard ({e}; scripts/install-deps.sh --tests)")
        return 77
    # Keep every scalar (the default keeps a reservoir sample of 10,000 per tag).
    accumulator = event_accumulator.EventAccumulator(directory, size_guidance={event_accumulator.SCALARS: 0})
    accumulator.Reload()
    if accumulator.file_version != 2.0:
        print(f"{directory}: file version {accumulator.file_version}, expected 2 (brain.Event:2)")
        return 1
    if has_only:
        return check_has(accumulator, directory, args[1:])
    expected = {}
    for tag, step, value in points:
        expected.setdefault(tag, []).append((step, value))
    tags = sorted(accumulator.Tags()["scalars"])
    if tags != sorted(expected):
        print(f"{directory}: scalar tags {tags}, expected {sorted(expected)}")
        return 1
    for tag, want in expected.items():
        got = [(e.step, e.value) for e in accumulator.Scalars(tag)]
        if got != want:
            print(f"{directory}: '{tag}' has (step, value) points {got}, expected {want}")
            return 1
    count = sum(len(w) for w in expected.values())
    print(f"{directory}: TensorBoard read the {count} expected scalars of {len(expected)} tags")
    return 0


def check_has(accumulator, directory, wanted):
    tags = set(accumulator.Tags()["scalars"])
    for tag in wanted:
        if tag not in tags:
            print(f"{directory}: no scalar '{tag}' (tags: {sorted(tags)})")
            return 1
        values = [e.value for e in accumulator.Scalars(tag)]
        if not values or not all(math.isfinite(v) for v in values):
            print(f"{directory}: '{tag}' has points {values}, expected finite values")
            return 1
    print(f"{directory}: TensorBoard read the {len(wanted)} expected tags ({len(tags)} in all)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
