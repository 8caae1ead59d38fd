#!/usr/bin/env python3
"""TensorFlow ParameterServerStrategy peer of `mpirun -np W+S train_mnist --model cnn --strategy ps --ps-mode async`.

Trains tf_mwms_mnist.py's Fashion-MNIST CNN with the recipe of train_mnist (same data
files and normalization, same model and initialization, SGD with Nesterov momentum 0.9 (--momentum),
peak lr 0.05, linear warm-up from 0.005 over 0.2 epochs then cosine decay to 0, weight
decay 5e-4 as an L2 penalty) on tf.distribute.experimental.ParameterServerStrategy:

  - this script starts S parameter servers and W workers (tf.distribute.Server, one
    process each, TF_CONFIG with free localhost ports); the launching process is the
    chief, the coordinator: a tf.distribute.coordinator.ClusterCoordinator schedules
    training steps (a custom training loop over create_per_worker_dataset, as in
    TensorFlow's parameter-server tutorial);
  - a step is one worker's update on its own batch of --batch samples (64 by default:
    under ParameterServerStrategy num_replicas_in_sync is 1, so the tutorial's
    per-worker batch is the global batch; dtrain's async workers do the same), applied to
    the variables on the parameter servers without waiting for the other workers:
    TensorFlow's parameter-server training is always asynchronous. An epoch is
    ceil(N / batch) scheduled steps, whichever worker takes them; the learning-rate
    schedule counts these updates (optimizer.iterations);
  - each worker reads the IDX files itself and shuffles all N samples independently
    (no seed), repeated: the coordinator schedules a fixed number of steps, as the
    tutorial recommends; the workers' samples are not disjoint;
  - variables are placed round-robin over the parameter servers; with S >= 2 a
    MinSizePartitioner also splits the large fc kernel (3136x1024) over S shards
    (--no-partition turns that off);
  - test accuracy is evaluated after each epoch (and every --eval-every-steps steps) by
    the coordinator, after coordinator.join(), on a local copy of the weights read from
    the parameter servers. Evaluations count in the time to --target-accuracy (first
    step to the end of the evaluation that reached it, less the time spent fetching the
    steps' losses for the report), not in the samples/s of training.

--straggler-worker R --straggler-delay-ms D slows worker R by D ms per step: a sleep at
the start of each of its steps (a SleepDataset read inside the step function; a sleep in
the input pipeline would be hidden by the prefetching of the step's input unless longer
than the step). Each worker process runs in its own directory holding a file
`worker_index`, which the input pipeline reads (the dataset function is one graph for all
workers) and sends along with each batch; each step returns it, which gives the number of
steps each worker took.

  python tf_ps_mnist.py --workers 2 --ps 1 --epochs 1 [--json]
"""

import argparse
import faulthandler
import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tf_mwms_mnist import MEAN, STD, build_model, free_ports, load_split, read_idx  # noqa: E402

NAME = "tf_ps_mnist"
STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist", help="directory with the IDX .gz files")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--ps", type=int, default=1, help="parameter servers")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch", type=int, default=64, help="samples per update: each worker step takes a whole batch")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--warmup-epochs", type=float, default=0.2)
    p.add_argument("--weight-decay", type=float, default=5e-4)
    p.add_argument("--threads", type=int, default=1, help="intra-op threads per process")
    p.add_argument("--limit-train", type=int, default=0, help="train on the first N examples only (0: all)")
    p.add_argument("--target-accuracy", type=float, default=0.88)
    p.add_argument("--momentum", type=float, default=0.9, help="SGD (Nesterov) momentum")
    p.add_argument("--stop-at-target", action="store_true", help="stop training once the target is reached")
    p.add_argument("--eval-every-steps", type=int, default=0, help="also evaluate every K steps (0: per epoch only)")
    p.add_argument("--straggler-worker", type=int, default=-1, help="worker index to slow down")
    p.add_argument("--straggler-delay-ms", type=float, default=0.0, help="delay per step of the straggler")
    p.add_argument("--no-partition", action="store_true", help="no variable partitioner with --ps >= 2")
    p.add_argument("--json", action="store_true", help="print JSON lines instead of text")
    p.add_argument("--timeout", type=float, default=3600, help="seconds before everything is killed")
    # Internal: set by the launcher for each server process ("ps" or "worker").
    p.add_argument("--server", default="", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.workers < 1 or args.ps < 1 or args.epochs < 1 or args.threads < 1:
        p.error("--workers, --ps, --epochs and --threads must be at least 1")
    if args.straggler_delay_ms > 0 and not 0 <= args.straggler_worker < args.workers:
        p.error("--straggler-delay-ms needs --straggler-worker in [0, workers)")
    return args


def run_server(args):
    """A parameter server or worker: a tf.distribute.Server until it is killed."""
    import tensorflow as tf

    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    # inter_op_parallelism_threads=1 (tf_mwms_mnist's setting) deadlocks the first scheduled
    # steps here (TF 2.21: workers and parameter servers idle, steps never return).
    config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=args.threads,
                                      inter_op_parallelism_threads=0)
    server = tf.distribute.Server(resolver.cluster_spec(), job_name=resolver.task_type,
                                  task_index=resolver.task_id, protocol=resolver.rpc_layer or "grpc",
                                  config=config, start=True)
    server.join()


class Cluster:
    """The server processes: each in its own process group, killed with the launcher."""

    def __init__(self, args, workdir):
        self.args = args
        self.procs = []  # (name, Popen)
        self.stopping = False
        self.lock = threading.Lock()
        ports = free_ports(args.ps + args.workers + 1)
        self.spec = {"ps": [f"127.0.0.1:{p}" for p in ports[:args.ps]],
                     "worker": [f"127.0.0.1:{p}" for p in ports[args.ps:args.ps + args.workers]],
                     "chief": [f"127.0.0.1:{ports[-1]}"]}
        self.env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), OMP_WAIT_POLICY="PASSIVE",
                        TF_CPP_MIN_LOG_LEVEL="2", TF_USE_LEGACY_KERAS="1")
        self.workdir = workdir

    def start(self):
        for job in ("ps", "worker"):
            for i in range(len(self.spec[job])):
                cwd = os.path.join(self.workdir, f"{job}{i}")
                os.makedirs(cwd)
                if job == "worker":  # the input pipeline's way to know its worker
                    with open(os.path.join(cwd, "worker_index"), "w") as f:
                        f.write(str(i))
                tf_config = {"cluster": self.spec, "task": {"type": job, "index": i}}
                cmd = [sys.executable, os.path.abspath(__file__), "--server", job,
                       "--threads", str(self.args.threads)]
                proc = subprocess.Popen(cmd, cwd=cwd, env=dict(self.env, TF_CONFIG=json.dumps(tf_config)),
                                        stdout=subprocess.DEVNULL, start_new_session=True,
                                        preexec_fn=_die_with_parent)
                self.procs.append((f"{job} {i}", proc))

    def wait_listening(self, deadline):
        for job in ("ps", "worker"):
            for address in self.spec[job]:
                host, port = address.rsplit(":", 1)
                while True:
                    self.check()
                    try:
                        socket.create_connection((host, int(port)), timeout=1).close()
                        break
                    except OSError:
                        if time.monotonic() > deadline:
                            raise RuntimeError(f"{job} at {address} is not listening")
                        time.sleep(0.2)

    def check(self):
        """Raises if a server exited (unless they are being stopped)."""
        for name, proc in self.procs:
            rc = proc.poll()
            if rc is not None and not self.stopping:
                raise RuntimeError(f"{name} exited with {rc}")

    def finish(self, status, message=None):
        """Kills the servers and leaves the process at once: TensorFlow objects that go out
        of scope or the interpreter's shutdown wait on the remote workers (the
        coordinator retries lost workers indefinitely, and a function's __del__ removes it
        from every worker), so nothing may be released before this."""
        with self.lock:  # one caller kills; another one waits here for the exit
            self.stopping = True
            if message:
                print(f"{NAME}: {message}", file=sys.stderr, flush=True)
            for _, proc in self.procs:
                if proc.poll() is None:
                    try:
                        os.killpg(proc.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
            for _, proc in self.procs:
                proc.wait()
            shutil.rmtree(self.workdir, ignore_errors=True)
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(status)


def _die_with_parent():
    """In the child before exec: SIGKILL when the launcher dies (Linux prctl PR_SET_PDEATHSIG),
    and the launcher's blocked signals unblocked."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    if _prctl is not None:
        _prctl(1, signal.SIGKILL)


try:
    import ctypes

    _prctl = ctypes.CDLL(None, use_errno=True).prctl  # loaded here, not between fork and exec
except (OSError, AttributeError):
    _prctl = None


def watchdog(cluster, deadline):
    """Kills everything when a server dies or the time is up: the coordinator waits for
    lost workers to come back, and TensorFlow calls do not return to Python for that."""
    while not cluster.stopping:
        message = None
        try:
            cluster.check()
        except RuntimeError as e:
            message = str(e)
        if message is None and time.monotonic() > deadline:
            message = f"still running after {cluster.args.timeout:g} s"
        if message is not None and not cluster.stopping:
            cluster.finish(1, message)
        time.sleep(0.5)


def idx_body(tf, path, header, limit):
    """An IDX .gz file's data bytes as a uint8 vector, read on the worker."""
    data = tf.io.decode_raw(tf.io.decode_compressed(tf.io.read_file(path), "GZIP"), tf.uint8)
    return data[header:header + limit] if limit else data[header:]


def train(args, cluster):
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    import tf_keras as keras

    data_dir = os.path.abspath(args.data)
    n_train = len(read_idx(os.path.join(data_dir, "train-labels-idx1-ubyte.gz")))
    if args.limit_train:
        n_train = min(n_train, args.limit_train)
    x_test, y_test = load_split(data_dir, "t10k")
    per_worker = args.batch
    steps_per_epoch = math.ceil(n_train / per_worker)  # scheduled steps, i.e. updates
    total = steps_per_epoch * args.epochs
    warmup = int(args.warmup_epochs * steps_per_epoch)

    os.environ["TF_CONFIG"] = json.dumps({"cluster": cluster.spec, "task": {"type": "chief", "index": 0}})
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    partitioner = None
    if args.ps >= 2 and not args.no_partition:
        partitioner = tf.distribute.experimental.partitioners.MinSizePartitioner(
            min_shard_bytes=256 << 10, max_shards=args.ps)
    strategy = tf.distribute.experimental.ParameterServerStrategy(resolver, variable_partitioner=partitioner)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)

    with strategy.scope():
        keras.utils.set_random_seed(1)
        model = build_model(args.weight_decay / 2)  # d/dw (l2 * w^2) = weight_decay * w
        schedule = keras.optimizers.schedules.CosineDecay(
            initial_learning_rate=0.1 * args.lr, decay_steps=max(total - warmup, 1), alpha=0.0,
            warmup_target=args.lr, warmup_steps=warmup)
        optimizer = keras.optimizers.SGD(schedule, momentum=args.momentum, nesterov=True)
    placement = {v.name: v.device for v in model.weights}  # a sharded kernel: its shards

    train_images = os.path.join(data_dir, "train-images-idx3-ubyte.gz")
    train_labels = os.path.join(data_dir, "train-labels-idx1-ubyte.gz")
    limit = args.limit_train
    straggler, delay_us = args.straggler_worker, int(args.straggler_delay_ms * 1000)

    def dataset_fn(_input_context):
        # Runs on each worker: the paths are the launcher's, the file "worker_index" is
        # the worker's own (relative to its working directory).
        worker = tf.strings.to_number(tf.io.read_file("worker_index"), tf.int32)
        x = tf.reshape(idx_body(tf, train_images, 16, limit * 784), [-1, 28, 28, 1])
        y = tf.cast(idx_body(tf, train_labels, 8, limit), tf.int64)
        ds = (tf.data.Dataset.from_tensor_slices((x, y)).shuffle(n_train).repeat()
              .batch(per_worker, drop_remainder=True)
              .map(lambda x, y: ((tf.cast(x, tf.float32) / 255.0 - MEAN) / STD, y, worker))
              .prefetch(2))
        return ds

    def straggle(worker, x):
        """x, after a sleep of --straggler-delay-ms on the straggler: a SleepDataset read
        inside the step, since the step's input is prefetched (a sleep in the input
        pipeline only shows when it is longer than the step)."""
        from tensorflow.python.data.experimental.ops import testing

        us = tf.where(worker == straggler, tf.constant(delay_us, tf.int64), tf.constant(0, tf.int64))
        slept = tf.data.Dataset.from_tensors(us).apply(testing.sleep(us)).get_single_element()
        with tf.control_dependencies([slept]):
            return tf.identity(x)

    per_worker_dataset = coordinator.create_per_worker_dataset(
        lambda: strategy.distribute_datasets_from_function(dataset_fn))
    iterator = iter(per_worker_dataset)

    @tf.function(autograph=False)  # no data-dependent control flow
    def train_step(iterator):
        def replica_fn(x, y, worker):
            if delay_us > 0:
                x = straggle(worker, x)
            with tf.GradientTape() as tape:
                logits = model(x, training=True)
                ce = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits))
                loss = ce + tf.add_n(model.losses)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            correct = tf.reduce_sum(tf.cast(tf.equal(tf.argmax(logits, 1), y), tf.int32))
            return ce, correct, worker

        return strategy.run(replica_fn, args=next(iterator))

    # Evaluation: the coordinator's local copy of the model, the weights read from the
    # parameter servers (sharded kernels concatenated) after coordinator.join().
    eval_model = build_model(0.0)
    test_ds = tf.data.Dataset.from_tensor_slices((x_test, y_test)).batch(500).prefetch(1)

    @tf.function(autograph=False)  # no data-dependent control flow
    def eval_batch(x, y):
        logits = eval_model(x, training=False)
        ce = tf.reduce_sum(tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits))
        return ce, tf.reduce_sum(tf.cast(tf.equal(tf.argmax(logits, 1), y), tf.int32))

    def evaluate():
        for src, dst in zip(model.layers, eval_model.layers):
            if dst.weights:  # src.weights lists a sharded kernel's shards; the kernel concatenates them
                dst.set_weights([tf.convert_to_tensor(src.kernel).numpy(), tf.convert_to_tensor(src.bias).numpy()])
        loss = correct = 0
        for x, y in test_ds:
            l, c = eval_batch(x, y)
            loss += float(l)
            correct += int(c)
        return loss / len(y_test), correct / len(y_test)

    emit(args, {"layout": True, "tensorflow": tf.__version__, "keras": keras.__version__,
                "train_samples": n_train, "steps_per_epoch": steps_per_epoch, "warmup_steps": warmup,
                "partitioner": "MinSizePartitioner" if partitioner else None, "placement": placement,
                "straggler_worker": straggler if delay_us else None,
                "straggler_delay_ms": args.straggler_delay_ms if delay_us else 0})

    results = []  # RemoteValues of this epoch's steps
    bookkeeping = 0.0  # seconds spent fetching step results: off the time-to-accuracy clock
    reached = None
    step = 0
    last = {}
    start = time.perf_counter()
    for epoch in range(1, args.epochs + 1):
        train_s = 0.0
        seg = time.perf_counter()
        evaluated_at = -1
        for i in range(steps_per_epoch):
            results.append(coordinator.schedule(train_step, args=(iterator,)))
            step += 1
            due = args.eval_every_steps and step % args.eval_every_steps == 0 and i + 1 < steps_per_epoch
            if due:
                coordinator.join()
                train_s += time.perf_counter() - seg
                reached = eval_and_report(args, evaluate, epoch, step, start, bookkeeping, reached, last)
                evaluated_at = step
                if reached is not None and args.stop_at_target:
                    break
                seg = time.perf_counter()
        if evaluated_at != step:
            coordinator.join()
            train_s += time.perf_counter() - seg
        t = time.perf_counter()
        losses, corrects, workers = zip(*(r.fetch() for r in results))
        bookkeeping += time.perf_counter() - t
        counts = [sum(1 for w in workers if w == k) for k in range(args.workers)]
        steps = len(results)
        results = []
        emit(args, {"epoch": epoch, "epochs": args.epochs, "steps": steps,
                    "train_loss": float(sum(losses) / steps),
                    "train_accuracy": float(sum(corrects)) / (steps * per_worker),
                    "seconds": round(train_s, 2), "samples_per_s": round(steps * per_worker / train_s, 1),
                    "steps_per_worker": counts})
        if evaluated_at != step:
            reached = eval_and_report(args, evaluate, epoch, step, start, bookkeeping, reached, last)
        if reached is not None and args.stop_at_target:
            break
    emit(args, {"final": True, "test_loss": last["test_loss"], "test_accuracy": last["test_accuracy"],
                "steps": step, "optimizer_iterations": int(optimizer.iterations.numpy()),
                "target_accuracy": args.target_accuracy, "time_to_accuracy_s": reached,
                "tensorflow": tf.__version__})
    return strategy, coordinator, model, optimizer, iterator, train_step, eval_model, eval_batch


def eval_and_report(args, evaluate, epoch, step, start, bookkeeping, reached, last):
    t = time.perf_counter()
    test_loss, test_accuracy = evaluate()
    now = time.perf_counter()
    elapsed = now - start - bookkeeping
    if reached is None and test_accuracy >= args.target_accuracy:
        reached = round(elapsed, 2)
    last.update(test_loss=test_loss, test_accuracy=test_accuracy)
    emit(args, {"eval": True, "epoch": epoch, "step": step, "test_loss": test_loss,
                "test_accuracy": test_accuracy, "eval_seconds": round(now - t, 2),
                "elapsed_s": round(elapsed, 2)})
    return reached


def emit(args, record):
    if args.json:
        print(json.dumps({"bench": "mnist", "framework": "tensorflow", "strategy": "ParameterServerStrategy",
                          "workers": args.workers, "ps": args.ps, "threads": args.threads, "batch": args.batch,
                          "batch_per_worker": args.batch, **record}), flush=True)
    elif record.get("layout"):
        part = f", {record['partitioner']}" if record["partitioner"] else ", round-robin"
        slow = (f", worker {record['straggler_worker']} delayed {record['straggler_delay_ms']:g} ms/step"
                if record["straggler_worker"] is not None else "")
        print(f"ParameterServerStrategy: {args.workers} workers x {args.batch} samples/step, "
              f"{args.ps} ps{part}{slow}; {record['train_samples']} samples, {record['steps_per_epoch']} "
              f"steps/epoch; tensorflow {record['tensorflow']}", flush=True)
    elif record.get("eval"):
        print(f"eval at step {record['step']} (epoch {record['epoch']}): test accuracy "
              f"{100 * record['test_accuracy']:.2f}% (loss {record['test_loss']:.4f}), "
              f"{record['elapsed_s']:.1f} s since the first step (eval {record['eval_seconds']:.1f} s)", flush=True)
    elif record.get("final"):
        tta = record["time_to_accuracy_s"]
        reach = (f"reached {100 * args.target_accuracy:.2f}% test accuracy in {tta:.2f} s" if tta is not None
                 else f"did not reach {100 * args.target_accuracy:.2f}% test accuracy")
        print(f"final test accuracy: {100 * record['test_accuracy']:.2f}% (test loss {record['test_loss']:.4f}); "
              f"{reach}; tensorflow {record['tensorflow']}", flush=True)
    else:
        print(f"epoch {record['epoch']}/{record['epochs']}: train loss {record['train_loss']:.4f}, "
              f"train accuracy {100 * record['train_accuracy']:.2f}%, {record['samples_per_s']:.0f} samples/s, "
              f"{record['seconds']:.1f} s, steps per worker {record['steps_per_worker']}", flush=True)


def main():
    args = parse_args()
    if args.server:
        run_server(args)
        return 0
    # The servers start before this process imports TensorFlow (no threads at fork yet).
    os.environ.update(OMP_NUM_THREADS=str(args.threads), OMP_WAIT_POLICY="PASSIVE",
                      TF_CPP_MIN_LOG_LEVEL=os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2"), TF_USE_LEGACY_KERAS="1")
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # kill -USR1: where it hangs
    # SIGINT/SIGTERM/SIGHUP go to one thread that kills the servers: the main thread can
    # sit in TensorFlow's C++ for long, where Python's signal handlers do not run. Blocked
    # here, before any other thread exists, so every later thread inherits the mask.
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    deadline = time.monotonic() + args.timeout
    cluster = Cluster(args, tempfile.mkdtemp(prefix=NAME + "."))

    def on_signal():
        sig = signal.sigwait(STOP_SIGNALS)
        cluster.finish(128 + sig, f"{signal.Signals(sig).name}")

    try:
        cluster.start()
        threading.Thread(target=on_signal, daemon=True).start()
        threading.Thread(target=watchdog, args=(cluster, deadline), daemon=True).start()
        cluster.wait_listening(deadline)
        keep = train(args, cluster)  # noqa: F841 (kept alive: see finish)
    except Exception as e:
        traceback.print_exc()
        cluster.finish(1, f"{type(e).__name__}: {e}")  # inside the handler, see finish
    cluster.finish(0)


if __name__ == "__main__":
    main()
