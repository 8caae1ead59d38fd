#!/usr/bin/env python3
"""bench/ps_table.py: bench_ps --json lines into a table of time to the target accuracy,
medians over the repetitions, each mode against sync with the same straggler setting.

    python3 bench/ps_table.py bench/results/ps_straggler.jsonl
"""
import json
import statistics
import sys
from collections import OrderedDict


def main(path):
    cases = OrderedDict()
    for line in open(path):
        row = json.loads(line)
        if "mode" not in row:
            continue
        cases.setdefault((row["slowed"], row["mode"]), []).append(row)
    print(f"{'mode':<24}{'slowed':<8}{'to target (runs)':<26}{'median':>8}{'vs sync':>9}"
          f"{'samples/s':>11}{'final %':>9}")
    for slowed in (False, True):
        base = None
        for (s, mode), rows in cases.items():
            if s != slowed:
                continue
            times = [r["time_to_target_s"] for r in rows]
            reached = [t for t in times if t is not None]
            # A run that missed the target counts as slower than any that reached it.
            med = statistics.median([t if t is not None else float("inf") for t in times]) if times else None
            if mode == "sync":
                base = med
            ratio = f"{med / base:.2f}x" if base and med not in (None, float("inf")) else "-"
            runs = ", ".join(f"{t:.1f}" if t is not None else "None" for t in times)
            med_text = f"{med:.1f}" if med not in (None, float("inf")) else "None"
            sps = statistics.median(r["samples_per_s"] for r in rows)
            acc = statistics.median(100 * r["final_accuracy"] for r in rows)
            print(f"{mode:<24}{str(slowed):<8}{runs:<26}{med_text:>8}{ratio:>9}{sps:>11.0f}{acc:>9.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
