#!/usr/bin/env python3
"""The table of run_loader_comparison.sh: bench_loader (dtrain) and torchvision_loader.py JSON
lines in, medians over the repetitions and the ratio to torchvision's best pipeline out.

  python loader_table.py bench/results/loader_comparison.jsonl
Standard library only.
"""

import json
import statistics
import sys

TARGET = 2.0  # dtrain's images/s per loader thread over torchvision's (issue 13)


def spread(values):
    return f"{statistics.median(values):.0f} ({min(values):.0f}-{max(values):.0f})" if values else "-"


def main(path):
    rows = [json.loads(line) for line in open(path) if line.startswith("{")]
    head = next((r for r in rows if "machine" in r), {})
    tv = next((r for r in rows if r.get("framework") == "torchvision" and "torch" in r), {})
    print(f"machine: {head.get('machine', '?')}")
    print(f"dtrain: {head.get('libjpeg', '?')} (Debian); data: {head.get('data', '?')}")
    print(f"torchvision: torch {tv.get('torch', '?')}, torchvision {tv.get('torchvision', '?')} (libjpeg-turbo "
          f"{tv.get('torchvision_libjpeg_turbo', '?')}), Pillow {tv.get('pillow', '?')} (libjpeg-turbo "
          f"{tv.get('pillow_libjpeg_turbo', '?')}), Python {tv.get('python', '?')}")

    cases = [r for r in rows if "case" in r]
    rates = {}  # (framework, case) -> {rep: images/s per thread}
    for r in cases:
        rates.setdefault((r["framework"], r["case"]), {})[r["rep"]] = r["images_per_s_per_thread"]
    reps = sorted({r["rep"] for r in cases})
    workers = sorted({r["workers"] for r in cases if r["batch"] > 1})
    batch = sorted({r["batch"] for r in cases if r["batch"] > 1})
    print(f"\nimages/s per loader thread, median (min-max) over {len(reps)} alternating repetitions; decode + "
          f"RandomResizedCrop(224) + flip + normalize to f32 CHW, batch {'/'.join(map(str, batch))}, "
          f"{'/'.join(map(str, workers))} worker(s), one timed pass after an untimed one")
    print(f"{'framework':<13}{'case':<12}{'images/s/thread':>20}")
    for (framework, case), by_rep in rates.items():
        print(f"{framework:<13}{case:<12}{spread(list(by_rep.values())):>20}")

    pipelines = {case: by_rep for (framework, case), by_rep in rates.items()
                 if framework == "torchvision" and not case.startswith("decode")}
    if not pipelines:
        return
    best = max(pipelines, key=lambda case: statistics.median(pipelines[case].values()))
    print(f"\nratio to torchvision's fastest pipeline ({best}), per repetition, median (min-max); target >= "
          f"{TARGET:.0f}x")
    for case in ("folder", "shards"):
        ours = rates.get(("dtrain", case), {})
        ratios = [ours[k] / pipelines[best][k] for k in ours if k in pipelines[best]]
        if ratios:
            verdict = "met" if statistics.median(ratios) >= TARGET else "missed"
            print(f"  dtrain {case:<7} {statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})"
                  f"  {verdict}")
    decode = rates.get(("dtrain", "decode"), {})
    for case in ("decode_pil", "decode_tv"):
        theirs = rates.get(("torchvision", case), {})
        ratios = [decode[k] / theirs[k] for k in decode if k in theirs]
        if ratios:
            print(f"  full decode, dtrain / {case[len('decode_'):]}: {statistics.median(ratios):.2f}x "
                  f"({min(ratios):.2f}-{max(ratios):.2f})")


if __name__ == "__main__":
    main(sys.argv[1])
