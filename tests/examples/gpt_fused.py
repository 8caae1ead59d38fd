"""train_gpt with its fused kernels and without (--fused true|false): the validation losses of
the two runs agree within 1e-5 relative at every evaluation (issue 59's bound over 20 steps).

  gpt_fused.py DIR TRAIN_GPT ARGS...   (ARGS: the run's flags, without --fused and --metrics)
"""
import json
import pathlib
import subprocess
import sys


def val_losses(metrics):
    return [(r["step"], r["test_loss"]) for r in map(json.loads, metrics.read_text().splitlines())
            if r.get("event") == "evaluation"]


def main():
    out = pathlib.Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    runs = {}
    for fused in ("true", "false"):
        metrics = out / f"metrics_{fused}.jsonl"
        metrics.unlink(missing_ok=True)
        cmd = sys.argv[2:] + ["--fused", fused, "--metrics", str(metrics)]
        r = subprocess.run(cmd, capture_output=True, text=True)
        print(f"--- --fused {fused}: exit {r.returncode} ---\n{r.stdout}{r.stderr}")
        if r.returncode != 0:
            sys.exit(f"gpt_fused: train_gpt --fused {fused} failed")
        runs[fused] = val_losses(metrics)
    fused, plain = runs["true"], runs["false"]
    if len(fused) < 2 or [s for s, _ in fused] != [s for s, _ in plain]:
        sys.exit(f"gpt_fused: expected the same evaluations (at least 2) in both runs, got {fused} and {plain}")
    worst = max(abs(a - b) / abs(b) for (_, a), (_, b) in zip(fused, plain))
    print(f"gpt_fused: {len(fused)} validation losses, largest relative difference {worst:.3e}")
    if worst > 1e-5:
        sys.exit(f"gpt_fused: fused {fused} and unfused {plain} differ by {worst:.3e} relative (bound 1e-5)")


if __name__ == "__main__":
    main()
