#!/usr/bin/env python3
"""The GPU check's bench table: dtrain's JSON lines beside PyTorch's, as ratios.

  python3 gpu_table.py DTRAIN_OPS TORCH_OPS DTRAIN_TRAIN TORCH_TRAIN [DTRAIN_E2E]

Each argument is a file of JSON lines (bench_gpu_ops / pytorch_gpu_ops.py --json,
bench_train / pytorch_train.py --device cuda --json); a missing or empty file shows as '-'.
DTRAIN_E2E holds the GPU check's train_imagenet line (model, batch, precision, samples_per_s:
its last epoch of a few steps, loader and optimizer included): a row beside PyTorch's step of
the same model, batch and precision, a smoke figure rather than a benchmark.
"""

import json
import sys


def load(path):
    try:
        with open(path) as f:
            return [json.loads(line) for line in f if line.startswith("{")]
    except (OSError, ValueError):
        return []


def by_case(rows, key):
    return {r[key]: r for r in rows if key in r and "machine" not in r}


def ratio(a, b):
    return f"{a / b:.2f}" if a and b else "-"


def fmt(v):
    return f"{v:.2f}" if isinstance(v, (int, float)) else "-"


def main(ops, torch_ops, train, torch_train, e2e=None):
    ours, theirs = by_case(load(ops), "case"), by_case(load(torch_ops), "case")
    print(f"{'gemm f32':<30}{'dtrain TF/s':>12}{'cuBLAS':>9}{'PyTorch':>9}{'dtrain/PyTorch':>16}")
    for case, r in ours.items():
        if r.get("group") == "gemm":
            t = theirs.get(case, {}).get("tflops")
            print(f"{case:<30}{fmt(r['tflops']):>12}{fmt(r['cublas_tflops']):>9}{fmt(t):>9}{ratio(r['tflops'], t):>16}")
    print(f"{'conv f32 (fwd / bwd-x / bwd-w)':<30}{'dtrain TF/s':>24}{'PyTorch TF/s':>24}{'ratios':>18}")
    for case, r in ours.items():
        if r.get("group") == "conv":
            t = theirs.get(case, {})
            keys = ("fwd_tflops", "bwd_input_tflops", "bwd_weight_tflops")
            mine = " / ".join(fmt(r[k]) for k in keys)
            peer = " / ".join(fmt(t.get(k)) for k in keys)
            ratios = " / ".join(ratio(r[k], t.get(k)) for k in keys)
            print(f"{case:<30}{mine:>24}{peer:>24}{ratios:>18}")
    def key(r):
        return r["model"], r["batch"], r.get("precision", "fp32")

    ours_t = {key(r): r for r in load(train) if "model" in r}
    theirs_t = {key(r): r for r in load(torch_train) if "model" in r}
    print(f"{'training step':<30}{'dtrain img/s':>14}{'PyTorch img/s':>15}{'dtrain/PyTorch':>16}")
    for k, r in ours_t.items():
        t = theirs_t.get(k, {}).get("samples_per_s")
        print(f"{k[0] + ' b' + str(k[1]) + ' ' + k[2]:<30}{fmt(r['samples_per_s']):>14}{fmt(t):>15}"
              f"{ratio(r['samples_per_s'], t):>16}")
    for r in load(e2e) if e2e else []:
        if "model" in r:
            t = theirs_t.get(key(r), {}).get("samples_per_s")
            name = f"e2e {r['model']} b{r['batch']} {r.get('precision', 'fp32')}"
            print(f"{name:<30}{fmt(r['samples_per_s']):>14}{fmt(t):>15}{ratio(r['samples_per_s'], t):>16}")
            print(f"  (e2e: train_imagenet, the last of {r.get('epochs', '?')} epochs of {r.get('steps', '?')} steps with "
                  "its loader and optimizer: a smoke figure, not a benchmark)")
    return 0


if __name__ == "__main__":
    if len(sys.argv) not in (5, 6):
        sys.exit(__doc__)
    sys.exit(main(*sys.argv[1:]))
