"""Plots of the cost model (matplotlib): measured points as markers, the model as lines.
Called by report.py; `python3 bench/model/plots.py bench/results` draws them alone."""
import os
import sys

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dtrain_model as m  # noqa: E402


def _save(fig, directory, name):
    os.makedirs(directory, exist_ok=True)
    paths = []
    for ext in ("png", "svg"):
        path = os.path.join(directory, "%s.%s" % (name, ext))
        fig.savefig(path, dpi=120, bbox_inches="tight")
        paths.append(path)
    plt.close(fig)
    return paths


def allreduce_figure(rows, fits, directory):
    """Bus bandwidth against size, one panel per link class; each (impl, ranks, hosts)
    its colour, measured points with their error, the fitted model as a line."""
    links = sorted({r["link"] for r in rows})
    if not links:
        return []
    fig, axes = plt.subplots(1, len(links), figsize=(6.5 * len(links), 5), squeeze=False)
    for ax, link in zip(axes[0], links):
        groups = sorted({(r["impl"], r["ranks"], r["hosts"]) for r in rows if r["link"] == link})
        for i, (impl, ranks, hosts) in enumerate(groups):
            color = plt.cm.tab10(i % 10)
            pts = [r for r in rows if (r["link"], r["impl"], r["ranks"], r["hosts"]) == (link, impl, ranks, hosts)]
            xs = [r["bytes"] for r in pts]
            ax.plot(xs, [m.busbw_gbps(r["bytes"], ranks, r["time_us"]) for r in pts], "o", color=color,
                    label="%s p=%d h=%d" % (impl, ranks, hosts))
            fit = fits[(impl, link, ranks, hosts)]
            grid = [min(xs) * (max(xs) / min(xs)) ** (k / 80.0) for k in range(81)]
            ax.plot(grid, [m.busbw_gbps(x, ranks, fit.time_us(x)) for x in grid], "-", color=color, lw=1)
            worst = max(pts, key=lambda r: abs(r["err"]))
            if abs(worst["err"]) > m.TARGET_ERROR:
                ax.annotate("%+.0f%%" % (100 * worst["err"]), (worst["bytes"], m.busbw_gbps(worst["bytes"], ranks, worst["time_us"])),
                            fontsize=7, color=color, xytext=(3, 3), textcoords="offset points")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("message bytes")
        ax.set_ylabel("bus bandwidth GB/s")
        ax.set_title("all-reduce, link %s (points measured, lines model; labels: errors > 15%%)" % link, fontsize=9)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    return _save(fig, directory, "allreduce_busbw")


def scaling_figure(rows, directory):
    """Samples/s and efficiency against ranks per strategy, weak and strong scaling."""
    rows = [r for r in rows if r["pred"]]
    modes = sorted({r["rec"].get("mode", "") for r in rows})
    if not modes:
        return []
    fig, axes = plt.subplots(len(modes), 2, figsize=(13, 4.5 * len(modes)), squeeze=False)
    for axrow, mode in zip(axes, modes):
        series = sorted({(r["rec"].get("strategy", ""), r["rec"].get("model", "")) for r in rows if r["rec"].get("mode") == mode})
        for i, (strategy, model) in enumerate(series):
            color = plt.cm.tab10(i % 10)
            pts = sorted((r for r in rows if (r["rec"].get("mode"), r["rec"].get("strategy"), r["rec"].get("model")) == (mode, strategy, model)),
                         key=lambda r: r["rec"]["ranks"])
            ranks = [r["rec"]["ranks"] for r in pts]
            label = "%s %s" % (strategy, model)
            for ax, meas, mod in ((axrow[0], "samples_per_s", "samples_per_s"), (axrow[1], "efficiency", "efficiency")):
                ax.plot(ranks, [r["rec"].get(meas) for r in pts], "o", color=color, label=label + " measured")
                ax.plot(ranks, [r["pred"].get(mod) for r in pts], "-", color=color, lw=1, label=label + " model")
            for r in pts:
                if r["rec"].get("samples_per_s"):
                    axrow[0].annotate("%+.0f%%" % (100 * r["err"]), (r["rec"]["ranks"], r["rec"]["samples_per_s"]),
                                      fontsize=7, color=color, xytext=(3, 3), textcoords="offset points")
        axrow[0].set_ylabel("samples/s")
        axrow[1].set_ylabel("efficiency (vs ranks x 1 rank)")
        for ax in axrow:
            ax.set_xlabel("ranks")
            ax.set_title("%s scaling on this machine (labels: model step-time error)" % mode, fontsize=9)
            ax.grid(True, alpha=0.3)
        axrow[0].legend(fontsize=7)
    return _save(fig, directory, "scaling_measured_vs_model")


def resnet50_figure(tables, peers, directory):
    """Data-parallel efficiency of ResNet-50 on H200 nodes, with the published points."""
    fig, ax = plt.subplots(figsize=(8, 5))
    for batch, style in ((256, "-"), (32, "--")):
        for name in ("data parallel (NCCL ring/tree)", "data parallel (ring only)"):
            res = tables[batch][name]
            ax.plot([r["gpus"] for r in res], [r["efficiency"] for r in res], style,
                    label="model, H200: %s, %d img/GPU" % (name, batch))
    for p, marker in zip(peers, ("s", "^")):
        ax.plot([p["gpus"]], [p["efficiency"]], marker, color="black", ms=8, label="published: " + p["label"])
        ax.plot([p["gpus"]], [p["model_efficiency"]], marker, color="black", ms=8, mfc="none",
                label="model on that peer's hardware (%s)" % p["node"]["name"])
    ax.set_xscale("log", base=2)
    ax.set_xlabel("GPUs")
    ax.set_ylabel("scaling efficiency")
    ax.set_ylim(0, 1.05)
    ax.set_title("ResNet-50 data parallel, H200 nodes (8x NVLink, 400 Gbit/s per GPU) - extrapolation\n"
                 "Horovod's point is ResNet-101 on P100s, Goyal's ResNet-50 on P100s", fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="lower left")
    return _save(fig, directory, "resnet50_h200_scaling")


def layouts_figure(tables, directory):
    """Every layout's efficiency and throughput against GPUs, one panel per batch."""
    fig, axes = plt.subplots(2, len(tables), figsize=(6.5 * len(tables), 9), squeeze=False)
    for col, (batch, table) in enumerate(sorted(tables.items(), reverse=True)):
        for name, res in table.items():
            g = [r["gpus"] for r in res]
            axes[0][col].plot(g, [r["efficiency"] for r in res], "-o", ms=3, label=name)
            axes[1][col].plot(g, [r["samples_per_s"] for r in res], "-o", ms=3, label=name)
        for ax, ylabel in ((axes[0][col], "efficiency"), (axes[1][col], "images/s")):
            ax.set_xscale("log", base=2)
            ax.set_xlabel("GPUs")
            ax.set_ylabel(ylabel)
            ax.set_title("ResNet-50 on H200 nodes, %d img/GPU: layouts (model)" % batch, fontsize=9)
            ax.grid(True, alpha=0.3)
        axes[1][col].set_yscale("log")
        axes[0][col].legend(fontsize=7)
    return _save(fig, directory, "resnet50_h200_layouts")


def write_all(directory, data):
    written = []
    written += allreduce_figure(data["allreduce"], data["fits"], directory)
    written += scaling_figure(data["scaling"], directory)
    written += resnet50_figure(data["extrapolation"], data["peers"], directory)
    written += layouts_figure(data["extrapolation"], directory)
    return written


if __name__ == "__main__":
    import report

    results = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "results")
    print("plots: " + ", ".join(write_all(os.path.join(results, "plots"), report.build(results))))
