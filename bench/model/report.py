"""Fit the cost model to the bench JSON lines, print its error on every measured
configuration, extrapolate to H200 clusters, write the tables and plots:

    python3 bench/model/report.py bench/results

writes bench/results/scaling_model.txt and bench/results/plots/*.png|svg (the plots need
matplotlib; without it the tables are still printed and written, and the reason given).
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import dtrain_model as m  # noqa: E402
import gpu_cluster as gc  # noqa: E402

SYSTEM_PYTHON = "/usr/bin/python3"  # Debian's python3-matplotlib installs for this one


def flag(err):
    return "  <-- over %d%%" % round(m.TARGET_ERROR * 100) if abs(err) > m.TARGET_ERROR else ""


def allreduce_rows(points, fits):
    """One row per measured all-reduce point: the fit of its own group, and for hosts > 1
    the hierarchical composition predicted from the one-host and between-host fits."""
    rows = []
    for p in sorted(points, key=lambda p: (p["link"], p["impl"], p["ranks"], p["hosts"], p["bytes"])):
        fit = fits.get((p["impl"], p["link"], p["ranks"], p["hosts"]))
        if fit is None:
            continue
        row = dict(p, model_us=fit.time_us(p["bytes"]), hier_us=None)
        if p["hosts"] > 1 and p["impl"] in ("auto", "shm"):
            intra = m.find_fit(fits, ("shm", "auto"), m.LOCAL_LINK, p["ranks_per_host"]) if p["ranks_per_host"] > 1 else None
            inter = m.find_fit(fits, m.P2P_IMPLS, p["link"], p["hosts"], p["hosts"])
            if inter is not None:
                row["hier_us"] = m.hierarchical_us(p["bytes"], intra, inter, p["hosts"])
        row["err"] = m.error(row["model_us"], p["time_us"])
        rows.append(row)
    return rows


def contention(rec, records):
    """Compute per sample at this rank count over compute per sample at 1 rank (same mode
    and model): the machine's slow-down when ranks share cores, an input to the model."""
    def per_sample(r):
        c, b = r.get("compute_ms_median"), r.get("batch_per_worker")
        return c / b if isinstance(c, (int, float)) and isinstance(b, (int, float)) and b else None
    mine = per_sample(rec)
    ones = [r for r in m.scaling_points(records) if r["ranks"] == 1
            and r.get("mode") == rec.get("mode") and r.get("model") == rec.get("model")]
    # The same run's baseline where there is one: same strategy, same link.
    same = [r for r in ones if r.get("strategy") == rec.get("strategy") and r.get("link") == rec.get("link")]
    ones = [x for x in (per_sample(r) for r in (same or ones)) if x]
    return mine / ones[0] if mine and ones else None


def bucket_shares(rec, records):
    """For a parameter-server line: the buckets of the data-parallel line of the same model
    and link with the nearest batch per worker, each ready time as a share of its
    backward (the same model finishes its gradients in the same order)."""
    if not str(rec.get("strategy", "")).startswith("ps_"):
        return None
    dp = [r for r in m.scaling_points(records) if r.get("strategy") == "data_parallel" and r.get("buckets")
          and r.get("model") == rec.get("model") and r.get("link") == rec.get("link")
          and r.get("backward_ms_median")]
    if not dp:
        return None
    batch = rec.get("batch_per_worker") or 0
    near = min(dp, key=lambda r: abs((r.get("batch_per_worker") or 0) - batch))
    return [{"bytes": b["bytes"], "ready_share": min(1.0, b["ready_ms"] / near["backward_ms_median"])}
            for b in near["buckets"]]


def scaling_rows(records, fits, table=None):
    rows = []
    key = lambda r: (r.get("strategy", ""), r.get("mode", ""), r.get("model", ""), r.get("_file", ""), r["ranks"])
    for rec in sorted(m.scaling_points(records), key=key):
        cpu_x = contention(rec, records)
        pred, why = m.predict_scaling(rec, fits, cpu_x or 1.0, bucket_shares(rec, records), table)
        row = {"rec": rec, "pred": pred, "why": why, "cpu_x": cpu_x}
        if pred:
            row["err"] = m.error(pred["step_ms"], rec["step_ms_median"])
            sps, eff = rec.get("samples_per_s"), rec.get("efficiency")
            if pred["samples_per_s"] and sps and eff:
                base = sps / (eff * rec["ranks"])  # the 1-rank samples/s of the same mode
                pred["efficiency"] = pred["samples_per_s"] / (rec["ranks"] * base)
        rows.append(row)
    return rows


def format_allreduce(rows):
    out = ["All-reduce: measured median vs model (the group's own alpha-beta fit; for several hosts also",
           "the hierarchical composition of the one-host shm fit and the links' ring fit)",
           "%-12s %-12s %5s %5s %11s %12s %12s %8s %12s" % ("impl", "link", "ranks", "hosts", "bytes",
                                                          "measured us", "model us", "error", "hier. us")]
    for r in rows:
        hier = "%12.1f" % r["hier_us"] if r["hier_us"] is not None else "%12s" % "-"
        out.append("%-12s %-12s %5d %5d %11d %12.1f %12.1f %+7.1f%% %s%s" % (
            r["impl"], r["link"], r["ranks"], r["hosts"], r["bytes"], r["time_us"], r["model_us"],
            100 * r["err"], hier, flag(r["err"])))
    return out


def format_constants(fits):
    out = ["Fitted constants per (impl, link, ranks, hosts): regimes by message size; time = a + b n;",
           "alpha = a / 2(p-1) (per message), beta = b / (2(p-1)/p) shown as 1/beta in GB/s",
           "%-12s %-12s %5s %5s %23s %10s %10s %10s" % ("impl", "link", "ranks", "hosts", "sizes (bytes)",
                                                     "a us", "alpha us", "1/beta GB/s")]
    for key in sorted(fits):
        fit = fits[key]
        for r in fit.regimes:
            alpha, beta = fit.alpha_beta(r["lo"] if r["lo"] else 0.0)
            rng = "%s..%s" % (_size(r["lo"]), _size(r["hi"]))
            out.append("%-12s %-12s %5d %5d %23s %10.2f %10.2f %10.2f" % (
                key[0], key[1], key[2], key[3], rng, r["a"], alpha, 1e-3 / beta if beta > 0 else float("inf")))
    return out


def _size(x):
    if x == 0:
        return "0"
    if x == float("inf"):
        return "inf"
    for unit, div in (("G", 2 ** 30), ("M", 2 ** 20), ("K", 2 ** 10)):
        if x >= div:
            return "%.3g%s" % (x / div, unit)
    return "%d" % x


def format_scaling(rows):
    out = ["Training steps: measured step_ms_median vs model (measured compute at n ranks is an input)",
           "(cpu x: compute per sample against 1 rank, the cores' contention; exp: exposed communication ms;",
           " sps: samples/s; m/p eff: measured / model efficiency)",
           "%-13s %-6s %-14s %5s %-16s %5s %9s %9s %8s %9s %9s %10s %10s %6s %6s" % (
               "strategy", "mode", "model", "ranks", "layout", "cpu x", "meas ms", "model ms", "error",
               "meas exp", "model exp", "meas sps", "model sps", "m eff", "p eff")]
    for row in rows:
        rec, pred = row["rec"], row["pred"]
        layout = "w%s s%s" % (rec.get("workers", "-"), rec.get("servers", "-")) if str(rec.get("strategy", "")).startswith("ps") \
            else ("K%s M%s" % (rec.get("stages"), rec.get("micro_batches")) if rec.get("strategy") == "pipeline" else "")
        if rec.get("link"):
            layout = (layout + " " + rec["link"]).strip()  # emulated hosts (bench/netns)
        head = "%-13s %-6s %-14s %5d %-16s %5s %9.2f" % (rec.get("strategy"), rec.get("mode"), rec.get("model"),
                                                         rec["ranks"], layout, _opt(row["cpu_x"], "%.2f"),
                                                         rec["step_ms_median"])
        if not pred:
            out.append(head + "   model: " + row["why"])
            continue
        out.append(head + " %9.2f %+7.1f%% %9s %9.2f %10s %10s %6s %6s%s" % (
            pred["step_ms"], 100 * row["err"], _opt(rec.get("exposed_comm_ms_median"), "%.2f"), pred["exposed_ms"],
            _opt(rec.get("samples_per_s"), "%.0f"), _opt(pred["samples_per_s"], "%.0f"),
            _opt(rec.get("efficiency"), "%.3f"), _opt(pred.get("efficiency"), "%.3f"), flag(row["err"])))
    return out


def _opt(value, fmt):
    return fmt % value if isinstance(value, (int, float)) else "-"


def summary(label, errors):
    if not errors:
        return "%s: no measured configurations" % label
    worst = max(errors, key=abs)
    within = sum(1 for e in errors if abs(e) <= m.TARGET_ERROR)
    return "%s: %d of %d within %d%%, worst %+.1f%%, mean |error| %.1f%%" % (
        label, within, len(errors), round(100 * m.TARGET_ERROR), 100 * worst,
        100 * sum(abs(e) for e in errors) / len(errors))


def format_extrapolation(tables):
    out = []
    for batch, table in tables.items():
        out.append("ResNet-50 on H200 nodes, %d images per GPU (weak scaling), %.0f images/s per GPU assumed:" % (
            batch, gc.H200_RESNET50_IMAGES_PER_S))
        out.append("%-42s " % "layout / GPUs" + " ".join("%7d" % g for g in gc.GPU_COUNTS))
        for name, results in table.items():
            out.append("%-42s " % (name + " eff") + " ".join("%7.3f" % r["efficiency"] for r in results))
        for name, results in table.items():
            out.append("%-42s " % (name + " kimg/s") + " ".join("%7.0f" % (r["samples_per_s"] / 1e3) for r in results))
        out.append("")
    return out


def format_peers(peers):
    out = ["Published peers, and the same model run on each peer's own hardware (figures in gpu_cluster.py):"]
    for p in peers:
        out.append("  %-42s published eff %.2f, model %.3f (exposed comm %.1f ms of a %.0f ms step) on %s" % (
            p["label"], p["efficiency"], p["model_efficiency"], p["model_exposed_ms"], p["compute_ms"], p["node"]["name"]))
    return out


EXPLANATION = """Reading the extrapolation:
  * H200 data parallel stays above ~96% to 4096 GPUs in the model: 102 MB of fp32 gradients
    take ~1 ms per step over 8x400 Gbit/s rails and NVLink, and all but the last bucket
    hide under backward. The peers lost ~10% on networks 8-16x slower per GPU (50 GbE
    per 8 P100s; 25 GbE per 4 P100s): the model on their hardware gives ~0.9 for both,
    because there the whole-model reduce no longer fits under backward. What the model
    leaves out, and real jobs at 4096 GPUs pay: stragglers (a synchronous step waits for
    the slowest of thousands), input pipelines, and NCCL's achieved bandwidth at scale.
  * A ring between nodes has 2(N-1) latency steps: at small per-GPU batches (32) and
    >=1024 GPUs it falls behind; NCCL's tree (2 log2 N) keeps the latency flat.
  * Pipeline (4 stages inside a node) pays its bubble (K-1)/(M+K-1) = 16% at M=16 for
    nothing: ResNet-50 fits on one GPU. It only beats a ring-only data parallel at
    thousands of GPUs with small batches, where each replica's smaller all-reduce helps.
  * A parameter server bound by S x link against W x 2 x model bytes loses ~30% at
    batch 256 even with one 400G server per 8 GPUs (pull + push of 102 MB per GPU per
    step, not overlapped), and collapses with a fixed server count once W x 2 x 102 MB
    outgrows 16 links. It wins only where a fixed cheap server pool is the constraint,
    or with asynchrony; for ResNet-50 on NVLink+IB nodes all-reduce wins everywhere."""


def build(results):
    """Everything the tables and plots show, from the JSON lines in `results`."""
    records = m.read_records(results)
    points = m.allreduce_points(records)
    fits = m.fit_allreduce(points)
    # Data parallelism's all-reduce per bucket: what the shipped table chooses, at the cost
    # that algorithm measured (auto's where it was not measured on that link).
    return {"fits": fits, "allreduce": allreduce_rows(points, fits),
            "scaling": scaling_rows(records, fits, m.read_table()),
            "extrapolation": {256: gc.resnet50_h200(256), 32: gc.resnet50_h200(32)},
            "peers": gc.peer_predictions()}


def main(argv):
    results = argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "results")
    data = build(results)
    ar_rows, sc_rows = data["allreduce"], data["scaling"]
    lines = format_allreduce(ar_rows) + [""]
    lines += [summary("all-reduce fits", [r["err"] for r in ar_rows])]
    hier = [m.error(r["hier_us"], r["time_us"]) for r in ar_rows if r["hier_us"] is not None]
    if hier:
        lines += [summary("hierarchical predictions (not fitted)", hier)]
    lines += [""] + format_constants(data["fits"]) + [""] + format_scaling(sc_rows) + [""]
    lines += [summary("training steps", [r["err"] for r in sc_rows if r["pred"]]), ""]
    lines += format_extrapolation(data["extrapolation"]) + format_peers(data["peers"]) + ["", EXPLANATION]
    text = "\n".join(lines) + "\n"
    print(text)
    with open(os.path.join(results, "scaling_model.txt"), "w", encoding="utf-8") as f:
        f.write(text)
    try:
        import plots
    except ImportError as exc:
        return _plots_elsewhere(results, exc)
    print("plots: " + ", ".join(plots.write_all(os.path.join(results, "plots"), data)))
    return 0


def _plots_elsewhere(results, exc):
    """matplotlib missing from this interpreter (a pyenv or venv python3 first on PATH):
    Debian's python3-matplotlib lives with /usr/bin/python3, so draw there if it has it."""
    if os.path.realpath(sys.executable) != os.path.realpath(SYSTEM_PYTHON) and os.path.exists(SYSTEM_PYTHON) \
            and subprocess.call([SYSTEM_PYTHON, "-c", "import matplotlib"], stderr=subprocess.DEVNULL) == 0:
        print("plots: %s has no matplotlib (%s); drawing them with %s" % (sys.executable, exc, SYSTEM_PYTHON))
        return subprocess.call([SYSTEM_PYTHON, os.path.join(os.path.dirname(os.path.abspath(__file__)), "plots.py"), results])
    print("plots skipped: %s (install Debian's python3-matplotlib: apt-get install -y python3-matplotlib)" % exc)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
