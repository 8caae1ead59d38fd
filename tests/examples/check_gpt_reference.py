"""Checks dtrain's GPT against a PyTorch twin on the same weights (write_gpt_reference).

Builds the model of the file's metadata in PyTorch (GPT-2: learned positions, LayerNorm,
tanh GELU; Llama: RMSNorm, rotary embeddings in the rotate-half convention, SwiGLU,
grouped-query heads), loads dtrain's initial weights by name, and compares logits, loss
and every parameter's gradient in relative norm ||a - b|| / ||b|| (f64: 1e-9, f32: 1e-4),
then 10 AdamW steps (decay on tensors of 2 or more dims, none on 1-D ones, as nanoGPT
groups them) whose losses must agree within 1e-4.

  check_gpt_reference.py FILE.safetensors
Exits 77 (skipped) without torch or safetensors, unless DTRAIN_REQUIRE_INTEROP=1.
"""
import math
import os
import sys

try:
    import torch
    import torch.nn.functional as F
    from safetensors.torch import load_file
    from safetensors import safe_open
except ImportError as e:
    if os.environ.get("DTRAIN_REQUIRE_INTEROP") == "1":
        print(f"check_gpt_reference: {e} (DTRAIN_REQUIRE_INTEROP=1)")
        sys.exit(1)
    print(f"check_gpt_reference: skipped: {e}")
    sys.exit(77)


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Twin(torch.nn.Module):
    """The reference: every weight a named parameter under dtrain's name."""

    def __init__(self, meta, params):
        super().__init__()
        self.meta = meta
        self.names = {}
        for name, value in params.items():
            p = torch.nn.Parameter(value.clone())
            key = name.replace(".", "__")
            self.register_parameter(key, p)
            self.names[name] = p

    def p(self, name):
        return self.names.get(name)

    def norm(self, x, prefix):
        eps = float(self.meta["norm_eps"])
        if self.meta["architecture"] == "llama":
            return rms_norm(x, self.p(prefix + ".weight"), eps)
        return F.layer_norm(x, (x.shape[-1],), self.p(prefix + ".weight"), self.p(prefix + ".bias"), eps)

    def lin(self, x, prefix):
        return F.linear(x, self.p(prefix + ".weight"), self.p(prefix + ".bias"))

    def forward(self, tokens):
        m = self.meta
        llama = m["architecture"] == "llama"
        layers, h, hkv, d = int(m["layers"]), int(m["heads"]), int(m["kv_heads"]), int(m["embd"])
        hd = d // h
        b, t = tokens.shape
        x = F.embedding(tokens, self.p("0.wte.weight"))
        if not llama:
            x = x + self.p("0.wpe.weight")[:t]
        if llama:
            inv = float(m["rope_theta"]) ** (-torch.arange(0, hd, 2, dtype=torch.float64) / hd)
            ang = torch.arange(t, dtype=torch.float64)[:, None] * inv[None, :]
            cos = torch.cat((ang.cos(), ang.cos()), -1).to(x.dtype)[None, :, None, :]
            sin = torch.cat((ang.sin(), ang.sin()), -1).to(x.dtype)[None, :, None, :]
        mask = torch.triu(torch.ones(t, t, dtype=torch.bool), 1)
        for i in range(1, layers + 1):
            pre = f"{i}"
            a = self.norm(x, pre + ".ln_1")
            qkv = self.lin(a, pre + ".attn.c_attn").view(b, t, h + 2 * hkv, hd)
            q, k, v = qkv[:, :, :h], qkv[:, :, h:h + hkv], qkv[:, :, h + hkv:]
            if llama:
                q = q * cos + rotate_half(q) * sin
                k = k * cos + rotate_half(k) * sin
            q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
            k = k.repeat_interleave(h // hkv, dim=1)
            v = v.repeat_interleave(h // hkv, dim=1)
            s = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
            s = s.masked_fill(mask, float("-inf"))
            y = (torch.softmax(s, -1) @ v).transpose(1, 2).reshape(b, t, d)
            x = x + self.lin(y, pre + ".attn.c_proj")
            a = self.norm(x, pre + ".ln_2")
            if llama:
                y = self.lin(F.silu(self.lin(a, pre + ".mlp.gate_proj")) * self.lin(a, pre + ".mlp.up_proj"),
                             pre + ".mlp.down_proj")
            else:
                y = self.lin(F.gelu(self.lin(a, pre + ".mlp.c_fc"), approximate="tanh"), pre + ".mlp.c_proj")
            x = x + y
        head = f"{layers + 1}"
        x = self.norm(x, head + ".ln_f")
        w = self.p(head + ".lm_head.weight")
        if w is None:
            w = self.p("0.wte.weight")  # tied
        return F.linear(x, w)


def rel(a, b):
    return (torch.linalg.norm((a - b).flatten()) / torch.linalg.norm(b.flatten())).item()


def main():
    path = sys.argv[1]
    with safe_open(path, framework="pt") as f:
        meta = f.metadata()
    tensors = load_file(path)
    f64 = meta["dtype"] == "f64"
    tol = 1e-9 if f64 else 1e-4
    params = {k[len("param."):]: v for k, v in tensors.items() if k.startswith("param.")}
    twin = Twin(meta, params)
    tokens, targets = tensors["tokens"], tensors["targets"]
    logits = twin(tokens)
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
    loss.backward()
    failures = []
    checks = [("logits", logits.detach(), tensors["logits"]), ("loss", loss.detach().reshape(1), tensors["loss"])]
    for name, p in twin.names.items():
        checks.append(("grad." + name, p.grad, tensors["grad." + name]))
    worst = 0.0
    for name, ref, got in checks:
        r = rel(got.to(ref.dtype), ref)
        worst = max(worst, r)
        if not r <= tol:
            failures.append(f"{name}: relative difference {r:.3g} > {tol:g}")
    print(f"check_gpt_reference: {meta['architecture']} {meta['dtype']}: logits, loss and {len(twin.names)} "
          f"gradients agree with PyTorch within {worst:.3g} (bound {tol:g})")

    # 10 AdamW steps, nanoGPT's groups.
    twin = Twin(meta, params)
    decay = [p for p in twin.parameters() if p.dim() >= 2]
    no_decay = [p for p in twin.parameters() if p.dim() < 2]
    b1, b2 = (float(x) for x in meta["betas"].split(","))
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": float(meta["weight_decay"])},
                             {"params": no_decay, "weight_decay": 0.0}], lr=float(meta["lr"]), betas=(b1, b2))
    losses = []
    for _ in range(10):
        opt.zero_grad()
        lg = twin(tokens)
        l = F.cross_entropy(lg.reshape(-1, lg.shape[-1]), targets.reshape(-1))
        l.backward()
        losses.append(l.item())
        opt.step()
    theirs = tensors["adamw_losses"].tolist()
    diff = max(abs(a - b) for a, b in zip(losses, theirs))
    print(f"check_gpt_reference: 10 AdamW steps: PyTorch {losses[0]:.6f} -> {losses[-1]:.6f}, dtrain "
          f"{theirs[0]:.6f} -> {theirs[-1]:.6f}, largest difference {diff:.3g} (bound 1e-4)")
    if not diff <= 1e-4:
        failures.append(f"AdamW losses differ by {diff:.3g} > 1e-4")
    for f in failures:
        print("check_gpt_reference: FAILED: " + f)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
