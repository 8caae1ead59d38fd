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
#       instead of skipping both; and tiktoken, with GPT-2's rank file (gpt2.tiktoken, from the
#       openai-whisper source package on PyPI) in .venv-tests/share/, which text.tiktoken_gpt2
#       checks dtrain's GPT-2 encoding against; and transformers (4.38.2, a release that
#       runs on Debian's torch 1.13), whose GPT2LMHeadModel loads dtrain's GPT-2 export. Also Slurm's daemons and client and munge, for
#       the test that runs the main job under srun on a one-node Slurm (docs/SLURM.md).
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
  libpcre2-dev                              # GPT-2's pre-tokenization regex (the text layer's tokenizers)
  libxxhash-dev                             # checkpoint checksums (XXH3, header-only)
  libopenmpi-dev openmpi-bin                # multi-process training
  catch2                                    # unit tests (v2)
  dataset-fashion-mnist                     # the example trainer's default data
  fortunes dict-gcide                       # corpora for train_gpt (fortune-mod's files, the GCIDE dictionary); the text tests
)
if [ "$tests" -eq 1 ]; then
  packages+=(python3-venv python3-torch)    # the interoperability checks (see above)
  # ctest slurm.np2_main_job: a one-node Slurm (scripts/slurm/one-node-slurm.sh, its own munged
  # and configuration) runs the main job through `srun --mpi=pmix`; skipped without these.
  # On a machine with systemd, apt also enables the packages' services; Debian's slurmctld and
  # slurmd do not start without an /etc/slurm/slurm.conf, and the test uses ports of its own.
  # Where no init system runs (a chroot, a container), invoke-rc.d starts none of them.
  packages+=(slurmctld slurmd slurm-client munge)
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# munge's post-install step makes /etc/munge/munge.key by running mungekey as the munge user
# (su munge -s /bin/sh), unless a key is there already. Where no user but root can run a
# program, su fails (126) and dpkg leaves munge and Slurm's packages half configured, as in
# fresh-machine-check's debootstrap root, whose / is mode 0700 (made by mktemp -d). There the
# key is made beforehand, as root, as mungekey would make it (128 random bytes); the
# post-install step then gives it to munge. (one-node-slurm.sh copes with that / on its side.)
if [[ " ${missing[*]} " == *" munge "* ]] && ! $SUDO test -e /etc/munge/munge.key &&
  ! $SUDO su nobody -s /bin/sh -c true 2>/dev/null; then
  echo "install-deps: no user but root may run a program here (/ is mode $(stat -c %a /)): making munge's key as root, which its installation would make as user munge"
  $SUDO install -d -m 0700 /etc/munge
  $SUDO sh -c 'umask 077 && head -c 128 /dev/urandom > /etc/munge/munge.key'
fi
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages already installed"
else
  echo "install-deps: installing ${missing[*]}"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends \
    -o DPkg::Lock::Timeout=600 "${missing[@]}"
fi

if [ "$tests" -eq 1 ]; then
  # Pinned, so that a test run today and one next month check against the same readers.
  pins=(safetensors==0.8.0 tensorboard==2.21.0 tiktoken==0.14.0 transformers==4.38.2)
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
  # GPT-2's BPE ranks for the tiktoken interoperability check (ctest text.tiktoken_gpt2): tiktoken's
  # get_encoding would download them at test time, so they are fetched once, from the pinned
  # openai-whisper source package, which ships them as whisper/assets/gpt2.tiktoken.
  rank_file=.venv-tests/share/gpt2.tiktoken
  if [ ! -s "$rank_file" ]; then
    whisper=openai-whisper==20250625
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    .venv-tests/bin/python3 -m pip download -q --disable-pip-version-check --no-deps --no-binary :all: \
      -d "$tmp" "$whisper"
    mkdir -p "$(dirname "$rank_file")"
    .venv-tests/bin/python3 - "$tmp" "$rank_file" <<'PY'
import pathlib, sys, tarfile
src, dst = sys.argv[1:]
(sdist,) = pathlib.Path(src).glob("openai_whisper-*.tar.gz")
with tarfile.open(sdist) as tar:
    member = next(m for m in tar.getmembers() if m.name.endswith("/whisper/assets/gpt2.tiktoken"))
    data = tar.extractfile(member).read()
pathlib.Path(dst + ".part").write_bytes(data)
pathlib.Path(dst + ".part").rename(dst)
PY
    echo "install-deps: $rank_file (GPT-2's ranks, from $whisper)"
  fi
fi
