"""Extrapolation of the cost model to GPU clusters: ResNet-50 data parallel on H200 nodes,
the same job laid out as pipeline + data parallel and as a parameter server, and the
published peers' setups run through the same model (standard library only).

Every hardware or model figure below is a published one or an assumption, said so next
to it; nothing here is measured on this machine.
"""
import math

import dtrain_model as m

# ---------------------------------------------------------------- ResNet-50 (v1.5)

# He et al. 2016, "Deep Residual Learning for Image Recognition", Table 1 (50-layer):
# stages of bottleneck blocks (blocks, mid channels, out channels, stride, output size);
# v1.5 (torchvision) puts the stride on the 3x3 convolution.
RESNET50_STAGES = ((3, 64, 256, 1, 56), (4, 128, 512, 2, 28), (6, 256, 1024, 2, 14), (3, 512, 2048, 2, 7))


def resnet50_layers(classes=1000):
    """Layers in forward order as (name, trainable params, forward multiply-adds per
    224x224 image, output elements per image). About 25.6 M parameters and 4.1 G
    multiply-adds (the "4.1 GFLOPs" usually quoted counts multiply-adds)."""
    layers = []

    def conv(name, cin, cout, k, out_hw):
        layers.append((name, cin * cout * k * k, cin * cout * k * k * out_hw * out_hw, cout * out_hw * out_hw))
        layers.append((name + ".bn", 2 * cout, 0, cout * out_hw * out_hw))  # gamma, beta

    conv("conv1", 3, 64, 7, 112)
    cin, hw = 64, 56  # after the 3x3/2 max pool
    for s, (blocks, mid, cout, stride, out_hw) in enumerate(RESNET50_STAGES):
        for b in range(blocks):
            name = "layer%d.%d" % (s + 1, b)
            conv(name + ".conv1", cin, mid, 1, hw)
            conv(name + ".conv2", mid, mid, 3, out_hw)
            conv(name + ".conv3", mid, cout, 1, out_hw)
            if b == 0:
                conv(name + ".downsample", cin, cout, 1, out_hw)
            cin, hw = cout, out_hw
    layers.append(("fc", 2048 * classes + classes, 2048 * classes, classes))
    return layers


def backward_buckets(layers, step_backward_ms, bucket_cap_bytes, bytes_per_param=4):
    """Gradient buckets in launch order, as PyTorch DDP builds them: layers in reverse
    (the order backward produces gradients), a bucket closed once it holds cap bytes;
    a bucket is ready when backward has passed its last layer. Backward time is spread
    over layers by their forward multiply-adds (backward costs ~2x forward per layer)."""
    total = float(sum(l[2] for l in layers))
    buckets, size, t = [], 0, 0.0
    for _, params, macs, _ in reversed(layers):
        t += step_backward_ms * macs / total
        size += params * bytes_per_param
        if size >= bucket_cap_bytes:
            buckets.append({"bytes": size, "ready_ms": t})
            size = 0
    if size:
        buckets.append({"bytes": size, "ready_ms": t})
    return buckets


# ---------------------------------------------------------------- hardware

# H200 SXM nodes (DGX/HGX H200): 8 GPUs on NVLink 4 / NVSwitch, NCCL all-reduce bus
# bandwidth ~450 GB/s inside a node (NVIDIA, H100/H200 datasheets: 900 GB/s NVLink per
# GPU, both directions); one 400 Gbit/s ConnectX-7 NIC per GPU (8 rails) between nodes,
# of which NCCL reaches ~90% (an assumption). Latencies: a few microseconds per message
# (assumed 3 us on NVLink, 5 us on InfiniBand).
H200_NODE = {"name": "H200 x8 / 8x400G IB", "gpus_per_node": 8, "nics_per_node": 8,
             "nvlink_Bps": 450e9, "nic_Bps": 400e9 / 8 * 0.9, "alpha_nvlink_us": 3.0, "alpha_net_us": 5.0}

# Per-GPU ResNet-50 training throughput on an H100/H200 (bf16, NHWC, DALI input): ~3,000
# images/s is the order of MLPerf Training closed-division results divided by GPU count
# (an assumption stated as such; it is ~7% of the 989 TFLOP/s dense bf16 peak: ResNet-50
# is bound by memory traffic in BN/ReLU, not by the tensor cores).
H200_RESNET50_IMAGES_PER_S = 3000.0
RESNET50_FORWARD_SHARE = 1.0 / 3.0  # forward : backward FLOPs = 1 : 2

# Goyal et al. 2017, "Accurate, Large Minibatch SGD: Training ImageNet in 1 Hour": 256
# Tesla P100 in 32 DGX-1 servers (8 per server, NVLink inside), 50 Gbit/s Ethernet per
# server, Caffe2 + Gloo (recursive halving/doubling between servers), 32 images per GPU;
# ~90% scaling efficiency from 8 to 256 GPUs. 90 epochs in ~1 hour = ~14k iterations of
# 8k images, ~0.26 s each, so ~0.23 s of compute per step at 90% (derived here).
GOYAL_NODE = {"name": "DGX-1 P100 x8 / 50GbE", "gpus_per_node": 8, "nics_per_node": 1,
              "nvlink_Bps": 20e9, "nic_Bps": 50e9 / 8 * 0.9, "alpha_nvlink_us": 10.0, "alpha_net_us": 30.0}
GOYAL = {"label": "Goyal et al. 2017: ResNet-50, 256 P100", "gpus": 256, "efficiency": 0.90,
         "node": GOYAL_NODE, "compute_ms": 230.0, "batch": 32, "param_bytes": 25.6e6 * 4}

# Sergeev & Del Balso 2018, "Horovod: fast and easy distributed deep learning in
# TensorFlow": 128 servers with 4 Pascal P100 each, 25 Gbit/s RoCE, ~90% scaling
# efficiency for ResNet-101 (44.5 M parameters) at 512 GPUs; NCCL 2 ring, 64 MB tensor
# fusion. Per-GPU ResNet-101 speed assumed ~130 images/s at batch 64 (fp32 TF on P100).
HOROVOD_NODE = {"name": "4x P100 / 25G RoCE", "gpus_per_node": 4, "nics_per_node": 1,
                "nvlink_Bps": 10e9, "nic_Bps": 25e9 / 8 * 0.9, "alpha_nvlink_us": 10.0, "alpha_net_us": 10.0}
HOROVOD = {"label": "Horovod 2018: ResNet-101, 512 P100", "gpus": 512, "efficiency": 0.90,
           "node": HOROVOD_NODE, "compute_ms": 64 / 130.0 * 1e3, "batch": 64, "param_bytes": 44.5e6 * 4}


# ---------------------------------------------------------------- collectives on a cluster

def hierarchical_allreduce_us(nbytes, node, nodes, gpus_per_node=None, algorithm="best"):
    """Reduce-scatter inside the node (NVLink), all-reduce of each GPU's 1/g shard between
    nodes, all-gather inside the node. Between nodes: ring (2(N-1) latency steps) or tree
    (2 log2 N steps), both moving ~2x the shard per NIC; "best" is the faster, as NCCL
    picks. With fewer NICs than GPUs a NIC carries several shards."""
    g = gpus_per_node or node["gpus_per_node"]
    intra = 0.0
    if g > 1:
        intra = m.ring_allreduce_us(nbytes, g, node["alpha_nvlink_us"], 1e6 / node["nvlink_Bps"])
    if nodes <= 1:
        return intra
    per_nic = nbytes / min(g, node["nics_per_node"])
    beta = 1e6 / node["nic_Bps"]
    ring = m.ring_allreduce_us(per_nic, nodes, node["alpha_net_us"], beta)
    tree = 2.0 * math.ceil(math.log2(nodes)) * node["alpha_net_us"] + 2.0 * per_nic * beta
    inter = {"ring": ring, "tree": tree, "best": min(ring, tree)}[algorithm]
    return intra + inter


# ---------------------------------------------------------------- layouts

def dp_cluster(gpus, node, compute_ms, batch, layers=None, param_bytes=None, bucket_cap=25e6, algorithm="best"):
    """Data parallel over `gpus`: weak scaling at `batch` per GPU. Returns step ms, exposed
    ms, samples/s and efficiency (against one GPU with no communication)."""
    g = min(gpus, node["gpus_per_node"])
    nodes = max(1, gpus // node["gpus_per_node"])
    backward = compute_ms * (1.0 - RESNET50_FORWARD_SHARE)
    if layers is not None:
        buckets = backward_buckets(layers, backward, bucket_cap)
    else:  # a model without a layer list: equal buckets, ready evenly through backward
        count = max(1, int(math.ceil(param_bytes / bucket_cap)))
        buckets = [{"bytes": param_bytes / count, "ready_ms": backward * (i + 1) / count} for i in range(count)]
    if gpus == 1:
        buckets = []
    step, exposed = m.dp_step_ms(compute_ms, backward, buckets,
                                 lambda n: hierarchical_allreduce_us(n, node, nodes, g, algorithm) / 1e3)
    return _result(gpus, batch, compute_ms, step, exposed)


def pipeline_cluster(gpus, node, compute_ms, batch, layers, stages=4, micro_batches=16, act_bytes=2):
    """Pipeline of `stages` GPUs inside a node (cut where forward FLOPs are balanced) x
    gpus/stages data-parallel replicas. A replica takes stages x batch images per step,
    so each GPU does the same work as in data parallel; the stage's gradient all-reduce
    (its own parameters only, among the replicas) runs after the flush, not overlapped."""
    total = float(sum(l[2] for l in layers))
    cuts, acc, k = [], 0.0, 1
    for i, l in enumerate(layers):
        acc += l[2]
        if k < stages and acc >= total * k / stages:
            cuts.append(i)
            k += 1
    bounds = [-1] + cuts + [len(layers) - 1]
    stage_params = [sum(l[1] for l in layers[bounds[j] + 1:bounds[j + 1] + 1]) for j in range(stages)]
    micro = stages * batch / micro_batches
    send_bytes = max(layers[c][3] for c in cuts) * act_bytes * micro if cuts else 0.0
    send_ms = (node["alpha_nvlink_us"] + send_bytes * 1e6 / node["nvlink_Bps"]) / 1e3
    step = m.pipeline_step_ms(compute_ms, stages, micro_batches, send_ms)
    replicas_per_node = max(1, node["gpus_per_node"] // stages)
    nodes = max(1, gpus // node["gpus_per_node"])
    if gpus // stages > 1:
        step += hierarchical_allreduce_us(max(stage_params) * 4, node, nodes, replicas_per_node) / 1e3
    return _result(gpus, batch, compute_ms, step, step - compute_ms)


def ps_cluster(gpus, node, compute_ms, batch, param_bytes, servers, server_Bps=400e9 / 8 * 0.9):
    """Synchronous parameter servers: every GPU pushes its fp32 gradient and pulls the
    parameters each step, not overlapped with compute; `servers` CPU hosts with one
    400 Gbit/s NIC each (an assumption: BytePS-style servers)."""
    if gpus == 1:
        return _result(gpus, batch, compute_ms, compute_ms, 0.0)
    comm = m.ps_comm_ms(param_bytes, gpus, servers, server_Bps, node["nic_Bps"], node["alpha_net_us"] / 1e3, 2)
    step = m.ps_sync_step_ms(compute_ms, comm)
    return _result(gpus, batch, compute_ms, step, comm)


def _result(gpus, batch, compute_ms, step, exposed):
    return {"gpus": gpus, "step_ms": step, "exposed_ms": exposed,
            "samples_per_s": gpus * batch / (step / 1e3), "efficiency": compute_ms / step}


GPU_COUNTS = (8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)


def resnet50_h200(batch, gpus_list=GPU_COUNTS, images_per_s=H200_RESNET50_IMAGES_PER_S):
    """Every layout's results for ResNet-50 on H200 nodes at `batch` images per GPU."""
    layers = resnet50_layers()
    params = sum(l[1] for l in layers) * 4
    compute = batch / images_per_s * 1e3
    node = H200_NODE
    layouts = {
        "data parallel (NCCL ring/tree)": lambda g: dp_cluster(g, node, compute, batch, layers),
        "data parallel (ring only)": lambda g: dp_cluster(g, node, compute, batch, layers, algorithm="ring"),
        "pipeline 4 stages x DP (M=16)": lambda g: pipeline_cluster(g, node, compute, batch, layers),
        "parameter server (1 server / node)": lambda g: ps_cluster(g, node, compute, batch, params, max(1, g // 8)),
        "parameter server (16 servers)": lambda g: ps_cluster(g, node, compute, batch, params, 16),
    }
    return {name: [fn(g) for g in gpus_list] for name, fn in layouts.items()}


def peer_predictions():
    """The model on each published peer's own hardware, beside its published figure."""
    out = []
    for peer in (GOYAL, HOROVOD):
        node = peer["node"]
        algorithm = "best" if peer is GOYAL else "ring"  # Gloo halving/doubling vs NCCL 2 ring
        res = dp_cluster(peer["gpus"], node, peer["compute_ms"], peer["batch"],
                         param_bytes=peer["param_bytes"], bucket_cap=64e6, algorithm=algorithm)
        out.append(dict(peer, model_efficiency=res["efficiency"], model_exposed_ms=res["exposed_ms"]))
    return out
