#!/usr/bin/env bash
# Installs dtrain's build, test and data dependencies from Debian 12 packages. Idempotent:
# packages already present are left as they are. Run as root (or through sudo).
# CUDA (nvcc, cuBLAS, cuDNN, NCCL) is not a Debian package: when /usr/local/cuda exists,
# CMake finds it and builds the CUDA targets; without it the build is CPU-only.
set -euo pipefail

packages=(
  cmake ninja-build g++ pkg-config ccache   # toolchain
  python3                                   # the include-layering check (tools/check_layering.py)
  clang-format                              # the layout check (tools/check_format.sh, .clang-format)
  libeigen3-dev                             # f64 GEMM, small dense math
  libdnnl-dev ocl-icd-opencl-dev            # oneDNN: f32 conv and GEMM kernels (its CMake config wants OpenCL)
  libfmt-dev libspdlog-dev                  # formatting, logging
  nlohmann-json3-dev                        # metrics and bench JSON
  libcli11-dev                              # command-line flags
  zlib1g-dev                                # .gz MNIST files
  libjpeg62-turbo-dev                       # JPEG decoding and encoding (ImageNet-style folders)
  libarchive-dev                            # tar shards of records (WebDataset layout)
  libxxhash-dev                             # checkpoint checksums (XXH3, header-only)
  libopenmpi-dev openmpi-bin                # multi-process training
  catch2                                    # unit tests (v2)
  dataset-fashion-mnist                     # the example trainer's default data
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages already installed"
  exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "install-deps: installing ${missing[*]}"
$SUDO apt-get update -q
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends \
  -o DPkg::Lock::Timeout=600 "${missing[@]}"
