#!/usr/bin/env python3
"""Reads a directory of TensorBoard event files with TensorBoard's own reader (the
EventAccumulator behind `tensorboard --logdir`) and checks that it holds exactly the
expected scalars: the tags, and per tag the (step, value) points in order, values compared
as the float32 that event files store.

With --metrics, the expected scalars are those of a trainer's --metrics file from the same
run: every number of each "epoch" line as epoch/NAME and the losses and accuracies of each
"evaluation" line as evaluation/NAME, at the line's step, and no other scalar of those
groups. The per-update train/loss and train/learning_rate, which the metrics file does not
hold, must be finite, at strictly increasing steps that include every epoch line's step.

usage: check_tensorboard.py DIR TAG@STEP=VALUE...
       check_tensorboard.py --metrics DIR METRICS_JSONL
Exits 77 (skipped) when the tensorboard package is missing, saying so, or 1 instead when
DTRAIN_REQUIRE_INTEROP is set (CI: scripts/install-deps.sh --tests installs it)."""
import json
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


# The fields of a metrics line that TensorBoard does not get as scalars: the x-axes, the
# wall clock, and an evaluation's seconds since the start. Other events ("summary": the
# run's totals) have no scalars.
NOT_SCALARS = {"epoch": {"event", "epoch", "step", "time"},
               "evaluation": {"event", "epoch", "step", "time", "seconds"}}
PER_UPDATE = ("train/loss", "train/learning_rate")


def main():
    from_metrics = len(sys.argv) > 1 and sys.argv[1] == "--metrics"
    if len(sys.argv) < 2 or (from_metrics and len(sys.argv) != 4):
        print(__doc__)
        return 2
    directory = sys.argv[2] if from_metrics else sys.argv[1]
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
    got = {tag: [(e.step, e.value) for e in accumulator.Scalars(tag)] for tag in accumulator.Tags()["scalars"]}
    if from_metrics:
        return check_against_metrics(directory, got, sys.argv[3])
    expected = {}
    for tag, step, value in (parse(p) for p in sys.argv[2:]):
        expected.setdefault(tag, []).append((step, value))
    return compare(directory, got, expected, "expected")


def compare(directory, got, expected, source):
    """Exactly the expected tags, each with the expected (step, value) points in order."""
    if sorted(got) != sorted(expected):
        print(f"{directory}: scalar tags {sorted(got)}, {source} {sorted(expected)} "
              f"(only in the event files: {sorted(set(got) - set(expected))}; "
              f"only expected: {sorted(set(expected) - set(got))})")
        return 1
    for tag, want in expected.items():
        if got[tag] != want:
            print(f"{directory}: '{tag}' has (step, value) points {got[tag]}, {source} {want}")
            return 1
    count = sum(len(w) for w in expected.values())
    print(f"{directory}: TensorBoard read the {count} scalars of {len(expected)} tags that {source}")
    return 0


def check_against_metrics(directory, got, path):
    expected = {}
    epoch_steps = []
    with open(path) as f:
        for line in f:
            record = json.loads(line)
            skip = NOT_SCALARS.get(record["event"])
            if skip is None:
                continue
            if record["event"] == "epoch":
                epoch_steps.append(int(record["step"]))
            for name, value in record.items():
                # Lists are a strategy's series (per-rank figures), which TensorBoard does not get.
                if name not in skip and not isinstance(value, list):
                    expected.setdefault(f"{record['event']}/{name}", []).append((int(record["step"]), as_float32(value)))
    if not epoch_steps:
        print(f"{path}: no epoch line")
        return 1
    per_epoch = {tag: points for tag, points in got.items() if tag.split("/")[0] in NOT_SCALARS}
    if compare(directory, per_epoch, expected, f"{path} holds"):
        return 1
    unknown = sorted(set(got) - set(per_epoch) - set(PER_UPDATE))
    if unknown:
        print(f"{directory}: scalars {unknown} that neither {path} nor the per-update tags {PER_UPDATE} account for")
        return 1
    for tag in PER_UPDATE:
        points = got.get(tag, [])
        steps = [step for step, _ in points]
        if any(b <= a for a, b in zip(steps, steps[1:])) or not set(epoch_steps) <= set(steps):
            print(f"{directory}: '{tag}' at steps {steps}: expected strictly increasing steps that include "
                  f"the epochs' {epoch_steps}")
            return 1
        if not all(math.isfinite(value) for _, value in points):
            print(f"{directory}: '{tag}' has points {points}, expected finite values")
            return 1
    print(f"{directory}: and {', '.join(PER_UPDATE)} have finite points at increasing steps "
          f"through each epoch's last ({epoch_steps})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
