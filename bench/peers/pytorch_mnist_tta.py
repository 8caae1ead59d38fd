#!/usr/bin/env python3
"""PyTorch peer of `train_mnist --model cnn --target-accuracy A`: time to test accuracy.

One process trains the LeNet-style CNN on Fashion-MNIST with train_mnist's defaults and
stops after the first epoch whose test accuracy reaches the target:
  - data: the IDX .gz files (Debian's dataset-fashion-mnist), inputs
    (pixel / 255 - 0.2860) / 0.3530 as dtrain's MnistDataset, all held in one tensor;
    batches are taken from a fresh random permutation each epoch (seed 1), the last one
    short (60000 = 937 x 64 + 32), as dtrain's DataLoader does without drop_last;
  - PyTorch's default initialization (seed 1), SGD with Nesterov momentum 0.9, weight
    decay 5e-4, batch 64;
  - learning rate per step as dtrain's make_schedule: a linear warm-up over
    int(0.2 x steps per epoch) steps from 0.1 x 0.05 up to 0.05, then cosine decay to 0
    over the remaining steps of all --epochs epochs (so stopping early does not change it);
  - after each epoch, evaluation on the 10k test images in eval mode, batch 500.
The time runs from the start of the first epoch (data loaded, model built) to the end of
the evaluation that reached the target, so it includes the evaluations.

  python pytorch_mnist_tta.py --threads 2 --target-accuracy 0.90 --json
Prints one line per epoch and the result: with --json the epoch lines go to stderr and
stdout gets one JSON object, {"bench":"time_to_accuracy","framework":"pytorch",...}.
"""

import argparse
import gzip
import json
import math
import os
import sys
import time

import peer_models  # imports no torch: that waits for the thread settings

BATCH = 64
LR, MOMENTUM, WEIGHT_DECAY = 0.05, 0.9, 5e-4
WARMUP_EPOCHS, WARMUP_START_FACTOR = 0.2, 0.1
MEAN, STD = 0.2860, 0.3530  # Fashion-MNIST's, as dtrain's MnistOptions
EVAL_BATCH = 500


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist", help="directory with the IDX .gz files")
    p.add_argument("--threads", type=int, default=1, help="intra-op threads")
    p.add_argument("--epochs", type=int, default=3, help="at most this many epochs; also the schedule's length")
    p.add_argument("--target-accuracy", type=float, default=0.90, help="stop at this test accuracy (0..1)")
    p.add_argument("--seed", type=int, default=1, help="seed for initialization and shuffling")
    p.add_argument("--limit-train", type=int, default=0, help="train on the first N examples only (0: all)")
    p.add_argument("--limit-test", type=int, default=0, help="evaluate on the first N examples only (0: all)")
    p.add_argument("--json", action="store_true", help="print the result as one JSON object")
    args = p.parse_args()
    peer_models.require_at_least(p, args, threads=1, epochs=1)
    if not 0 < args.target_accuracy <= 1:
        p.error(f"--target-accuracy must be in (0, 1], got {args.target_accuracy}")
    return args


def read_idx(path, torch):
    """The payload of an IDX file of unsigned bytes as a flat uint8 tensor, and its count."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    rank = data[3]
    header = 4 + 4 * rank
    count = int.from_bytes(data[4:8], "big")
    return torch.frombuffer(bytearray(data[header:]), dtype=torch.uint8), count


def load_split(data_dir, prefix, limit, torch):
    pixels, count = read_idx(os.path.join(data_dir, f"{prefix}-images-idx3-ubyte.gz"), torch)
    labels, _ = read_idx(os.path.join(data_dir, f"{prefix}-labels-idx1-ubyte.gz"), torch)
    # dtrain's lookup table: (v / 255 - mean) / std in double, stored as float.
    lut = ((torch.arange(256, dtype=torch.float64) / 255 - MEAN) / STD).float()
    images = lut[pixels.long()].view(count, 1, 28, 28)
    labels = labels.long()
    if limit > 0:
        images, labels = images[:limit], labels[:limit]
    return images, labels


def learning_rate(step, steps_per_epoch, epochs):
    """dtrain's WarmupLr(CosineLr(lr, total - warmup), warmup, 0.1) at `step`."""
    total = steps_per_epoch * epochs
    warmup = int(WARMUP_EPOCHS * steps_per_epoch)
    if step < warmup:
        return LR * (WARMUP_START_FACTOR + (1 - WARMUP_START_FACTOR) * step / warmup)
    cosine_steps = max(total - warmup, 1)
    t = step - warmup
    if t >= cosine_steps:
        return 0.0
    return LR * (1 + math.cos(math.pi * t / cosine_steps)) / 2


def main():
    args = parse_args()
    peer_models.set_thread_environment(args.threads)
    import torch

    torch.set_num_threads(args.threads)
    train_x, train_y = load_split(args.data, "train", args.limit_train, torch)
    test_x, test_y = load_split(args.data, "t10k", args.limit_test, torch)
    torch.manual_seed(args.seed)
    model, _, _ = peer_models.build_model("cnn")
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM, weight_decay=WEIGHT_DECAY,
                                nesterov=True)
    loss_fn = torch.nn.CrossEntropyLoss()
    shuffle = torch.Generator().manual_seed(args.seed)
    n = train_x.shape[0]
    steps_per_epoch = (n + BATCH - 1) // BATCH
    log = sys.stderr if args.json else sys.stdout
    print(f"pytorch {torch.__version__}: cnn, {n} train / {test_x.shape[0]} test examples from {args.data}, "
          f"{args.threads} thread(s), batch {BATCH}, sgd lr {LR:g}, target {100 * args.target_accuracy:.2f}%",
          file=log, flush=True)

    start = time.perf_counter()
    accuracy, reached, epoch = 0.0, False, 0
    for epoch in range(1, args.epochs + 1):
        epoch_start = time.perf_counter()
        model.train()
        order = torch.randperm(n, generator=shuffle)
        loss_sum, correct = 0.0, 0
        for i in range(steps_per_epoch):
            for group in optimizer.param_groups:
                group["lr"] = learning_rate((epoch - 1) * steps_per_epoch + i, steps_per_epoch, args.epochs)
            index = order[i * BATCH:(i + 1) * BATCH]
            x, y = train_x[index], train_y[index]
            optimizer.zero_grad(set_to_none=True)
            logits = model(x)
            loss = loss_fn(logits, y)
            loss.backward()
            optimizer.step()
            loss_sum += loss.item()  # dtrain's loop also reads the loss and counts hits each step
            correct += int((logits.argmax(1) == y).sum())
        train_seconds = time.perf_counter() - epoch_start

        model.eval()
        test_loss, test_correct = 0.0, 0
        with torch.no_grad():
            for i in range(0, test_x.shape[0], EVAL_BATCH):
                logits = model(test_x[i:i + EVAL_BATCH])
                y = test_y[i:i + EVAL_BATCH]
                test_loss += loss_fn(logits, y).item() * y.shape[0]
                test_correct += int((logits.argmax(1) == y).sum())
        accuracy = test_correct / test_x.shape[0]
        elapsed = time.perf_counter() - start
        print(f"epoch {epoch}/{args.epochs}: train loss {loss_sum / steps_per_epoch:.4f}, train accuracy "
              f"{100 * correct / n:.2f}%, test loss {test_loss / test_x.shape[0]:.4f}, test accuracy "
              f"{100 * accuracy:.2f}%, {n / train_seconds:.0f} samples/s, {train_seconds:.1f} s training, "
              f"{time.perf_counter() - epoch_start - train_seconds:.1f} s evaluation, {elapsed:.1f} s in all",
              file=log, flush=True)
        if accuracy >= args.target_accuracy:
            reached = True
            break
    seconds = time.perf_counter() - start

    if args.json:
        print(json.dumps({"bench": "time_to_accuracy", "framework": "pytorch", "torch": torch.__version__,
                          "model": "cnn", "threads": args.threads, "target": args.target_accuracy,
                          "reached": reached, "seconds": round(seconds, 4), "epochs": epoch,
                          "test_accuracy": round(accuracy, 4)}), flush=True)
    elif reached:
        print(f"reached {100 * args.target_accuracy:.2f}% test accuracy after {epoch} epoch(s) in {seconds:.1f} s")
    else:
        print(f"did not reach {100 * args.target_accuracy:.2f}% test accuracy in {epoch} epoch(s), {seconds:.1f} s "
              f"(final {100 * accuracy:.2f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
