"""What the PyTorch peers share: the thread environment and the models dtrain benchmarks.

Nothing here imports torch at module level, so that a script can import this module, call
set_thread_environment() and only then import torch (OpenMP reads its settings once, at
load). Works with torch 1.13 (Debian's python3-torch) as well as current releases.
"""

import os

MODELS = ("mlp", "mlp_50m", "cnn", "resnet20_cifar", "resnet18_cifar", "resnet18_224", "resnet50_224")


def require_at_least(parser, args, **minimums):
    """Ends with argparse's usage error unless every named option is at least its minimum,
    e.g. require_at_least(p, args, steps=1, warmup=0)."""
    for name, minimum in minimums.items():
        value = getattr(args, name)
        if value < minimum:
            parser.error(f"--{name.replace('_', '-')} must be at least {minimum}, got {value}")


def set_thread_environment(threads, wait_policy="PASSIVE"):
    """Must run before torch is imported. Every BLAS torch may call gets the same thread
    count: without OPENBLAS_NUM_THREADS, Debian's torch runs its Linear layers on OpenBLAS's
    own pool (all hardware threads) while claiming `threads`. PASSIVE (the default here)
    makes idle OpenMP threads sleep instead of spinning, which on a shared 2-vCPU machine is
    worth up to 10x; wait_policy=None leaves the OpenMP runtime's own default."""
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = str(threads)
    if wait_policy is None:
        os.environ.pop("OMP_WAIT_POLICY", None)
    else:
        os.environ["OMP_WAIT_POLICY"] = wait_policy


def build_model(name):
    """(module, shape of one input sample, number of classes) of the named model, with
    PyTorch's default initialization (draws from torch's global generator)."""
    from torch import nn

    if name == "mlp":
        return mlp((512, 512)), (1, 28, 28), 10
    if name == "mlp_50m":  # dtrain's nn::mlp(1768, 16 x 1768, 10): 50.06M parameters
        return mlp((1768,) * 16, inputs=1768), (1768,), 10
    if name == "cnn":  # dtrain's nn::lenet_cnn without dropout
        return nn.Sequential(nn.Conv2d(1, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                             nn.Linear(3136, 1024), nn.ReLU(), nn.Linear(1024, 10)), (1, 28, 28), 10
    if name == "resnet20_cifar":  # dtrain's nn::resnet_cifar(20)
        return resnet_cifar(20, classes=10), (3, 32, 32), 10
    if name == "resnet18_cifar":
        return resnet18(imagenet_stem=False, classes=10), (3, 32, 32), 10
    if name == "resnet18_224":
        return resnet18(imagenet_stem=True, classes=1000), (3, 224, 224), 1000
    if name == "resnet50_224":  # the same layout as dtrain's nn::resnet(50); needs torchvision
        import torchvision

        return torchvision.models.resnet50(num_classes=1000), (3, 224, 224), 1000
    raise ValueError(f"unknown model '{name}' (expected one of {', '.join(MODELS)})")


def mlp(hidden, inputs=784, classes=10):
    """dtrain's nn::mlp: Flatten, then Linear + ReLU for each hidden width, then a Linear to
    the classes; the same flat layer list, so that pipeline cut indices mean the same."""
    from torch import nn

    layers, width = [nn.Flatten()], inputs
    for h in hidden:
        layers += [nn.Linear(width, h), nn.ReLU()]
        width = h
    return nn.Sequential(*layers, nn.Linear(width, classes))


def balanced_cuts(sizes, stages):
    """The stages - 1 cut indices that split a flat layer list with these parameter counts
    into contiguous, non-empty stages (stage s holds layers [cut[s-1], cut[s])) with the
    smallest possible largest stage. Of the optimal splits it returns the one in which each
    stage, first to last, takes as many layers as it can, so that parameter-free layers
    (activations, pooling) stay with the layer before them."""
    n = len(sizes)
    if not 1 <= stages <= n:
        raise ValueError(f"cannot cut {n} layers into {stages} non-empty stages")

    def greedy(cap):  # the cuts with every stage at most cap, or None
        cuts, start = [], 0
        for s in range(stages - 1):
            end, total, limit = start, 0, n - (stages - 1 - s)  # a layer left for each later stage
            while end < limit and total + sizes[end] <= cap:
                total += sizes[end]
                end += 1
            if end == start:
                return None
            cuts.append(end)
            start = end
        return cuts if sum(sizes[start:]) <= cap else None

    # The optimum is the sum of some contiguous run; greedy() succeeds for every cap from it up.
    caps = sorted({sum(sizes[i:j]) for i in range(n) for j in range(i + 1, n + 1)})
    lo, hi = 0, len(caps) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if greedy(caps[mid]) is None:
            lo = mid + 1
        else:
            hi = mid
    return greedy(caps[lo])


def basic_block(cin, cout, stride):
    """ResNet's basic block: two 3x3 convs with batch norm, a 1x1 projection shortcut where
    the shape changes (dtrain's nn::basic_block)."""
    from torch import nn

    class BasicBlock(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.relu = nn.ReLU(inplace=True)
            self.downsample = None
            if stride != 1 or cin != cout:
                self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            identity = x if self.downsample is None else self.downsample(x)
            out = self.relu(self.bn1(self.conv1(x)))
            return self.relu(self.bn2(self.conv2(out)) + identity)

    return BasicBlock(cin, cout, stride)


def resnet18(imagenet_stem, classes):
    """torchvision's resnet18 layout (basic blocks 2-2-2-2), written out so that the
    benchmarks need no torchvision. The ImageNet stem is a 7x7 stride-2 conv and a 3x3
    stride-2 max-pool (224x224 input); the CIFAR stem a 3x3 stride-1 conv without pooling
    (32x32 input)."""
    from torch import nn

    if imagenet_stem:
        layers = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True),
                  nn.MaxPool2d(3, 2, 1)]
    else:
        layers = [nn.Conv2d(3, 64, 3, 1, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True)]
    cin = 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        layers += [basic_block(cin, cout, stride), basic_block(cout, cout, 1)]
        cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, classes)]
    return nn.Sequential(*layers)


def run_ranks(worker, ranks, args):
    """Runs worker(rank, world, args) on every rank: the ranks torch.distributed.run or mpirun
    started (their environment names them; mpirun's need MASTER_ADDR and MASTER_PORT set), or
    `ranks` processes spawned here on localhost."""
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        worker(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), args)
        return
    if "OMPI_COMM_WORLD_RANK" in os.environ and "MASTER_ADDR" in os.environ:  # under mpirun (emulated hosts)
        worker(int(os.environ["OMPI_COMM_WORLD_RANK"]), int(os.environ["OMPI_COMM_WORLD_SIZE"]), args)
        return
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    mp.spawn(worker, args=(ranks, args), nprocs=ranks, join=True)


def set_gloo_environment(threads):
    """set_thread_environment, and gloo on the loopback interface (the ranks share this host).
    Must run before torch is imported."""
    set_thread_environment(threads)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")


def leave(code=0):
    """Ends a rank after its results are out: the process group is destroyed, then the process
    leaves without the interpreter's and C++ static teardown, where in about one run of ten
    torch 2.15's gloo threads abort ("terminate called without an active exception",
    SIGABRT), which would fail the whole run."""
    import sys

    import torch.distributed as dist

    dist.destroy_process_group()
    sys.stdout.flush()
    os._exit(code)


def resnet_cifar(depth, classes=10):
    """He et al.'s CIFAR ResNet (depth 6n + 2: 16, 32, 64 channels, n blocks each), as dtrain's
    nn::resnet_cifar: a 3x3 stem, projection shortcuts where the shape changes."""
    from torch import nn

    n = (depth - 2) // 6
    layers, cin = [nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU(inplace=True)], 16
    for stage in range(3):
        width = 16 << stage
        for b in range(n):
            layers.append(basic_block(cin, width, 2 if stage > 0 and b == 0 else 1))
            cin = width
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes)]
    return nn.Sequential(*layers)
