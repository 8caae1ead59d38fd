#!/usr/bin/env python3
"""The table of run_ps_comparison.sh: bench_ps (dtrain) and tf_ps_mnist.py (TensorFlow's
ParameterServerStrategy) JSON lines in, medians over the repetitions and the target ratios out.

  python ps_table.py bench/results/ps_comparison.jsonl
"""

import json
import statistics
import sys


def spread(values):
    return f"{statistics.median(values):.0f} ({min(values):.0f}-{max(values):.0f})" if values else "-"


def main(path):
    rows = [json.loads(line) for line in open(path) if line.strip()]
    machine = next((r["machine"] for r in rows if "machine" in r), "?")
    tf_version = next((r["tensorflow"] for r in rows if "tensorflow" in r), "?")
    print(f"machine: {machine}; tensorflow {tf_version}")

    # 1. Throughput: samples/s per repetition, dtrain async against TensorFlow, per server count.
    thr = [r for r in rows if r.get("part") == "throughput"]
    print("\nthroughput (CNN, 64 samples per update, 2 workers, asynchronous; samples/s, median (min-max) over "
          f"{len({r['rep'] for r in thr})} alternating repetitions)")
    print(f"{'servers':<9}{'dtrain':>20}{'tensorflow':>20}{'ratio':>18}")
    for servers in (1, 2):
        ours = {r["rep"]: r["samples_per_s"] for r in thr if r.get("bench") == "ps" and r.get("servers") == servers
                and "mode" in r}
        theirs = {r["rep"]: r["samples_per_s"] for r in thr if r.get("framework") == "tensorflow"
                  and r.get("ps") == servers and "samples_per_s" in r}
        ratios = [ours[k] / theirs[k] for k in ours if k in theirs and theirs[k] > 0]
        ratio = f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})" if ratios else "-"
        print(f"{servers:<9}{spread(list(ours.values())):>20}{spread(list(theirs.values())):>20}{ratio:>18}")

    # 2. Time to the target accuracy.
    tta = [r for r in rows if r.get("part") == "tta"]
    if not tta:
        return
    target = next((r["target"] for r in tta if "target" in r), next((r.get("target_accuracy") for r in tta), 0))
    print(f"\ntime to {100 * target:.0f}% test accuracy (CNN, 2 workers, whole training set, evaluated 4 times per "
          "epoch; seconds from the first step, evaluations included)")
    print(f"{'system':<12}{'mode':<8}{'S':>3}{'slowed':>8}{'samples/s':>11}{'to target':>11}{'final %':>9}"
          f"{'staleness':>12}")
    best = {}
    for r in tta:
        if r.get("bench") == "ps" and "mode" in r:
            key = ("dtrain", r["mode"], r["servers"], r["slowed"])
            t = r["time_to_target_s"]
            print(f"{'dtrain':<12}{r['mode']:<8}{r['servers']:>3}{str(r['slowed']):>8}{r['samples_per_s']:>11.0f}"
                  f"{(f'{t:.1f}' if t is not None else '-'):>11}{100 * r['final_accuracy']:>9.2f}"
                  f"{r['staleness_mean']:>7.2f}/{r['staleness_max']:<4.0f}")
            best.setdefault(key, []).append(t)
        elif r.get("framework") == "tensorflow" and r.get("final"):
            key = ("tensorflow", "async", r["ps"], r["slowed"])
            t = r["time_to_accuracy_s"]
            epochs = [e for e in tta if e.get("framework") == "tensorflow" and e.get("rep") == r["rep"]
                      and e.get("slowed") == r["slowed"] and "samples_per_s" in e]
            sps = statistics.median([e["samples_per_s"] for e in epochs]) if epochs else 0
            print(f"{'tensorflow':<12}{'async':<8}{r['ps']:>3}{str(r['slowed']):>8}{sps:>11.0f}"
                  f"{(f'{t:.1f}' if t is not None else '-'):>11}{100 * r['test_accuracy']:>9.2f}{'':>12}")
            best.setdefault(key, []).append(t)

    def median_time(key):
        times = [t for t in best.get(key, []) if t is not None]
        return statistics.median(times) if times else None

    print("\nslowed worker: time to target against sync's (target <= 0.7)")
    for servers in (1, 2):
        sync = median_time(("dtrain", "sync", servers, True))
        for mode in ("async", "ssp:1", "ssp:4"):
            t = median_time(("dtrain", mode, servers, True))
            if sync and t:
                print(f"  dtrain {mode:<6} {servers} server(s): {t:.1f} s / {sync:.1f} s = {t / sync:.2f}")


if __name__ == "__main__":
    main(sys.argv[1])
