#!/usr/bin/env python3
"""Tables for run_train_comparison.sh, from the JSON lines of bench_train, pytorch_train.py
and the two time-to-accuracy runs; and the one place that reads train_mnist's result line.

  train_table.py dtrain-tta --threads T --target A < train_mnist.log   # -> one JSON line
  train_table.py table RAW.jsonl --machine "..."                       # -> both tables
Standard library only: runs under any python3.
"""

import argparse
import json
import re
import statistics
import sys

# train_mnist --target-accuracy ends with one of these lines; the epoch lines before it
# carry the test accuracy.
REACHED = re.compile(r"reached ([\d.]+)% test accuracy after (\d+) epoch\(s\) in ([\d.]+) s")
NOT_REACHED = re.compile(r"did not reach ([\d.]+)% test accuracy")
EPOCH = re.compile(r"^epoch (\d+)/\d+:.*test accuracy ([\d.]+)%", re.MULTILINE)
SECONDS = re.compile(r"([\d.]+) s\b")


def dtrain_tta(log, threads, target):
    """train_mnist's log as a time_to_accuracy JSON object, or None without a result line."""
    epochs = EPOCH.findall(log)
    accuracy = round(float(epochs[-1][1]) / 100, 4) if epochs else None
    result = {"bench": "time_to_accuracy", "framework": "dtrain", "model": "cnn", "threads": threads,
              "target": target}
    reached = REACHED.search(log)
    if reached:
        return {**result, "reached": True, "seconds": float(reached.group(3)), "epochs": int(reached.group(2)),
                "test_accuracy": accuracy}
    missed = NOT_REACHED.search(log)
    if missed:
        seconds = SECONDS.search(log, missed.end())
        return {**result, "reached": False, "seconds": float(seconds.group(1)) if seconds else None,
                "epochs": int(epochs[-1][0]) if epochs else None, "test_accuracy": accuracy}
    return None


def read_jsonl(path):
    with open(path) as f:
        return [r for r in (json.loads(line) for line in f if line.startswith("{")) if "provenance" not in r]


def fmt(value, spec, width):
    return f"{value:{width}{spec}}" if value is not None else f"{'-':>{width}}"


def ratio(numerator, denominator):
    return numerator / denominator if numerator and denominator else None


def median(values):
    return statistics.median(values) if values else None


def spread(values, spec):
    """' (min-max)' of several repetitions' values, '' of one."""
    return f" ({min(values):{spec}}-{max(values):{spec}})" if len(values) > 1 else ""


def precision(r):
    return r.get("precision", "fp32")


def label(model, batch, threads, prec):
    """A case's name in the tables; the precision only where it is not fp32."""
    return f"{model} b{batch} t{threads}" + ("" if prec == "fp32" else f" {prec}")


def throughput_table(rows):
    # Not bench_train's machine line, nor the peers' tuning runs.
    train = [r for r in rows if r.get("bench") == "train" and "framework" in r and not r.get("tune")]
    versions = list(dict.fromkeys(r["torch"] for r in train if r["framework"] == "pytorch"))
    cases = list(dict.fromkeys((r["model"], r["batch"], r["threads"], precision(r)) for r in train))
    # samples/s per repetition (rows without "rep" are one repetition)
    by_key = {}
    for r in train:
        key = (r["framework"], r.get("torch"), r["model"], r["batch"], r["threads"], precision(r))
        by_key.setdefault(key, {})[r.get("rep", 1)] = r["samples_per_s"]
    reps = len({r.get("rep", 1) for r in train})
    print("Training-step throughput, one process: samples/s = batch / median step time;")
    print("ratio = dtrain samples/s / torch samples/s (above 1: dtrain is faster).")
    wide = reps > 1
    if wide:
        print(f"Medians over {reps} alternating repetitions, (min-max); the ratio's over the repetitions' ratios.")
    w_rate, w_ratio = (20, 19) if wide else (9, 7)
    header = f"{'case':<29} | {'dtrain':>{w_rate}}"
    for v in versions:
        header += f" | {'torch ' + v:>{max(w_rate, 22)}}{'ratio':>{w_ratio}}"
    print(header)
    for case in cases:
        d = by_key.get(("dtrain", None, *case), {})
        d_rate = median(list(d.values()))
        line = f"{label(*case):<29} | " + \
            f"{fmt(d_rate, '.1f', 0)}{spread(list(d.values()), '.1f')}".rjust(w_rate)
        for v in versions:
            p = by_key.get(("pytorch", v, *case), {})
            p_rate = median(list(p.values()))
            ratios = [d[k] / p[k] for k in d if k in p and p[k]]
            line += " | " + f"{fmt(p_rate, '.1f', 0)}{spread(list(p.values()), '.1f')}".rjust(max(w_rate, 22))
            line += f"{fmt(median(ratios), '.2f', 0)}{spread(ratios, '.2f')}".rjust(w_ratio)
        print(line)
    settings_table(train, versions, cases)


def settings_table(train, versions, cases):
    """Which settings each peer's measured runs used (run_train_comparison.sh tunes them),
    and how long dtrain's idle pool threads polled before sleeping (its waiting policy)."""
    variants = {(r["torch"], r["model"], r["batch"], r["threads"], precision(r)): r["variant"]
                for r in train if r["framework"] == "pytorch" and "variant" in r}
    polls = {(r["model"], r["batch"], r["threads"], precision(r)): r["pool_spin_us"]
             for r in train if r["framework"] == "dtrain" and "pool_spin_us" in r}
    if not variants and not polls:
        return
    print()
    print("The settings in the measured runs (dtrain's defaults; the peers' fastest of the tuning runs):")
    for case in cases:
        chosen = [f"dtrain: poll {polls[case]} us"] if case in polls else []
        chosen += [f"torch {v}: {variants[(v, *case)]}" for v in versions if (v, *case) in variants]
        print(f"{label(*case):<29} | " + "; ".join(chosen))


def tta_table(rows):
    tta = [r for r in rows if r.get("bench") == "time_to_accuracy"]
    if not tta:
        return
    print()
    print(f"Time to {100 * tta[0]['target']:.0f}% Fashion-MNIST test accuracy, LeNet-style CNN, one process, batch 64;")
    print("seconds from the first epoch's start to the end of the evaluation that reached the target")
    print("(evaluations included); ratio = torch seconds / dtrain seconds (above 1: dtrain is faster).")
    peer = next((r["torch"] for r in tta if r["framework"] == "pytorch"), "")
    print(f"{'threads':>7} | {'dtrain s':>9}{'epochs':>7}{'acc %':>7} | {'torch ' + peer + ' s':>20}{'epochs':>7}"
          f"{'acc %':>7} | {'ratio':>6}")
    by_key = {(r["framework"], r["threads"]): r for r in tta}
    for threads in dict.fromkeys(r["threads"] for r in tta):
        line = f"{threads:>7}"
        seconds = {}
        for framework, width in (("dtrain", 9), ("pytorch", 20)):
            r = by_key.get((framework, threads), {})
            seconds[framework] = r.get("seconds") if r.get("reached") else None
            accuracy = r.get("test_accuracy")
            mark = " " if r.get("reached", True) else "*"
            line += (f" | {fmt(r.get('seconds'), '.1f', width - 1)}{mark}{fmt(r.get('epochs'), 'd', 7)}"
                     f"{fmt(100 * accuracy if accuracy else None, '.2f', 7)}")
        print(f"{line} | {fmt(ratio(seconds['pytorch'], seconds['dtrain']), '.2f', 6)}")
    if any(not r.get("reached") for r in tta):
        print("* did not reach the target: seconds of all epochs")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    d = sub.add_parser("dtrain-tta", help="train_mnist's log on stdin -> one time_to_accuracy JSON line")
    d.add_argument("--threads", type=int, required=True)
    d.add_argument("--target", type=float, required=True)
    t = sub.add_parser("table", help="the throughput and time-to-accuracy tables of a JSON-lines file")
    t.add_argument("raw")
    t.add_argument("--machine", default="")
    args = p.parse_args()
    if args.command == "dtrain-tta":
        result = dtrain_tta(sys.stdin.read(), args.threads, args.target)
        if result is None:
            print("train_table: no 'reached ...' or 'did not reach ...' line in train_mnist's output", file=sys.stderr)
            return 1
        print(json.dumps(result))
        return 0
    if args.machine:
        print(f"machine: {args.machine}")
    rows = read_jsonl(args.raw)
    throughput_table(rows)
    tta_table(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
