#!/usr/bin/env bash
# Installs dtrain's build, test and data dependencies from Debian 12 packages. Idempotent:
# packages already present are left as they are. Run as root (or through sudo).
# CUDA (nvcc, cuBLAS, cuDNN, NCCL) is not a Debian package: when /usr/local/cuda exists,
# CMake finds it and builds the CUDA targets; without it the build is CPU-only.
#
#   scripts/install-deps.sh           what the build, the trainers and most tests need
#   scripts/install-deps.sh --tests   also what the interoperability checks need: PyTorch
#       (Debian's python3-torch) and, in the git-ignored .venv-tests at the repository root (made
#       with --system-site-packages, so that it sees Debian's torch and numpy), the two
#       packages Debian 12 does not have, from PyPI: safetensors and tensorboard. ctest then
#       loads a checkpoint in PyTorch and reads the event files with TensorBoard's reader
#       instead of skipping both. Also Slurm's daemons and client and munge, for the test that runs
#       the main job under srun on a one-node Slurm (docs/SLURM.md).
set -euo pipefail
cd "$(dirname "$0")/.."

tests=0
case "${1:-}" in
  "") ;;
  --tests) tests=1 ;;
  *) echo "usage: scripts/install-deps.sh [--tests]" >&2; exit 2 ;;
esac

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
if [ "$tests" -eq 1 ]; then
  packages+=(python3-venv python3-torch)    # the interoperability checks (see above)
  # ctest slurm.np2_main_job: a one-node Slurm (scripts/slurm/one-node-slurm.sh, its own munged
  # and configuration) runs the main job through `srun --mpi=pmix`; skipped without these.
  # On a machine with systemd, apt also enables the packages' services; Debian's slurmctld and
  # slurmd do not start without an /etc/slurm/slurm.conf, and the test uses ports of its own.
  # munge's post-install step runs a shell as its own system user (su munge -s /bin/sh); where
  # no other user may run one (some container sandboxes), the packages cannot be configured,
  # and installing them would leave dpkg half done: they are left out, saying so, and the
  # Slurm test skips.
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  if $SUDO su nobody -s /bin/sh -c true 2>/dev/null; then
    packages+=(slurmctld slurmd slurm-client munge)
  else
    echo "install-deps: Slurm left out: no user but root may run a shell here, which munge's installation needs (the Slurm test will be skipped)" >&2
  fi
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages already installed"
else
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "install-deps: installing ${missing[*]}"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends \
    -o DPkg::Lock::Timeout=600 "${missing[@]}"
fi

if [ "$tests" -eq 1 ]; then
  # Pinned, so that a test run today and one next month check against the same readers.
  pins=(safetensors==0.8.0 tensorboard==2.21.0)
  # Debian's interpreter, whichever python3 comes first on PATH: its site packages hold torch.
  # Its own environment: bench/peers/setup-venv.sh's .venv holds PyPI's torch for benchmarks.
  if [ ! -x .venv-tests/bin/python3 ]; then
    /usr/bin/python3 -m venv --system-site-packages .venv-tests
  fi
  if .venv-tests/bin/python3 -m pip install -q --disable-pip-version-check "${pins[@]}"; then
    echo "install-deps: .venv-tests has ${pins[*]} (and sees Debian's torch)"
  else
    echo "install-deps: pip could not install ${pins[*]} into .venv-tests" >&2
    exit 1
  fi
fi
