"""Cost model of dtrain's communication and training steps (Python standard library only).

Three parts, each a small set of functions:
  * reading the bench JSON lines (bench_allreduce, bench_scaling) defensively;
  * alpha-beta fits of all-reduce time per (impl, link class, ranks): a ring all-reduce of
    n bytes on p ranks costs 2(p-1) alpha + 2(p-1)/p n beta, so the measured time is a
    line in n whose intercept and slope give alpha and beta. Memory-bound links change
    regime with size (MPI's eager protocol for small messages, the last-level cache for
    mid sizes), so a fit holds up to three regimes, each its own line, and says so;
  * step models: data parallel (buckets all-reduced in launch order on one channel as
    their gradients become ready, exposed communication = what ends after backward),
    pipeline (bubble (K-1)/(M+K-1) plus activation sends), parameter server (servers'
    link bound S x link against W x 2 x model bytes).
Measured compute at n ranks is an input: on a machine with fewer cores than ranks the
slow-down is a property of the machine, not something the model predicts.
"""
import json
import math
import os

LOCAL_LINK = "shm"  # lines without "link" ran on one host
MAX_REGIMES = 3
TARGET_ERROR = 0.15


# ---------------------------------------------------------------- reading the results

def read_records(directory):
    """Every JSON object in *.json / *.jsonl under `directory` (not recursive), each with
    "_file" added. Lines that are not JSON objects are skipped: the files may hold a
    human-readable header."""
    records = []
    for name in sorted(os.listdir(directory)):
        if not (name.endswith(".json") or name.endswith(".jsonl")):
            continue
        with open(os.path.join(directory, name), encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if not line.startswith("{"):
                    continue
                try:
                    obj = json.loads(line)
                except ValueError:
                    continue
                if isinstance(obj, dict):
                    obj["_file"] = name
                    records.append(obj)
    return records


def _number(rec, key):
    value = rec.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def link_of(rec):
    return rec.get("link") or LOCAL_LINK


def allreduce_points(records):
    """bench_allreduce lines that carry figures, as plain dicts."""
    points = []
    for rec in records:
        if rec.get("bench") != "allreduce":
            continue
        size, time_us, ranks = _number(rec, "bytes"), _number(rec, "time_us"), _number(rec, "ranks")
        if size is None or time_us is None or ranks is None or time_us <= 0 or not rec.get("impl"):
            continue
        hosts = _number(rec, "hosts") or 1.0
        points.append({"impl": rec["impl"], "link": link_of(rec), "ranks": int(ranks),
                       "hosts": int(hosts), "ranks_per_host": int(_number(rec, "ranks_per_host") or ranks / hosts),
                       "bytes": size, "time_us": time_us, "file": rec.get("_file", "")})
    return points


def scaling_points(records):
    """bench_scaling lines that carry a measured step time."""
    return [rec for rec in records
            if rec.get("bench") == "scaling" and _number(rec, "step_ms_median") and _number(rec, "ranks")]


# ---------------------------------------------------------------- alpha-beta fits

def fit_line_relative(xs, ys):
    """(a, b) >= 0 minimising sum(((a + b x) - y) / y)^2: relative error is what the
    target is stated in, and plain least squares would ignore the small sizes."""
    sw = swx = swxx = swy = swxy = 0.0
    for x, y in zip(xs, ys):
        w = 1.0 / (y * y)
        sw, swx, swxx, swy, swxy = sw + w, swx + w * x, swxx + w * x * x, swy + w * y, swxy + w * x * y
    det = sw * swxx - swx * swx
    a = b = -1.0
    if det > 0:
        a = (swy * swxx - swx * swxy) / det
        b = (sw * swxy - swx * swy) / det
    if a < 0 or b < 0:  # a negative latency or per-byte cost has no meaning: drop that term
        cand_b = (0.0, swxy / swxx if swxx > 0 else 0.0)
        cand_a = (swy / sw, 0.0)
        a, b = min(cand_b, cand_a, key=lambda ab: _rel_sse(ab[0], ab[1], xs, ys))
    return a, b


def _rel_sse(a, b, xs, ys):
    return sum(((a + b * x) - y) ** 2 / (y * y) for x, y in zip(xs, ys))


def fit_regimes(xs, ys, max_regimes=MAX_REGIMES, target=TARGET_ERROR):
    """Piecewise lines over sorted x, each regime at least two points: the fewest regimes
    (up to max_regimes) that bring every point within `target`, else the best with
    max_regimes. Returns a list of {"lo", "hi", "a", "b"}; lo/hi are the geometric
    midpoints between neighbouring regimes' sizes (the outer ends are open)."""
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    xs, ys = [xs[i] for i in order], [ys[i] for i in order]
    best = None
    for k in range(1, min(max_regimes, len(xs) // 2) + 1):
        worst, sse, regimes = min((_regimes_for(xs, ys, cuts) for cuts in _cut_sets(len(xs), k)),
                                  key=lambda t: (t[0], t[1]))
        best = (worst, sse, regimes)
        if worst <= target:
            break
    return best[2]


def _cut_sets(n, k):
    """Start indices of regimes 2..k such that every regime holds >= 2 points."""
    if k == 1:
        yield ()
        return
    for first in range(2, n - 2 * (k - 1) + 1):
        for rest in _cut_sets(n - first, k - 1):
            yield (first,) + tuple(first + c for c in rest)


def _regimes_for(xs, ys, cuts):
    bounds = [0] + list(cuts) + [len(xs)]
    regimes, worst, sse = [], 0.0, 0.0
    for i in range(len(bounds) - 1):
        sx, sy = xs[bounds[i]:bounds[i + 1]], ys[bounds[i]:bounds[i + 1]]
        a, b = fit_line_relative(sx, sy)
        lo = math.sqrt(xs[bounds[i] - 1] * xs[bounds[i]]) if i > 0 else 0.0
        hi = math.sqrt(xs[bounds[i + 1] - 1] * xs[bounds[i + 1]]) if i + 2 < len(bounds) else math.inf
        regimes.append({"lo": lo, "hi": hi, "a": a, "b": b})
        for x, y in zip(sx, sy):
            err = abs(a + b * x - y) / y
            worst, sse = max(worst, err), sse + err * err
    return worst, sse, regimes


def eval_regimes(regimes, x):
    for r in regimes:
        if x < r["hi"]:
            return r["a"] + r["b"] * x
    return regimes[-1]["a"] + regimes[-1]["b"] * x


def ring_factors(p):
    """(latency steps, bytes factor) of a ring all-reduce on p ranks."""
    return 2.0 * (p - 1), 2.0 * (p - 1) / p


def ring_allreduce_us(nbytes, p, alpha_us, beta_us_per_byte):
    if p <= 1:
        return 0.0
    steps, factor = ring_factors(p)
    return steps * alpha_us + factor * nbytes * beta_us_per_byte


class AllReduceFit:
    """One (impl, link, ranks) fit: time_us(n) from the regimes; alpha/beta per regime
    read through the ring formula, so that a point-to-point message of n bytes costs
    alpha + n beta."""

    def __init__(self, impl, link, ranks, regimes, points):
        self.impl, self.link, self.ranks, self.regimes, self.points = impl, link, ranks, regimes, points

    def time_us(self, nbytes):
        return eval_regimes(self.regimes, nbytes)

    def alpha_beta(self, nbytes):
        """(alpha us, beta us/byte) of the regime that holds nbytes."""
        steps, factor = ring_factors(max(self.ranks, 2))
        for r in self.regimes:
            if nbytes < r["hi"]:
                return r["a"] / steps, r["b"] / factor
        r = self.regimes[-1]
        return r["a"] / steps, r["b"] / factor

    def p2p_us(self, nbytes):
        alpha, beta = self.alpha_beta(nbytes)
        return alpha + nbytes * beta


def fit_allreduce(points):
    """{(impl, link, ranks, hosts): AllReduceFit} over every measured group."""
    groups = {}
    for p in points:
        groups.setdefault((p["impl"], p["link"], p["ranks"], p["hosts"]), []).append(p)
    fits = {}
    for key, pts in groups.items():
        by_size = {}
        for p in pts:  # repeated runs of one size: fit their median
            by_size.setdefault(p["bytes"], []).append(p["time_us"])
        xs = sorted(by_size)
        ys = [_median(by_size[x]) for x in xs]
        if len(xs) < 2:
            continue
        fits[key] = AllReduceFit(key[0], key[1], key[2], fit_regimes(xs, ys), pts)
    return fits


def find_fit(fits, impls, link, ranks, hosts=1):
    """The fit of the first impl in `impls` measured on (link, ranks, hosts); failing
    that, the same impl and link at the nearest measured rank count, rescaled through the
    ring formula (alpha and beta do not depend on p in the model). None if none."""
    for impl in impls:
        if (impl, link, ranks, hosts) in fits:
            return fits[(impl, link, ranks, hosts)]
    for impl in impls:
        near = [k for k in fits if k[0] == impl and k[1] == link and k[3] == hosts and k[2] > 1]
        if near:
            src = fits[min(near, key=lambda k: abs(math.log(k[2] / max(ranks, 1))))]
            return _rescaled(src, ranks)
    return None


def _rescaled(src, ranks):
    s_steps, s_factor = ring_factors(src.ranks)
    d_steps, d_factor = ring_factors(max(ranks, 2))
    regimes = [{"lo": r["lo"], "hi": r["hi"], "a": r["a"] * d_steps / s_steps,
                "b": r["b"] * d_factor / s_factor} for r in src.regimes]
    return AllReduceFit(src.impl, src.link, ranks, regimes, [])


def hierarchical_us(nbytes, intra_fit, inter_fit, hosts):
    """Hierarchical all-reduce: reduce inside each host, a ring among the host leaders
    over the link, broadcast inside each host. Reduce + broadcast on shared memory cost
    about one intra-host all-reduce (the same bytes read and written once each way)."""
    intra = intra_fit.time_us(nbytes) if intra_fit else 0.0
    alpha, beta = inter_fit.alpha_beta(nbytes)
    return intra + ring_allreduce_us(nbytes, hosts, alpha, beta)


# ---------------------------------------------------------------- the collective table

# The table the library compiles in (include/dtrain/comm/collective_table.h has the format).
TABLE_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src", "comm",
                          "collective_table.json")
# bench_allreduce's name for each of the table's algorithms.
TABLE_IMPLS = {"mpi": "dtrain_mpi", "ring": "dtrain_ring", "recursive_doubling": "dtrain_rd",
               "rabenseifner": "dtrain_rab", "shm": "shm", "shm+ring": "shm", "shm+mpi": "shm_mpi",
               "shm+recursive_doubling": "shm_rd", "shm+rabenseifner": "shm_rab"}


def read_table(path=TABLE_FILE):
    with open(path) as f:
        table = json.load(f)
    if table.get("format") != "dtrain-allreduce-table/1":
        raise ValueError("%s: not a dtrain collective table" % path)
    return table


def table_choice(table, nbytes, ranks, hosts):
    """The algorithm dtrain's Auto runs for `nbytes` on `ranks` ranks over `hosts` hosts, as
    the library chooses it (CollectiveTable::choose): the exact case, else the nearest (log2
    of ranks and hosts) with one host or with several as `hosts` has, else the built-in
    rule."""
    best, best_distance = None, math.inf
    for case in table.get("cases", []):
        if (case["hosts"] == 1) != (hosts == 1):
            continue
        distance = abs(math.log2(case["ranks"] / ranks)) + abs(math.log2(case["hosts"] / hosts))
        if distance < best_distance:
            best, best_distance = case, distance
    if best is None:
        return "shm" if hosts == 1 or nbytes >= 256 << 10 else "mpi"
    for step in best["choices"]:
        if "up_to_bytes" not in step or nbytes <= step["up_to_bytes"]:
            return step["algorithm"]
    return best["choices"][-1]["algorithm"]


def busbw_gbps(nbytes, ranks, time_us):
    return ring_factors(max(ranks, 2))[1] * nbytes / (time_us * 1e3) if ranks > 1 else nbytes / (time_us * 1e3)


def _median(values):
    s = sorted(values)
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else 0.5 * (s[mid - 1] + s[mid])


# ---------------------------------------------------------------- step models

def dp_overlap(backward_ms, buckets, allreduce_ms, slowdown=1.0):
    """Buckets [{"bytes", "ready_ms"}] in launch order, each all-reduced on one channel
    once ready and once the previous one is done. While backward still runs, an
    all-reduce shares the cores with it and progresses `slowdown` times slower (on CPUs
    the copies, reductions and the kernel's TCP work need a core; the measured slowdown
    of compute at these ranks is the same contention seen from the other side); after
    backward it runs at its measured speed. Returns (comm end ms after backward start,
    exposed ms = the part after backward ends)."""
    free = 0.0
    for bucket in buckets:
        start = max(float(bucket["ready_ms"]), free)
        work = allreduce_ms(float(bucket["bytes"]))
        overlap = max(0.0, backward_ms - start)  # time left under backward
        if work * slowdown <= overlap:
            free = start + work * slowdown
        else:
            free = max(start, backward_ms) + work - overlap / slowdown
    return free, max(0.0, free - backward_ms)


def dp_step_ms(compute_ms, backward_ms, buckets, allreduce_ms, slowdown=1.0):
    """(step ms, exposed communication ms) of one data-parallel step."""
    _, exposed = dp_overlap(backward_ms, buckets, allreduce_ms, slowdown)
    return compute_ms + exposed, exposed


def bubble_fraction(stages, micro_batches):
    """Idle share of a GPipe/1F1B schedule: (K-1)/(M+K-1)."""
    return (stages - 1) / (micro_batches + stages - 1)


def pipeline_step_ms(stage_compute_ms, stages, micro_batches, send_ms):
    """One pipeline step of balanced stages: M micro-batches through K stages take M+K-1
    slots; each slot is a micro-batch's share of the stage's compute plus its activation
    going forward and its gradient coming back across a boundary (send_ms each, 0 for
    one stage)."""
    per_micro = stage_compute_ms / micro_batches + (2.0 * send_ms if stages > 1 else 0.0)
    return (micro_batches + stages - 1) * per_micro


def pipeline_step_unbalanced_ms(stage_compute_ms, micro_batches, send_ms):
    """One pipeline step of stages with per-step compute C_k (a list, in stage order):
    the slowest stage runs M micro-batches back to back, and the others add the fill and
    drain, one micro-batch's worth each: (M-1) c_max + sum_k c_k with c_k = C_k / M, plus
    a send each way per boundary for that one micro-batch. Balanced stages give
    pipeline_step_ms."""
    m = float(micro_batches)
    per_micro = [c / m for c in stage_compute_ms]
    sends = 2.0 * send_ms * (len(stage_compute_ms) - 1)
    return (m - 1.0) * max(per_micro) + sum(per_micro) + sends


def ps_comm_ms(param_bytes, workers, servers, server_link_bps, worker_link_bps, alpha_ms, messages):
    """Push gradients + pull parameters of one step: every worker moves 2 x model bytes;
    the servers together move W x 2 x model bytes over S links. The slower of the two
    ends bounds the step, plus a latency per message."""
    server_bound = workers * 2.0 * param_bytes / (servers * server_link_bps)
    worker_bound = 2.0 * param_bytes / worker_link_bps
    return 1e3 * max(server_bound, worker_bound) + messages * alpha_ms


def ps_sync_step_ms(compute_ms, comm_ms):
    """Synchronous PS: pull before forward, push after backward, nothing overlapped."""
    return compute_ms + comm_ms


def ps_async_step_ms(compute_ms, param_bytes, workers, servers, server_link_bps, worker_link_bps, alpha_ms, messages):
    """Asynchronous PS: a worker's cycle is its compute plus its own push and pull; the
    servers can serve at most S x link / (2 x model bytes) worker steps per second, so
    the mean worker step is the longer of the two."""
    own = compute_ms + 1e3 * 2.0 * param_bytes / worker_link_bps + messages * alpha_ms
    server_limited = 1e3 * workers * 2.0 * param_bytes / (servers * server_link_bps)
    return max(own, server_limited)


# ---------------------------------------------------------------- measured configurations

DP_IMPLS = ("auto", "shm", "dtrain_ring", "ring", "mpi")  # dtrain's default first
P2P_IMPLS = ("ring", "mpi", "dtrain_ring")  # MPI send/recv, as pipeline and PS use
PS_MESSAGE_BYTES = 1 << 20  # ParameterServerOptions::bucket_bytes: one message per MB


def predict_scaling(rec, fits, cpu_slowdown=1.0, bucket_shares=None, table=None):
    """Model step (ms), exposed communication (ms) and samples/s for one bench_scaling
    line, from its measured compute and the all-reduce fits of its link; None when the
    line lacks what its strategy needs (the reason in the second element).
    `cpu_slowdown`: the row's measured compute per sample over the 1-rank figure (the
    cores' contention), which stretches an all-reduce that overlaps backward.
    `bucket_shares`: for a parameter-server line, the gradient buckets of the same model
    ({"bytes", "ready_share": ready_ms / backward_ms}, from a data-parallel line), so that
    pushes and pulls overlap backward as they do.
    `table`: an collective table (read_table()): data parallelism's all-reduce then costs
    what the table's choice per bucket size measured."""
    strategy, ranks = rec.get("strategy"), int(_number(rec, "ranks"))
    link, hosts = link_of(rec), int(_number(rec, "hosts") or 1)
    compute = _number(rec, "compute_ms_median")
    if compute is None:
        parts = [_number(rec, k) for k in ("forward_ms_median", "backward_ms_median", "optimizer_ms_median")]
        compute = sum(parts) if all(p is not None for p in parts) else None
    if compute is None:
        return None, "no compute_ms_median (nor forward/backward/optimizer)"
    workers = int(_number(rec, "workers") or ranks)
    if strategy == "data_parallel":
        step, exposed = _predict_dp(rec, fits, compute, workers, link, hosts, max(1.0, cpu_slowdown or 1.0), table)
    elif strategy == "pipeline":
        step, exposed = _predict_pipeline(rec, fits, compute, link, hosts)
    elif strategy in ("ps_sync", "ps_async"):
        step, exposed = _predict_ps(rec, fits, compute, workers, link, hosts, strategy,
                                    max(1.0, cpu_slowdown or 1.0), bucket_shares)
    else:
        return None, "unknown strategy %r" % strategy
    if step is None:
        return None, exposed
    batch = _number(rec, "global_batch") or (_number(rec, "batch_per_worker") or 0) * workers
    return {"step_ms": step, "exposed_ms": exposed,
            "samples_per_s": batch / (step / 1e3) if batch else None}, ""


def _dp_allreduce_us(fits, link, workers, hosts, table):
    """The all-reduce time of n bytes as dtrain's Auto runs it: the measured fit of the
    algorithm the table chooses for n where one was measured, else of DP_IMPLS' first."""
    fallback = find_fit(fits, DP_IMPLS, link, workers, hosts)
    if table is None:
        return fallback and fallback.time_us
    chosen = {}

    def time_us(nbytes):
        impl = TABLE_IMPLS.get(table_choice(table, nbytes, workers, hosts))
        if impl not in chosen:
            chosen[impl] = find_fit(fits, (impl,), link, workers, hosts) if impl else None
        fit = chosen[impl] or fallback
        return fit.time_us(nbytes)

    return time_us if fallback else None


def _predict_dp(rec, fits, compute, workers, link, hosts, slowdown, table=None):
    if workers <= 1:
        return compute, 0.0
    time_us = _dp_allreduce_us(fits, link, workers, hosts, table)
    buckets = rec.get("buckets")
    backward = _number(rec, "backward_ms_median")
    if time_us is None:
        return None, "no all-reduce fit for link %s" % link
    if not isinstance(buckets, list) or backward is None:
        param_bytes = _number(rec, "param_bytes")
        if param_bytes is None:
            return None, "no buckets, backward_ms_median or param_bytes"
        exposed = time_us(param_bytes) / 1e3  # no overlap information: all exposed
        return compute + exposed, exposed
    return dp_step_ms(compute, backward, buckets, lambda n: time_us(n) / 1e3, slowdown)


def _predict_pipeline(rec, fits, compute, link, hosts):
    stages = int(_number(rec, "stages") or _number(rec, "ranks"))
    micro = int(_number(rec, "micro_batches") or 1)
    act = _number(rec, "activation_bytes") or 0.0
    fit = find_fit(fits, P2P_IMPLS, link, 2, hosts)
    if fit is None and stages > 1:
        return None, "no point-to-point fit for link %s" % link
    send = fit.p2p_us(act) / 1e3 if (fit and act) else 0.0
    stage_compute = rec.get("rank_compute_ms")
    if isinstance(stage_compute, list) and len(stage_compute) == stages and stages > 1:
        # The stages' own compute (bench_scaling lists them in rank = stage order).
        step = pipeline_step_unbalanced_ms([float(c) for c in stage_compute], micro, send)
    else:
        # compute_ms_median is a stage's busy time per step (its share of every micro-batch)
        step = pipeline_step_ms(compute, stages, micro, send)
    return step, step - compute


def _predict_ps(rec, fits, compute, workers, link, hosts, strategy, slowdown=1.0, bucket_shares=None):
    if int(_number(rec, "ranks") or 1) == 1:
        return compute, 0.0  # the 1-rank baseline trains locally: no server, no messages
    servers = int(_number(rec, "servers") or 1)
    param_bytes = _number(rec, "param_bytes")
    fit = find_fit(fits, P2P_IMPLS, link, 2, hosts)
    if param_bytes is None or fit is None:
        return None, "no param_bytes or no point-to-point fit for link %s" % link
    alpha_us, beta = fit.alpha_beta(min(param_bytes, PS_MESSAGE_BYTES))
    bps = 1e6 / beta if beta > 0 else math.inf
    messages = 2.0 * max(1.0, math.ceil(param_bytes / PS_MESSAGE_BYTES))
    backward = _number(rec, "backward_ms_median")
    if bucket_shares and backward is not None:
        # Workers push each gradient bucket as backward finishes it (the data-parallel
        # reducer's buckets) and pull its new values as soon as the servers have them: the
        # push and pull of a bucket overlap backward as an all-reduce would, bounded by the
        # worker's link or by the servers' links shared among the workers.
        def push_pull_ms(nbytes):
            pieces = 2.0 * max(1.0, math.ceil(nbytes / PS_MESSAGE_BYTES))
            wire = max(2.0 * nbytes / bps, workers * 2.0 * nbytes / (servers * bps))
            return 1e3 * wire + pieces * alpha_us / 1e3
        buckets = [{"bytes": b["bytes"], "ready_ms": b["ready_share"] * backward} for b in bucket_shares]
        step, exposed = dp_step_ms(compute, backward, buckets, push_pull_ms, slowdown)
        if strategy == "ps_async":
            server_limited = 1e3 * workers * 2.0 * param_bytes / (servers * bps)
            step = max(step, server_limited)
            exposed = step - compute
        return step, exposed
    if strategy == "ps_sync":
        comm = ps_comm_ms(param_bytes, workers, servers, bps, bps, alpha_us / 1e3, messages)
        return ps_sync_step_ms(compute, comm), comm
    step = ps_async_step_ms(compute, param_bytes, workers, servers, bps, bps, alpha_us / 1e3, messages)
    return step, step - compute


def error(model, measured):
    return (model - measured) / measured
