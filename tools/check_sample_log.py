#!/usr/bin/env python3
"""Audits a run's sample log (train_* --sample-log DIR; src/train/sample_log.h).

Each rank of each attempt of a job (a restart, a relaunch on other hosts) wrote
attempt-<A>-rank-<R>.txt: one line per applied update, `<epoch> <global step> <update in
epoch> <unix time> <sample index>...`. An update that a later attempt redid (the job resumed from a
checkpoint taken before it) counts in the later attempt only: that is the run's final
lineage, the updates the final model is made of. In that lineage every epoch must take
every sample index of the dataset exactly once, except the sampler's padding: when the
dataset's size is not a multiple of the number of shards, the epoch's last update repeats
up to shards - 1 samples (as PyTorch's DistributedSampler does), whatever happened before.

  tools/check_sample_log.py DIR [--epochs N]

Checks, and names what fails: every shard of an attempt wrote every update of its
lineage; ranks that read the same shard agree; each epoch's counts. Prints a summary
(attempts, their world sizes, updates redone) and exits 1 on any failure.
"""
import argparse
import collections
import pathlib
import re
import sys

HEADER = re.compile(r"# dtrain sample log: rank (\d+) of (\d+), attempt (\d+), shard (\d+) of (\d+), "
                    r"dataset (\d+), global batch (\d+)")


def read_logs(directory):
    """{attempt: {"world": W, "shards": S, "dataset": N, "steps": {step: (epoch, in_epoch, {shard: indices})}}}"""
    attempts = {}
    files = sorted(directory.glob("attempt-*-rank-*.txt"))
    if not files:
        raise SystemExit(f"check_sample_log: {directory} holds no attempt-*-rank-*.txt files")
    for path in files:
        lines = path.read_text().splitlines()
        m = HEADER.fullmatch(lines[0]) if lines else None
        if not m:
            raise SystemExit(f"check_sample_log: {path}: the first line is not a sample-log header")
        rank, world, attempt, shard, shards, dataset, batch = map(int, m.groups())
        a = attempts.setdefault(attempt, {"world": world, "shards": shards, "dataset": dataset, "batch": batch,
                                          "steps": {}, "ranks": set()})
        if (a["world"], a["shards"], a["dataset"]) != (world, shards, dataset):
            raise SystemExit(f"check_sample_log: {path}: its header disagrees with attempt {attempt}'s other files")
        a["ranks"].add(rank)
        for number, line in enumerate(lines[1:], start=2):
            fields = line.split()
            if len(fields) < 4:
                raise SystemExit(f"check_sample_log: {path}:{number}: expected <epoch> <step> <update> <time> "
                                 "<index>...")
            epoch, step, in_epoch = map(int, fields[:3])
            indices = sorted(map(int, fields[4:]))
            e, u, by_shard = a["steps"].setdefault(step, (epoch, in_epoch, {}))
            if (e, u) != (epoch, in_epoch):
                raise SystemExit(f"check_sample_log: {path}:{number}: step {step} is update {in_epoch} of epoch "
                                 f"{epoch} here, update {u} of epoch {e} in another rank's file")
            if shard in by_shard and by_shard[shard] != indices:
                raise SystemExit(f"check_sample_log: {path}:{number}: step {step}: ranks reading shard {shard} "
                                 "took different samples")
            by_shard[shard] = indices
    return attempts


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("directory", type=pathlib.Path)
    parser.add_argument("--epochs", type=int, default=0, help="the epochs the run trained (default: those logged)")
    args = parser.parse_args()
    attempts = read_logs(args.directory)
    failures = []
    for attempt, a in sorted(attempts.items()):
        if len(a["ranks"]) != a["world"]:
            failures.append(f"attempt {attempt}: files from {len(a['ranks'])} of its {a['world']} ranks")
    # The lineage: each global step from the last attempt that applied it.
    lineage = {}
    for attempt, a in sorted(attempts.items()):
        for step in a["steps"]:
            lineage[step] = attempt
    redone = sum(len(a["steps"]) for a in attempts.values()) - len(lineage)
    dataset = next(iter(attempts.values()))["dataset"]
    per_epoch = collections.defaultdict(collections.Counter)
    last_step = {}  # epoch -> its last update in the lineage, with the attempt's shard count
    for step, attempt in sorted(lineage.items()):
        a = attempts[attempt]
        epoch, in_epoch, by_shard = a["steps"][step]
        missing = sorted(set(range(a["shards"])) - set(by_shard))
        if missing:
            failures.append(f"step {step} (attempt {attempt}): no record from shard(s) {missing}")
        for indices in by_shard.values():
            per_epoch[epoch].update(indices)
        if epoch not in last_step or in_epoch > last_step[epoch][0]:
            last_step[epoch] = (in_epoch, a["shards"], [i for v in by_shard.values() for i in v])
    epochs = range(1, args.epochs + 1) if args.epochs else sorted(per_epoch)
    for epoch in epochs:
        counts = per_epoch.get(epoch, collections.Counter())
        outside = [i for i in counts if not 0 <= i < dataset]
        unseen = dataset - sum(1 for i in counts if 0 <= i < dataset)
        repeated = {i: c for i, c in counts.items() if c > 1}
        last = last_step.get(epoch)
        padding_ok = (last is not None and all(c == 2 for c in repeated.values()) and len(repeated) < last[1]
                      and all(i in last[2] for i in repeated))
        if outside:
            failures.append(f"epoch {epoch}: indices outside [0, {dataset}): {sorted(outside)[:5]}")
        if unseen:
            failures.append(f"epoch {epoch}: {unseen} sample(s) of {dataset} in no applied update")
        if repeated and not padding_ok:
            failures.append(f"epoch {epoch}: {len(repeated)} sample(s) in more than one applied update, e.g. "
                            f"{sorted(repeated.items())[:5]}")
        note = f" ({len(repeated)} repeated by the sampler's padding)" if repeated and padding_ok else ""
        print(f"epoch {epoch}: {sum(counts.values())} samples taken, {dataset - unseen} of {dataset} distinct{note}")
    shapes = ", ".join(f"attempt {k}: {a['world']} rank(s), {a['shards']} shard(s), {len(a['steps'])} update(s)"
                       for k, a in sorted(attempts.items()))
    print(f"{shapes}; {len(lineage)} update(s) in the final lineage, {redone} redone after a restart")
    for f in failures:
        print(f"check_sample_log: {f}", file=sys.stderr)
    print("sample log: every sample of every epoch in exactly one applied update" if not failures else
          f"sample log: {len(failures)} problem(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
