#!/usr/bin/env python3
"""PyTorch pipelining (gloo) peer of bench_pipeline: pipeline-parallel step time, GPipe, 1F1B or zero bubble.

Same model, cut, micro-batches, data, optimizer and measurement as dtrain's bench_pipeline:
  - models: mlp (Flatten, Linear + ReLU for each --hidden width, Linear to 10) and cnn (the
    LeNet-style CNN), both on 1x28x28 inputs, as the same flat layer lists as dtrain's
    nn::mlp and nn::lenet_cnn (no dropout layer), so that cut indices mean the same;
  - the whole model is built on every rank from the same seed and rank s keeps layers
    [cut[s-1], cut[s]) as its stage; by default the cuts minimize the largest stage's
    parameter count, as dtrain's Pipeline does;
  - one fixed batch (normal inputs, uniform labels) of --batch samples, split by the
    schedule (torch.distributed.pipelining's ScheduleGPipe, Schedule1F1B, or its zero-bubble
    schedules: ScheduleInterleavedZeroBubble with one stage per rank for zb-h1, and
    ScheduleZBVZeroBubble, two stages per rank in a V, rank s holding chunks s and
    2K-1-s, for zb-v, which then takes 2K-1 cuts) into --micro-batches; cross-entropy on
    the last stage, SGD lr 0.01 momentum 0.9 per rank;
  - a step is zero_grad + schedule.step + optimizer step; it lasts as long as its slowest
    rank (the maximum over ranks, taken after each step, outside the timed region).
Before it spawns the ranks it times the unpipelined model in one process (same model, batch
and threads) as the reference, and checks that the pipeline's losses of the first two steps
match it; --stages 1 runs only that reference.

Spawns its ranks itself on localhost:
  python pytorch_pipeline.py --model mlp --stages 2 --micro-batches 8 --schedule 1f1b
or runs under torch.distributed.run (ranks then come from its environment; no reference):
  python -m torch.distributed.run --nproc_per_node 2 pytorch_pipeline.py --stages 2
Prints a table, or with --json one line per case in the bench output contract's style.
"""

import argparse
import json
import os
import socket
import statistics
import sys
import time

import peer_models  # imports no torch: that waits for the thread settings

SEED = 1  # the model's initialization, on every rank and in the reference
DATA_SEED = 100  # the fixed batch
LOSS_RTOL = 1e-4  # pipelined against unpipelined loss: only the summation order differs


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    p.add_argument("--hidden", default="512,512,512,512", help="mlp hidden widths, comma-separated")
    p.add_argument("--stages", type=int, default=2, help="pipeline stages = ranks; 1: only the reference")
    p.add_argument("--cuts", default="", help="stages-1 layer indices; default: balanced by parameter count")
    p.add_argument("--micro-batches", type=int, default=8)
    p.add_argument("--schedule", choices=["gpipe", "1f1b", "zb-h1", "zb-v"], default="1f1b")
    p.add_argument("--batch", type=int, default=256, help="samples per step, all micro-batches together")
    p.add_argument("--threads", type=int, default=1, help="intra-op threads per rank")
    p.add_argument("--steps", type=int, default=20, help="measured steps")
    p.add_argument("--warmup", type=int, default=3, help="unmeasured steps first")
    p.add_argument("--json", action="store_true", help="print JSON lines instead of a table")
    args = p.parse_args()
    peer_models.require_at_least(p, args, stages=1, micro_batches=1, batch=1, threads=1, steps=1, warmup=0)
    try:
        args.hidden = [int(h) for h in args.hidden.split(",")]
        args.cuts = [int(c) for c in args.cuts.split(",")] if args.cuts else None
    except ValueError as e:
        p.error(f"--hidden and --cuts take comma-separated integers: {e}")
    if args.batch % args.micro_batches:
        p.error(f"--batch {args.batch} is not a multiple of --micro-batches {args.micro_batches}")
    if args.schedule != "gpipe" and args.micro_batches < args.stages:
        p.error(f"{args.schedule} needs at least as many micro-batches as stages, "
                f"got {args.micro_batches} < {args.stages}")
    args.chunks_per_rank = 2 if args.schedule == "zb-v" else 1
    return p, args


def build(args):
    """(list of layers, shape of one input sample, classes), initialized from SEED."""
    import torch

    torch.manual_seed(SEED)
    if args.model == "mlp":
        return list(peer_models.mlp(args.hidden)), (1, 28, 28), 10
    model, sample_shape, classes = peer_models.build_model(args.model)
    return list(model), sample_shape, classes


def synthetic_batch(args, sample_shape, classes):
    import torch

    gen = torch.Generator().manual_seed(DATA_SEED)
    x = torch.randn((args.batch, *sample_shape), generator=gen)
    return x, torch.randint(0, classes, (args.batch,), generator=gen)


def resolve_cuts(parser, args):
    """Fills args.cuts (balanced unless given) and args.stage_params; needs torch imported."""
    layers, _, _ = build(args)
    sizes = [sum(p.numel() for p in layer.parameters()) for layer in layers]
    parts = args.stages * args.chunks_per_rank
    if parts > len(layers):
        parser.error(f"--stages {args.stages} x {args.chunks_per_rank} chunks exceed the model's {len(layers)} layers")
    if args.cuts is None:
        args.cuts = peer_models.balanced_cuts(sizes, parts)
    bounds = [0, *args.cuts, len(layers)]
    if len(args.cuts) != parts - 1 or any(a >= b for a, b in zip(bounds, bounds[1:])):
        parser.error(f"--cuts needs {parts - 1} increasing indices in [1, {len(layers) - 1}] "
                     f"({args.stages} stages x {args.chunks_per_rank} chunks), got {args.cuts}")
    args.stage_layers = [[type(layer).__name__ for layer in layers[a:b]] for a, b in zip(bounds, bounds[1:])]
    args.stage_params = [sum(sizes[a:b]) for a, b in zip(bounds, bounds[1:])]


def reference(args):
    """The unpipelined model in this process: step times and the first losses."""
    import torch

    torch.set_num_threads(args.threads)
    layers, sample_shape, classes = build(args)
    model = torch.nn.Sequential(*layers)
    x, y = synthetic_batch(args, sample_shape, classes)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    times, losses = [], []
    for i in range(args.warmup + args.steps):
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        elapsed = time.perf_counter() - start
        losses.append(loss.item())
        if i >= args.warmup:
            times.append(elapsed)
    return {"times": times, "losses": losses[:2]}


def worker(rank, world, args):
    import torch
    import torch.distributed as dist
    from torch.distributed.pipelining import (PipelineStage, Schedule1F1B, ScheduleGPipe,
                                              ScheduleInterleavedZeroBubble, ScheduleZBVZeroBubble)

    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    layers, sample_shape, classes = build(args)
    bounds = [0, *args.cuts, len(layers)]
    parts = len(bounds) - 1
    x, y = synthetic_batch(args, sample_shape, classes)
    # This rank's chunks: one (rank) or, in the V, rank and 2K-1-rank.
    chunk_ids = [rank] if args.chunks_per_rank == 1 else [rank, parts - 1 - rank]
    stages, modules = [], []
    for c in chunk_ids:
        module = torch.nn.Sequential(*layers[bounds[c]:bounds[c + 1]])
        # One micro-batch's input and output of this chunk, so that the stage knows its
        # buffer shapes up front (static metadata) instead of exchanging them in the first
        # step. Not under no_grad: the metadata records requires_grad, and without it no
        # gradient flows back to the stage before.
        example = x[:args.batch // args.micro_batches]
        for layer in layers[:bounds[c]]:
            example = layer(example)
        stages.append(PipelineStage(module, c, parts, torch.device("cpu"), input_args=example,
                                    output_args=module(example)))
        modules.append(module)
    # CrossEntropyLoss averages over its micro-batch and the schedule divides the gradients
    # by the number of micro-batches (scale_grads=True): the gradient of the batch mean.
    loss_fn = torch.nn.CrossEntropyLoss()
    if args.schedule in ("gpipe", "1f1b"):
        schedule_cls = ScheduleGPipe if args.schedule == "gpipe" else Schedule1F1B
        schedule = schedule_cls(stages[0], n_microbatches=args.micro_batches, loss_fn=loss_fn)
    else:
        schedule_cls = ScheduleInterleavedZeroBubble if args.schedule == "zb-h1" else ScheduleZBVZeroBubble
        schedule = schedule_cls(stages, n_microbatches=args.micro_batches, loss_fn=loss_fn)
    params = [p for m in modules for p in m.parameters()]
    optimizer = torch.optim.SGD(params, lr=0.01, momentum=0.9) if params else None
    first, last = 0 in chunk_ids, parts - 1 in chunk_ids

    def step():
        losses = []
        start = time.perf_counter()
        if optimizer:
            optimizer.zero_grad(set_to_none=True)
        if first and last:
            schedule.step(x, target=y, losses=losses)
        elif first:
            schedule.step(x)
        elif last:
            schedule.step(target=y, losses=losses)
        else:
            schedule.step()
        if optimizer:
            optimizer.step()
        elapsed = time.perf_counter() - start
        return elapsed, (torch.stack(losses).mean().item() if losses else 0.0)

    dist.barrier()
    times, first_losses = [], torch.zeros(2, dtype=torch.float64)
    for i in range(args.warmup + args.steps):
        elapsed, loss = step()
        if i < 2:
            first_losses[i] = loss
        slowest = torch.tensor([elapsed], dtype=torch.float64)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)  # a step lasts as long as its slowest rank
        if i >= args.warmup:
            times.append(slowest.item())
    dist.all_reduce(first_losses)  # the last stage's losses (the others add zeros), to rank 0
    code = 0
    if rank == 0:
        n_losses = min(2, args.warmup + args.steps)
        code = report(args, world, torch.__version__, times, first_losses[:n_losses].tolist())
    peer_models.leave(code)


def result_line(args, version, stages, micro_batches, schedule, times, cuts):
    def ms(seconds):
        return round(1000 * seconds, 3)

    median = statistics.median(times)
    return {
        "bench": "pipeline", "impl": "torch", "torch": version, "model": args.model, "stages": stages,
        "micro_batches": micro_batches, "schedule": schedule, "batch": args.batch, "threads": args.threads,
        "steps": args.steps, "step_ms_median": ms(median), "step_ms_min": ms(min(times)),
        "step_ms_max": ms(max(times)), "samples_per_s": round(args.batch / median, 2), "cuts": cuts,
    }


def report(args, world, version, times, losses):
    """Prints the reference (when there is one) and the pipeline; returns the exit code."""
    rows = []
    if args.reference:
        rows.append(("1 process", result_line(args, version, 1, 1, "none", args.reference["times"], [])))
    if times:
        rows.append((f"{args.schedule}, {world} stages",
                     result_line(args, version, world, args.micro_batches, args.schedule, times, args.cuts)))
    mismatch = None
    if times and args.reference:
        expected = args.reference["losses"][:len(losses)]
        if any(abs(a - b) > LOSS_RTOL * abs(b) for a, b in zip(losses, expected)):
            mismatch = f"pipelined losses {losses} differ from the unpipelined {expected}"
    if args.json:
        for _, row in rows:
            print(json.dumps(row), flush=True)
    else:
        model = args.model + (f" 784-{'-'.join(map(str, args.hidden))}-10" if args.model == "mlp" else "")
        split = f"in {args.micro_batches} micro-batches" if times else "unpipelined"
        print(f"pytorch {version} pipelining (gloo): {model}, batch {args.batch} {split}, "
              f"{args.threads} thread(s) per rank, {args.steps} steps after {args.warmup} warm-up")
        print(f"cuts {args.cuts}:")
        for s, (names, n_params) in enumerate(zip(args.stage_layers, args.stage_params)):
            print(f"  stage {s}: {n_params:>9} parameters  {' '.join(names)}")
        print(f"{'case':<16}{'median ms':>11}{'min ms':>10}{'max ms':>10}{'samples/s':>11}{'vs 1 process':>14}")
        base = rows[0][1]["samples_per_s"] if args.reference else None
        for name, r in rows:
            ratio = f"{r['samples_per_s'] / base:.3f}" if base else "-"
            print(f"{name:<16}{r['step_ms_median']:>11.2f}{r['step_ms_min']:>10.2f}{r['step_ms_max']:>10.2f}"
                  f"{r['samples_per_s']:>11.1f}{ratio:>14}")
        if times and args.reference and not mismatch:
            print(f"losses of the first {len(losses)} step(s) match the unpipelined model's "
                  f"(within {LOSS_RTOL:g}): {', '.join(f'{v:.6f}' for v in losses)}", flush=True)
    if mismatch:
        print(f"error: {mismatch}", file=sys.stderr, flush=True)
        return 1
    return 0


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    parser, args = parse_args()
    peer_models.set_gloo_environment(args.threads)  # before torch is imported
    import torch

    resolve_cuts(parser, args)
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # launched by torch.distributed.run
        world = int(os.environ["WORLD_SIZE"])
        if world != args.stages or world < 2:
            parser.error(f"--stages {args.stages} under torch.distributed.run needs as many processes, "
                         f"at least 2, got {world} (--stages 1, the reference, runs without it)")
        args.reference = None
        worker(int(os.environ["RANK"]), world, args)
        return 0
    args.reference = reference(args)
    if args.stages == 1:
        return report(args, 1, torch.__version__, [], [])
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(free_port())
    import torch.multiprocessing as mp

    try:
        mp.spawn(worker, args=(args.stages, args), nprocs=args.stages, join=True)
    except (mp.ProcessExitedException, mp.ProcessRaisedException) as e:  # the failing rank's exit or traceback
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
