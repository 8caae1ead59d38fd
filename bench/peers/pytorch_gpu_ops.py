#!/usr/bin/env python3
"""PyTorch peer of dtrain's bench_gpu_ops: the same GEMM and convolution cases on a GPU.

Same shapes, f32, and the same timing (a run of calls, then one synchronization, about
20 ms per run, runs alternating, medians). TF32 is allowed exactly when
DTRAIN_ALLOW_TF32=1, as for dtrain; cuDNN autotuning is on (the peer's best).

  python pytorch_gpu_ops.py [--device cuda:N] [--filter gemm|conv|<case>] [--json]
"""

import argparse
import json
import os
import statistics
import sys
import time

GEMM = [  # name, m, n, k, transpose_a, transpose_b (as bench_gpu_ops)
    ("square_1024", 1024, 1024, 1024, False, False),
    ("square_4096", 4096, 4096, 4096, False, False),
    ("square_8192", 8192, 8192, 8192, False, False),
    ("resnet50_b256_fc_fwd", 256, 1000, 2048, False, True),
    ("resnet50_b256_fc_bwd_x", 256, 2048, 1000, False, False),
    ("resnet50_b256_fc_bwd_w", 1000, 2048, 256, True, False),
]
CONV = [  # name, n, c, hw, o, k, stride, pad
    ("resnet50_b64_stem_7x7s2", 64, 3, 224, 64, 7, 2, 3),
    ("resnet50_b64_l1_1x1_reduce", 64, 256, 56, 64, 1, 1, 0),
    ("resnet50_b64_l1_3x3", 64, 64, 56, 64, 3, 1, 1),
    ("resnet50_b64_l1_1x1_expand", 64, 64, 56, 256, 1, 1, 0),
    ("resnet50_b64_l2_3x3s2", 64, 128, 56, 128, 3, 2, 1),
    ("resnet50_b64_l3_3x3", 64, 256, 14, 256, 3, 1, 1),
    ("resnet50_b64_l4_3x3", 64, 512, 7, 512, 3, 1, 1),
]


def time_in_turn(torch, device, impls, min_seconds=0.3):
    """Seconds per call of each implementation (medians), as bench_gpu_ops times them."""
    def once(f, calls):
        start = time.perf_counter()
        for _ in range(calls):
            f()
        torch.cuda.synchronize(device)
        return time.perf_counter() - start

    calls = []
    for f in impls:
        once(f, 1)
        calls.append(int(min(max(0.02 / max(once(f, 1), 1e-6), 1), 1000)))
    seconds = [[] for _ in impls]
    while any(len(s) < 3 or sum(s) < min_seconds for s in seconds):
        for i, f in enumerate(impls):
            seconds[i].append(once(f, calls[i]))
    return [statistics.median(s) / c for s, c in zip(seconds, calls)]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--filter", default="")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()

    import torch
    from torch.nn import grad

    device = torch.device(args.device)
    tf32 = os.environ.get("DTRAIN_ALLOW_TF32") == "1"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cudnn.benchmark = True
    gen = torch.Generator().manual_seed(1)

    def rand(*shape):
        return (torch.rand(shape, generator=gen) * 2 - 1).to(device)

    rows = []
    print(f"pytorch {torch.__version__} on {torch.cuda.get_device_name(device)}, tf32 {tf32}", flush=True)
    for name, m, n, k, ta, tb in GEMM:
        if args.filter not in "gemm/" + name:
            continue
        a = rand(k, m) if ta else rand(m, k)
        b = rand(n, k) if tb else rand(k, n)
        opa, opb = (a.t() if ta else a), (b.t() if tb else b)
        (t,) = time_in_turn(torch, device, [lambda: torch.matmul(opa, opb)])
        rows.append({"bench": "gpu_ops", "framework": "pytorch", "group": "gemm", "case": name,
                     "tflops": round(2 * m * n * k / t / 1e12, 4)})
    for name, n, c, hw, o, k, stride, pad in CONV:
        if args.filter not in "conv/" + name:
            continue
        out = (hw + 2 * pad - k) // stride + 1
        x, w, g = rand(n, c, hw, hw), rand(o, c, k, k), rand(n, o, out, out)
        conv = torch.nn.functional.conv2d
        times = time_in_turn(torch, device, [
            lambda: conv(x, w, None, stride, pad),
            lambda: grad.conv2d_input(x.shape, w, g, stride, pad),
            lambda: grad.conv2d_weight(x, w.shape, g, stride, pad),
        ])
        flops = 2 * n * o * out * out * c * k * k
        fwd, bwd_x, bwd_w = (round(flops / t / 1e12, 4) for t in times)
        rows.append({"bench": "gpu_ops", "framework": "pytorch", "group": "conv", "case": name,
                     "fwd_tflops": fwd, "bwd_input_tflops": bwd_x, "bwd_weight_tflops": bwd_w})
    for r in rows:
        if args.json:
            print(json.dumps(r))
        elif r["group"] == "gemm":
            print(f"{r['case']:<30}{r['tflops']:>10.2f} TFLOP/s")
        else:
            print(f"{r['case']:<30}{r['fwd_tflops']:>10.2f}{r['bwd_input_tflops']:>12.2f}"
                  f"{r['bwd_weight_tflops']:>13.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
