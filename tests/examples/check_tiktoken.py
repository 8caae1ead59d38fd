#!/usr/bin/env python3
"""Checks dtrain's GPT-2 tokenizer against OpenAI's tiktoken on every file of a corpus folder
(fortune-mod's files): dtrain-tokenize encodes the folder with gpt2:RANKS into a token file,
which must hold, in the same order, exactly the ids tiktoken's encode_ordinary gives each file
(the Encoding built from the same rank file, with GPT-2's pattern and <|endoftext|> = 50256);
dtrain-tokenize decode must then print the files' bytes back. Then the same for a file of random
text drawn from a fixed seed over what English text rarely holds: Unicode spaces (and U+180E,
which is not one), letters and digits of other scripts, combining marks, emoji, contractions.

usage: check_tiktoken.py DTRAIN_TOKENIZE RANKS CORPUS_DIR WORK_DIR
       (e.g. build/release/examples/dtrain-tokenize .venv-tests/share/gpt2.tiktoken
        /usr/share/games/fortunes build/release/tests/tiktoken_gpt2)
Exits 77 (skipped) when tiktoken, the rank file or the corpus is missing, saying so, or 1
instead when DTRAIN_REQUIRE_INTEROP is set (CI: scripts/install-deps.sh --tests installs the
first two, scripts/install-deps.sh the fortunes)."""
import os
import pathlib
import random
import struct
import subprocess
import sys

GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
# What the random text is drawn from.
ALPHABET = list("abcdeXYZ  '\t\n\r.,!?-_0123") + [
    "'", "'", "\u00a0", "\u2003", "\u3000", "\u0085", "\u2028", "\u000b", "\u000c", "\u1680", "\u202f",
    "\u205f", "\u200b", "\ufeff", "\u180e", "\u00e9", "\u00df", "\u03a9", "\u65e5", "\u672c", "\u0663",
    "\u00bd", "\u00b2", "\u216b", "\U0001f600", "\U0001f44d\U0001f3fd", "\u0301", "\u0915\u093f", "\ufb01",
    "'s", "'ll", "'S", "'VE"]


def missing(what):
    """Something the check needs is not installed: skipped, or a failure where it must run."""
    if os.environ.get("DTRAIN_REQUIRE_INTEROP"):
        print(f"{what}, and DTRAIN_REQUIRE_INTEROP is set: run scripts/install-deps.sh --tests")
        return 1
    print(f"skipped: {what}")
    return 77


def corpus_files(folder):
    """The files dtrain reads from a corpus folder (dtrain/text/corpus.h): regular files, sorted,
    not hidden, not *.dat or *.u8, without a NUL byte in their first 8 KiB."""
    files = []
    for path in sorted(folder.iterdir()):
        name = path.name
        if name.startswith(".") or name.endswith((".dat", ".u8")) or not path.is_file():
            continue
        with open(path, "rb") as f:
            if b"\0" in f.read(8192):
                continue
        files.append(path)
    return files


def read_token_file(path):
    """dtrain's token file: "DTRAINTK", version, id width, vocab size, count; then the ids."""
    data = path.read_bytes()
    magic, version, width, vocab, count = struct.unpack_from("<8sIIqq", data)
    assert magic == b"DTRAINTK" and version == 1 and width in (2, 4), f"{path}: not a dtrain token file"
    assert len(data) == 32 + count * width, f"{path}: {len(data)} bytes for {count} tokens of {width}"
    ids = struct.unpack_from(f"<{count}{'H' if width == 2 else 'I'}", data, 32)
    return list(ids), vocab


def main():
    if len(sys.argv) != 5:
        print(__doc__)
        return 2
    tool, ranks_path, corpus, work = sys.argv[1], pathlib.Path(sys.argv[2]), pathlib.Path(sys.argv[3]), pathlib.Path(sys.argv[4])
    os.environ["TIKTOKEN_CACHE_DIR"] = ""  # read the rank file where it is; no cached copy
    try:
        import tiktoken
        import tiktoken.load
    except ImportError as e:
        return missing(f"{sys.executable} cannot import tiktoken ({e})")
    if not ranks_path.is_file():
        return missing(f"GPT-2's rank file {ranks_path} is absent")
    if not corpus.is_dir():
        return missing(f"the corpus {corpus} is absent (Debian package fortunes)")

    ranks = tiktoken.load.load_tiktoken_bpe(str(ranks_path))
    enc = tiktoken.Encoding(name="gpt2", pat_str=GPT2_PATTERN, mergeable_ranks=ranks,
                            special_tokens={"<|endoftext|>": 50256})
    assert enc.n_vocab == 50257, enc.n_vocab
    files = corpus_files(corpus)
    texts = [f.read_bytes() for f in files]
    expected = [enc.encode_ordinary(t.decode("utf-8")) for t in texts]

    work.mkdir(parents=True, exist_ok=True)
    tokens_path = work / "gpt2.tok"
    spec = f"gpt2:{ranks_path}"
    run = subprocess.run([tool, "encode", "--tokenizer", spec, "--out", str(tokens_path), str(corpus)],
                         capture_output=True, text=True)
    print(run.stdout + run.stderr, end="")
    if run.returncode != 0:
        print(f"FAIL: dtrain-tokenize encode exited {run.returncode}")
        return 1
    ids, vocab = read_token_file(tokens_path)
    failures = 0
    if vocab != 50257:
        print(f"FAIL: the token file's vocab size is {vocab}, expected 50257")
        failures += 1
    at = 0
    for path, want in zip(files, expected):
        got = ids[at:at + len(want)]
        if got != want:
            first = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
            print(f"FAIL: {path}: dtrain's GPT-2 ids differ from tiktoken's at token {first}: "
                  f"dtrain {got[first:first + 8]} {enc.decode(got[first:first + 8])!r}, "
                  f"tiktoken {want[first:first + 8]} {enc.decode(want[first:first + 8])!r}")
            failures += 1
            break  # the offsets of the files after it are off too
        at += len(want)
    if failures == 0 and at != len(ids):
        print(f"FAIL: dtrain wrote {len(ids)} tokens, tiktoken's files add up to {at}")
        failures += 1

    decoded = subprocess.run([tool, "decode", "--tokenizer", spec, str(tokens_path)], capture_output=True)
    if decoded.returncode != 0 or decoded.stdout != b"".join(texts):
        print(f"FAIL: dtrain-tokenize decode (exit {decoded.returncode}) does not give the files' bytes back: "
              f"{len(decoded.stdout)} bytes for {sum(map(len, texts))}; {decoded.stderr.decode(errors='replace')}")
        failures += 1
    if failures:
        return 1

    rng = random.Random(57)
    text = "".join(rng.choice(ALPHABET) for _ in range(20000))
    (work / "random").mkdir(exist_ok=True)
    (work / "random" / "unicode.txt").write_text(text, encoding="utf-8")
    run = subprocess.run([tool, "encode", "--tokenizer", spec, "--out", str(work / "random.tok"),
                          str(work / "random" / "unicode.txt")], capture_output=True, text=True)
    got = read_token_file(work / "random.tok")[0] if run.returncode == 0 else None
    want = enc.encode_ordinary(text)
    if got != want:
        first = 0 if got is None else next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), len(want))
        print(f"FAIL: random Unicode text (seed 57, {work / 'random' / 'unicode.txt'}): dtrain-tokenize exit "
              f"{run.returncode} {run.stderr}; ids differ from tiktoken's at token {first}: "
              f"dtrain {[enc.decode([t]) for t in (got or [])[first:first + 6]]}, "
              f"tiktoken {[enc.decode([t]) for t in want[first:first + 6]]}")
        return 1
    print(f"dtrain's GPT-2 ids equal tiktoken {tiktoken.__version__ if hasattr(tiktoken, '__version__') else ''}'s "
          f"on {len(files)} files of {corpus} ({sum(map(len, texts))} bytes, {len(ids)} tokens), and decode back; "
          f"and on {len(text)} characters of random Unicode text ({len(want)} tokens)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
