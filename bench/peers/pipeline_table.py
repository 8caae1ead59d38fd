#!/usr/bin/env python3
"""The table of run_pipeline_comparison.sh, from the JSON lines of bench_pipeline and
pytorch_pipeline.py over alternating repetitions (the driver tags each line with "rep").

  pipeline_table.py RAW.jsonl [--machine "..."]
Per side and schedule: the median over the repetitions of each one's median step time,
with the spread of those medians; then, paired within each repetition (the runs of one
repetition saw the same machine load) and summarized as the median [min - max] over the
repetitions: the machine's parallel capacity (two of dtrain's one-process runs started
together, tagged "concurrent": 2, over twice one alone), dtrain's samples/s over torch's,
each side's pipeline samples/s over twice its own one-process samples/s (dtrain's also over
the two concurrent runs'), dtrain's measured bubble less its theory (the schedule simulated
with the measured pass times), and each dtrain schedule's peak activation memory over
GPipe's. One micro-batch count per schedule and side, as the driver runs them.
Standard library only: runs under any python3.
"""

import argparse
import json
import statistics
import sys


def read_rows(path):
    """The result lines (not the machine lines) of bench "pipeline"."""
    with open(path) as f:
        rows = [json.loads(line) for line in f if line.startswith("{")]
    return [r for r in rows if r.get("bench") == "pipeline" and "impl" in r]


def spread(values, spec=".2f"):
    """'median [min - max]' of values, or '-' without any."""
    if not values:
        return "-"
    return f"{statistics.median(values):{spec}} [{min(values):{spec}} - {max(values):{spec}}]"


def by_rep(rows, impl, schedule, concurrent=0):
    """{rep: [rows of that side and schedule]}; concurrent=N: those of the N one-process runs
    started together (the machine's parallel capacity), which are otherwise left out."""
    out = {}
    for r in rows:
        if r["impl"] == impl and r["schedule"] == schedule and r.get("concurrent", 0) == concurrent:
            out.setdefault(r.get("rep", 0), []).append(r)
    return out


def rate(rows):
    """The samples/s of a repetition's rows of one case (torch's one-process reference runs
    once per pipelined invocation: their median)."""
    return statistics.median(r["samples_per_s"] for r in rows)


def peak(row):
    return max(row["peak_activation_bytes"])


def paired(a, b, f):
    """f(a's rows, b's rows) for every repetition that has both."""
    return [f(a[rep], b[rep]) for rep in sorted(a) if rep in b]


def case_table(rows):
    rows = [r for r in rows if not r.get("concurrent")]
    impls = list(dict.fromkeys(r["impl"] for r in rows))
    print("Step time (ms): the median over repetitions of each one's median (slowest rank per step), with the")
    print("spread of those medians; samples/s = batch / step time; bubble: idle share of a stage's step, mean over")
    print("stages, measured (dtrain only) and in theory (the schedule simulated with dtrain's measured pass times,")
    print("first repetition's); act MiB: a stage's peak allocator use during")
    print("a step above its use before it, max over stages (dtrain only).")
    print(f"{'impl':<8}{'schedule':<10}{'K':>3}{'M':>4}{'reps':>5} | {'step ms':>25} | {'samples/s':>26} |"
          f" {'bubble':>21} {'theory':>7} | {'act MiB':>22}")
    for impl in impls:
        cases = list(dict.fromkeys((r["schedule"], r["stages"], r["micro_batches"]) for r in rows if r["impl"] == impl))
        for schedule, stages, micro in cases:
            case = [r for r in rows if r["impl"] == impl and r["schedule"] == schedule and r["stages"] == stages
                    and r["micro_batches"] == micro]
            bubble = [r["bubble_measured"] for r in case if "bubble_measured" in r]
            theory = next((f"{r['bubble_theory']:.3f}" for r in case if "bubble_theory" in r), "-")
            mib = [peak(r) / 2**20 for r in case if r.get("peak_activation_bytes")]
            print(f"{impl:<8}{schedule:<10}{stages:>3}{micro:>4}{len(case):>5} |"
                  f" {spread([r['step_ms_median'] for r in case]):>25} |"
                  f" {spread([r['samples_per_s'] for r in case], '.1f'):>26} |"
                  f" {spread(bubble, '.3f'):>21} {theory:>7} | {spread(mib):>22}")


def ratio_table(rows):
    schedules = list(dict.fromkeys(r["schedule"] for r in rows if r["stages"] > 1))
    print()
    print("Ratios, paired within each repetition: median [min - max] over the repetitions.")

    def line(label, values, target=""):
        print(f"  {label:<60}{spread(values, '.3f'):>24}" + (f"   ({target})" if target else ""))

    alone, together = by_rep(rows, "dtrain", "none"), by_rep(rows, "dtrain", "none", concurrent=2)
    if together:
        line("machine: 2 one-process runs at once / (2 x one alone) samples/s",
             paired(together, alone, lambda c, a: sum(r["samples_per_s"] for r in c) / (2 * rate(a))),
             "1.0 = two cores of throughput")
    for schedule in schedules:
        stages = next(r["stages"] for r in rows if r["schedule"] == schedule)
        d, t = by_rep(rows, "dtrain", schedule), by_rep(rows, "torch", schedule)
        target = "target >= 1.5" if schedule.startswith("zb") else "target >= 1.2"
        line(f"{schedule}: dtrain / torch samples/s", paired(d, t, lambda a, b: rate(a) / rate(b)), target)
        for impl in ("dtrain", "torch"):
            scaling = paired(by_rep(rows, impl, schedule), by_rep(rows, impl, "none"),
                             lambda p, s: rate(p) / (stages * rate(s)))
            line(f"{schedule}: {impl} pipeline / ({stages} x one process) samples/s", scaling, "target >= 0.8")
        if together and stages == 2:
            line(f"{schedule}: dtrain pipeline / 2 one-process runs at once",
                 paired(d, together, lambda p, c: rate(p) / sum(r["samples_per_s"] for r in c)))
        gap = [r["bubble_measured"] - r["bubble_theory"] for rs in d.values() for r in rs if "bubble_theory" in r]
        line(f"{schedule}: dtrain bubble measured - theory", gap, "target within 0.05")
    gpipe = by_rep(rows, "dtrain", "gpipe")
    for schedule in schedules:
        other = by_rep(rows, "dtrain", schedule)
        if schedule == "gpipe" or not paired(other, gpipe, lambda a, b: None):
            continue
        r = next(iter(other.values()))[0]
        stages, micro = r["stages"], r["micro_batches"]
        line(f"dtrain {schedule} / GPipe peak activation memory, max over stages",
             paired(other, gpipe, lambda a, b: peak(a[0]) / peak(b[0])),
             f"target <= 0.35, theory K/M = {stages / micro:.3f}")
        for s in range(stages):
            line(f"  stage {s}", paired(other, gpipe, lambda a, b: a[0]["peak_activation_bytes"][s] /
                                        b[0]["peak_activation_bytes"][s]))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("raw", help="the JSON lines of the runs")
    p.add_argument("--machine", default="", help="printed first")
    args = p.parse_args()
    rows = read_rows(args.raw)
    if not rows:
        print(f"pipeline_table: no bench_pipeline or pytorch_pipeline.py results in {args.raw}", file=sys.stderr)
        return 1
    if args.machine:
        print(f"machine: {args.machine}")
    case_table(rows)
    ratio_table(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
