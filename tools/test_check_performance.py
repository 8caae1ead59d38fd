#!/usr/bin/env python3
"""Self-tests of tools/check_performance.py (ctest docs.performance_table_selftest).

Each test builds a small git repository (one row, one raw file, a README and a docs page),
regenerates its tables, then makes one change and expects the check to fail naming the row:
a link's text, a row's commit/date/machine in the docs or in the raw file's header, a commit
touching a current row's source (also under its old name after a rename), a number in README's
"Measured" without a row; a commit unknown to the repository and a shallow clone are refused.
"""

import contextlib
import io
import json
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import check_performance as cp  # noqa: E402

ROWS = '''
[sources]
core = ["src/core/"]

[run.demo]
raw = "bench/results/demo.txt"
command = "bench_demo"
sources = ["@core"]

[[row]]
id = "demo-speed"
run = "demo"
what = "demo samples/s"
extract = 're:^speed ([\\d.]+)'
format = "{:.1f} samples/s"

[[readme]]
label = "demo"
text = "speed {demo-speed}"
'''


def git(root, *args):
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True)


def head(root):
    return subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], check=True,
                          capture_output=True, text=True).stdout.strip()


class Repo:
    def __init__(self, tmp):
        self.root = Path(tmp) / "repo"
        r = self.root
        (r / "src/core").mkdir(parents=True)
        (r / "docs/performance").mkdir(parents=True)
        (r / "bench/results").mkdir(parents=True)
        git(r, "init", "-q")
        git(r, "config", "user.email", "t@example.com")
        git(r, "config", "user.name", "t")
        (r / "src/core/a.cpp").write_text("int a;\n")
        self.commit("code")
        self.measured = head(r)
        self.write_raw(self.measured, "2026-12-06", "Intel Xeon, 2 vCPUs")
        (r / "docs/performance/rows.toml").write_text(ROWS)
        (r / "docs/PERFORMANCE.md").write_text(f"# Measured\n\n{cp.TABLE_BEGIN}\n{cp.TABLE_END}\n")
        (r / "README.md").write_text(f"# demo\n\n## Measured\n\n{cp.README_BEGIN}\n{cp.README_END}\n\n## Other\n")
        (r / "docs/PAGE.md").write_text("The demo runs at [12.3 samples/s](PERFORMANCE.md#demo-speed).\n")
        self.run("--write")
        self.commit("table")

    def write_raw(self, commit, date, machine):
        prov = {"commit": commit, "date": date, "machine": machine}
        (self.root / "bench/results/demo.txt").write_text(f"{cp.PROV_TEXT} {json.dumps(prov)}\nspeed 12.34\n")

    def commit(self, message):
        git(self.root, "add", "-A")
        git(self.root, "commit", "-q", "-m", message)

    def run(self, *args):
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = cp.main(["--root", str(self.root), *args])
        return code, err.getvalue()

    def edit(self, path, old, new):
        p = self.root / path
        text = p.read_text()
        assert old in text, (path, old)
        p.write_text(text.replace(old, new))


class CheckPerformanceTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.repo = Repo(self.tmp.name)

    def tearDown(self):
        self.tmp.cleanup()

    def assert_fails_naming(self, needle, *args):
        code, err = self.repo.run(*args)
        self.assertEqual(code, 1, err)
        self.assertIn(needle, err)
        return err

    def test_generated_tables_pass_and_row_is_current(self):
        code, err = self.repo.run("--check")
        self.assertEqual(code, 0, err)
        perf = (self.repo.root / "docs/PERFORMANCE.md").read_text()
        self.assertIn("| 12.3 samples/s |", perf)
        self.assertIn("| current |", perf)

    def test_changed_link_text_fails_naming_the_row(self):
        self.repo.edit("docs/PAGE.md", "[12.3 samples/s]", "[12.4 samples/s]")
        self.assert_fails_naming("row demo-speed: the link text '12.4 samples/s'")

    def test_changed_commit_date_machine_in_the_table_fail_naming_the_row(self):
        perf = "docs/PERFORMANCE.md"
        for old, new in ((f"| {self.repo.measured} |", "| 0000000 |"), ("| 2026-12-06 |", "| 2026-12-05 |"),
                         ("| Intel Xeon, 2 vCPUs |", "| AMD EPYC, 2 vCPUs |")):
            self.repo.edit(perf, old, new)
            self.assert_fails_naming("row demo-speed differs")
            self.repo.edit(perf, new, old)
        self.assertEqual(self.repo.run()[0], 0)

    def test_changed_raw_header_fails_naming_the_row(self):
        self.repo.write_raw(self.repo.measured, "2026-12-06", "AMD EPYC, 2 vCPUs")
        err = self.assert_fails_naming("row demo-speed differs")
        self.assertIn("AMD EPYC", err)
        self.repo.write_raw(self.repo.measured + "-dirty", "2026-12-06", "Intel Xeon, 2 vCPUs")
        self.repo.run("--write")
        self.assertIn("not current: measured on a dirty tree",
                      (self.repo.root / "docs/PERFORMANCE.md").read_text())

    def test_commit_touching_a_source_makes_a_current_row_fail(self):
        (self.repo.root / "src/core/a.cpp").write_text("int a = 1;\n")
        self.repo.commit("change the measured code")
        changed = head(self.repo.root)
        err = self.assert_fails_naming("row demo-speed differs")
        self.assertIn(f"stale since {changed}", err)
        # regenerating and committing only the docs is stable
        self.assertEqual(self.repo.run("--write")[0], 0)
        self.repo.commit("regenerate")
        self.assertEqual(self.repo.run()[0], 0)

    def test_renamed_source_is_followed(self):
        # the row measures src/core/; a file there that came from src/old/ under its old name
        git(self.repo.root, "mv", "src/core", "src/old")
        self.repo.commit("move away")
        (self.repo.root / "src/old/a.cpp").write_text("int a = 2;\n")
        self.repo.commit("change under the old name")
        changed = head(self.repo.root)
        git(self.repo.root, "mv", "src/old", "src/core")
        self.repo.commit("move back")
        err = self.assert_fails_naming("row demo-speed differs")
        self.assertIn("stale since", err)
        self.assertIn(changed, "".join(cp.Git(self.repo.root).touching(self.repo.measured, ["src/core/"])))

    def test_readme_number_without_a_row_fails(self):
        self.repo.edit("README.md", "## Other", "Also 2.4x at batch 256.\n\n## Other")
        self.assert_fails_naming("'2.4x' in 'Measured' is not a link")

    def test_unknown_commit_is_refused(self):
        self.repo.write_raw("1234567", "2026-12-06", "Intel Xeon, 2 vCPUs")
        self.assert_fails_naming("is not in this repository")

    def test_shallow_clone_is_deepened_or_refused(self):
        (self.repo.root / "src/core/b.cpp").write_text("int b;\n")
        self.repo.commit("later")
        self.repo.run("--write")
        self.repo.commit("regenerate")
        clone = Path(self.tmp.name) / "shallow"
        subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{self.repo.root}", str(clone)], check=True)
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            self.assertEqual(cp.main(["--root", str(clone), "--no-deepen"]), 1)
        self.assertIn("shallow", err.getvalue())
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            self.assertEqual(cp.main(["--root", str(clone)]), 0)  # deepened from its origin

    def test_outside_git_is_skipped(self):
        plain = Path(self.tmp.name) / "plain"
        subprocess.run(["cp", "-r", str(self.repo.root), str(plain)], check=True)
        subprocess.run(["rm", "-rf", str(plain / ".git")], check=True)
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            self.assertEqual(cp.main(["--root", str(plain)]), cp.SKIP)


if __name__ == "__main__":
    unittest.main()
