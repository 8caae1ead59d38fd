#!/usr/bin/env python3
"""TensorFlow MultiWorkerMirroredStrategy peer of `mpirun -np 2 train_mnist --model cnn`.

Trains the LeNet-style CNN on Fashion-MNIST with tf.distribute.MultiWorkerMirroredStrategy
over localhost workers (TF_CONFIG; this script starts the workers itself on free ports)
and reports the seconds of each epoch and the final test accuracy. The recipe is
train_mnist's defaults:
  - data: the IDX .gz files (Debian's dataset-fashion-mnist by default), pixels
    normalized as (x/255 - 0.2860) / 0.3530; each epoch reshuffled, global batch 64 split
    over the workers;
  - model: conv5x5-32 pad 2, ReLU, maxpool 2, conv5x5-64 pad 2, ReLU, maxpool 2,
    fc 3136-1024, ReLU, fc 1024-10, with PyTorch's (and dtrain's) default initialization;
  - SGD, Nesterov momentum 0.9, peak lr 0.05, linear warm-up from 0.005 over 0.2 epochs,
    then cosine decay to 0 over the remaining steps; weight decay 5e-4 as an L2 penalty on
    every weight and bias (torch-style SGD weight_decay, which dtrain implements).
Keras 2 (tf_keras) drives the training: Keras 3's model.fit fails under
MultiWorkerMirroredStrategy (keras-team/keras#20585: "Attempt to convert a value
(PerReplica...)"), and TensorFlow's multi-worker tutorial uses tf_keras too.
Per-epoch time covers training only, as train_mnist's does; the test set is evaluated
once, after the last epoch.

  python tf_mwms_mnist.py --workers 2 --epochs 3 [--json]
"""

import argparse
import gzip
import json
import math
import os
import socket
import subprocess
import sys
import time

MEAN, STD = 0.2860, 0.3530


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist", help="directory with the IDX .gz files")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch", type=int, default=64, help="global batch, split over the workers")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--warmup-epochs", type=float, default=0.2)
    p.add_argument("--weight-decay", type=float, default=5e-4)
    p.add_argument("--threads", type=int, default=1, help="intra-op threads per worker")
    p.add_argument("--limit-train", type=int, default=0, help="train on the first N examples only (0: all)")
    p.add_argument("--json", action="store_true", help="print JSON lines instead of text")
    p.add_argument("--timeout", type=float, default=3600, help="seconds before the workers are killed")
    # Internal: set by the launcher for each worker process.
    p.add_argument("--worker-index", type=int, default=-1, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.workers < 1 or args.epochs < 1 or args.threads < 1:
        p.error("--workers, --epochs and --threads must be at least 1")
    if args.batch % args.workers:
        p.error(f"--batch {args.batch} must be divisible by --workers {args.workers}")
    return args


def read_idx(path):
    """An IDX file (gzip-compressed) as a numpy array of its declared shape."""
    import numpy as np

    with gzip.open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] != 0x08:
        raise ValueError(f"{path}: not an unsigned-byte IDX file")
    dims = raw[3]
    shape = tuple(int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(dims))
    body = raw[4 + 4 * dims:]
    if len(body) != math.prod(shape):
        raise ValueError(f"{path}: {len(body)} data bytes for shape {shape}")
    return np.frombuffer(body, dtype=np.uint8).reshape(shape)


def load_split(data_dir, prefix, limit=0):
    import numpy as np

    x = read_idx(os.path.join(data_dir, f"{prefix}-images-idx3-ubyte.gz"))
    y = read_idx(os.path.join(data_dir, f"{prefix}-labels-idx1-ubyte.gz"))
    if limit:
        x, y = x[:limit], y[:limit]
    x = ((x.astype(np.float32) / 255.0 - MEAN) / STD)[..., None]  # NHWC, one channel
    return x, y.astype(np.int64)


def build_model(l2):
    """The LeNet-style CNN with torch's default init: kernels U(+-1/sqrt(fan_in)) (kaiming
    uniform with a=sqrt(5)) and biases U(+-1/sqrt(fan_in))."""
    import tf_keras as keras

    def init(fan_in):
        bound = 1.0 / math.sqrt(fan_in)
        return dict(kernel_initializer=keras.initializers.RandomUniform(-bound, bound),
                    bias_initializer=keras.initializers.RandomUniform(-bound, bound),
                    kernel_regularizer=keras.regularizers.L2(l2), bias_regularizer=keras.regularizers.L2(l2))

    return keras.Sequential([
        keras.Input((28, 28, 1)),
        keras.layers.Conv2D(32, 5, padding="same", activation="relu", **init(25)),
        keras.layers.MaxPooling2D(2),
        keras.layers.Conv2D(64, 5, padding="same", activation="relu", **init(32 * 25)),
        keras.layers.MaxPooling2D(2),
        keras.layers.Flatten(),
        keras.layers.Dense(1024, activation="relu", **init(3136)),
        keras.layers.Dense(10, **init(1024)),
    ])


def run_worker(args):
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    import tf_keras as keras

    chief = args.worker_index == 0
    x_train, y_train = load_split(args.data, "train", args.limit_train)
    x_test, y_test = load_split(args.data, "t10k")
    steps_per_epoch = math.ceil(len(x_train) / args.batch)
    total = steps_per_epoch * args.epochs
    warmup = int(args.warmup_epochs * steps_per_epoch)

    # Every worker builds the same pipeline with the same seed and keeps its own 1/W of
    # each global batch (DATA sharding), so that the workers see disjoint samples.
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    train = (tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(len(x_train), seed=1)
             .batch(args.batch).prefetch(2).with_options(options))
    test = tf.data.Dataset.from_tensor_slices((x_test, y_test)).batch(500).with_options(options)

    with strategy.scope():
        keras.utils.set_random_seed(1)
        model = build_model(args.weight_decay / 2)  # d/dw (l2 * w^2) = weight_decay * w
        schedule = keras.optimizers.schedules.CosineDecay(
            initial_learning_rate=0.1 * args.lr, decay_steps=max(total - warmup, 1), alpha=0.0,
            warmup_target=args.lr, warmup_steps=warmup)
        model.compile(optimizer=keras.optimizers.SGD(schedule, momentum=0.9, nesterov=True),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])

    class EpochTimer(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.start = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            seconds = time.perf_counter() - self.start
            if chief:
                emit(args, {"epoch": epoch + 1, "epochs": args.epochs, "train_loss": logs["loss"],
                            "train_accuracy": logs["accuracy"], "seconds": round(seconds, 2),
                            "samples_per_s": round(len(x_train) / seconds, 1)})

    model.fit(train, epochs=args.epochs, verbose=0, callbacks=[EpochTimer()])
    test_loss, test_accuracy = model.evaluate(test, verbose=0)
    if chief:
        emit(args, {"final": True, "test_loss": test_loss, "test_accuracy": test_accuracy,
                    "replicas": strategy.num_replicas_in_sync, "tensorflow": tf.__version__})


def emit(args, record):
    if args.json:
        print(json.dumps({"bench": "mnist", "framework": "tensorflow", "strategy": "MultiWorkerMirroredStrategy",
                          "workers": args.workers, "threads": args.threads, "batch": args.batch, **record}),
              flush=True)
    elif record.get("final"):
        print(f"final test accuracy: {100 * record['test_accuracy']:.2f}% (test loss {record['test_loss']:.4f}), "
              f"{record['replicas']} replicas, tensorflow {record['tensorflow']}", flush=True)
    else:
        print(f"epoch {record['epoch']}/{record['epochs']}: train loss {record['train_loss']:.4f}, "
              f"train accuracy {100 * record['train_accuracy']:.2f}%, {record['samples_per_s']:.0f} samples/s, "
              f"{record['seconds']:.1f} s", flush=True)


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:  # all bound at once, so the ports differ
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def launch(args):
    """Starts one process per worker with its TF_CONFIG; the chief's output is ours."""
    workers = [f"127.0.0.1:{p}" for p in free_ports(args.workers)]
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), OMP_WAIT_POLICY="PASSIVE",
               TF_CPP_MIN_LOG_LEVEL="2", TF_USE_LEGACY_KERAS="1")
    procs = []
    for i in range(args.workers):
        tf_config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": i}}
        cmd = [sys.executable, os.path.abspath(__file__), *sys.argv[1:], "--worker-index", str(i)]
        procs.append(subprocess.Popen(cmd, env=dict(env, TF_CONFIG=json.dumps(tf_config)),
                                      stdout=None if i == 0 else subprocess.DEVNULL))
    deadline = time.monotonic() + args.timeout
    status = 0
    try:
        for i, proc in enumerate(procs):
            rc = proc.wait(timeout=max(deadline - time.monotonic(), 1))
            if rc != 0:
                print(f"tf_mwms_mnist: worker {i} exited with {rc}", file=sys.stderr)
                status = 1
                break
    except subprocess.TimeoutExpired:
        print(f"tf_mwms_mnist: workers still running after {args.timeout:g} s", file=sys.stderr)
        status = 1
    finally:
        for proc in procs:  # one failed worker leaves the others waiting in a collective
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return status


def main():
    args = parse_args()
    if args.worker_index >= 0:
        run_worker(args)
        return 0
    return launch(args)


if __name__ == "__main__":
    sys.exit(main())
