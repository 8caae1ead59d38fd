#!/usr/bin/env python3
"""Checks that dtrain's #include edges follow its layering.

The allowed dependencies are read from the dtrain_add_layer(<layer> DEPS ... PRIVATE_DEPS
...) calls in src/CMakeLists.txt, the same lines that link the libraries, so the table
cannot drift from the build. A layer may include:
  - its own headers, public (dtrain/<layer>/...) and private ("<layer>/...", src/<layer>/);
  - the public headers of the layers it depends on, directly or through them (tensor links
    core, so autograd may include dtrain/core/...). PRIVATE_DEPS count for src/ only.
Never another layer's private headers, and a public header never includes a private one
(it is installed without src/). examples/ and bench/ are programs: any public header,
no private ones.

  check_layering.py [--root DIR]             the include edges
  check_layering.py [--root DIR] --umbrella  include/dtrain/dtrain.h includes every
                                             public header that builds without CUDA

Exits 1 and names file:line and the edge for each violation.
"""
import argparse
import re
import sys
from pathlib import Path

SOURCE_SUFFIXES = {".h", ".hpp", ".cuh", ".inl", ".cpp", ".cc", ".cu"}
PROGRAM_DIRS = ("examples", "bench")
UMBRELLA = "dtrain/dtrain.h"
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*([<"])([^">]+)[">]')
LAYER_CALL_RE = re.compile(r"\bdtrain_add_layer\s*\(([^)]*)\)")


def parse_layers(cmake_file):
    """{layer: (public deps, private deps)} from the dtrain_add_layer calls."""
    text = re.sub(r"#[^\n]*", "", cmake_file.read_text())
    calls = [call.split() for call in LAYER_CALL_RE.findall(text)]
    names = {call[0] for call in calls}
    layers = {}
    for name, *args in calls:
        deps = {"DEPS": set(), "PRIVATE_DEPS": set()}
        section = None
        for arg in args:
            if arg in deps:
                section = deps[arg]
                continue
            dep = re.sub(r"^dtrain(_|::)", "", arg)
            if section is not None and dep != arg and dep in names:
                section.add(dep)
        layers[name] = (deps["DEPS"], deps["PRIVATE_DEPS"])
    return layers


def reachable(layers, start):
    """`start` and every layer below it through public DEPS."""
    seen, todo = set(), list(start)
    while todo:
        layer = todo.pop()
        if layer not in seen:
            seen.add(layer)
            todo.extend(layers[layer][0])
    return seen


def source_files(directory):
    return sorted(p for p in directory.rglob("*") if p.is_file() and p.suffix in SOURCE_SUFFIXES)


def includes(path):
    for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        match = INCLUDE_RE.match(line)
        if match:
            yield number, match.group(1) == '"', match.group(2)


class Checker:
    def __init__(self, root):
        self.root = root
        self.table_file = root / "src" / "CMakeLists.txt"
        self.layers = parse_layers(self.table_file)
        self.errors = []
        self.edges = 0

    def error(self, path, line, message):
        where = path.relative_to(self.root).as_posix() + (f":{line}" if line else "")
        self.errors.append(f"{where}: {message}")

    def owner_of(self, path):
        """The layer whose src/ holds the existing file `path`, or None."""
        if not path.is_file():
            return None
        parts = path.resolve().relative_to(self.root).parts
        return parts[1] if len(parts) > 2 and parts[0] == "src" and parts[1] in self.layers else None

    def check_layer_file(self, path, layer, public):
        deps, private_deps = self.layers[layer]
        allowed = reachable(self.layers, deps if public else deps | private_deps)
        kind = "public header" if public else "file"
        for line, quoted, target in includes(path):
            parts = target.split("/")
            self.edges += 1
            if target == UMBRELLA:
                self.error(path, line, f'{layer} -> every layer: "{UMBRELLA}" includes every '
                           "layer; it is for programs")
            elif parts[0] == "dtrain" and len(parts) > 2:
                to = parts[1]
                if to not in self.layers:
                    self.error(path, line, f'{layer} -> ?: "{target}" names no layer of '
                               f"{self.table_file.relative_to(self.root)}")
                elif to != layer and to not in allowed:
                    self.error(path, line, f'{layer} -> {to}: "{target}" goes up or sideways; '
                               f"{layer}'s {kind}s may include the public headers of: "
                               f"{', '.join(sorted(allowed)) or 'no other layer'}")
            elif quoted and parts[0] in self.layers and len(parts) > 1:
                self.check_private(path, line, layer, public, parts[0], target)
            elif quoted:
                # A relative path ("../core/x.h") must not reach into another layer's src/.
                owner = self.owner_of(path.parent / target)
                if owner is not None:
                    self.check_private(path, line, layer, public, owner, target)

    def check_private(self, path, line, layer, public, to, target):
        if public:
            self.error(path, line, f'{layer} -> {to}: public header includes the private header '
                       f'"{target}" (public headers are installed without src/)')
        elif to != layer:
            self.error(path, line, f'{layer} -> {to}: "{target}" is {to}\'s private header; '
                       f"a layer includes only its own private headers (src/{layer}/) and "
                       f"other layers' public ones (dtrain/{to}/...)")

    def check_program_file(self, path, program_dir):
        for line, quoted, target in includes(path):
            self.edges += 1
            if not quoted:
                continue
            # The compiler looks next to the file first, then in the program's directory
            # (bench/ puts itself on the include path); src/ is not on a program's path, but
            # a relative path could still reach into it.
            if (path.parent / target).is_file():
                owner = self.owner_of(path.parent / target)
            elif (program_dir / target).is_file():
                owner = self.owner_of(program_dir / target)
            else:
                owner = self.owner_of(self.root / "src" / target)
            if owner is not None:
                self.error(path, line, f'{program_dir.name} -> {owner}: "{target}" is a private '
                           f"header; programs include only public ones (dtrain/{owner}/...)")

    def check_includes(self):
        files = 0
        for top in (self.root / "src", self.root / "include" / "dtrain"):
            for directory in sorted(p for p in top.iterdir() if p.is_dir()):
                if directory.name not in self.layers:
                    self.error(directory, None, f"{directory.name} is not a layer of "
                               f"{self.table_file.relative_to(self.root)}; its files are unchecked")
                    continue
                for path in source_files(directory):
                    self.check_layer_file(path, directory.name, public=top.name == "dtrain")
                    files += 1
        for name in PROGRAM_DIRS:
            for path in source_files(self.root / name) if (self.root / name).is_dir() else []:
                self.check_program_file(path, self.root / name)
                files += 1
        return f"{self.edges} includes in {files} files"

    def check_umbrella(self):
        umbrella = self.root / "include" / UMBRELLA
        public_dir = self.root / "include"
        # Headers under a cuda/ folder need the CUDA toolkit; every other one builds anywhere.
        public = {p.relative_to(public_dir).as_posix(): p for p in source_files(public_dir / "dtrain")
                  if "cuda" not in p.relative_to(public_dir).parts and p != umbrella}
        if not umbrella.exists():
            self.error(umbrella, None, "missing: the umbrella header that includes every public header")
            return "no umbrella"
        listed = set()
        for line, _, target in includes(umbrella):
            listed.add(target)
            if target.startswith("dtrain/") and target not in public and target != "dtrain/config.h":
                self.error(umbrella, line, f'"{target}" is not a public header that builds '
                           "without CUDA (renamed, removed, or under a cuda/ folder)")
        for target in sorted(set(public) - listed):
            self.error(umbrella, None, f'missing #include "{target}": every public header outside '
                       "cuda/ folders belongs in the umbrella")
        return f"{len(public)} public headers in {UMBRELLA}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent,
                        help="the source tree (default: this script's project)")
    parser.add_argument("--umbrella", action="store_true",
                        help="check include/dtrain/dtrain.h instead of the include edges")
    args = parser.parse_args()
    checker = Checker(args.root.resolve())
    if args.umbrella:
        summary = checker.check_umbrella()
        rule = f"{UMBRELLA} includes every public header outside cuda/ folders, and only those"
    else:
        summary = checker.check_includes()
        rule = ("allowed dependencies (src/CMakeLists.txt, transitively): "
                + describe(checker.layers))
    for message in checker.errors:
        print(message)
    if checker.errors:
        print(f"check_layering: {len(checker.errors)} violation(s); {rule}")
        return 1
    print(f"check_layering: OK, {summary}; {rule}")
    return 0


def describe(layers):
    return "; ".join(f"{name} -> {', '.join(sorted(reachable(layers, deps | private))) or '-'}"
                     for name, (deps, private) in layers.items())


if __name__ == "__main__":
    sys.exit(main())
