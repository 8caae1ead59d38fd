#!/usr/bin/env python3
"""Recomputes every figure of docs/PERFORMANCE.md from its raw file.

  python3 tools/check_performance.py [--root DIR] [--list] [--show ID]

docs/PERFORMANCE.md has one table of measured figures. Each row names its raw file
(a path from the repository root, bench/results/...) and, in its "extract" column, how
the figure comes out of that file. This script runs that extraction and fails (exit 1)
when the table's figure and the recomputed one disagree by more than the figure's own
rounding (92.23% is checked to +-0.005, 1.3x to +-0.05), when a raw file is missing, when
a row's extraction is missing or unknown, when two rows share an id, and when README.md
or docs/*.md cite a row (a link to PERFORMANCE.md#ID) that the table does not have.
Standard library only (Python 3.11).

Extractions (the "extract" column, in backticks; a table cell cannot hold a pipe, write
\\x7c in a regular expression instead):
  re:REGEX          group 1 of REGEX's first match (multi-line mode: ^ and $ per line)
  re#N:REGEX        group 1 of its N-th match (1-based; -1: the last)
  med:FIELD:FILTER  median of FIELD over the file's JSON lines that match FILTER
                    (k=v,k=v; a line is a JSON object on a line of its own)
  medratio:FIELD:FILTER_A:FILTER_B   median(A) / median(B)
  best:FILTER       the paired ratio against the best peer: per repetition ("rep"), dtrain's
                    samples_per_s over the fastest PyTorch samples_per_s of that repetition
                    (bench_train / pytorch_train.py lines, tuning runs left out); the median
                    over the repetitions
  fn:NAME           a named extractor below (EXTRACTORS), for figures that need more
                    than one line of the file
"""

import argparse
import json
import math
import re
import statistics
import sys
from pathlib import Path

TABLE_HEADER = re.compile(r"^\|\s*id\s*\|")
CITATION = re.compile(r"PERFORMANCE\.md#([A-Za-z0-9_-]+)")
NUMBER = re.compile(r"^[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)?(?:\.\d+)?")


class CheckError(Exception):
    pass


# ---------------------------------------------------------------- the table


def split_row(line):
    """The cells of a markdown table row; '\\|' is a pipe inside a cell."""
    cells, cell, i = [], "", 0
    body = line.strip()
    if body.startswith("|"):
        body = body[1:]
    if body.endswith("|") and not body.endswith("\\|"):
        body = body[:-1]
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


def strip_code(cell):
    cell = cell.strip()
    if cell.startswith("`") and cell.endswith("`") and len(cell) >= 2:
        return cell[1:-1]
    return cell


def row_id(cell):
    """The id cell may carry an anchor: <a id="x"></a>x."""
    return re.sub(r"<[^>]*>", "", cell).strip().strip("`")


def read_table(path):
    lines = path.read_text(encoding="utf-8").splitlines()
    start = next((i for i, line in enumerate(lines) if TABLE_HEADER.match(line)), None)
    if start is None:
        raise CheckError(f"{path}: no table whose first column is 'id'")
    header = [h.lower() for h in split_row(lines[start])]
    for needed in ("id", "figure", "command", "commit", "date", "machine", "raw file", "extract", "status"):
        if needed not in header:
            raise CheckError(f"{path}: the table has no '{needed}' column")
    rows = []
    for number, line in enumerate(lines[start + 2:], start + 3):
        if not line.startswith("|"):
            break
        cells = split_row(line)
        if len(cells) != len(header):
            raise CheckError(f"{path}:{number}: {len(cells)} cells, the header has {len(header)}")
        row = dict(zip(header, cells))
        row["id"] = row_id(row["id"])
        row["line"] = number
        rows.append(row)
    return rows


# ---------------------------------------------------------------- raw files


def json_lines(text):
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{") and line.endswith("}"):
            try:
                value = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(value, dict):
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


# Named extractors: figures that need the structure of one kind of file.


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
    """The fitted all-reduce rows (impl link ranks hosts bytes measured model error ...)."""
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


# ---------------------------------------------------------------- comparison


def shown_value(figure):
    """The number a figure cell shows and its rounding: '**1.83x**' -> (1.83, 0.005)."""
    text = figure.replace("*", "").strip()
    match = NUMBER.match(text)
    if not match or not match.group(0) or match.group(0) in "+-":
        return None, None
    digits = match.group(0)
    decimals = len(digits.split(".")[1]) if "." in digits else 0
    return float(digits.replace(",", "")), 0.5 * 10 ** -decimals


def agrees(figure, value):
    if isinstance(value, str):
        return figure.replace("*", "").strip() == value, value
    shown, tolerance = shown_value(figure)
    if shown is None:
        return False, value
    return math.isclose(shown, value, abs_tol=tolerance + 1e-9) or abs(shown - value) <= tolerance + 1e-9, value


def check(root):
    perf = root / "docs" / "PERFORMANCE.md"
    if not perf.is_file():
        raise CheckError(f"{perf} not found")
    rows = read_table(perf)
    failures = []
    ids = {}
    for row in rows:
        where = f"docs/PERFORMANCE.md:{row['line']}: row {row['id']}"
        if not re.fullmatch(r"[a-z0-9][a-z0-9-]*", row["id"]):
            failures.append(f"{where}: an id is lower-case letters, digits and '-'")
        if row["id"] in ids:
            failures.append(f"{where}: the id is already used at line {ids[row['id']]}")
        ids[row["id"]] = row["line"]
        status = row["status"].replace("*", "").strip().lower()
        if not (status.startswith("current") or status.startswith("stale")):
            failures.append(f"{where}: status '{row['status']}' is neither 'current' nor 'stale ...'")
        spec = strip_code(row["extract"])
        raw = strip_code(row["raw file"])
        if not spec:
            failures.append(f"{where}: no extraction (the 'extract' column is empty)")
            continue
        if not raw.startswith("bench/results/"):
            failures.append(f"{where}: raw file '{raw}' is not under bench/results/")
            continue
        path = root / raw
        if not path.is_file():
            failures.append(f"{where}: raw file {raw} does not exist")
            continue
        try:
            value = extract(spec, path.read_text(encoding="utf-8", errors="replace"))
        except (CheckError, re.error, ValueError, KeyError, StopIteration, ZeroDivisionError) as e:
            failures.append(f"{where}: cannot recompute from {raw}: {e}")
            continue
        ok, value = agrees(row["figure"], value)
        if not ok:
            shown = f"{value:.6g}" if isinstance(value, float) else value
            failures.append(f"{where}: the table says {row['figure']!r}, {raw} gives {shown}")
    # Citations: README.md and docs/*.md link rows as PERFORMANCE.md#ID.
    cited = 0
    for doc in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
        if not doc.is_file():
            continue
        for number, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
            for match in CITATION.finditer(line):
                cited += 1
                if match.group(1) not in ids:
                    failures.append(f"{doc.relative_to(root)}:{number}: cites row '{match.group(1)}', "
                                    "which docs/PERFORMANCE.md's table does not have")
    return rows, cited, failures


def print_command(rows, wanted):
    """A row's command; a row whose command is "as OTHER" (the same run) takes OTHER's."""
    seen = set()
    while True:
        if wanted not in rows:
            print(f"check_performance: no row '{wanted}' in docs/PERFORMANCE.md", file=sys.stderr)
            return 1
        seen.add(wanted)
        command = rows[wanted]["command"].strip()
        match = re.match(r"^as ([a-z0-9-]+)\b", command)
        if not match or match.group(1) in seen:
            break
        wanted = match.group(1)
    # The command is the first code span of the cell; the rest is a note.
    code = re.match(r"^`([^`]*)`", command)
    if not code:
        print(f"check_performance: row '{wanted}' has no runnable command: {command}", file=sys.stderr)
        return 2
    print(code.group(1))
    return 0


def main():
    default_root = Path(__file__).resolve().parent.parent
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--root", type=Path, default=default_root, help="the repository root (default: %(default)s)")
    p.add_argument("--list", action="store_true", help="print each row's id and figure and stop")
    p.add_argument("--show", metavar="ID", help="print one row's command, raw file and recomputed value")
    p.add_argument("--command", metavar="ID", help="print one row's command (\"as OTHER\" resolved), for bench/reproduce.sh")
    args = p.parse_args()
    root = args.root.resolve()
    try:
        if args.command:
            rows = {row["id"]: row for row in read_table(root / "docs" / "PERFORMANCE.md")}
            return print_command(rows, args.command)
        if args.list or args.show:
            rows = read_table(root / "docs" / "PERFORMANCE.md")
            for row in rows:
                if args.list:
                    print(f"{row['id']}\t{row['figure']}")
                elif row["id"] == args.show:
                    text = (root / strip_code(row["raw file"])).read_text(encoding="utf-8", errors="replace")
                    print(f"figure:   {row['figure']}\ncommand:  {strip_code(row['command'])}\n"
                          f"raw file: {strip_code(row['raw file'])}\nextract:  {strip_code(row['extract'])}\n"
                          f"value:    {extract(strip_code(row['extract']), text)}")
                    return 0
            if args.show:
                print(f"check_performance: no row '{args.show}'", file=sys.stderr)
                return 1
            return 0
        rows, cited, failures = check(root)
    except CheckError as e:
        print(f"check_performance: {e}", file=sys.stderr)
        return 1
    if failures:
        for failure in failures:
            print(f"check_performance: {failure}", file=sys.stderr)
        print(f"check_performance: {len(failures)} problem(s) in {len(rows)} rows", file=sys.stderr)
        return 1
    print(f"check_performance: {len(rows)} rows recomputed from their raw files; {cited} citations in "
          "README.md and docs/ name existing rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
