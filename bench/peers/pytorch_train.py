#!/usr/bin/env python3
"""PyTorch peer of dtrain's bench_train: one process's training-step throughput.

Same models, synthetic data, optimizer and measurement as bench_train, so that the two
print comparable numbers:
  - models (peer_models.py): mlp (784-512-512-10) and the LeNet-style CNN on 1x28x28,
    resnet18_cifar (CIFAR stem, 3x32x32, 10 classes), resnet18_224 (ImageNet stem,
    3x224x224, 1000 classes);
  - per case one fixed random batch (normal inputs, uniform labels, seeded), the model in
    train mode, cross-entropy loss, SGD lr 0.01 momentum 0.9;
  - a step is zero_grad (gradients set to None) + forward + loss + backward + optimizer
    step; each step after the warm-up is timed; reported are the median and the spread.

  python pytorch_train.py --model cnn --batch 64,256 --threads 1,2 --steps 20 --json
  python pytorch_train.py --model resnet50_224 --batch 64 --device cuda --json

On a GPU (--device cuda[:N]) each step ends with torch.cuda.synchronize(), as bench_train
waits for its device; cuDNN autotuning is on (the peer's best), and TF32 is allowed in
matmuls and convolutions exactly when DTRAIN_ALLOW_TF32=1, as for dtrain, so that both
compute in the same precision.

Each thread count runs in a fresh child process: OpenMP sizes its thread pool once per
process, so lowering torch.set_num_threads() in a process that already ran wider would
not measure what a process started with that count does. Several batch sizes at one
thread count share a process, as in bench_train.
Prints a table, or with --json one line per (batch, threads) case in the bench output
contract's style (the keys bench_train prints, with "framework":"pytorch").
"""

import argparse
import contextlib
import json
import math
import os
import statistics
import subprocess
import sys
import time

import peer_models  # imports no torch: that waits for the thread settings


def positive_list(text):
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got '{text}'")
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected integers >= 1, got '{text}'")
    return values


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", choices=peer_models.MODELS, default="cnn")
    p.add_argument("--batch", type=positive_list, default=[64], help="samples per step, e.g. 64 or 64,256")
    p.add_argument("--threads", type=positive_list, default=[1], help="intra-op threads, e.g. 1 or 1,2")
    p.add_argument("--steps", type=int, default=20, help="measured steps per case")
    p.add_argument("--warmup", type=int, default=3, help="unmeasured steps per case first")
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    p.add_argument("--precision", choices=("fp32", "bf16", "f16"), default="fp32",
                   help="bf16/f16: forward under torch.autocast (f16 with a GradScaler), as bench_train")
    p.add_argument("--wait-policy", choices=("passive", "active", "default"), default="passive",
                   help="OMP_WAIT_POLICY for torch's OpenMP threads; default: the runtime's own")
    p.add_argument("--channels-last", action="store_true",
                   help="model and input in torch.channels_last (NHWC) memory format")
    p.add_argument("--compile", action="store_true",
                   help="torch.compile the model (torch >= 2; the warm-up steps include the compilation)")
    p.add_argument("--show-config", action="store_true",
                   help="print torch.__version__ and torch.__config__.show() and exit")
    p.add_argument("--json", action="store_true", help="print one JSON object per case instead of a table")
    args = p.parse_args()
    peer_models.require_at_least(p, args, steps=1, warmup=0)
    return args


def measure(args, threads):
    """Runs every batch size at `threads` in this process; torch is imported here."""
    peer_models.set_thread_environment(threads, None if args.wait_policy == "default" else args.wait_policy.upper())
    import torch

    torch.set_num_threads(threads)
    device = torch.device(args.device)
    on_gpu = device.type == "cuda"
    if on_gpu:
        tf32 = os.environ.get("DTRAIN_ALLOW_TF32") == "1"
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
        torch.backends.cudnn.benchmark = True
    results = []
    for batch in args.batch:
        torch.manual_seed(1)
        model, sample_shape, classes = peer_models.build_model(args.model)
        model.to(device)
        model.train()
        memory_format = torch.channels_last if args.channels_last else torch.contiguous_format
        if args.channels_last:
            model.to(memory_format=memory_format)
        train_model = torch.compile(model) if args.compile else model
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        loss_fn = torch.nn.CrossEntropyLoss()
        # fp32 touches no autocast API, so that Debian's torch 1.13 runs this too.
        low = {"bf16": torch.bfloat16, "f16": torch.float16}.get(args.precision)
        scaler = torch.amp.GradScaler(device.type) if args.precision == "f16" else None
        gen = torch.Generator().manual_seed(100)
        x = torch.randn((batch, *sample_shape), generator=gen)
        y = torch.randint(0, classes, (batch,), generator=gen)
        x, y = x.to(device, memory_format=memory_format) if x.dim() == 4 else x.to(device), y.to(device)

        def step():
            start = time.perf_counter()
            optimizer.zero_grad(set_to_none=True)  # explicit: torch 1.13's default is False
            with torch.autocast(device.type, dtype=low) if low else contextlib.nullcontext():
                loss = loss_fn(train_model(x), y)
            if scaler:
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
            else:
                loss.backward()
                optimizer.step()
            if on_gpu:
                torch.cuda.synchronize(device)
            seconds = time.perf_counter() - start
            losses.append(loss.item())  # after the clock stops, as in bench_train
            return seconds

        losses = []
        for _ in range(args.warmup):
            step()
        times = [step() for _ in range(args.steps)]
        check_trains(args, batch, threads, losses)
        results.append(summarize(args, torch.__version__, batch, threads, times))
        results[-1]["loss_first"], results[-1]["loss_last"] = round(losses[0], 6), round(losses[-1], 6)
        results[-1]["device"] = str(device)
        results[-1]["precision"] = args.precision
        results[-1]["variant"] = variant_name(args)
    return results


def check_trains(args, batch, threads, losses):
    """Exits 1, as bench_train does, when the timed steps did not train: a loss that is not
    finite, or one that did not fall from the first step to the last (f16's scaler may skip
    an overflowing step; that shows as a loss that did not fall)."""
    problem = next((f"the loss of step {i + 1} is {v}" for i, v in enumerate(losses) if not math.isfinite(v)), None)
    if problem is None and len(losses) >= 2 and not losses[-1] < losses[0]:
        problem = f"the loss did not fall: {losses[0]:.6g} at the first step, {losses[-1]:.6g} at the last"
    if problem:
        sys.exit(f"pytorch_train: {args.model} batch {batch} on {threads} thread(s) does not train, so its figure "
                 f"is void: {problem}")


def variant_name(args):
    """The settings this run tried, e.g. "wait=passive,alloc=jemalloc,channels_last"."""
    preload = os.environ.get("LD_PRELOAD", "")
    parts = [f"wait={args.wait_policy}", "alloc=jemalloc" if "jemalloc" in preload else "alloc=system"]
    if args.channels_last:
        parts.append("channels_last")
    if args.compile:
        parts.append("compile")
    return ",".join(parts)


def summarize(args, version, batch, threads, times):
    def r4(v):  # 4 decimals, as bench_train: the spread between steps is larger
        return round(v, 4)

    median, fastest, slowest = statistics.median(times), min(times), max(times)
    return {
        "bench": "train", "framework": "pytorch", "torch": version, "model": args.model, "batch": batch,
        "threads": threads, "steps": args.steps,
        "samples_per_s": r4(batch / median), "samples_per_s_min": r4(batch / slowest),
        "samples_per_s_max": r4(batch / fastest),
        "step_ms_median": r4(1e3 * median), "step_ms_min": r4(1e3 * fastest), "step_ms_max": r4(1e3 * slowest),
    }


def measure_in_children(args):
    """One child process per thread count (see the module docstring); their JSON lines."""
    results = []
    for threads in args.threads:
        command = [sys.executable, os.path.abspath(__file__), "--model", args.model,
                   "--batch", ",".join(map(str, args.batch)), "--threads", str(threads),
                   "--steps", str(args.steps), "--warmup", str(args.warmup), "--device", args.device,
                   "--precision", args.precision, "--wait-policy", args.wait_policy, "--json"]
        command += ["--channels-last"] * args.channels_last + ["--compile"] * args.compile
        out = subprocess.run(command, stdout=subprocess.PIPE, check=True, text=True).stdout
        results += [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return results


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and ":" in line:
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def print_table(args, results):
    print(f"pytorch {results[0]['torch']} training step: {args.model} on {args.device}, {args.steps} steps after "
          f"{args.warmup} warm-up; {cpu_model()}, {os.cpu_count()} hardware threads")
    print(f"{'batch':>6}{'threads':>8} | {'samples/s':>10}{'min':>9}{'max':>9} | {'step ms':>9}{'min':>9}{'max':>9}")
    for r in results:
        print(f"{r['batch']:>6}{r['threads']:>8} | {r['samples_per_s']:>10.1f}{r['samples_per_s_min']:>9.1f}"
              f"{r['samples_per_s_max']:>9.1f} | {r['step_ms_median']:>9.2f}{r['step_ms_min']:>9.2f}"
              f"{r['step_ms_max']:>9.2f}")


def show_config():
    import torch

    print(f"torch {torch.__version__}")
    print(torch.__config__.show())
    return 0


def main():
    args = parse_args()
    if args.show_config:
        return show_config()
    results = measure(args, args.threads[0]) if len(args.threads) == 1 else measure_in_children(args)
    if args.json:
        for r in results:
            print(json.dumps(r), flush=True)
    else:
        print_table(args, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
