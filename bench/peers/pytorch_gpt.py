"""The PyTorch reference of train_gpt: the same model, data, schedule and evaluation.

Reads a dtrain token file (dtrain-tokenize encode; docs/TOKENIZERS.md), splits it as dtrain
does (the last floor(n / 10) tokens validate), draws training window i of the run at
position splitmix64(seed, i) mod (split - T) (data/token_windows.h: the same windows as
train_gpt with the same --seed), trains nanoGPT's GPT (LayerNorm without biases when
--bias false, tanh GELU, tied embeddings, init N(0, 0.02) with the residual projections
scaled by 1/sqrt(2L)) with AdamW (decay on tensors of 2 or more dims), dtrain's warm-up +
cosine schedule and clipping, and reports the mean cross-entropy over the validation
split's non-overlapping windows in order (all, or the first --eval-windows). Prints
"step N: val loss X" lines and, at the end, one JSON line.

  pytorch_gpt.py --tokens FILE --vocab V [--layers 4 --heads 4 --embd 128 --block-size 64
                 --global-batch-size 12 --steps 2000 --lr 1e-3 --min-lr 1e-4 --warmup-steps 100
                 --betas 0.9,0.99 --weight-decay 0.1 --clip 1 --eval-every 500 --eval-windows 0
                 --seed 1 --threads N --compile]
"""
import argparse
import json
import math
import struct
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

MASK = (1 << 64) - 1


def splitmix64(seed, index):
    z = (seed * 0x9E3779B97F4A7C15 + index + 0x9E3779B97F4A7C15) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def read_tokens(path):
    with open(path, "rb") as f:
        head = f.read(32)
        if head[:8] != b"DTRAINTK":
            sys.exit(f"{path}: not a dtrain token file")
        _, width, vocab, count = struct.unpack("<IIqq", head[8:32])
        data = np.frombuffer(f.read(), dtype=np.uint16 if width == 2 else np.uint32)
    assert len(data) == count, f"{path}: {len(data)} ids, header says {count}"
    return data.astype(np.int64), vocab


class Block(nn.Module):
    def __init__(self, d, h, bias):
        super().__init__()
        self.h = h
        self.ln_1 = nn.LayerNorm(d, bias=bias) if "bias" in nn.LayerNorm.__init__.__code__.co_varnames else nn.LayerNorm(d)
        self.c_attn = nn.Linear(d, 3 * d, bias=bias)
        self.c_proj = nn.Linear(d, d, bias=bias)
        self.ln_2 = nn.LayerNorm(d, bias=bias) if "bias" in nn.LayerNorm.__init__.__code__.co_varnames else nn.LayerNorm(d)
        self.c_fc = nn.Linear(d, 4 * d, bias=bias)
        self.c_proj2 = nn.Linear(4 * d, d, bias=bias)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.h, d // self.h).transpose(1, 2) for z in (q, k, v))
        if hasattr(F, "scaled_dot_product_attention"):
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            s = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.h)
            s = s.masked_fill(torch.triu(torch.ones(t, t, dtype=torch.bool), 1), float("-inf"))
            y = torch.softmax(s, -1) @ v
        x = x + self.c_proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.c_proj2(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab, block, layers, heads, d, bias):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(block, d)
        self.h = nn.ModuleList(Block(d, heads, bias) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() >= 2:
                std = 0.02 / math.sqrt(2 * layers) if name.endswith("c_proj.weight") or name.endswith("c_proj2.weight") else 0.02
                nn.init.normal_(p, 0.0, std)
        if not bias:  # torch < 2.1 has no LayerNorm(bias=False): freeze its biases at zero
            for m in self.modules():
                if isinstance(m, nn.LayerNorm) and m.bias is not None:
                    m.bias.requires_grad_(False)

    def forward(self, idx):
        t = idx.shape[1]
        x = self.wte(idx) + self.wpe.weight[:t]
        for blk in self.h:
            x = blk(x)
        return F.linear(self.ln_f(x), self.wte.weight)


def lr_at(step, a):
    if step < a.warmup_steps:
        return a.lr * (step + 1) / a.warmup_steps
    if step >= a.steps - 1:
        return a.min_lr
    ratio = (step - a.warmup_steps) / (a.steps - 1 - a.warmup_steps)
    return a.min_lr + 0.5 * (1 + math.cos(math.pi * ratio)) * (a.lr - a.min_lr)


def evaluate(model, tokens, split, a):
    n = len(tokens)
    windows = (n - split - 1) // a.block_size
    if a.eval_windows:
        windows = min(windows, a.eval_windows)
    model.eval()
    total = 0.0
    with torch.no_grad():
        for start in range(0, windows, a.global_batch_size):
            rows = range(start, min(start + a.global_batch_size, windows))
            x = torch.stack([torch.from_numpy(tokens[split + r * a.block_size: split + r * a.block_size + a.block_size]) for r in rows])
            y = torch.stack([torch.from_numpy(tokens[split + r * a.block_size + 1: split + r * a.block_size + a.block_size + 1]) for r in rows])
            logits = model(x)
            total += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)).item() * len(rows)
    model.train()
    return total / windows, windows


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tokens", required=True)
    p.add_argument("--vocab", type=int, required=True)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--embd", type=int, default=128)
    p.add_argument("--block-size", type=int, default=64)
    p.add_argument("--bias", default="false")
    p.add_argument("--dropout", type=float, default=0.0, help="0 only: the comparison runs without dropout")
    p.add_argument("--global-batch-size", type=int, default=12)
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--min-lr", type=float, default=1e-4)
    p.add_argument("--warmup-steps", type=int, default=100)
    p.add_argument("--betas", default="0.9,0.99")
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--clip", type=float, default=1.0)
    p.add_argument("--eval-every", type=int, default=500)
    p.add_argument("--eval-windows", type=int, default=0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--compile", action="store_true")
    p.add_argument("--time-steps", type=int, default=0, help="only time this many steps after 5 warm-up steps")
    a = p.parse_args()
    if a.dropout != 0:
        sys.exit("pytorch_gpt.py: --dropout: only 0 (train_gpt's dropout draws from its own generator)")
    if a.threads:
        torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    tokens, _ = read_tokens(a.tokens)
    split = len(tokens) - len(tokens) // 10
    model = GPT(a.vocab, a.block_size, a.layers, a.heads, a.embd, a.bias == "true")
    params = [q for q in model.parameters() if q.requires_grad]
    b1, b2 = (float(x) for x in a.betas.split(","))
    opt = torch.optim.AdamW([{"params": [q for q in params if q.dim() >= 2], "weight_decay": a.weight_decay},
                             {"params": [q for q in params if q.dim() < 2], "weight_decay": 0.0}],
                            lr=a.lr, betas=(b1, b2))
    step_fn = model
    if a.compile:
        step_fn = torch.compile(model)
    positions = split - a.block_size
    seed = a.seed & MASK

    def batch(step):
        rows = []
        for j in range(a.global_batch_size):
            pos = splitmix64(seed, step * a.global_batch_size + j) % positions
            rows.append(torch.from_numpy(tokens[pos: pos + a.block_size + 1]))
        w = torch.stack(rows)
        return w[:, :-1], w[:, 1:]

    def train_step(step):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, a)
        x, y = batch(step)
        logits = step_fn(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if a.clip > 0:
            torch.nn.utils.clip_grad_norm_(params, a.clip)
        opt.step()
        return loss

    if a.time_steps:
        for s in range(5):
            train_step(s)
        start = time.perf_counter()
        for s in range(5, 5 + a.time_steps):
            train_step(s)
        dt = (time.perf_counter() - start) / a.time_steps
        print(json.dumps({"peer": f"torch {torch.__version__}", "compile": a.compile, "threads": torch.get_num_threads(),
                          "ms_per_step": 1000 * dt, "tokens_per_s": a.global_batch_size * a.block_size / dt}))
        return
    start = time.perf_counter()
    val = None
    for s in range(a.steps):
        loss = train_step(s)
        if (s + 1) % a.eval_every == 0 or s + 1 == a.steps:
            val, windows = evaluate(model, tokens, split, a)
            print(f"step {s + 1}: train loss {loss.item():.4f}, val loss {val:.4f} ({windows} windows)", flush=True)
    print(json.dumps({"peer": f"torch {torch.__version__}", "seed": a.seed, "final_val_loss": val,
                      "seconds": time.perf_counter() - start}))


if __name__ == "__main__":
    main()
