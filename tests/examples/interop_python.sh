#!/bin/sh
# Runs a Python interoperability check (safetensors in PyTorch, TensorBoard's reader) with
# the repository's .venv-tests, which scripts/install-deps.sh --tests makes, when it exists
# as the test runs (not when CMake configured), else with FALLBACK (CMake's python3).
#   interop_python.sh FALLBACK SCRIPT ARGS...
fallback=$1
shift
venv_python="$(dirname "$0")/../../.venv-tests/bin/python3"
if [ -x "$venv_python" ]; then
  exec "$venv_python" "$@"
fi
exec "$fallback" "$@"
