"""PyTorch's language-model loss on materialised logits, bench_cross_entropy's peer.

F.cross_entropy(h @ W.T, y), forward and backward, with h (B*T, d) ~ N(0, 1) and W (V, d) ~
N(0, 0.02) leaves that require grad and y uniform over the vocabulary: what
bench_cross_entropy draws (other random numbers, the same distributions). GPT-2 small's head by
default: vocabulary 50257, width 768, 4 x 1024 tokens.

Time: the median of --reps passes after --warmup untimed ones (gradients set to None before
each pass, as zero_grad does). Peak memory: on the CPU torch has no peak-memory counter
(torch.cuda.max_memory_allocated is CUDA's), so this measures the growth of the process's
peak resident set, getrusage's ru_maxrss after the passes minus its value once the inputs
exist; bench_cross_entropy reports the same figure for dtrain ("rss_growth_mb"). Run it in a
fresh process per measurement (bench/cross_entropy.sh does): a peak never falls.

Prints one JSON line:
  {"peer": "torch 2.x", "tokens", "vocab", "embd", "threads", "median_ms", "min_ms",
   "max_ms", "rss_growth_mb", "loss", "memory": "ru_maxrss growth over the inputs"}

  pytorch_cross_entropy.py [--vocab 50257 --embd 768 --batch 4 --seq 1024 --threads 1
                            --reps 3 --warmup 1]
"""
import argparse
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
    p.add_argument("--vocab", type=int, default=50257)
    p.add_argument("--embd", type=int, default=768)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    n = a.batch * a.seq
    h = torch.randn(n, a.embd).requires_grad_()
    w = torch.randn(a.vocab, a.embd).mul_(0.02).requires_grad_()  # in place: no transient copy in the baseline
    y = torch.randint(0, a.vocab, (n,))
    rss_before = max_rss_mb()
    seconds = []
    loss = None
    for rep in range(a.warmup + a.reps):
        h.grad = None
        w.grad = None
        start = time.perf_counter()
        loss = F.cross_entropy(h @ w.T, y)
        loss.backward()
        took = time.perf_counter() - start
        if rep >= a.warmup:
            seconds.append(took)
    rss_growth = max_rss_mb() - rss_before
    print(json.dumps({
        "peer": f"torch {torch.__version__}",
        "tokens": n, "vocab": a.vocab, "embd": a.embd, "threads": a.threads,
        "median_ms": round(1e3 * statistics.median(seconds), 4),
        "min_ms": round(1e3 * min(seconds), 4), "max_ms": round(1e3 * max(seconds), 4),
        "rss_growth_mb": round(rss_growth, 4), "loss": loss.item(),
        "memory": "ru_maxrss growth over the inputs",
    }))


if __name__ == "__main__":
    main()
