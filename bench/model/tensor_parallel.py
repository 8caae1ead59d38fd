"""Cost model of tensor parallelism (Megatron layout) for a GPT, with and without sequence
parallelism (Python standard library only).

Per transformer layer and micro-batch of B sequences of T tokens, width d, h heads:
  * matmul FLOPs, forward: 24 B T d^2 (qkv 6, proj 2, fc 8, proj 8) + 4 B T^2 d (scores and
    their product with V, the causal half not skipped, as Megatron counts); a step is forward
    + backward (2x forward) = 3x, or 4x with full activation recomputation. The lm_head adds
    2 B T d V forward (3x per step). Tensor parallelism splits all of these over tp ranks.
  * memory-bound elementwise work, as bytes moved: outside the tensor-parallel regions (two
    LayerNorms, two residual adds, two dropouts when training with dropout) every rank
    repeats the whole B T d activation under plain TP; sequence parallelism splits it over tp.
    Inside them (softmax and attention dropout over B h T^2 scores, GELU over B T 4d) it is
    split either way. The optimizer's update traffic per parameter is split too.
  * communication (no overlap with compute, as in Megatron-LM 2019):
      plain TP: 2 all-reduces of B T d elements forward (after attention's and the MLP's
        row-parallel projections) and 2 backward (the gradients of their column-parallel
        inputs); with recomputation the 2 forward ones again;
      SP: the same volume as all-gather + reduce-scatter pairs: forward 2 all-gathers (the
        normed input of attention and of the MLP) and 2 reduce-scatters (their outputs),
        backward the mirror (2 reduce-scatters, 2 all-gathers), so 4 + 4 per layer;
      outside the layers: the vocabulary-parallel embedding (all-reduce forward, or a
        reduce-scatter + all-gather with SP) and the lm_head's input (all-reduce backward, or
        an all-gather + reduce-scatter with SP), and the vocabulary-parallel cross-entropy's
        three all-reduces of B T fp32 values (max, sum of exponentials, target logit).
    A ring all-reduce of n bytes on t ranks costs 2(t-1) alpha + 2(t-1)/t n / busbw; an
    all-gather or reduce-scatter of a full tensor of n bytes costs half that.
Efficiency: strong scaling (one model, one batch): t(1) / (tp t(tp)); weak scaling as
Megatron-LM reports it (the model grows with tp): per-GPU FLOP rate at tp over that at 1,
(F(tp) / t(tp)) / (tp F(1) / t(1)), which is t(1) / (tp t(tp)) when F(tp) = tp F(1).

Every hardware figure below is a published one or an assumption, said so next to it.
"""
import math
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dtrain_model as dm  # noqa: E402  (all-reduce fits from bench/results)

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "results")


# ---------------------------------------------------------------- the model's work

def gpt(layers, d, heads, T, B, V, dropout=False, recompute=False, act_bytes=2, params=None, fused_attention=False):
    """A GPT configuration: B sequences of T tokens per step (per tensor-parallel group).
    fused_attention: the scores never reach memory (flash attention): no softmax traffic."""
    return {"layers": layers, "d": d, "heads": heads, "T": T, "B": B, "V": V, "dropout": dropout,
            "recompute": recompute, "act_bytes": act_bytes, "params": params, "fused_attention": fused_attention}


def gemms(c, tp):
    """One rank's GEMMs of one layer's forward as (count, M, K, N), batched ones counted:
    qkv, proj, fc, proj2 (column- and row-parallel), then the heads' scores and their
    product with V (h / tp heads per rank)."""
    BT, d, T = c["B"] * c["T"], c["d"], c["T"]
    hd = d // c["heads"]
    local_heads = c["B"] * c["heads"] // tp
    return [(1, BT, d, 3 * d // tp), (1, BT, d // tp, d), (1, BT, d, 4 * d // tp), (1, BT, 4 * d // tp, d),
            (local_heads, T, hd, T), (local_heads, T, T, hd)]


def gemm_s(count, M, K, N, hw, act_bytes):
    """A GEMM's time: its FLOPs at the matmul efficiency plus its operands' and result's
    traffic at memory bandwidth (a sum, not a roofline maximum: narrow GEMMs lose to both)."""
    return count * (2.0 * M * K * N / (hw["peak_flops"] * hw["mm_eff"])
                    + act_bytes * (M * K + K * N + M * N) / hw["mem_Bps"])


def param_count(c):
    return c["layers"] * 12 * c["d"] ** 2 + c["V"] * c["d"] + c["T"] * c["d"]


def layer_forward_flops(c):
    B, T, d = c["B"], c["T"], c["d"]
    return 24.0 * B * T * d * d + 4.0 * B * T * T * d


def step_flops(c):
    """Model FLOPs of one step (the figure a FLOP/s rate is quoted in)."""
    k = 4.0 if c["recompute"] else 3.0
    return c["layers"] * k * layer_forward_flops(c) + 3.0 * 2.0 * c["B"] * c["T"] * c["d"] * c["V"]


# Element accesses per element of one forward pass (reads + writes), an assumption of
# unfused kernels: LayerNorm 2, residual add 3, dropout 3 (read, write, mask).
REPLICATED_ACCESSES = 2 * 2 + 2 * 3
DROPOUT_ACCESSES = 2 * 3
SOFTMAX_ACCESSES = 3  # scale + mask + softmax, read and write (partly fused)
GELU_ACCESSES = 2
OPTIMIZER_BYTES_PER_PARAM = 20  # Adam with fp32 master weights: read and write weight, m, v, grad (an assumption)


def elementwise_bytes(c):
    """(replicated, split) bytes moved per layer per step by memory-bound kernels."""
    B, T, d, h, b = c["B"], c["T"], c["d"], c["heads"], c["act_bytes"]
    k = 4.0 if c["recompute"] else 3.0  # backward touches about twice the forward's bytes
    repl = REPLICATED_ACCESSES + (DROPOUT_ACCESSES if c["dropout"] else 0)
    scores = 0 if c["fused_attention"] else SOFTMAX_ACCESSES + (3 if c["dropout"] else 0)
    return (k * repl * B * T * d * b,
            k * (scores * B * h * T * T + GELU_ACCESSES * B * T * 4 * d) * b)


# ---------------------------------------------------------------- collectives

def allreduce_s(nbytes, t, link):
    if t <= 1:
        return 0.0
    return 2 * (t - 1) * link["alpha_s"] + 2.0 * (t - 1) / t * nbytes / link["busbw_Bps"]


def gather_s(nbytes, t, link):
    """An all-gather or reduce-scatter whose full tensor is nbytes."""
    if t <= 1:
        return 0.0
    return (t - 1) * link["alpha_s"] + (t - 1.0) / t * nbytes / link["busbw_Bps"]


def comm_s(c, tp, sp, link):
    """Communication per step: (seconds, number of collectives)."""
    if tp <= 1:
        return 0.0, 0
    act = c["B"] * c["T"] * c["d"] * c["act_bytes"]
    L = c["layers"]
    if sp:
        per_layer = 4 + (2 if c["recompute"] else 0)  # all-gathers; as many reduce-scatters
        n = 2 * per_layer * L + 4
        t = (per_layer * L + 2) * (gather_s(act, tp, link) * 2)
    else:
        per_layer = 4 + (2 if c["recompute"] else 0)
        n = per_layer * L + 2
        t = n * allreduce_s(act, tp, link)
    ce = 3 * allreduce_s(c["B"] * c["T"] * 4, tp, link)
    return t + ce, n + 3


# ---------------------------------------------------------------- step time

def step_time(c, tp, hw, link, sp=False):
    """One step's time on one rank of a tp group: a dict of its parts (seconds)."""
    k = 4.0 if c["recompute"] else 3.0  # backward: two GEMMs of each forward one's size
    b = c["act_bytes"]
    mm = c["layers"] * k * sum(gemm_s(*g, hw, b) for g in gemms(c, tp))
    mm += 3.0 * gemm_s(1, c["B"] * c["T"], c["d"], c["V"] // tp, hw, b)  # lm_head
    repl, split = elementwise_bytes(c)
    ew = c["layers"] * (repl / (tp if sp else 1) + split / tp) / hw["mem_Bps"]
    params = c["params"] or param_count(c)
    opt = params / tp * OPTIMIZER_BYTES_PER_PARAM / hw["mem_Bps"]
    comm, n = comm_s(c, tp, sp, link)
    total = mm + ew + opt + comm
    return {"matmul": mm, "elementwise": ew, "optimizer": opt, "comm": comm, "collectives": n, "total": total}


def strong_efficiency(c, tp, hw, link, sp=False):
    return step_time(c, 1, hw, link)["total"] / (tp * step_time(c, tp, hw, link, sp)["total"])


def weak_efficiency(c1, t1, cn, tn, n):
    """Megatron-LM's weak scaling: FLOP rate per GPU at n over that at 1."""
    return (step_flops(cn) / tn) / (n * step_flops(c1) / t1)


def calibrate_mm_eff(c, hw, target_flops_per_s):
    """The matmul efficiency at which the model's one-GPU step reaches a published rate
    (bisection: the step time falls as the efficiency rises)."""
    t_target = step_flops(c) / target_flops_per_s
    lo, hi = 1e-3, 1.0
    if step_time(c, 1, dict(hw, mm_eff=hi), None)["total"] > t_target:
        raise ValueError("the published rate is out of the model's reach")
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if step_time(c, 1, dict(hw, mm_eff=mid), None)["total"] > t_target:
            lo = mid
        else:
            hi = mid
    return hi


# ---------------------------------------------------------------- Megatron-LM 2019

# Shoeybi et al. 2019, "Megatron-LM" (arXiv 1909.08053), Table 1: GPT-2 configurations of
# the scaling study, hidden size per head 96, sequence 1024, vocabulary padded to 51,200,
# batch 8 per model-parallel group; weak scaling against the 1.2B model on one GPU, which
# sustains 39 TFLOP/s ("30% of the theoretical peak" of a DGX-2H V100). Figure 5's bar
# labels for 1/2/4/8-way model parallelism: 100%, 95%, 82%, 77% (the text: "8-way ...
# achieves 77% of linear scaling"); model+data on 64..512 GPUs 96%, 83%, 79%, 74% ("74%
# scaling" at 512; the abstract's 76% is 15.1 PFLOP/s over 512 x 39 TFLOP/s). The figure's
# text as extracted gives 95% and 96% for the 2-GPU and the 64-GPU bars without saying which
# is which: 2-way may be 96%. (The "91/87/80%" often quoted are the later MegatronLM v1.0
# blog post's 90.7/86.5/79.6% with a 62.4 TFLOP/s baseline and 1.2B-8.7B models.) Appendix D: Table 8, the 1.2B model at batch 8 on 1/2/4/8
# GPUs (strong scaling): speedup 1.0, 1.64, 2.34, 2.98; Table 7, the 8.3B model on 8 GPUs
# with 16/24/32 heads: 82%/80%/77%. Activation checkpointing after every layer (the paper
# cites Chen et al. 2016; an assumption here that it was on): 4x forward per step.
MEGATRON_CONFIGS = [  # (GPUs, params, hidden, heads, layers, published weak-scaling efficiency)
    (1, 1.2e9, 1536, 16, 40, 1.00),
    (2, 2.5e9, 1920, 20, 54, 0.95),
    (4, 4.2e9, 2304, 24, 64, 0.82),
    (8, 8.3e9, 3072, 32, 72, 0.77),
]
MEGATRON_STRONG = {1: 1.0, 2: 1.64, 4: 2.34, 8: 2.98}
MEGATRON_HEADS = {16: 0.82, 24: 0.80, 32: 0.77}
MEGATRON_BASELINE_FLOPS = 39e12

# DGX-2H: V100 SXM3 32GB; 125 TFLOP/s fp16 tensor-core peak (the V100 datasheet; the paper's
# "39 TFLOP/s = 30% of peak" implies ~130 for the DGX-2H's higher-clocked parts); HBM2
# 900 GB/s, of which ~80% reached by elementwise kernels (an assumption). NVSwitch: 300 GB/s
# per GPU in both directions together (the paper); NCCL all-reduce bus bandwidth assumed
# 120 GB/s (80% of one direction's 150), alpha 5 us per ring step (an assumption).
V100_DGX2H = {"name": "V100 DGX-2H", "peak_flops": 125e12, "mm_eff": None, "mem_Bps": 0.8 * 900e9}
NVSWITCH_V100 = {"name": "NVSwitch (V100)", "busbw_Bps": 120e9, "alpha_s": 5e-6}


def megatron_config(hidden, heads, layers, params, B=8):
    return gpt(layers, hidden, heads, 1024, B, 51200, dropout=True, recompute=True, act_bytes=2, params=params)


def megatron_check():
    """Rows (gpus, model weak efficiency, published, parts of the step) for Figure 5, then
    the strong-scaling and heads checks."""
    c1 = megatron_config(*MEGATRON_CONFIGS[0][2:5], MEGATRON_CONFIGS[0][1])
    hw = dict(V100_DGX2H, mm_eff=calibrate_mm_eff(c1, V100_DGX2H, MEGATRON_BASELINE_FLOPS))
    t1 = step_time(c1, 1, hw, NVSWITCH_V100)["total"]
    weak = []
    for gpus, params, hidden, heads, layers, published in MEGATRON_CONFIGS:
        c = megatron_config(hidden, heads, layers, params)
        parts = step_time(c, gpus, hw, NVSWITCH_V100)
        weak.append((gpus, weak_efficiency(c1, t1, c, parts["total"], gpus), published, parts))
    strong = []
    for n in (1, 2, 4, 8):
        tn = step_time(c1, n, hw, NVSWITCH_V100)["total"]
        strong.append((n, t1 / tn, MEGATRON_STRONG[n], t1 / MEGATRON_STRONG[n] - tn))
    heads = []
    for h, published in MEGATRON_HEADS.items():
        c = megatron_config(3072, h, 72, 8.3e9)
        heads.append((h, weak_efficiency(c1, t1, c, step_time(c, 8, hw, NVSWITCH_V100)["total"], 8), published))
    return hw, weak, strong, heads


# ---------------------------------------------------------------- an 8-GPU NVLink node today

# H100 SXM / H200 SXM: 989 TFLOP/s dense bf16 (NVIDIA datasheets); HBM3 3.35 TB/s (H100),
# HBM3e 4.8 TB/s (H200), ~80% reached (an assumption); NVLink 4 through NVSwitch, 900 GB/s per
# GPU both directions, NCCL all-reduce bus bandwidth ~450 GB/s (gpu_cluster.H200_NODE's
# figure), 3 us per ring step. Matmul efficiency 50% of peak for this GPT's GEMMs at tp=1, an
# assumption (large GEMMs reach 60-70%; at tp=8 the per-GPU GEMMs are 8x narrower and reach
# less, which this constant-efficiency model does not see: read its tp=8 figures as an upper
# bound).
H100 = {"name": "H100 SXM", "peak_flops": 989e12, "mm_eff": 0.5, "mem_Bps": 0.8 * 3.35e12}
H200 = {"name": "H200 SXM", "peak_flops": 989e12, "mm_eff": 0.5, "mem_Bps": 0.8 * 4.8e12}
NVLINK4 = {"name": "NVLink 4 / NVSwitch", "busbw_Bps": 450e9, "alpha_s": 3e-6}
# GPT-2 XL: 48 layers, width 1600, 25 heads, vocabulary 50,257 (Radford et al. 2019); 25
# heads do not split 8 ways, so 32 heads of 50 here; vocabulary padded to 50,304; sequence
# 1024, batch 8 per tensor-parallel group, bf16, no dropout, no recomputation, fused (flash)
# attention: the scores stay on chip.
GPT2_XL = gpt(48, 1600, 32, 1024, 8, 50304, dropout=False, recompute=False, act_bytes=2, fused_attention=True)


def node_prediction(c=GPT2_XL, gpus=(1, 2, 4, 8)):
    out = []
    for hw in (H100, H200):
        for tp in gpus:
            for sp in ((False, True) if tp > 1 else (False,)):
                parts = step_time(c, tp, hw, NVLINK4, sp)
                out.append((hw["name"], tp, sp, parts, strong_efficiency(c, tp, hw, NVLINK4, sp)))
    return out


# ---------------------------------------------------------------- this machine (CPU)

# One vCPU of the machine the benches ran on: ~204 GFLOP/s fp32 FMA peak (docs/DESIGN.md,
# "Targets"), small GEMMs of this GPT at ~40% of it (an assumption), ~10 GB/s of memory
# traffic per core for elementwise kernels (an assumption).
CPU_CORE = {"name": "1 vCPU", "peak_flops": 204e9, "mm_eff": 0.4, "mem_Bps": 10e9}
# gloo's all-reduce between 2 processes on this machine, measured with torch 2.15
# (torch.distributed.all_reduce of 16 kB to 1 MB, median of 50 after a barrier, the machine
# busy with a build: load ~2.3): ~295 us at 16 kB, ~1390 us at 1 MB -> alpha ~140 us per ring
# step, bus bandwidth ~0.94 GB/s.
GLOO_2RANKS = {"name": "gloo, 2 processes", "busbw_Bps": 0.94e9, "alpha_s": 140e-6}


def dtrain_link(ranks=2, nbytes=1 << 18, results=RESULTS):
    """dtrain's all-reduce on this machine from bench/results' bench_allreduce lines
    (dtrain_model's fit at the message size of one activation), or None."""
    try:
        fits = dm.fit_allreduce(dm.allreduce_points(dm.read_records(results)))
    except OSError:
        return None
    fit = dm.find_fit(fits, dm.DP_IMPLS, dm.LOCAL_LINK, ranks)
    if fit is None:
        return None
    alpha_us, beta_us = fit.alpha_beta(nbytes)
    return {"name": "dtrain %s, %d ranks (bench/results fit)" % (fit.impl, ranks), "alpha_s": alpha_us * 1e-6,
            "busbw_Bps": 1e6 / beta_us if beta_us > 0 else float("inf")}


def cpu_check(measured, c, link, capacity, label, vcpus=2, hw=CPU_CORE):
    """Predicted against measured tokens/s on this machine. measured: {"tp1": tokens/s,
    "tp2": ..., "tp2sp": ..., "tp4": ...} (any subset with tp1); capacity: the machine's
    two-process capacity (two one-process runs at once over one alone). The tp=1 point is
    the input: its step time is split into the part tensor parallelism divides and the part
    it repeats in the model's proportions; each of tp processes runs at capacity / tp of a
    core when tp > capacity; communication comes from `link`. Returns rows (point, measured,
    predicted, error, the residual step time the model leaves out, collectives per step)."""
    tokens = c["B"] * c["T"]
    t1 = tokens / measured["tp1"]
    one = step_time(c, 1, hw, link)
    repl, _ = elementwise_bytes(c)
    repl_s = c["layers"] * repl / hw["mem_Bps"]
    f_repl = repl_s / one["total"]
    rows = [("tp1", measured["tp1"], measured["tp1"], 0.0, 0.0, 0, one["total"])]
    for point in ("tp2", "tp2sp", "tp4", "tp4sp"):
        if point not in measured or not measured[point]:
            continue
        tp = int(point[2])
        sp = point.endswith("sp")
        slow = max(1.0, tp / capacity)
        compute = t1 * ((1.0 - f_repl) / tp + f_repl / (tp if sp else 1)) * slow
        comm, n = comm_s(c, tp, sp, link)
        t = compute + comm
        pred = tokens / t
        meas = measured[point]
        rows.append((point, meas, pred, pred / meas - 1.0, tokens / meas - t, n, None))
    return {"label": label, "rows": rows, "t1_model_s": one["total"], "t1_measured_s": t1, "link": link,
            "capacity": capacity, "vcpus": vcpus}


def read_tp_speed(path):
    """Median tokens/s per side and the capacity from a bench/tp_speed.sh results file."""
    if not os.path.exists(path):
        return None
    sides, cap = {}, None
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = re.match(r"^(dtrain|torch)_(tp\w+|pair)\s+(\d+)\s", line)
            if m:  # PyTorch's eager and compiled sides (_c): the better median
                side, point = sides.setdefault(m.group(1), {}), m.group(2).replace("_c", "")
                side[point] = max(side.get(point, 0.0), float(m.group(3)))
            m = re.match(r"^two-process capacity.*: ([0-9.]+)", line)
            if m:
                cap = float(m.group(1))
    return {"sides": sides, "capacity": cap}


# When no results file has them: bench/results/tp_speed_wip.txt's PyTorch medians (torch 2.15,
# 1 thread per process, the small model, the better of eager and compile; the machine busy
# with a build: noisy) and its two-process capacity.
FALLBACK_TORCH = {"tp1": 11813.0, "tp2": 6244.0, "tp2sp": 5268.0, "tp4": 2412.0}
FALLBACK_CAPACITY = 1.10


# ---------------------------------------------------------------- the tables

def _pct(x):
    return "%5.1f%%" % (100 * x)


def main():
    hw, weak, strong, heads = megatron_check()
    print("Megatron-LM 2019 (Shoeybi et al.), V100 DGX-2H, NVSwitch busbw %.0f GB/s (assumed), batch 8, seq 1024,"
          " recomputation; matmul efficiency calibrated to the published 39 TFLOP/s at 1 GPU: %.0f%% of %.0f TFLOP/s"
          % (NVSWITCH_V100["busbw_Bps"] / 1e9, 100 * hw["mm_eff"], hw["peak_flops"] / 1e12))
    print("  weak scaling (Figure 5, model parallel)")
    print("  GPUs  model  hidden  model eff  published  error   step ms: matmul  elementwise  comm (collectives)")
    for (gpus, params, hidden, _, _, _), (_, eff, pub, parts) in zip(MEGATRON_CONFIGS, weak):
        print("  %4d  %4.1fB  %6d     %s     %s  %+5.1f%%  %13.0f  %11.0f  %4.0f (%d)"
              % (gpus, params / 1e9, hidden, _pct(eff), _pct(pub), 100 * (eff / pub - 1), 1e3 * parts["matmul"],
                 1e3 * parts["elementwise"], 1e3 * parts["comm"], parts["collectives"]))
    print("  strong scaling of the 1.2B model (Table 8)")
    print("  GPUs  model speedup  published  error   unmodelled ms/step (published step - model's)")
    for n, s, pub, resid in strong:
        print("  %4d  %13.2f  %9.2f  %+5.1f%%  %8.0f" % (n, s, pub, 100 * (s / pub - 1), 1e3 * resid))
    print("  8.3B on 8 GPUs by heads (Table 7): heads, model eff, published")
    for h, eff, pub in heads:
        print("  %4d  %s  %s  %+5.1f%%" % (h, _pct(eff), _pct(pub), 100 * (eff / pub - 1)))

    print("\nPrediction: GPT-2-XL-ish (48 layers, width 1600, 32 heads, seq 1024, batch 8, vocab 50304, bf16) in one"
          " 8-GPU NVLink 4 node (busbw %.0f GB/s), matmul at %.0f%% of peak (assumed): strong-scaling efficiency"
          % (NVLINK4["busbw_Bps"] / 1e9, 100 * H100["mm_eff"]))
    print("  GPU        tp  sp   step ms  matmul  elementwise  comm  collectives  efficiency  tokens/s")
    for name, tp, sp, parts, eff in node_prediction():
        print("  %-9s %3d  %-3s %8.2f %7.2f %12.2f %5.2f %12d     %s  %9.0f"
              % (name, tp, "sp" if sp else "-", 1e3 * parts["total"], 1e3 * parts["matmul"], 1e3 * parts["elementwise"],
                 1e3 * parts["comm"], parts["collectives"], _pct(eff), GPT2_XL["B"] * GPT2_XL["T"] / parts["total"]))

    cpu_models = (("small", gpt(4, 128, 4, 64, 12, 256, act_bytes=4), "4 layers, width 128, 4 heads"),
                  ("wide", gpt(4, 256, 8, 64, 12, 256, act_bytes=4), "4 layers, width 256, 8 heads"))
    link = dtrain_link()
    any_dtrain_tp = False
    for model, c, shape in cpu_models:
        stem = "tp_speed" + ("" if model == "small" else "_" + model)
        found, path = None, None
        for path in (os.path.join(RESULTS, stem + tail) for tail in (".txt", "_wip.txt")):
            found = read_tp_speed(path)
            if found and found["sides"]:
                break
        if not (found and found["sides"]):
            if model != "small":
                continue
            found, path = {"sides": {"torch": FALLBACK_TORCH}, "capacity": FALLBACK_CAPACITY}, "FALLBACK figures"
        capacity = found["capacity"] or FALLBACK_CAPACITY
        checks = []
        if found["sides"].get("torch", {}).get("tp1"):
            checks.append(cpu_check(found["sides"]["torch"], c, GLOO_2RANKS, capacity,
                                    "PyTorch DTensor over gloo (%s)" % os.path.basename(path)))
        dtrain_pts = found["sides"].get("dtrain", {})
        if dtrain_pts.get("tp1") and link and any(k.startswith("tp2") for k in dtrain_pts):
            any_dtrain_tp = True
            checks.append(cpu_check(dtrain_pts, c, link, capacity, "dtrain (%s)" % os.path.basename(path)))
        for chk in checks:
            print("\nThis machine, the %s GPT (%s, block 64, batch 12, fp32), 1 thread per process: %s;"
                  " two-process capacity %.2f; link %s: alpha %.1f us, busbw %.2f GB/s; tp1 step measured %.1f ms,"
                  " model %.1f ms" % (model, shape, chk["label"], chk["capacity"], chk["link"]["name"],
                                      1e6 * chk["link"]["alpha_s"], chk["link"]["busbw_Bps"] / 1e9,
                                      1e3 * chk["t1_measured_s"], 1e3 * chk["t1_model_s"]))
            print("  point   measured tok/s  predicted  error    unmodelled ms/step  collectives")
            for point, meas, pred, err, resid, n, _ in chk["rows"]:
                print("  %-6s %14.0f %10.0f  %+6.1f%%  %18.1f  %11d" % (point, meas, pred, 100 * err, 1e3 * resid, n))
    if not any_dtrain_tp:
        print("\n(no dtrain tp points in bench/results/tp_speed*.txt yet: run bench/tp_speed.sh once train_gpt takes"
              " --parallel tp=N)")

if __name__ == "__main__":
    main()
