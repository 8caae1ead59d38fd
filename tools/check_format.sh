#!/usr/bin/env bash
# Fails, naming each file, unless the folders listed below follow .clang-format (clang-format
# 14, Debian 12's). The rest of the tree joins the list as it is next reworked, so that a
# reformat never hides a change; `clang-format -i FILE` formats a file.
#   tools/check_format.sh [ROOT]      exit 77 (skipped) when clang-format is not installed
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$root"
if ! command -v clang-format > /dev/null; then
  echo "check_format: clang-format is not installed (scripts/install-deps.sh installs it): skipped"
  exit 77
fi
folders=(src/dist include/dtrain/dist src/train include/dtrain/train src/text include/dtrain/text examples tests/dist tests/train
  tests/text)
mapfile -t files < <(find "${folders[@]}" -type f \( -name '*.cpp' -o -name '*.h' \) | sort)
bad=0
for f in "${files[@]}"; do
  if ! clang-format --style=file "$f" | cmp -s - "$f"; then
    echo "check_format: $f does not follow .clang-format (clang-format -i $f)"
    bad=$((bad + 1))
  fi
done
if [ "$bad" -gt 0 ]; then
  echo "check_format: $bad of ${#files[@]} file(s) need formatting"
  exit 1
fi
echo "check_format: ${#files[@]} files follow .clang-format"
