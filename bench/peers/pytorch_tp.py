"""PyTorch's tensor parallelism (DTensor) on CPU as train_gpt's --parallel tp=N peer.

The GPT of pytorch_gpt.py (GPT-2 style: LayerNorm, tanh GELU, learned positions, tied
embeddings, no dropout; its Linear and LayerNorm biases off with --bias false, ln_f's
bias on as there), its token file reader, its training windows, AdamW groups, warm-up +
cosine schedule and clipping, trained on --tp processes over gloo with
torch.distributed.tensor.parallel:

  * the model is pytorch_gpt.GPT built with the same seed (the same initial weights as
    pytorch_gpt.py) and copied into TPGPT, which holds the same weights but splits the
    fused qkv projection into q, k and v (a column split of the fused (3d, d) weight
    would give rank 0 all of q and half of k) and puts attention and MLP in submodules;
  * attention q, k, v and MLP fc: ColwiseParallel; attention proj and MLP proj:
    RowwiseParallel (an all-reduce each in forward, two more in backward: Megatron's
    layout); each rank computes heads / tp heads;
  * the token embedding: RowwiseParallel (vocabulary-parallel: rows of the (V, d) table
    per rank, the looked-up rows summed over the ranks);
  * lm_head: ColwiseParallel with output Shard(-1) and use_local_output=False, the loss
    under loss_parallel() (vocabulary-parallel cross-entropy: no rank holds all logits);
  * the embedding and lm_head stay tied: both styles shard the (V, d) table by rows
    (Shard(0)), so after parallelize_module the lm_head's weight is set back to the
    embedding's DTensor parameter and both gradients add into it (checked at start-up:
    the JSON line says "tied": true; --untie trains separate tables instead);
  * --sp: sequence parallelism (Korthikanti et al. 2022): the residual stream between
    blocks is split along the sequence (Shard(1)); LayerNorms are SequenceParallel,
    PrepareModuleInput all-gathers the normed input of attention and MLP, the row-wise
    projections and the embedding end in a reduce-scatter (output Shard(1)), and
    lm_head all-gathers its input. The position embedding is a plain tensor added to this
    rank's part of the sequence. The LayerNorms' weight gradients come out of backward as
    Partial(sum) DTensors (each rank's part of the sequence; DTensor leaves the sum
    pending, and a Partial gradient counted as it stands in the clipping norm gave a wrong
    norm): they and the position embedding's gradient are summed over the ranks by hand,
    in one all-reduce, before clipping and AdamW.

Parameters not parallelized (position embedding, LayerNorms without --sp) are plain tensors,
the same on every rank. Gradient clipping sums squares of sharded gradients over the ranks
and of replicated ones once (torch's clip_grad_norm_ refuses DTensor and plain tensors in one
call); AdamW gets DTensor and plain parameters in separate groups (its foreach kernels take
one kind per list).

Launch: `--tp 1` trains in this process, without torch.distributed. `--tp N` (N > 1) spawns
N processes with torch.multiprocessing (spawn), each initialising gloo from env variables
(MASTER_ADDR 127.0.0.1, a free MASTER_PORT); no torchrun. Every rank gets --threads intra-op
threads (OMP_NUM_THREADS too) and trains on the whole global batch (tensor parallelism
splits the model, not the batch). After --untimed-steps untimed steps, --time-steps steps are
timed on every rank; a step's time is the slowest rank's (a MAX all-reduce after the step,
outside the timed region). Prints the first losses (rank 0) and one JSON line:

  {"peer": "torch 2.x", "tp": N, "sp": bool, "tied": bool, "threads": T, "steps": S,
   "step_ms_median", "step_ms_min", "step_ms_max", "step_ms_mean",
   "tokens_per_s": global batch x block / median step (all ranks together),
   "tokens_per_s_mean", "peak_rss_mb": [per rank], "losses": [first steps], ...}

--check K first trains K steps at tp=1 in this process and exits 1 unless every one of the
first K losses of the tp run matches within 1e-4 relative (printed side by side).

  pytorch_tp.py --tokens FILE --vocab V [--tp 2] [--sp] [--layers 4 --heads 4 --embd 128
                --block-size 64 --global-batch-size 12 --threads 1 --time-steps 40
                --untimed-steps 5 --check 5 --seed 1 ...]
"""
import argparse
import json
import math
import os
import resource
import socket
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pytorch_gpt as pg  # noqa: E402  (the model's initialization, the reader, windows, schedule)


class Attention(nn.Module):
    def __init__(self, d, heads, bias):
        super().__init__()
        self.head_dim = d // heads
        self.q = nn.Linear(d, d, bias=bias)
        self.k = nn.Linear(d, d, bias=bias)
        self.v = nn.Linear(d, d, bias=bias)
        self.proj = nn.Linear(d, d, bias=bias)

    def forward(self, x):
        # Under TP q, k, v hold this rank's heads only: the head count comes from their width.
        q, k, v = self.q(x), self.k(x), self.v(x)
        b, t = q.shape[0], q.shape[1]
        q, k, v = (z.view(b, t, -1, self.head_dim).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, -1))


class MLP(nn.Module):
    def __init__(self, d, bias):
        super().__init__()
        self.fc = nn.Linear(d, 4 * d, bias=bias)
        self.proj = nn.Linear(4 * d, d, bias=bias)

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, d, heads, bias):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d, bias=bias)
        self.attn = Attention(d, heads, bias)
        self.ln_2 = nn.LayerNorm(d, bias=bias)
        self.mlp = MLP(d, bias)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class TPGPT(nn.Module):
    """pytorch_gpt.GPT's weights in a layout tensor parallelism can split."""

    def __init__(self, ref, heads, bias):
        super().__init__()
        vocab, d = ref.wte.weight.shape
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(ref.wpe.weight.shape[0], d)
        self.h = nn.ModuleList(Block(d, heads, bias) for _ in ref.h)
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.seq_offset = 0  # this rank's first position under sequence parallelism
        with torch.no_grad():
            self.wte.weight.copy_(ref.wte.weight)
            self.wpe.weight.copy_(ref.wpe.weight)
            self.ln_f.load_state_dict(ref.ln_f.state_dict())
            for mine, theirs in zip(self.h, ref.h):
                mine.ln_1.load_state_dict(theirs.ln_1.state_dict())
                mine.ln_2.load_state_dict(theirs.ln_2.state_dict())
                for name, part in zip("qkv", theirs.c_attn.weight.split(d, 0)):
                    getattr(mine.attn, name).weight.copy_(part)
                mine.attn.proj.weight.copy_(theirs.c_proj.weight)
                mine.mlp.fc.weight.copy_(theirs.c_fc.weight)
                mine.mlp.proj.weight.copy_(theirs.c_proj2.weight)
                if bias:
                    for name, part in zip("qkv", theirs.c_attn.bias.split(d, 0)):
                        getattr(mine.attn, name).bias.copy_(part)
                    mine.attn.proj.bias.copy_(theirs.c_proj.bias)
                    mine.mlp.fc.bias.copy_(theirs.c_fc.bias)
                    mine.mlp.proj.bias.copy_(theirs.c_proj2.bias)
        self.lm_head.weight = self.wte.weight

    def forward(self, idx):
        x = self.wte(idx)  # (b, t, d), or (b, t / tp, d) under --sp
        t = x.shape[1]
        x = x + self.wpe.weight[self.seq_offset:self.seq_offset + t]
        for blk in self.h:
            x = blk(x)
        return self.lm_head(self.ln_f(x))


def parallelize(model, mesh, sp, untie):
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                                   SequenceParallel, parallelize_module)
    seq = Shard(1) if sp else Replicate()
    plan = {
        "wte": RowwiseParallel(input_layouts=Replicate(), output_layouts=seq),
        "ln_f": SequenceParallel() if sp else None,
        "lm_head": ColwiseParallel(input_layouts=seq, output_layouts=Shard(-1), use_local_output=False),
    }
    for i in range(len(model.h)):
        p = f"h.{i}."
        for name in ("attn.q", "attn.k", "attn.v", "mlp.fc"):
            plan[p + name] = ColwiseParallel()
        plan[p + "attn.proj"] = RowwiseParallel(output_layouts=seq)
        plan[p + "mlp.proj"] = RowwiseParallel(output_layouts=seq)
        if sp:
            plan[p + "ln_1"] = SequenceParallel()
            plan[p + "ln_2"] = SequenceParallel()
            plan[p + "attn"] = PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),))
            plan[p + "mlp"] = PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),))
    plan = {k: v for k, v in plan.items() if v is not None}
    if untie:  # separate tables, both initialized from the tied one
        model.lm_head.weight = nn.Parameter(model.wte.weight.detach().clone())
    parallelize_module(model, mesh, plan)
    tied = False
    if not untie:
        # parallelize_module gave wte and lm_head a DTensor each; both are Shard(0) of (V, d).
        if model.lm_head.weight.placements == model.wte.weight.placements:
            model.lm_head.weight = model.wte.weight
            tied = True
        else:
            print("pytorch_tp.py: the embedding and lm_head shard differently; untied", file=sys.stderr)
    if sp:
        t_local = -(-model.wpe.weight.shape[0] // mesh.size())  # torch.chunk's split of the block
        model.seq_offset = mesh.get_local_rank() * t_local
    return tied


def is_dtensor(x):
    from torch.distributed.tensor import DTensor
    return isinstance(x, DTensor)


def reduce_sequence_grads(model, params, group):
    """Under --sp the LayerNorms' gradients come back from backward as Partial(sum) DTensors
    (each rank's part of the sequence; DTensor defers the sum) and the position embedding's
    plain gradient holds this rank's rows only: all summed in one all-reduce, the norms'
    made Replicate."""
    from torch.distributed.tensor import DTensor, Replicate
    partial = [p for p in params if is_dtensor(p.grad) and any(pl.is_partial() for pl in p.grad.placements)]
    locals_ = [p.grad.to_local() for p in partial] + [model.wpe.weight.grad]
    flat = torch.cat([g.reshape(-1) for g in locals_])
    torch.distributed.all_reduce(flat, group=group)
    offset = 0
    for p, g in zip(partial + [None], locals_):
        n = g.numel()
        part = flat[offset:offset + n].view_as(g)
        offset += n
        if p is None:
            model.wpe.weight.grad.copy_(part)
        else:
            p.grad = DTensor.from_local(part.clone(), p.grad.device_mesh, [Replicate()] * p.grad.device_mesh.ndim,
                                        run_check=False)


def clip_grads(params, max_norm, group):
    """torch.nn.utils.clip_grad_norm_'s arithmetic over DTensor and plain gradients: squares
    of sharded gradients summed over the ranks, replicated (DTensor or plain) ones once."""
    sharded = torch.zeros((), dtype=torch.float64)
    replicated = torch.zeros((), dtype=torch.float64)
    for p in params:
        g = p.grad
        if g is None:
            continue
        if is_dtensor(g):
            local = g.to_local()
            if any(pl.is_shard() for pl in g.placements):
                sharded += local.double().pow(2).sum()
            else:
                replicated += local.double().pow(2).sum()
        else:
            replicated += g.double().pow(2).sum()
    if group is not None:
        torch.distributed.all_reduce(sharded, group=group)
    total = math.sqrt(float(sharded + replicated))
    coef = min(1.0, max_norm / (total + 1e-6))
    for p in params:
        if p.grad is not None:
            p.grad.mul_(coef)
    return total


def unique_params(model):
    seen, out = set(), []
    for p in model.parameters():
        if p.requires_grad and id(p) not in seen:
            seen.add(id(p))
            out.append(p)
    return out


def build(a):
    torch.manual_seed(a.seed)
    bias = a.bias == "true"
    ref = pg.GPT(a.vocab, a.block_size, a.layers, a.heads, a.embd, bias)
    return TPGPT(ref, a.heads, bias)


def train(a, rank=0, tp=1, mesh=None):
    """Trains; returns (losses of every step, step seconds of the timed steps, tied)."""
    model = build(a)
    tied = not a.untie
    group = None
    if tp > 1:
        tied = parallelize(model, mesh, a.sp, a.untie)
        group = mesh.get_group()
    elif a.untie:
        model.lm_head.weight = nn.Parameter(model.wte.weight.detach().clone())
    params = unique_params(model)
    forward = torch.compile(model) if a.compile else model
    b1, b2 = (float(x) for x in a.betas.split(","))
    groups = []
    for dt in (True, False):
        for decay in (True, False):
            ps = [p for p in params if (tp > 1 and is_dtensor(p)) == dt and (p.dim() >= 2) == decay]
            if ps:
                groups.append({"params": ps, "weight_decay": a.weight_decay if decay else 0.0})
    opt = torch.optim.AdamW(groups, lr=a.lr, betas=(b1, b2))
    tokens, _ = pg.read_tokens(a.tokens)
    split = len(tokens) - len(tokens) // 10
    positions = split - a.block_size
    seed = a.seed & pg.MASK

    def batch(step):
        rows = []
        for j in range(a.global_batch_size):
            pos = pg.splitmix64(seed, step * a.global_batch_size + j) % positions
            rows.append(torch.from_numpy(tokens[pos: pos + a.block_size + 1]))
        w = torch.stack(rows)
        return w[:, :-1], w[:, 1:]

    def step_fn(step):
        for g in opt.param_groups:
            g["lr"] = pg.lr_at(step, a)
        x, y = batch(step)
        opt.zero_grad(set_to_none=True)
        if tp > 1:
            from torch.distributed.tensor.parallel import loss_parallel
            with loss_parallel():
                logits = forward(x)
                loss = F.cross_entropy(logits.flatten(0, 1), y.flatten())
                loss.backward()
            if a.sp:
                reduce_sequence_grads(model, params, group)
        else:
            logits = forward(x)
            loss = F.cross_entropy(logits.flatten(0, 1), y.flatten())
            loss.backward()
        if a.clip > 0:
            clip_grads(params, a.clip, group)
        opt.step()
        return loss.to_local() if is_dtensor(loss) else loss

    losses, times = [], []
    total = a.untimed_steps + a.time_steps
    for s in range(total):
        start = time.perf_counter()
        loss = step_fn(s)
        dt = time.perf_counter() - start
        if s >= a.untimed_steps:
            if tp > 1:
                t = torch.tensor([dt], dtype=torch.float64)
                torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX, group=group)
                dt = float(t)
            times.append(dt)
        losses.append(float(loss.detach()))
    return losses, times, tied


def peak_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def report(a, tp, losses, times, tied, rss):
    med = statistics.median(times)
    mean = sum(times) / len(times)
    tokens = a.global_batch_size * a.block_size
    return {"peer": f"torch {torch.__version__}", "tp": tp, "sp": bool(a.sp and tp > 1), "tied": tied, "compile": a.compile,
            "threads": torch.get_num_threads(), "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "default"),
            "layers": a.layers, "heads": a.heads, "embd": a.embd, "block_size": a.block_size,
            "global_batch_size": a.global_batch_size, "steps": len(times),
            "step_ms_median": 1e3 * med, "step_ms_min": 1e3 * min(times), "step_ms_max": 1e3 * max(times),
            "step_ms_mean": 1e3 * mean, "tokens_per_s": tokens / med, "tokens_per_s_mean": tokens / mean,
            "peak_rss_mb": rss, "losses": [round(x, 6) for x in losses[:a.print_losses]]}


def worker(rank, a, port, queue):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(a.tp),
                      LOCAL_RANK=str(rank))
    run_rank(a, rank, a.tp, queue)


def run_rank(a, rank, tp, queue=None):
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo", rank=rank, world_size=tp)
    try:
        mesh = init_device_mesh("cpu", (tp,), mesh_dim_names=("tp",))
        losses, times, tied = train(a, rank, tp, mesh)
        rss = [None] * tp
        dist.all_gather_object(rss, round(peak_rss_mb(), 1))
        if rank == 0:
            result = report(a, tp, losses, times, tied, rss)
            if queue is not None:
                queue.put(result)
            else:
                emit(a, result, None)
        dist.barrier()
    finally:
        dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def emit(a, result, reference):
    for i, x in enumerate(result["losses"]):
        ref = "" if reference is None or i >= len(reference) else f"   tp=1 {reference[i]:.6f}"
        print(f"step {i + 1}: loss {x:.6f} (tp={result['tp']}{', sp' if result['sp'] else ''}){ref}", flush=True)
    if not result["tied"]:
        print("pytorch_tp.py: embedding and lm_head UNTIED (separate tables, the same initial values)", flush=True)
    print(json.dumps(result), flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tokens", required=True)
    p.add_argument("--vocab", type=int, required=True)
    p.add_argument("--tp", type=int, default=2, help="tensor-parallel processes (1: plain, one process)")
    p.add_argument("--sp", action="store_true", help="sequence parallelism on the norms and the residual stream")
    p.add_argument("--untie", action="store_true", help="separate embedding and lm_head tables")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--embd", type=int, default=128)
    p.add_argument("--block-size", type=int, default=64)
    p.add_argument("--bias", default="false")
    p.add_argument("--global-batch-size", type=int, default=12)
    p.add_argument("--steps", type=int, default=2000, help="the schedule's length (pytorch_gpt.py's --steps)")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--min-lr", type=float, default=1e-4)
    p.add_argument("--warmup-steps", type=int, default=100, help="the learning rate's linear warm-up, as in pytorch_gpt.py")
    p.add_argument("--betas", default="0.9,0.99")
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--clip", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=1, help="intra-op threads per process")
    p.add_argument("--compile", action="store_true", help="torch.compile the (parallelized) model")
    p.add_argument("--time-steps", type=int, default=40)
    p.add_argument("--untimed-steps", type=int, default=5, help="steps before the timed ones")
    p.add_argument("--print-losses", type=int, default=5, help="losses of the first steps in the output")
    p.add_argument("--check", type=int, default=0, metavar="K",
                   help="first train K steps at tp=1 here; exit 1 unless the first K losses agree within 1e-4")
    a = p.parse_args()
    if a.heads % a.tp or a.embd % a.heads:
        sys.exit("pytorch_tp.py: --heads must divide by --tp and --embd by --heads")
    a.print_losses = max(a.print_losses, a.check)
    os.environ["OMP_NUM_THREADS"] = str(a.threads)
    torch.set_num_threads(a.threads)

    reference = None
    if a.check:
        ref_args = argparse.Namespace(**vars(a))
        ref_args.untimed_steps, ref_args.time_steps = a.check, 0
        reference, _, _ = train(ref_args)

    if "RANK" in os.environ and "WORLD_SIZE" in os.environ and int(os.environ["WORLD_SIZE"]) > 1:
        # under torchrun or another launcher that sets the env variables: this process is one rank
        a.tp = int(os.environ["WORLD_SIZE"])
        if a.heads % a.tp:
            sys.exit("pytorch_tp.py: --heads must divide by the world size")
        run_rank(a, int(os.environ["RANK"]), a.tp)
        return
    if a.tp == 1:
        losses, times, tied = train(a)
        result = report(a, 1, losses, times, tied, [round(peak_rss_mb(), 1)])
    else:
        import torch.multiprocessing as mp
        ctx = mp.get_context("spawn")
        queue = ctx.SimpleQueue()
        mp.start_processes(worker, args=(a, free_port(), queue), nprocs=a.tp, join=True, start_method="spawn")
        result = queue.get()
    emit(a, result, reference)
    if reference is not None:
        got = result["losses"][:a.check]
        bad = [i for i, (x, r) in enumerate(zip(got, reference)) if abs(x - r) > 1e-4 * abs(r)]
        diff = max(abs(x - r) / abs(r) for x, r in zip(got, reference))
        print(f"check: first {a.check} losses of tp={result['tp']} against tp=1: max relative difference {diff:.2e}"
              f" ({'MISMATCH at steps ' + str([i + 1 for i in bad]) if bad else 'ok'})", flush=True)
        if bad:
            sys.exit(1)


if __name__ == "__main__":
    main()
