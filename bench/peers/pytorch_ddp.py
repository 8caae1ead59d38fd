#!/usr/bin/env python3
"""PyTorch DDP (gloo) peer of bench_ddp: data-parallel step time with and without all-reduce.

Same models, synthetic data, optimizer and measurement as dtrain's bench_ddp, so that the
two print comparable numbers:
  - models: mlp (784-512-512-10), cnn (the LeNet-style CNN), resnet18_cifar (ResNet-18 with
    a 3x3 stride-1 stem and no max-pool, 32x32x3 input); 10 classes;
  - one fixed random batch per rank (normal inputs, uniform labels), cross-entropy loss,
    SGD lr 0.01 momentum 0.9;
  - a step is zero_grad + forward + loss + backward (+ all-reduce) + optimizer step. Synced
    steps and steps under ddp.no_sync() (all-reduce skipped) alternate after the warm-up,
    so that both see the same machine load; each step's time is the slowest rank's.
  - efficiency = median no-sync step time / median synced step time.

--hook fp16|bf16|powersgd:R[:W] registers DDP's communication hook of that name (the
compression hooks of torch.distributed.algorithms.ddp_comm_hooks; PowerSGD at rank R with
error feedback and warm start, compressing from step W, default 2, the earliest it allows),
the peer of bench_ddp --exchanges.

Spawns its ranks itself on localhost:
  python pytorch_ddp.py --model cnn --ranks 2 --batch 64 --threads 1
or runs under torch.distributed.run or mpirun (ranks then come from its environment; under
mpirun MASTER_ADDR and MASTER_PORT must be set, as bench/netns/run_netns.sh runs need):
  python -m torch.distributed.run --nproc_per_node 2 pytorch_ddp.py --model cnn
Prints a table, or with --json one line in the bench output contract's style.
"""

import argparse
import inspect
import json
import statistics
import sys
import time

import peer_models  # imports no torch: that waits for the thread settings


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", choices=["mlp", "cnn", "resnet20_cifar", "resnet18_cifar"], default="cnn")
    p.add_argument("--ranks", type=int, default=2, help="processes to spawn (ignored under torch.distributed.run)")
    p.add_argument("--batch", type=int, default=64, help="samples per rank per step")
    p.add_argument("--threads", type=int, default=1, help="intra-op threads per rank")
    p.add_argument("--steps", type=int, default=20, help="measured steps of each kind (synced, no-sync)")
    p.add_argument("--warmup", type=int, default=3, help="unmeasured steps of each kind first")
    p.add_argument("--bucket-mb", type=float, default=25, help="DDP's bucket_cap_mb (its default: 25)")
    p.add_argument("--hook", default="none", help="none, fp16, bf16 or powersgd:R[:W] (a DDP communication hook)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    args = p.parse_args()
    if args.hook not in ("none", "fp16", "bf16") and not args.hook.startswith("powersgd:"):
        p.error(f"--hook must be none, fp16, bf16 or powersgd:R[:W], got '{args.hook}'")
    peer_models.require_at_least(p, args, ranks=1, batch=1, threads=1, steps=1, warmup=0)
    return args


def worker(rank, world, args):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(1)
    model, sample_shape, classes = peer_models.build_model(args.model)
    # Buffers (batch-norm statistics) synced once, at wrap time, as dtrain does: a broadcast
    # at each forward would put a collective (and a wait for the slower rank) into the
    # no_sync steps too. Recent torch renamed the flag; Debian's 1.13 knows the old name.
    params = inspect.signature(DistributedDataParallel).parameters
    flag = "forward_sync_buffers" if "forward_sync_buffers" in params else "broadcast_buffers"
    ddp = DistributedDataParallel(model, bucket_cap_mb=args.bucket_mb, **{flag: False})
    register_hook(ddp, args.hook)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(100 + rank)
    x = torch.randn((args.batch, *sample_shape), generator=gen)
    y = torch.randint(0, classes, (args.batch,), generator=gen)

    def step(sync):
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        if sync:
            loss_fn(ddp(x), y).backward()
        else:
            with ddp.no_sync():
                loss_fn(ddp(x), y).backward()
        optimizer.step()
        return time.perf_counter() - start

    for _ in range(args.warmup):
        step(True)
        step(False)
    times = torch.zeros(2, args.steps, dtype=torch.float64)
    for i in range(args.steps):
        times[0, i] = step(True)
        times[1, i] = step(False)
    dist.all_reduce(times, op=dist.ReduceOp.MAX)  # a step lasts as long as its slowest rank
    if rank == 0:
        report(args, world, torch.__version__, times[0].tolist(), times[1].tolist())
    peer_models.leave()


def register_hook(ddp, hook):
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

    if hook == "fp16":
        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
    elif hook == "bf16":
        ddp.register_comm_hook(None, default_hooks.bf16_compress_hook)
    elif hook.startswith("powersgd:"):
        parts = hook.split(":")
        state = powerSGD_hook.PowerSGDState(
            process_group=None, matrix_approximation_rank=int(parts[1]),
            start_powerSGD_iter=int(parts[2]) if len(parts) > 2 else 2, min_compression_rate=2,
            use_error_feedback=True, warm_start=True)
        ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)


def report(args, world, version, synced, unsynced):
    def ms(seconds):
        return round(1000 * seconds, 3)

    t_with, t_without = statistics.median(synced), statistics.median(unsynced)
    result = {
        "bench": "ddp", "framework": "pytorch", "framework_version": version, "model": args.model, "hook": args.hook,
        "bucket_mb": args.bucket_mb,
        "ranks": world, "batch_per_rank": args.batch, "threads": args.threads, "steps": args.steps,
        "step_ms_median": ms(t_with), "step_ms_min": ms(min(synced)), "step_ms_max": ms(max(synced)),
        "step_ms_no_comm_median": ms(t_without), "step_ms_no_comm_min": ms(min(unsynced)),
        "step_ms_no_comm_max": ms(max(unsynced)),
        "efficiency": round(t_without / t_with, 4),
        "samples_per_s": round(world * args.batch / t_with, 2),
    }
    if args.json:
        print(json.dumps(result), flush=True)
        return
    print(f"pytorch {version} DDP (gloo): {args.model}, {world} rank(s) x {args.threads} thread(s), "
          f"batch {args.batch} per rank, {args.steps} steps after {args.warmup} warm-up")
    print(f"{'case':<12}{'median ms':>12}{'min ms':>10}{'max ms':>10}")
    print(f"{'all-reduce':<12}{result['step_ms_median']:>12.2f}{result['step_ms_min']:>10.2f}"
          f"{result['step_ms_max']:>10.2f}")
    print(f"{'no_sync':<12}{result['step_ms_no_comm_median']:>12.2f}{result['step_ms_no_comm_min']:>10.2f}"
          f"{result['step_ms_no_comm_max']:>10.2f}")
    print(f"efficiency {result['efficiency']:.3f}, {result['samples_per_s']:.1f} samples/s (all ranks)", flush=True)


def main():
    args = parse_args()
    peer_models.set_gloo_environment(args.threads)  # before torch is imported
    peer_models.run_ranks(worker, args.ranks, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
