#!/usr/bin/env python3
"""ctest elastic.sample_log_checker: tools/check_sample_log.py on made-up logs, so that the
audit behind the elastic tests is known to fail where it must: a sample lost, a sample
taken twice, a shard's record missing, ranks of one shard disagreeing; and to pass a run
whose later attempt redid updates on fewer ranks, and the sampler's padding."""
import pathlib
import subprocess
import sys
import tempfile

CHECKER = pathlib.Path(__file__).resolve().parents[2] / "tools" / "check_sample_log.py"


def write(directory, attempt, rank, world, shard, shards, n, batch, records):
    lines = [f"# dtrain sample log: rank {rank} of {world}, attempt {attempt}, shard {shard} of {shards}, "
             f"dataset {n}, global batch {batch}"]
    lines += [f"{e} {g} {u} 0.0 " + " ".join(map(str, idx)) for e, g, u, idx in records]
    (directory / f"attempt-{attempt}-rank-{rank}.txt").write_text("\n".join(lines) + "\n")


def check(name, expect_ok, expect_text, build):
    with tempfile.TemporaryDirectory() as tmp:
        d = pathlib.Path(tmp)
        build(d)
        out = subprocess.run([sys.executable, str(CHECKER), str(d), "--epochs", "1"], capture_output=True, text=True)
        text = out.stdout + out.stderr
        ok = out.returncode == 0
        if ok != expect_ok or expect_text not in text:
            print(f"{name}: expected {'success' if expect_ok else 'failure'} with '{expect_text}', got exit "
                  f"{out.returncode}:\n{text}")
            return False
        print(f"{name}: ok")
        return True


def two_then_one(d, lose=None, twice=None):
    # 8 samples, global batch 4: attempt 0 on 2 shards did updates 1 and 2 (update 2 is
    # redone), attempt 1 on one shard redid update 2 from the checkpoint after update 1.
    write(d, 0, 0, 2, 0, 2, 8, 4, [(1, 1, 1, [0, 2]), (1, 2, 2, [4, 6])])
    write(d, 0, 1, 2, 1, 2, 8, 4, [(1, 1, 1, [1, 3]), (1, 2, 2, [5, 7])])
    second = [4, 5, 6, 7]
    if lose is not None:
        second.remove(lose)
    if twice is not None:
        second.append(twice)
    write(d, 1, 0, 1, 0, 1, 8, 4, [(1, 2, 2, second)])


results = [
    check("redone on fewer ranks", True, "every sample of every epoch in exactly one applied update", two_then_one),
    check("a sample lost", False, "1 sample(s) of 8 in no applied update", lambda d: two_then_one(d, lose=6)),
    check("a sample twice", False, "in more than one applied update", lambda d: two_then_one(d, twice=0)),
    check("a shard missing", False, "no record from shard(s) [1]",
          lambda d: (write(d, 0, 0, 2, 0, 2, 4, 4, [(1, 1, 1, [0, 2])]),
                     write(d, 0, 1, 2, 1, 2, 4, 4, []))),
    check("ranks of a shard disagree", False, "took different samples",
          lambda d: (write(d, 0, 0, 2, 0, 1, 2, 2, [(1, 1, 1, [0, 1])]),
                     write(d, 0, 1, 2, 0, 1, 2, 2, [(1, 1, 1, [0, 0])]))),
    # 5 samples on 2 shards: the padded order repeats its first sample in the last update.
    check("the sampler's padding", True, "1 repeated by the sampler's padding",
          lambda d: (write(d, 0, 0, 2, 0, 2, 5, 4, [(1, 1, 1, [3, 1]), (1, 2, 2, [0])]),
                     write(d, 0, 1, 2, 1, 2, 5, 4, [(1, 1, 1, [4, 2]), (1, 2, 2, [3])]))),
]
sys.exit(0 if all(results) else 1)
