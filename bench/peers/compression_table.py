#!/usr/bin/env python3
"""The table of run_compression_comparison.sh: medians over its repetitions.

  compression_table.py RESULTS.jsonl "MACHINE LINE"

Per model and exchange (plain all-reduce, bf16, PowerSGD at rank 2 and 4): dtrain's step time,
efficiency (its step without communication over the step with the exchange, the compression's
own compute charged to the step) and samples/s; the speedup over dtrain's plain all-reduce;
the same for PyTorch DDP with the matching communication hook (its efficiency against its own
no_sync steps); and dtrain / PyTorch samples/s, the median of the per-repetition ratios.
"""

import json
import statistics
import sys
from collections import defaultdict

CASES = ("none", "bf16", "powersgd:2", "powersgd:4")


def kind_of(label):
    """'exchange powersgd:2:0' -> 'powersgd:2' (bench_ddp's case label, warm-up steps dropped)."""
    kind = label.removeprefix("exchange ")
    return ":".join(kind.split(":")[:2])


def main():
    rows = [r for r in (json.loads(line) for line in open(sys.argv[1]) if line.strip()) if "provenance" not in r]
    dtrain = defaultdict(dict)  # (model, case) -> rep -> (step ms, efficiency, samples/s)
    torch = defaultdict(dict)
    for r in rows:
        if r.get("framework") == "dtrain":
            key = (r["model"], r["rep"])
            dtrain[(r["model"], "none")][r["rep"]] = (r["step_ms_median"], r["efficiency"], r["samples_per_s"])
            for e in r.get("exchanges", []):
                dtrain[(r["model"], kind_of(e["exchange"]))][key[1]] = (e["step_ms_median"], e["efficiency"],
                                                                        e["samples_per_s"])
        elif r.get("framework") == "pytorch":
            torch[(r["model"], r["hook"])][r["rep"]] = (r["step_ms_median"], r["efficiency"], r["samples_per_s"])
    versions = sorted({r["framework_version"] for r in rows if r.get("framework") == "pytorch"})
    reps = sorted({r["rep"] for r in rows if "rep" in r})
    print(f"machine: {sys.argv[2]}")
    print(f"PyTorch {', '.join(versions)} DDP over gloo with its communication hooks; {len(reps)} repetition(s), "
          "medians over them.")
    print("eff = step without communication / step with it (each framework's own); speedup = over the same")
    print("framework's plain all-reduce; ratio = dtrain samples/s / pytorch samples/s (median of per-repetition ratios).")
    print(f"{'model':<15}{'exchange':<12}| {'dtrain ms':>9}{'eff':>7}{'samples/s':>10}{'speedup':>8} |"
          f" {'pytorch ms':>10}{'eff':>7}{'samples/s':>10}{'speedup':>8} | {'ratio':>6}")
    for model in sorted({m for m, _ in dtrain}):
        for case in CASES:
            d, p = dtrain.get((model, case), {}), torch.get((model, case), {})
            if not d:
                continue
            med = lambda runs, i: statistics.median(v[i] for v in runs.values())  # noqa: E731
            d_plain, p_plain = dtrain[(model, "none")], torch.get((model, "none"), {})
            line = (f"{model:<15}{case:<12}| {med(d, 0):>9.1f}{med(d, 1):>7.3f}{med(d, 2):>10.1f}"
                    f"{statistics.median(d_plain[k][0] / d[k][0] for k in d if k in d_plain):>8.2f} |")
            if p:
                both = [k for k in d if k in p]
                ratio = statistics.median(d[k][2] / p[k][2] for k in both) if both else float("nan")
                speedup = statistics.median(p_plain[k][0] / p[k][0] for k in p if k in p_plain)
                line += f" {med(p, 0):>10.1f}{med(p, 1):>7.3f}{med(p, 2):>10.1f}{speedup:>8.2f} | {ratio:>6.2f}"
            print(line)


if __name__ == "__main__":
    main()
