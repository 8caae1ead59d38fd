#!/usr/bin/env bash
# Installs the peer frameworks that bench/peers/ compares dtrain with into a virtual
# environment (default: the repository's .venv, which git ignores), for benchmarks. (The
# tests' readers, safetensors and TensorBoard, come from scripts/install-deps.sh --tests.)
#   bench/peers/setup-venv.sh [VENV_DIR]
# Needs python3 (3.9-3.12, for which all three packages publish wheels) and PyPI access.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
venv=${1:-$root/.venv}

python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --upgrade pip
# PyPI's Linux torch wheel brings CUDA libraries along (about 4 GB of the 6.8 GB this
# environment takes); it runs on CPU-only machines all the same.
"$venv/bin/pip" install torch tensorflow-cpu
# torchvision for ResNet-50 (pytorch_train.py) and the loader peer (torchvision_loader.py),
# Pillow for that and make_loader_images.py. pip picks the newest torchvision that accepts
# the installed torch (0.29.2, requiring torch >= 2.14, with torch 2.15.0).
"$venv/bin/pip" install torchvision pillow
# Keras 2 for MultiWorkerMirroredStrategy: Keras 3's model.fit fails under it. Without
# --no-deps, tf-keras would install the `tensorflow` package over tensorflow-cpu.
tf_version=$("$venv/bin/python" -c 'import tensorflow as tf; print(tf.__version__)' 2>/dev/null)
"$venv/bin/pip" install --no-deps "tf-keras==$tf_version"

"$venv/bin/python" - <<'PY'
import torch, torch.distributed as dist, torchvision
assert dist.is_gloo_available(), "this torch build has no gloo backend"
print(f"peers ready: torch {torch.__version__}, torchvision {torchvision.__version__}", end="")
PY
"$venv/bin/python" -c 'import tensorflow as tf, tf_keras
print(f", tensorflow {tf.__version__}, tf_keras {tf_keras.__version__}")' 2>/dev/null
