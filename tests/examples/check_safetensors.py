#!/usr/bin/env python3
"""Reads a dtrain checkpoint's model.safetensors with Python's `safetensors` package, as a
PyTorch user would, and checks the tensor names, dtypes and shapes of train_mnist's MLP
(--hidden H1,H2,...); with torch present, loads the file into the PyTorch twin of that
model by name (strict) and checks that the twin computes with the loaded weights.

usage: check_safetensors.py CHECKPOINT_ROOT HIDDEN   (e.g. ckpt 64,64)
Exits 77 (skipped) when the safetensors or the torch package is missing, saying so, or 1
instead when DTRAIN_REQUIRE_INTEROP is set (CI: scripts/install-deps.sh --tests installs
both)."""
import os
import sys


def missing(what):
    """A reader that is not installed: skipped, or a failure where the checks must run."""
    if os.environ.get("DTRAIN_REQUIRE_INTEROP"):
        print(f"{what}, and DTRAIN_REQUIRE_INTEROP is set: run scripts/install-deps.sh --tests")
        return 1
    print(f"skipped: {what}")
    return 77


def main():
    root, hidden = sys.argv[1], [int(h) for h in sys.argv[2].split(",")]
    try:
        from safetensors.numpy import load_file
    except ImportError:
        return missing(f"{sys.executable} has no 'safetensors' package")
    with open(os.path.join(root, "latest")) as f:
        path = os.path.join(root, f.read().strip(), "model.safetensors")
    tensors = load_file(path)
    # train_mnist's MLP: Flatten, then Linear + ReLU per hidden width, then Linear to 10.
    widths = [28 * 28] + hidden + [10]
    expected = {}
    for i in range(len(widths) - 1):
        index = 1 + 2 * i
        expected[f"{index}.weight"] = (widths[i + 1], widths[i])
        expected[f"{index}.bias"] = (widths[i + 1],)
    got = {name: tuple(t.shape) for name, t in tensors.items()}
    if got != expected:
        print(f"{path}: tensors {got}, expected {expected}")
        return 1
    for name, t in tensors.items():
        if str(t.dtype) != "float32":
            print(f"{path}: {name} has dtype {t.dtype}, expected float32")
            return 1
    print(f"{path}: {len(tensors)} tensors with the expected names and shapes")

    try:
        import torch
        from safetensors.torch import load_file as load_torch
    except ImportError:
        return missing(f"{sys.executable} has no 'torch' package: the names and shapes were checked, "
                       "but the file was not loaded into PyTorch")
    layers = [torch.nn.Flatten()]
    for i in range(len(widths) - 1):
        layers.append(torch.nn.Linear(widths[i], widths[i + 1]))
        if i + 2 < len(widths):
            layers.append(torch.nn.ReLU())
    twin = torch.nn.Sequential(*layers)
    twin.load_state_dict(load_torch(path), strict=True)
    out = twin(torch.zeros(2, 1, 28, 28))
    if tuple(out.shape) != (2, 10) or not torch.isfinite(out).all():
        print(f"the twin's output is wrong: {out}")
        return 1
    print(f"loaded into its PyTorch {torch.__version__} twin by name (strict)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
