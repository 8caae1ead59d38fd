#!/usr/bin/env python3
"""Reads a dtrain checkpoint's model.safetensors with Python's `safetensors` package, as a
PyTorch user would, and checks the tensor names, dtypes and shapes of train_mnist's MLP
(--hidden H1,H2,...); with torch present, loads the file into the PyTorch twin of that
model by name (strict), runs the twin on the first test images of the IDX file, normalised
as dtrain's MnistDataset does, and compares its logits with those dtrain computed from the
same checkpoint on the same images (write_logits).

usage: check_safetensors.py CHECKPOINT_ROOT HIDDEN LOGITS IMAGES
       (e.g. ckpt 64,64 logits.safetensors /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz)
Exits 77 (skipped) when the safetensors or the torch package is missing, saying so, or 1
instead when DTRAIN_REQUIRE_INTEROP is set (CI: scripts/install-deps.sh --tests installs
both)."""
import gzip
import os
import sys

# Logits agree when |dtrain - torch| <= ATOL + RTOL * |torch| (numpy.allclose's rule). Both
# compute in float32 but sum the 784- and 64-term dot products in different orders (Eigen's
# GEMM against PyTorch's BLAS), so they differ by float32 rounding: ~1e-6 on logits of a few
# units. The absolute part covers logits near zero, where a relative bound means nothing; a
# wrong, transposed or swapped weight, or other inputs, moves logits by ~0.1 or more.
ATOL = 1e-5
RTOL = 1e-5
# dtrain's MnistOptions defaults (Fashion-MNIST's training-set statistics), as float32.
MEAN, STD = 0.2860, 0.3530


def missing(what):
    """A reader that is not installed: skipped, or a failure where the checks must run."""
    if os.environ.get("DTRAIN_REQUIRE_INTEROP"):
        print(f"{what}, and DTRAIN_REQUIRE_INTEROP is set: run scripts/install-deps.sh --tests")
        return 1
    print(f"skipped: {what}")
    return 77


def read_images(path, count, np):
    """The first `count` images of an IDX file (plain or .gz), normalised as MnistDataset
    does: (pixel / 255 - mean) / std in double with float32 mean and std, then float32."""
    with (gzip.open if path.endswith(".gz") else open)(path, "rb") as f:
        data = f.read()
    magic, total, rows, cols = (int.from_bytes(data[i:i + 4], "big") for i in range(0, 16, 4))
    if magic != 0x803 or total < count or (rows, cols) != (28, 28):
        raise ValueError(f"{path}: not an IDX file of at least {count} 28x28 images")
    pixels = np.frombuffer(data, dtype=np.uint8, count=count * 28 * 28, offset=16).astype(np.float64)
    normalised = (pixels / 255.0 - float(np.float32(MEAN))) / float(np.float32(STD))
    return normalised.astype(np.float32).reshape(count, 1, 28, 28)


def main():
    if len(sys.argv) != 5:
        print(__doc__)
        return 2
    root, hidden, logits_path, images_path = sys.argv[1], [int(h) for h in sys.argv[2].split(",")], *sys.argv[3:]
    try:
        import numpy as np
        from safetensors.numpy import load_file
    except ImportError as e:
        return missing(f"{sys.executable} cannot import safetensors.numpy ({e})")
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
    twin.eval()

    dtrain_logits = load_file(logits_path)["logits"]
    images = read_images(images_path, dtrain_logits.shape[0], np)
    with torch.no_grad():
        torch_logits = twin(torch.from_numpy(images)).numpy()
    if torch_logits.shape != dtrain_logits.shape:
        print(f"logits of shape {dtrain_logits.shape} from dtrain, {torch_logits.shape} from PyTorch")
        return 1
    error = np.abs(dtrain_logits.astype(np.float64) - torch_logits)
    bound = ATOL + RTOL * np.abs(torch_logits.astype(np.float64))
    worst = np.unravel_index(np.argmax(error - bound), error.shape)
    summary = (f"max |difference| {error.max():.3g} (logits up to {np.abs(torch_logits).max():.3g}); "
               f"worst at image {worst[0]} class {worst[1]}: dtrain {dtrain_logits[worst]:.7g}, "
               f"PyTorch {torch_logits[worst]:.7g}")
    if not (error <= bound).all():
        print(f"the PyTorch {torch.__version__} twin's logits differ from dtrain's by more than "
              f"{ATOL:g} + {RTOL:g} * |logit| on {int((error > bound).sum())} of {error.size}: {summary}")
        return 1
    print(f"loaded into its PyTorch {torch.__version__} twin by name (strict); its logits on "
          f"{len(images)} test images match dtrain's to {ATOL:g} + {RTOL:g} * |logit|: {summary}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
