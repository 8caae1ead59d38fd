"""PyTorch's F.scaled_dot_product_attention, forward and backward: bench_attention's peer.

q, k, v (B, T, H, D) ~ N(0, 1) leaves seen as (B, H, T, D) through transposes (as a GPT's
attention passes them), causal, the loss sum(out * w). On the CPU PyTorch takes its flash
attention kernel for this (no mask tensor, no dropout, f32); --math forces its math path for
reference. Time: the median of --reps passes after --warmup untimed ones. Peak memory: torch has
no CPU peak counter, so the growth of the process's peak resident set (ru_maxrss) once the
inputs exist; bench_attention reports the same figure. One measurement per process.

Prints one JSON line: {"peer", "seq", "heads", "head_dim", "batch", "threads", "median_ms",
"min_ms", "max_ms", "rss_growth_mb", "backend"}.
"""
import argparse
import contextlib
import json
import resource
import statistics
import time

import torch
import torch.nn.functional as F


def max_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # kilobytes on Linux


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--math", action="store_true", help="the math (unfused) path instead of flash")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    shape = (a.batch, a.seq, a.heads, a.head_dim)
    q, k, v = (torch.randn(shape).requires_grad_() for _ in range(3))
    w = torch.randn(shape).transpose(1, 2)
    backend = "math" if a.math else "flash"
    ctx = contextlib.nullcontext()
    if hasattr(torch.nn, "attention"):
        from torch.nn.attention import SDPBackend, sdpa_kernel
        ctx = sdpa_kernel(SDPBackend.MATH if a.math else SDPBackend.FLASH_ATTENTION)
    rss_before = max_rss_mb()
    seconds = []
    with ctx:
        for rep in range(a.warmup + a.reps):
            for x in (q, k, v):
                x.grad = None
            start = time.perf_counter()
            out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                 is_causal=True)
            (out * w).sum().backward()
            took = time.perf_counter() - start
            if rep >= a.warmup:
                seconds.append(took)
    print(json.dumps({
        "peer": f"torch {torch.__version__}", "seq": a.seq, "heads": a.heads, "head_dim": a.head_dim,
        "batch": a.batch, "threads": a.threads, "backend": backend,
        "median_ms": round(1e3 * statistics.median(seconds), 4), "min_ms": round(1e3 * min(seconds), 4),
        "max_ms": round(1e3 * max(seconds), 4), "rss_growth_mb": round(max_rss_mb() - rss_before, 4),
    }))


if __name__ == "__main__":
    main()
