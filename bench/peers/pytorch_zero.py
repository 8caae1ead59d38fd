#!/usr/bin/env python3
"""PyTorch sharded data parallelism (ZeRO, gloo, CPU) peer: step time of DDP, ZeRO-1, FSDP2 ZeRO-2 and ZeRO-3.

What it measures, for one model, with every mode on its own copy of the same initial model
(seed 1) in the same processes:
  - ddp:         DistributedDataParallel, torch.optim.Adam (lr 1e-4) on the full model;
  - zero1:       DDP + ZeroRedundancyOptimizer(Adam, lr 1e-4): optimizer state sharded, each
                 rank steps its shard and broadcasts the updated parameters;
  - fsdp2_zero2: FSDP2 fully_shard on every Linear/Conv2d layer, then on the root, with
                 reshard_after_forward=False: gradients and optimizer state sharded (reduce-
                 scatter), parameters all-gathered once per step and kept from the forward to
                 the backward; Adam (lr 1e-4) on the sharded (DTensor) parameters;
  - fsdp2_zero3: the same with reshard_after_forward=True: parameters freed after each layer's
                 forward and all-gathered again for its backward.
  - models: cnn (the LeNet-style CNN, 1x28x28 input) and mlp_50m (dtrain's
    nn::mlp(1768, 16 x 1768, 10), 50.06M parameters, input 1768), as dtrain's bench_models.h;
  - one fixed random batch per rank (normal inputs, uniform labels in [0, 10), seeded by
    rank), cross-entropy loss; a step is zero_grad(set_to_none=True) + forward + loss +
    backward + optimizer step;
  - after the warm-up the modes take their steps in turn (ddp, zero1, fsdp2_zero2,
    fsdp2_zero3, ddp, ...) so that all see the same machine load; a barrier precedes each
    step, and each step's time is the slowest rank's (per-rank perf_counter wall time,
    all-reduced with MAX);
  - samples/s = ranks x batch / median step time; vs_ddp = that over ddp's samples/s.

Knobs set, as a user tuning the peer would:
  - DDP: gradient_as_bucket_view=True (gradients live in the all-reduce buckets: no copy in
    or out of them, and less memory), default 25 MB buckets; no buffer broadcast (the models
    have no buffers).
  - ZeroRedundancyOptimizer: parameters_as_bucket_view=True (the parameter broadcast after
    the step goes per bucket rather than per tensor).
  - FSDP2: one fully_shard unit per Linear/Conv2d layer (the recommended per-layer wrapping:
    communication of one layer overlaps computation of its neighbours, and under ZeRO-3 only
    one layer's full parameters are alive at a time), then the root; float32 throughout (no
    MixedPrecisionPolicy), CPU device mesh over the gloo group.
  - Adam with its defaults in every mode (on CPU that is the per-tensor implementation),
    so that the modes differ only in how they shard and communicate.
  - threads: --threads intra-op threads per rank (default 1), OMP/MKL/OpenBLAS pools the
    same, OMP_WAIT_POLICY=PASSIVE (peer_models.set_thread_environment).

Needs torch >= 2.6 (torch.distributed.fsdp.fully_shard); the repository's .venv-fsdp holds one.
Spawns its ranks itself on localhost:
  python pytorch_zero.py --model cnn --ranks 2 --batch 64
  python pytorch_zero.py --model mlp_50m --ranks 2 --batch 256
or runs under torch.distributed.run (ranks then come from its environment):
  python -m torch.distributed.run --nproc_per_node 2 pytorch_zero.py --model cnn
Prints a table, or with --json one line per mode in the bench output contract's style.
"""

import argparse
import copy
import json
import statistics
import sys
import time

import peer_models  # imports no torch: that waits for the thread settings

MODES = ("ddp", "zero1", "fsdp2_zero2", "fsdp2_zero3")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", choices=["cnn", "mlp_50m"], default="cnn")
    p.add_argument("--modes", default=",".join(MODES),
                   help=f"comma-separated subset of {','.join(MODES)} (default: all)")
    p.add_argument("--ranks", type=int, default=2, help="processes to spawn (ignored under torch.distributed.run)")
    p.add_argument("--batch", type=int, default=64, help="samples per rank per step")
    p.add_argument("--threads", type=int, default=1, help="intra-op threads per rank")
    p.add_argument("--steps", type=int, default=20, help="measured steps of each mode")
    p.add_argument("--warmup", type=int, default=3, help="unmeasured steps of each mode first")
    p.add_argument("--json", action="store_true", help="print one JSON object per mode instead of a table")
    args = p.parse_args()
    peer_models.require_at_least(p, args, ranks=1, batch=1, threads=1, steps=1, warmup=0)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes or len(set(modes)) != len(modes):
        p.error(f"--modes must name distinct modes out of {','.join(MODES)}, got '{args.modes}'")
    args.modes = [m for m in MODES if m in modes]  # always in the canonical order
    return args


def wrap(mode, model, world):
    """(module to call, optimizer) of one mode, around its own copy of the model."""
    import torch
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel

    if mode in ("ddp", "zero1"):
        ddp = DistributedDataParallel(model, gradient_as_bucket_view=True)
        if mode == "ddp":
            return ddp, torch.optim.Adam(ddp.parameters(), lr=1e-4)
        from torch.distributed.optim import ZeroRedundancyOptimizer

        return ddp, ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=torch.optim.Adam, lr=1e-4,
                                            parameters_as_bucket_view=True)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", (world,))
    reshard = mode == "fsdp2_zero3"
    for layer in model.modules():
        if isinstance(layer, (nn.Linear, nn.Conv2d)):
            fully_shard(layer, mesh=mesh, reshard_after_forward=reshard)
    fully_shard(model, mesh=mesh, reshard_after_forward=reshard)
    return model, torch.optim.Adam(model.parameters(), lr=1e-4)


def worker(rank, world, args):
    import torch
    import torch.distributed as dist

    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(1)
    template, sample_shape, classes = peer_models.build_model(args.model)
    runs = {}
    for i, mode in enumerate(args.modes):
        # The last mode takes the template itself: one model copy less in memory.
        model = template if i == len(args.modes) - 1 else copy.deepcopy(template)
        runs[mode] = wrap(mode, model, world)
    del template
    loss_fn = torch.nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(100 + rank)
    x = torch.randn((args.batch, *sample_shape), generator=gen)
    y = torch.randint(0, classes, (args.batch,), generator=gen)
    last_loss = {}

    def step(mode):
        module, optimizer = runs[mode]
        dist.barrier()
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(module(x), y)
        loss.backward()
        optimizer.step()
        elapsed = time.perf_counter() - start
        last_loss[mode] = loss.detach()
        return elapsed

    for _ in range(args.warmup):
        for mode in args.modes:
            step(mode)
    times = torch.zeros(len(args.modes), args.steps, dtype=torch.float64)
    for i in range(args.steps):
        for m, mode in enumerate(args.modes):
            times[m, i] = step(mode)
    dist.all_reduce(times, op=dist.ReduceOp.MAX)  # a step lasts as long as its slowest rank
    # Mean over the ranks of the last step's loss: the same in every mode up to rounding,
    # a check that the modes train the same model on the same data.
    losses = torch.stack([last_loss[mode].float() for mode in args.modes])
    dist.all_reduce(losses)
    if rank == 0:
        report(args, world, torch.__version__, times.tolist(), (losses / world).tolist())
    peer_models.leave()


def report(args, world, version, times, losses):
    def ms(seconds):
        return round(1000 * seconds, 3)

    rows = []
    for mode, t, loss in zip(args.modes, times, losses):
        median = statistics.median(t)
        rows.append({
            "bench": "pytorch_zero", "framework": "pytorch", "framework_version": version,
            "model": args.model, "mode": mode, "ranks": world, "batch": args.batch,
            "threads": args.threads, "steps": args.steps, "warmup": args.warmup,
            "median_step_ms": ms(median), "step_ms_min": ms(min(t)), "step_ms_max": ms(max(t)),
            "samples_per_s": round(world * args.batch / median, 2), "last_loss": round(loss, 6),
        })
    ddp = next((r["samples_per_s"] for r in rows if r["mode"] == "ddp"), None)
    for r in rows:
        r["vs_ddp"] = round(r["samples_per_s"] / ddp, 4) if ddp else None
    if args.json:
        for r in rows:
            print(json.dumps(r), flush=True)
        return
    print(f"pytorch {version} ZeRO peer (gloo, CPU): {args.model}, {world} rank(s) x {args.threads} thread(s), "
          f"batch {args.batch} per rank, {args.steps} steps after {args.warmup} warm-up, Adam lr 1e-4")
    print(f"{'mode':<13}{'median ms':>11}{'min ms':>10}{'max ms':>10}{'samples/s':>11}{'vs ddp':>8}{'last loss':>11}")
    for r in rows:
        vs = f"{r['vs_ddp']:.3f}" if r["vs_ddp"] is not None else "-"
        print(f"{r['mode']:<13}{r['median_step_ms']:>11.2f}{r['step_ms_min']:>10.2f}{r['step_ms_max']:>10.2f}"
              f"{r['samples_per_s']:>11.1f}{vs:>8}{r['last_loss']:>11.5f}", flush=True)


def main():
    args = parse_args()
    peer_models.set_gloo_environment(args.threads)  # before torch is imported
    peer_models.run_ranks(worker, args.ranks, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
