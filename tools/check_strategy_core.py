#!/usr/bin/env python3
"""Checks that dist::Strategy stays a small core and that the training loop stays blind to
strategy kinds (docs/ARCHITECTURE.md, "The strategy core").

  - class Strategy in include/dtrain/dist/strategy/strategy.h declares at most --max-virtuals
    (10) virtual functions, the destructor included: what only some strategies do belongs
    in a capability, not a new virtual;
  - no file under src/train/ or src/checkpoint/ names a strategy kind (its class, its
    header or its directory).

  check_strategy_core.py [--root DIR] [--max-virtuals N]

Exits 1 naming each violation.
"""
import argparse
import re
import sys
from pathlib import Path

KINDS = re.compile(r"\b(LocalStrategy|DataParallelStrategy|PipelineStrategy|ParameterServerStrategy|"
                   r"ZeroStrategy)\b|dist/(data_parallel|pipeline|ps|sharded)/")


def strategy_class(header):
    """The text of `class Strategy { ... };` (braces matched)."""
    text = header.read_text()
    start = re.search(r"^class Strategy\s*\{", text, re.M)
    if not start:
        return None
    depth, i = 0, start.end() - 1
    while i < len(text):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[start.end():i]
        i += 1
    return None


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", default=Path(__file__).resolve().parent.parent, type=Path)
    parser.add_argument("--max-virtuals", type=int, default=10)
    args = parser.parse_args()
    problems = []
    header = args.root / "include/dtrain/dist/strategy/strategy.h"
    body = strategy_class(header)
    if body is None:
        problems.append(f"{header.relative_to(args.root)}: no `class Strategy {{ ... }};` found")
    else:
        code = re.sub(r"//[^\n]*", "", body)
        virtuals = re.findall(r"\bvirtual\b[^;{]*?(~?\w+)\s*\(", code)
        if len(virtuals) > args.max_virtuals:
            problems.append(f"{header.relative_to(args.root)}: class Strategy declares {len(virtuals)} virtual functions "
                            f"({', '.join(virtuals)}); at most {args.max_virtuals}: make the new one a capability")
    for layer in ("train", "checkpoint"):
        for path in sorted((args.root / "src" / layer).rglob("*")):
            if not path.is_file():
                continue
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if line.lstrip().startswith("//"):
                    continue
                match = KINDS.search(line)
                if match:
                    problems.append(f"{path.relative_to(args.root)}:{number}: names the strategy kind "
                                    f"'{match.group(0)}' (ask for a capability instead)")
    for p in problems:
        print(f"check_strategy_core: {p}")
    if problems:
        print(f"check_strategy_core: {len(problems)} violation(s)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
