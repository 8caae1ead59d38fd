#!/usr/bin/env python3
"""Generates and checks the table of measured figures (docs/PERFORMANCE.md) from raw files.

  python3 tools/check_performance.py [--root DIR] [--check]   regenerate in memory, compare, fail naming rows
  python3 tools/check_performance.py --write                  write the generated parts of the docs
  python3 tools/check_performance.py --list | --show ID | --command ID

The rows are defined in docs/performance/rows.toml (id, what, command, raw file, extraction,
the source paths the figure measures, figure format). Everything else in a row is read, not
typed: the figure from the raw file by the extraction; commit, date, machine and peer versions
from the raw file's provenance header (its first line: `# dtrain-provenance: {json}` in text
files, `{"provenance": {...}}` in JSON-lines files; bench/provenance.sh writes it); the status
from git: a row is "stale since H" when a commit (H, the first) after the row's commit touched one of its
sources (renames followed), "not current: ..." when its provenance is not clean (no commit
recorded, a dirty tree, a caveat in the header), "current" otherwise.

--check (the default; ctest docs.performance_table) fails when
  - the committed table in docs/PERFORMANCE.md or the README's "Measured" table differs from the
    regenerated one (each differing row named, with the cells that differ);
  - a link to a row (PERFORMANCE.md#ID, or #ID inside PERFORMANCE.md) in README.md or docs/*.md
    names a row that does not exist or has a text other than the row's figure;
  - a figure-like number in README's "## Measured" section is not the text of a link to a row
    (figure-like: a number with a decimal point, or followed by %, x, s, ms, us, samples/s,
    images/s, GB/s, GiB; dates, dotted versions, code spans and link texts excluded);
  - a raw file is missing, has no provenance header, or its extraction fails; a row's commit is
    unknown to the repository; a source path does not exist.
A shallow clone is deepened (git fetch --unshallow) or the check fails saying why; outside a git
work tree the check cannot compute staleness and exits 77 (ctest: skipped). Standard library only.

Extractions (a row's `extract`):
  re:REGEX          group 1 of REGEX's first match (multi-line mode: ^ and $ per line)
  re#N:REGEX        group 1 of its N-th match (1-based; -1: the last)
  med:FIELD:FILTER  median of FIELD over the file's JSON lines that match FILTER (k=v,k=v)
  medratio:FIELD:FILTER_A:FILTER_B   median(A) / median(B)
  best:FILTER       per repetition ("rep"), dtrain's samples_per_s over the fastest PyTorch
                    samples_per_s of that repetition (tuning lines left out); the median
  fn:NAME           a named extractor (EXTRACTORS)
The provenance line is removed before extracting.
"""

import argparse
import json
import re
import statistics
import subprocess
import sys
import tomllib
from pathlib import Path

ROWS_FILE = "docs/performance/rows.toml"
PERF_FILE = "docs/PERFORMANCE.md"
README_FILE = "README.md"
TABLE_BEGIN = "<!-- generated table: python3 tools/check_performance.py --write; edit docs/performance/rows.toml -->"
TABLE_END = "<!-- end of generated table -->"
README_BEGIN = "<!-- generated from docs/performance/rows.toml ([[readme]]): python3 tools/check_performance.py --write -->"
README_END = "<!-- end of generated Measured table -->"
PROV_TEXT = "# dtrain-provenance:"
SKIP = 77
COLUMNS = ["id", "figure", "what", "command", "commit", "date", "machine", "peers, settings",
           "measures", "raw file", "extract", "status"]


class CheckError(Exception):
    pass


class NotARepo(Exception):
    pass


# ---------------------------------------------------------------- raw files


def read_raw(path):
    """(provenance dict or None, the text without the provenance line)."""
    text = path.read_text(encoding="utf-8", errors="replace")
    first, _, rest = text.partition("\n")
    if first.startswith(PROV_TEXT):
        return json.loads(first[len(PROV_TEXT):]), rest
    if first.startswith('{"provenance"'):
        value = json.loads(first)
        if isinstance(value, dict) and isinstance(value.get("provenance"), dict):
            return value["provenance"], rest
    return None, text


def json_lines(text):
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{") and line.endswith("}"):
            try:
                value = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(value, dict) and "provenance" not in value:
                out.append(value)
    return out


def parse_filter(spec):
    pairs = []
    for part in filter(None, spec.split(",")):
        key, _, value = part.partition("=")
        pairs.append((key.strip(), value.strip()))
    return pairs


def matches(obj, pairs):
    for key, value in pairs:
        if key not in obj:
            return False
        have = obj[key]
        if isinstance(have, bool):
            have = "true" if have else "false"
        if isinstance(have, (int, float)) and not isinstance(have, bool):
            try:
                if float(value) != float(have):
                    return False
                continue
            except ValueError:
                return False
        if str(have) != value:
            return False
    return True


def field_median(objs, field, pairs):
    values = [o[field] for o in objs if matches(o, pairs) and isinstance(o.get(field), (int, float))]
    if not values:
        raise CheckError(f"no JSON line with '{field}' matches {pairs}")
    return statistics.median(values)


def paired_best(objs, pairs):
    train = [o for o in objs if o.get("bench") == "train" and "framework" in o and not o.get("tune")
             and matches(o, pairs)]
    by_rep = {}
    for o in train:
        by_rep.setdefault(o.get("rep", 1), {}).setdefault(o["framework"], []).append(o["samples_per_s"])
    ratios = [max(r["dtrain"]) / max(r["pytorch"]) for r in by_rep.values() if r.get("dtrain") and r.get("pytorch")]
    if not ratios:
        raise CheckError(f"no repetition with both dtrain and a PyTorch line matching {pairs}")
    return statistics.median(ratios)


def _scaling_steps(text):
    """The training-step rows of bench/model/report.py's scaling_model.txt: (ranks, |error| %)."""
    section = text.split("Training steps:", 1)
    if len(section) < 2:
        raise CheckError("no 'Training steps:' section")
    rows = []
    # up to the summary line ("training steps: N of M within 15%"); the extrapolation after it
    # has rows that start with the same words
    for line in section[1].split("\ntraining steps:", 1)[0].splitlines():
        if re.match(r"^(data_parallel|pipeline|ps_sync|ps_async)\s", line):
            tokens = line.split()
            error = next(t for t in tokens if t.endswith("%"))
            rows.append((int(tokens[3]), abs(float(error[:-1]))))
    if not rows:
        raise CheckError("no training-step rows")
    return rows


def _allreduce_fit_rows(text):
    rows = []
    for line in text.split("Training steps:", 1)[0].splitlines():
        tokens = line.split()
        if len(tokens) >= 8 and tokens[4].isdigit() and tokens[7].endswith("%"):
            rows.append((int(tokens[4]), "over 15%" in line))
    return rows


def steps_multirank_within(text):
    multi = [e for ranks, e in _scaling_steps(text) if ranks > 1]
    return f"{sum(e <= 15.0 for e in multi)} of {len(multi)}"


def steps_multirank_mean(text):
    multi = [e for ranks, e in _scaling_steps(text) if ranks > 1]
    return sum(multi) / len(multi)


def steps_one_rank(text):
    return float(sum(1 for ranks, _ in _scaling_steps(text) if ranks == 1))


def allreduce_miss_sizes(text):
    rows = _allreduce_fit_rows(text)
    sizes = {size for size, _ in rows}
    missed = {size for size, over in rows if over}
    return f"{len(missed)} of {len(sizes)}"


EXTRACTORS = {
    "steps_multirank_within": steps_multirank_within,
    "steps_multirank_mean": steps_multirank_mean,
    "steps_one_rank": steps_one_rank,
    "allreduce_miss_sizes": allreduce_miss_sizes,
}


def extract(spec, text):
    kind, _, rest = spec.partition(":")
    if kind == "re" or kind.startswith("re#"):
        nth = int(kind[3:]) if kind.startswith("re#") else 1
        found = list(re.finditer(rest, text, re.MULTILINE))
        if not found:
            raise CheckError(f"no match for /{rest}/")
        try:
            match = found[nth - 1] if nth > 0 else found[nth]
        except IndexError:
            raise CheckError(f"/{rest}/ matches {len(found)} time(s), not {nth}") from None
        value = match.group(1)
        try:
            return float(value.replace(",", ""))
        except ValueError:
            return value
    if kind == "med":
        field, _, flt = rest.partition(":")
        return field_median(json_lines(text), field, parse_filter(flt))
    if kind == "medratio":
        field, flt_a, flt_b = rest.split(":", 2)
        objs = json_lines(text)
        return field_median(objs, field, parse_filter(flt_a)) / field_median(objs, field, parse_filter(flt_b))
    if kind == "best":
        return paired_best(json_lines(text), parse_filter(rest))
    if kind == "fn":
        if rest not in EXTRACTORS:
            raise CheckError(f"no extractor named '{rest}' (known: {', '.join(sorted(EXTRACTORS))})")
        return EXTRACTORS[rest](text)
    raise CheckError(f"unknown extraction '{spec}' (re:, re#N:, med:, medratio:, best:, fn:)")


# ---------------------------------------------------------------- git


class Git:
    """Staleness from the history: commits after a row's commit that touched its sources."""

    def __init__(self, root, deepen=True):
        self.root = root
        self.cache = {}
        self.renames = {}
        out = self._run("rev-parse", "--is-inside-work-tree", check=False)
        if out is None or out.strip() != "true":
            raise NotARepo(f"{root} is not a git work tree: staleness needs the history")
        if self._run("rev-parse", "--is-shallow-repository").strip() == "true":
            if not deepen:
                raise CheckError("the clone is shallow: staleness needs the history (git fetch --unshallow)")
            result = subprocess.run(["git", "-C", str(root), "fetch", "--quiet", "--unshallow"],
                                    capture_output=True, text=True)
            if result.returncode != 0:
                raise CheckError("the clone is shallow and `git fetch --unshallow` failed "
                                 f"({result.stderr.strip() or 'exit ' + str(result.returncode)}): "
                                 "staleness needs the commits since each row's commit")

    def _run(self, *args, check=True):
        result = subprocess.run(["git", "-C", str(self.root), *args], capture_output=True, text=True)
        if result.returncode != 0:
            if check:
                raise CheckError(f"git {' '.join(args)}: {result.stderr.strip()}")
            return None
        return result.stdout

    def known(self, commit):
        return self._run("cat-file", "-e", f"{commit}^{{commit}}", check=False) is not None

    def _renames_since(self, commit):
        """(new, old) path pairs of renames after commit, newest first."""
        if commit not in self.renames:
            out = self._run("log", "-M", "--diff-filter=R", "--name-status", "--format=", f"{commit}..HEAD")
            pairs = []
            for line in out.splitlines():
                parts = line.split("\t")
                if len(parts) == 3 and parts[0].startswith("R"):
                    pairs.append((parts[2], parts[1]))
            self.renames[commit] = pairs
        return self.renames[commit]

    def touching(self, commit, sources):
        """Hashes (7 characters) of the commits after `commit` that touch `sources`, oldest first."""
        key = (commit, tuple(sources))
        if key in self.cache:
            return self.cache[key]
        paths = list(sources)
        for new, old in self._renames_since(commit):  # newest first: a chain of renames is followed back
            for p in list(paths):
                if p.endswith("/") and new.startswith(p):
                    paths.append(old)
                elif new == p:
                    paths.append(old)
        out = self._run("log", "--format=%H", "--reverse", f"{commit}..HEAD", "--", *sorted(set(paths)))
        # 7 characters whatever the clone: git's own abbreviation grows with the object count,
        # which would make the same table differ between two clones of one commit.
        hashes = [h[:7] for h in out.split()]
        self.cache[key] = hashes
        return hashes


# ---------------------------------------------------------------- rows


def load_definitions(root):
    path = root / ROWS_FILE
    if not path.is_file():
        raise CheckError(f"{ROWS_FILE} not found")
    with open(path, "rb") as f:
        try:
            data = tomllib.load(f)
        except tomllib.TOMLDecodeError as e:
            raise CheckError(f"{ROWS_FILE}: {e}") from None
    return data


def expand_sources(names, groups, where):
    out = []
    for name in names:
        if name.startswith("@"):
            if name[1:] not in groups:
                raise CheckError(f"{where}: no source group '{name[1:]}' in [sources]")
            out.extend(expand_sources(groups[name[1:]], groups, where))
        else:
            out.append(name)
    return list(dict.fromkeys(out))


def resolve_rows(data):
    """The [[row]] entries with their run's fields filled in."""
    runs = data.get("run", {})
    groups = data.get("sources", {})
    rows, seen = [], set()
    for entry in data.get("row", []):
        rid = entry.get("id", "")
        where = f"{ROWS_FILE}: row {rid or '?'}"
        if not re.fullmatch(r"[a-z0-9][a-z0-9-]*", rid):
            raise CheckError(f"{where}: an id is lower-case letters, digits and '-'")
        if rid in seen:
            raise CheckError(f"{where}: the id is used twice")
        seen.add(rid)
        run = {}
        if "run" in entry:
            if entry["run"] not in runs:
                raise CheckError(f"{where}: no [run.{entry['run']}]")
            run = runs[entry["run"]]
        row = {**run, **entry}
        for needed in ("what", "command", "raw", "extract", "format", "sources"):
            if needed not in row:
                raise CheckError(f"{where}: no '{needed}' (in the row or its run)")
        if not row["raw"].startswith("bench/results/"):
            raise CheckError(f"{where}: raw file '{row['raw']}' is not under bench/results/")
        row["sources"] = expand_sources(row["sources"], groups, where)
        if not row["sources"] and not row.get("sources_note"):
            raise CheckError(f"{where}: no sources and no sources_note saying why")
        rows.append(row)
    return rows


def format_figure(row, value):
    if isinstance(value, str):
        return row["format"].replace("{}", value) if "{}" in row["format"] else value
    return row["format"].format(value)


def peers_text(prov):
    peers = prov.get("peers")
    if not peers:
        return ""
    if isinstance(peers, dict):
        return ", ".join(f"{k} {v}" for k, v in peers.items())
    return str(peers)


def compute(root, rows, git):
    """Each row's generated cells, or a failure naming the row."""
    out, failures = [], []
    raw_cache = {}
    for row in rows:
        rid = row["id"]
        try:
            path = root / row["raw"]
            if not path.is_file():
                raise CheckError(f"raw file {row['raw']} does not exist")
            if row["raw"] not in raw_cache:
                raw_cache[row["raw"]] = read_raw(path)
            prov, body = raw_cache[row["raw"]]
            if prov is None:
                raise CheckError(f"{row['raw']} has no provenance header (first line `{PROV_TEXT} {{...}}` "
                                 "or {\"provenance\": {...}}; bench/provenance.sh writes it)")
            for src in row["sources"]:
                if not (root / src).exists():
                    raise CheckError(f"source path {src} does not exist")
            value = extract(row["extract"], body)
            figure = format_figure(row, value)
            commit = prov.get("commit") or ""
            clean = commit.removesuffix("-dirty")
            problems = []
            if not commit:
                problems.append("the raw file names no commit" + (f" ({prov['no_commit']})" if prov.get("no_commit") else ""))
            elif commit.endswith("-dirty"):
                problems.append(f"measured on a dirty tree ({commit})")
            for key in ("date", "machine"):
                if not prov.get(key):
                    problems.append(f"the raw file names no {key}")
            if prov.get("caveat"):
                problems.append(prov["caveat"])
            stale = []
            if clean:
                if not git.known(clean):
                    raise CheckError(f"commit {clean} (from {row['raw']}) is not in this repository: "
                                     "cannot tell what changed since; refusing")
                if row["sources"]:
                    stale = git.touching(clean, row["sources"])
            if stale:
                # the first commit only: later ones would change the row with every commit
                status = f"stale since {stale[0]}"
                if problems:
                    status += "; " + "; ".join(problems)
            elif problems:
                status = "not current: " + "; ".join(problems)
            else:
                status = "current"
            commit_cell = commit or "none recorded"
            if prov.get("baseline"):
                commit_cell += f" vs {prov['baseline']}"
            machine = (prov.get("machine") or "not recorded") + (f"; {row['setup']}" if row.get("setup") else "")
            peers = "; ".join(x for x in (peers_text(prov), row.get("settings", "")) if x) or "none"
            command = " ".join(x for x in (f"`{row['command']}`" if row["command"] else "", row.get("command_note", "")) if x)
            measures = ", ".join(f"`{s}`" for s in row["sources"]) or row.get("sources_note", "")
            if row["sources"] and row.get("sources_note"):
                measures += f" ({row['sources_note']})"
            what = row["what"] + (f" ({prov['note']})" if prov.get("note") and row.get("show_note") else "")
            cells = {
                "id": f'<a id="{rid}"></a>{rid}', "figure": figure, "what": what, "command": command,
                "commit": commit_cell, "date": prov.get("date") or "not recorded", "machine": machine, "peers, settings": peers,
                "measures": measures, "raw file": f"`{row['raw']}`", "extract": f"`{row['extract']}`",
                "status": status,
            }
            out.append({"id": rid, "cells": cells, "status": status, "figure": figure, "row": row,
                        "date": prov.get("date") or "date not recorded", "machine": prov.get("machine") or "machine not recorded"})
        except (CheckError, re.error, ValueError, KeyError, IndexError, StopIteration, ZeroDivisionError,
                json.JSONDecodeError) as e:
            failures.append(f"row {rid}: {e}")
    return out, failures


def cell_text(text):
    return text.replace("|", "\\|").replace("\n", " ")


def render_table(computed):
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for c in computed:
        lines.append("| " + " | ".join(cell_text(c["cells"][col]) for col in COLUMNS) + " |")
    return lines


def short_machine(machine):
    return ",".join(machine.split(";")[0].split(" (")[0].split(",")[:2])


def render_readme(data, computed):
    by_id = {c["id"]: c for c in computed}
    lines = ["| figure | measured | machine, date | status |", "|---|---|---|---|"]
    for entry in data.get("readme", []):
        ids = re.findall(r"\{([a-z0-9-]+)\}", entry["text"])
        missing = [i for i in ids if i not in by_id]
        if missing:
            raise CheckError(f"{ROWS_FILE}: [[readme]] '{entry['label']}' names unknown row(s) {', '.join(missing)}")
        text = re.sub(r"\{([a-z0-9-]+)\}", lambda m: f"[{by_id[m.group(1)]['figure']}](docs/PERFORMANCE.md#{m.group(1)})",
                      entry["text"])
        where = []
        for i in ids:
            w = f"{short_machine(by_id[i]['machine'])}, {by_id[i]['date']}"
            if w not in where:
                where.append(w)
        statuses = [by_id[i]["status"] for i in ids]
        if all(s == "current" for s in statuses):
            status = "current"
        else:
            bad = [i for i, s in zip(ids, statuses) if s != "current"]
            kinds = sorted({by_id[i]["status"].split(" since")[0].split(":")[0] for i in bad})
            status = " / ".join(kinds) + ("" if len(bad) == len(ids) else f" ({', '.join(bad)})")
        lines.append(f"| {cell_text(entry['label'])} | {cell_text(text)} | {'; '.join(where)} | {status} |")
    return lines


def splice(text, begin, end, lines, name):
    if begin not in text or end not in text:
        raise CheckError(f"{name}: the markers of the generated part are missing ({begin} ... {end})")
    head, _, rest = text.partition(begin)
    _, _, tail = rest.partition(end)
    return head + begin + "\n" + "\n".join(lines) + "\n" + end + tail


def region(text, begin, end):
    if begin not in text or end not in text:
        return None
    return text.partition(begin)[2].partition(end)[0].strip("\n").splitlines()


def row_cells(line):
    cells, cell, i = [], "", 0
    body = line.strip().removeprefix("|").removesuffix("|")
    while i < len(body):
        if body[i] == "\\" and i + 1 < len(body) and body[i + 1] == "|":
            cell += "|"
            i += 2
            continue
        if body[i] == "|":
            cells.append(cell.strip())
            cell = ""
        else:
            cell += body[i]
        i += 1
    cells.append(cell.strip())
    return cells


def row_key(cells):
    return re.sub(r"<[^>]*>", "", cells[0]).strip() if cells else ""


def diff_tables(committed, generated, name, columns):
    """Failures naming each row that differs."""
    failures = []
    if committed is None:
        return [f"{name}: the generated part's markers are missing (run --write)"]
    old = {row_key(row_cells(line)): row_cells(line) for line in committed[2:] if line.startswith("|")}
    new = {row_key(row_cells(line)): row_cells(line) for line in generated[2:]}
    if committed[:2] != generated[:2]:
        failures.append(f"{name}: the table's header differs from the generated one")
    for key, cells in new.items():
        if key not in old:
            failures.append(f"{name}: row {key} is missing (run python3 tools/check_performance.py --write)")
            continue
        differ = [f"{col}: {a!r} -> {b!r}" for col, a, b in zip(columns, old[key], cells) if a != b]
        if len(old[key]) != len(cells):
            differ.append(f"{len(old[key])} cells, generated {len(cells)}")
        if differ:
            failures.append(f"{name}: row {key} differs from its raw file and the history: " + "; ".join(differ))
    for key in old:
        if key not in new:
            failures.append(f"{name}: row {key} is not generated from {ROWS_FILE}")
    if not failures and [l for l in committed if l.startswith("|")] != generated:
        failures.append(f"{name}: the table's order or layout differs from the generated one (run --write)")
    return failures


# ---------------------------------------------------------------- links and README numbers

LINK = re.compile(r"\[([^\]]*)\]\(([^)\s]*?)#([A-Za-z0-9_-]+)\)")
FIGURE_LIKE = re.compile(
    r"(?<![\w.\-/#])(\d[\d,]*(?:\.\d+)?)"
    r"(?:%|x\b|\s?(?:s\b|ms\b|us\b|samples/s\b|images/s\b|GB/s\b|GiB\b|minutes\b))")
DECIMAL = re.compile(r"(?<![\w.\-/#])\d+\.\d+(?![\d.]*\d)(?!\.\d)")


def check_links(root, by_id):
    failures, count = [], 0
    docs = [root / README_FILE, *sorted((root / "docs").glob("*.md"))]
    for doc in docs:
        if not doc.is_file():
            continue
        rel = doc.relative_to(root).as_posix()
        inside_perf = rel == PERF_FILE
        text = doc.read_text(encoding="utf-8")
        if inside_perf:
            gen = region(text, TABLE_BEGIN, TABLE_END)
            text_lines = text.splitlines()
        else:
            text_lines = text.splitlines()
        for number, line in enumerate(text_lines, 1):
            for m in LINK.finditer(line):
                label, target, anchor = m.groups()
                if not (target.endswith("PERFORMANCE.md") or (inside_perf and target == "")):
                    continue
                if inside_perf and target == "" and anchor not in by_id:
                    continue  # a section anchor
                count += 1
                if anchor not in by_id:
                    failures.append(f"{rel}:{number}: links row '{anchor}', which {ROWS_FILE} does not define")
                    continue
                shown = label.replace("*", "").replace("`", "").strip()
                if shown != by_id[anchor]["figure"]:
                    failures.append(f"{rel}:{number}: row {anchor}: the link text '{label}' is not the row's "
                                    f"figure '{by_id[anchor]['figure']}'")
    return failures, count


def measured_section(text):
    m = re.search(r"^## Measured\s*$(.*?)(?=^## |\Z)", text, re.MULTILINE | re.DOTALL)
    return m.group(1) if m else None


def check_readme_numbers(root, by_id):
    text = (root / README_FILE).read_text(encoding="utf-8")
    section = measured_section(text)
    if section is None:
        return [f"{README_FILE}: no '## Measured' section"]
    start = text[: text.index(section)].count("\n") + 1
    failures = []
    for offset, line in enumerate(section.splitlines()):
        clean = re.sub(r"<!--.*?-->", " ", line)
        clean = LINK.sub(lambda m: " " if m.group(3) in by_id else m.group(0), clean)
        clean = re.sub(r"`[^`]*`", " ", clean)
        clean = re.sub(r"\]\([^)]*\)", "]", clean)
        clean = re.sub(r"\b\d{4}-\d{2}-\d{2}\b", " ", clean)
        found = [m.group(0) for m in FIGURE_LIKE.finditer(clean)]
        covered = [m.span() for m in FIGURE_LIKE.finditer(clean)]
        found += [m.group(0) for m in DECIMAL.finditer(clean) if not any(s <= m.start() < e for s, e in covered)]
        for number in dict.fromkeys(found):
            failures.append(f"{README_FILE}:{start + offset}: '{number.strip()}' in 'Measured' is not a link "
                            "to a row of docs/PERFORMANCE.md")
    return failures


# ---------------------------------------------------------------- main


def generate(root, git):
    data = load_definitions(root)
    rows = resolve_rows(data)
    computed, failures = compute(root, rows, git)
    return data, rows, computed, failures


def check(root, git):
    data, rows, computed, failures = generate(root, git)
    if failures:
        return rows, failures, 0
    by_id = {c["id"]: c for c in computed}
    table = render_table(computed)
    perf = (root / PERF_FILE).read_text(encoding="utf-8")
    failures += diff_tables(region(perf, TABLE_BEGIN, TABLE_END), table, PERF_FILE, COLUMNS)
    try:
        readme_lines = render_readme(data, computed)
        readme = (root / README_FILE).read_text(encoding="utf-8")
        failures += diff_tables(region(readme, README_BEGIN, README_END), readme_lines, README_FILE + " Measured",
                                ["figure", "measured", "machine, date", "status"])
    except CheckError as e:
        failures.append(str(e))
    link_failures, links = check_links(root, by_id)
    failures += link_failures
    failures += check_readme_numbers(root, by_id)
    return rows, failures, links


def write(root, git):
    data, rows, computed, failures = generate(root, git)
    if failures:
        return failures
    perf_path, readme_path = root / PERF_FILE, root / README_FILE
    perf_path.write_text(splice(perf_path.read_text(encoding="utf-8"), TABLE_BEGIN, TABLE_END,
                                render_table(computed), PERF_FILE), encoding="utf-8")
    readme_path.write_text(splice(readme_path.read_text(encoding="utf-8"), README_BEGIN, README_END,
                                  render_readme(data, computed), README_FILE), encoding="utf-8")
    return []


def main(argv=None):
    default_root = Path(__file__).resolve().parent.parent
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--root", type=Path, default=default_root, help="the repository root (default: %(default)s)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="regenerate in memory and compare (the default)")
    mode.add_argument("--write", action="store_true", help="write the generated table and README 'Measured' table")
    mode.add_argument("--list", action="store_true", help="print each row's id and raw file and stop")
    mode.add_argument("--show", metavar="ID", help="print one row's command, raw file, provenance and value")
    mode.add_argument("--command", metavar="ID", help="print one row's command, for bench/reproduce.sh")
    p.add_argument("--no-deepen", action="store_true", help="fail on a shallow clone instead of fetching")
    args = p.parse_args(argv)
    root = args.root.resolve()
    name = "check_performance"
    try:
        if args.list or args.command or args.show:
            rows = resolve_rows(load_definitions(root))
            ids = {r["id"]: r for r in rows}
            if args.list:
                for r in rows:
                    print(f"{r['id']}\t{r['raw']}")
                return 0
            wanted = args.command or args.show
            if wanted not in ids:
                print(f"{name}: no row '{wanted}' in {ROWS_FILE}", file=sys.stderr)
                return 1
            row = ids[wanted]
            if args.command:
                if not row["command"]:
                    print(f"{name}: row '{wanted}' has no runnable command: {row.get('command_note', '')}", file=sys.stderr)
                    return 2
                print(row["command"])
                return 0
            prov, body = read_raw(root / row["raw"])
            print(f"command:  {row['command']}\nraw file: {row['raw']}\nextract:  {row['extract']}\n"
                  f"sources:  {', '.join(row['sources'])}\nprovenance: {json.dumps(prov)}\n"
                  f"value:    {extract(row['extract'], body)}")
            return 0
        git = Git(root, deepen=not args.no_deepen)
        if args.write:
            failures = write(root, git)
            for f in failures:
                print(f"{name}: {f}", file=sys.stderr)
            return 1 if failures else 0
        rows, failures, links = check(root, git)
    except NotARepo as e:
        print(f"{name}: skipped: {e}", file=sys.stderr)
        return SKIP
    except CheckError as e:
        print(f"{name}: {e}", file=sys.stderr)
        return 1
    if failures:
        for failure in failures:
            print(f"{name}: {failure}", file=sys.stderr)
        print(f"{name}: {len(failures)} problem(s) in {len(rows)} rows; after a code or raw-file change, "
              "python3 tools/check_performance.py --write regenerates the tables (commit the code first: "
              "staleness is read from commits)", file=sys.stderr)
        return 1
    print(f"{name}: {len(rows)} rows regenerated from their raw files and the history match docs/PERFORMANCE.md "
          f"and README's Measured table; {links} links in README.md and docs/ show their rows' figures")
    return 0


if __name__ == "__main__":
    sys.exit(main())
