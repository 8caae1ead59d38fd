#!/usr/bin/env python3
"""Counts a ctest run's passed, failed and skipped tests from its JUnit file.

  python3 tools/ctest_summary.py NAME JUNIT_XML

Prints `ci: tests NAME: P passed, F failed, S skipped (of N)` and then one line per skipped
test with the reason its output gave, so that a skip is never read as a pass. ctest's own
summary line ("100% tests passed, 0 tests failed out of 556") counts skipped tests among
the passed ones, and CI extracts used to drop the list that follows it.

ctest's JUnit file marks both a skip (exit code SKIP_RETURN_CODE, or output matching
SKIP_REGULAR_EXPRESSION) and a test that could not start (a missing executable) as `<skipped>`; ctest itself counts the second as a failure, and
so does this script. Exits 1 when a test failed or the file has no test, else 0.
Standard library only.
"""

import sys
import xml.etree.ElementTree as ET

# What ctest writes for a test it reports as skipped: its exit code was SKIP_RETURN_CODE, or its
# output matched SKIP_REGULAR_EXPRESSION (message SKIP_REGULAR_EXPRESSION_MATCHED).
SKIP_MESSAGES = ("SKIP_RETURN_CODE", "SKIP_REGULAR_EXPRESSION")


def skip_reason(output):
    """The line of a skipped test's output that says why (tests print `skipped: ...`)."""
    lines = [line.strip() for line in (output or "").splitlines() if line.strip()]
    for line in lines:
        if "skip" in line.lower():
            return line
    return lines[-1] if lines else "(no reason printed)"


def summarize(junit_path):
    root = ET.parse(junit_path).getroot()
    passed, failed, skipped = [], [], []
    for case in root.iter("testcase"):
        name = case.get("name")
        skip = case.find("skipped")
        if case.find("failure") is not None or case.find("error") is not None:
            failed.append(name)
        elif skip is not None and any(m in (skip.get("message") or "") for m in SKIP_MESSAGES):
            skipped.append((name, skip_reason(case.findtext("system-out"))))
        elif skip is not None or case.get("status") != "run":
            failed.append(name)  # could not start: ctest counts it as failed
        else:
            passed.append(name)
    return passed, failed, skipped


def main(argv):
    if len(argv) != 3:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    name, path = argv[1], argv[2]
    try:
        passed, failed, skipped = summarize(path)
    except (OSError, ET.ParseError) as e:
        print(f"ctest_summary: {path}: cannot read ctest's JUnit file: {e}", file=sys.stderr)
        return 1
    total = len(passed) + len(failed) + len(skipped)
    print(f"ci: tests {name}: {len(passed)} passed, {len(failed)} failed, "
          f"{len(skipped)} skipped (of {total})")
    for test, reason in skipped:
        print(f"ci:   skipped {test}: {reason[:160]}")
    for test in failed:
        print(f"ci:   failed {test}")
    return 1 if failed or total == 0 else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
