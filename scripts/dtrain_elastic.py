#!/usr/bin/env python3
"""dtrain-launch's elastic mode (dtrain-launch --np MIN:MAX ...): runs a training program
on the hosts that are there, between MIN and MAX ranks, and relaunches it from its newest
checkpoint when a host fails (on the hosts that remain) or comes back (at the job's next
checkpoint): torchrun's --nnodes MIN:MAX and Horovod Elastic's host discovery for dtrain.

  dtrain-launch --np 2:4 --hosts a:2,b:2 -- train_mnist --checkpoint-dir ckpt --checkpoint-every 50
  dtrain-launch --np 2:8 --host-discovery ./hosts.sh -- train_mnist --checkpoint-dir ckpt ...

The command is the program, not an mpirun line: the launcher writes mpirun's ranks and
hosts for each attempt (one application context per host, ranks numbered host by host).
Hosts come from --hosts (host:slots, comma separated) or from a discovery command that
prints `host:slots` lines (Horovod's contract; `host` alone is one slot), asked before each
attempt and every --discovery-interval seconds while the job runs.

When the job fails, the hosts that failed are read from mpirun's report ("process rank R
... exited on signal"; "Remote daemon ... on node H" for a machine gone), srun's ("tasks
2-3: Killed", "Node failure on H") and dtrain's timeout messages ("rank W: ... waited ...
for rank R": R's host, unless a rank of it reported a wait itself, being alive); they are
left out for --cooldown seconds (doubling with each further failure of the
same host), and the job is relaunched with `--resume auto` on the hosts left, as many ranks
as they have slots (at most MAX, a multiple of --np-multiple: the model-parallel size pp x tp,
so that shrinking takes data-parallel replicas away). Fewer than MIN slots, after waiting
--wait-for-hosts seconds for more: the job ends, naming the hosts it had and the minimum.

When hosts come back (discovery lists more, or a left-out host's cooldown ends) and the job
could run on more ranks, the launcher writes "relaunch" into DTRAIN_ELASTIC_CONTROL: the
job stops at its next checkpoint (rank 0 writes "stopped ..." into the file once the
checkpoint is on disk), every training rank exiting 75 (train::kRelaunchExitCode), and is
relaunched on the larger set. The Trainer keeps the global batch (--batch-size) whatever the
number of ranks, and the position inside the epoch in global samples, so no sample of the
epoch is lost or repeated across the change (tools/check_sample_log.py audits it).

Under Slurm (--launcher srun, inside an allocation): each attempt is an `srun --mpi=pmix`
step on the hosts left, every task placed by SLURM_HOSTFILE (--distribution=arbitrary);
without --hosts or --host-discovery the hosts are the allocation's (SLURM_JOB_NODELIST, its
SLURM_TASKS_PER_NODE as slots). srun's report ("srun: error: NODE: task(s) R: Killed") names
the ranks that died.

--fake-hosts: the host names are labels; every rank runs on this machine, with DTRAIN_HOST_ID
numbering its host (0, 1, ... in the order the hosts were first listed, the same in every
attempt), so that dtrain's host-aware collectives see two hosts and a test can fail one
(DTRAIN_FAULT=kill-host-at-step:<host number>:<step>). --host-exec TEMPLATE (default:
DTRAIN_HOST_EXEC) prefixes each fake host's ranks with a command, {id} its number: emulated
hosts in network namespaces (bench/netns/run_netns.sh --controller sets it and MPIRUN).

Records: --log-dir (default <checkpoint-dir>/launch) holds attempt-<A>.json for each attempt
(its hosts, each rank's host, the launch command, Unix times started and ended, exit status,
the ranks and hosts that failed; "ended" is written before the next attempt's hosts are chosen) and the control
file. The program sees DTRAIN_RESTART_COUNT (the attempt).
"""
import argparse
import json
import os
import pathlib
import re
import shlex
import signal
import subprocess
import sys
import threading
import time

RELAUNCH_EXIT = 75  # train::kRelaunchExitCode
# mpirun's report of a rank that died, and dtrain's timeout naming the rank waited for.
DIED = re.compile(r"process rank (\d+) with PID \d+ on node \S+ exited on signal")
# A machine gone: Open MPI's daemon lost, or Slurm's node failure (the host, not a rank).
HOST_LOST = re.compile(r"Remote daemon: \S+ on node (\S+)|srun: error: Node failure on (\S+)")
# srun's: a task that died of a signal, not one that exited with an error or that srun
# itself ended (Terminated) once another had died.
SRUN_DIED = re.compile(r"srun: error: \S+: tasks? ([0-9,-]+): (?!Exited with exit code|Terminated)")
# dtrain's timeout: "rank W: ... waited 5.0 s for rank R ...". A rank that prints it is
# alive; only a rank waited for whose host printed nothing is taken as lost (in a stalled
# ring every live rank names its neighbour, a live one among them).
WAITED = re.compile(r"\brank (\d+): [^\n]*?waited [0-9.]+ s for [^\n]*?\brank (\d+)")


def say(text):
    print(f"dtrain-launch: {text}", file=sys.stderr, flush=True)


def parse_hosts(text, origin):
    """'a:2,b:2' or discovery lines -> [(host, slots)] in order, a host listed once."""
    hosts = {}
    for item in re.split(r"[,\s]+", text.strip()):
        if not item:
            continue
        name, _, slots = item.partition(":")
        if not name or (slots and not slots.isdigit()) or (slots and int(slots) < 1):
            raise ValueError(f"{origin}: '{item}' is not host or host:slots (slots >= 1)")
        hosts[name] = hosts.get(name, 0) + (int(slots) if slots else 1)
    return list(hosts.items())


def slurm_allocation():
    """The allocation's hosts and tasks per host: SLURM_JOB_NODELIST through `scontrol show
    hostnames`, SLURM_TASKS_PER_NODE as '2(x3),1'."""
    nodelist = os.environ.get("SLURM_JOB_NODELIST")
    tasks = os.environ.get("SLURM_TASKS_PER_NODE")
    if not nodelist or not tasks:
        raise SystemExit("dtrain-launch: --launcher srun without --hosts or --host-discovery needs a Slurm allocation "
                         "(SLURM_JOB_NODELIST and SLURM_TASKS_PER_NODE are not set)")
    names = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True,
                           check=True).stdout.split()
    slots = []
    for item in tasks.split(","):
        m = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", item)
        if not m:
            raise SystemExit(f"dtrain-launch: SLURM_TASKS_PER_NODE '{tasks}': expected N or N(xK) items")
        slots += [int(m.group(1))] * int(m.group(2) or 1)
    if len(slots) != len(names):
        raise SystemExit(f"dtrain-launch: SLURM_TASKS_PER_NODE '{tasks}' does not match the {len(names)} node(s) "
                         f"of {nodelist}")
    return ",".join(f"{n}:{k}" for n, k in zip(names, slots))


class Hosts:
    """The hosts the job may use: the fixed list or the discovery command's, less those
    left out after failing (until their cooldown ends)."""

    def __init__(self, args):
        self.fixed = parse_hosts(args.hosts, "--hosts") if args.hosts else None
        self.discovery = args.host_discovery
        self.cooldown = args.cooldown
        self.failures = {}  # host -> failures so far
        self.left_out = {}  # host -> time it may be used again
        self.known = self.fixed or []

    def listed(self):
        if self.fixed is not None:
            return self.fixed
        try:
            out = subprocess.run(self.discovery, shell=True, capture_output=True, text=True, timeout=30)
            if out.returncode != 0:
                raise RuntimeError(f"exit {out.returncode}: {out.stderr.strip()}")
            self.known = parse_hosts(out.stdout, f"--host-discovery '{self.discovery}'")
        except (RuntimeError, ValueError, subprocess.TimeoutExpired) as e:
            say(f"host discovery failed ({e}); using the hosts it listed last")
        return self.known

    def usable(self):
        now = time.monotonic()
        return [(h, s) for h, s in self.listed() if self.left_out.get(h, 0) <= now]

    def fail(self, host):
        n = self.failures.get(host, 0) + 1
        self.failures[host] = n
        seconds = min(self.cooldown * 2 ** (n - 1), self.cooldown * 16)
        self.left_out[host] = time.monotonic() + seconds
        return seconds

    def describe_left_out(self):
        now = time.monotonic()
        return ", ".join(f"{h} for {t - now:.0f} s more ({self.failures[h]} failure(s))"
                         for h, t in self.left_out.items() if t > now)


def ranks_for(slots, args):
    """The most ranks `slots` allow: at most MAX, a multiple of --np-multiple."""
    n = min(slots, args.max_np)
    return n - n % args.np_multiple


def layout(hosts, np_):
    """[(host, ranks)] filling the hosts in order."""
    out, left = [], np_
    for host, slots in hosts:
        if left == 0:
            break
        take = min(slots, left)
        out.append((host, take))
        left -= take
    return out


def write_record(log_dir, record):
    path = log_dir / f"attempt-{record['attempt']}.json"
    path.with_suffix(".tmp").write_text(json.dumps(record) + "\n")
    path.with_suffix(".tmp").replace(path)


def srun_command(args, program, placed, host_ids, log_dir, attempt):
    """An srun step: each task on its host (SLURM_HOSTFILE), or with fake hosts every task
    here, given its DTRAIN_HOST_ID by this script re-run as a wrapper (--exec-fake-host)."""
    ranks = [h for h, c in placed for _ in range(c)]
    command = shlex.split(os.environ.get("SRUN", "srun")) + ["--mpi=pmix", f"--ntasks={len(ranks)}",
                                                              "--kill-on-bad-exit=1"]
    command += shlex.split(args.mpirun_args)
    env = {}
    if args.fake_hosts:
        ids = ",".join(str(host_ids.setdefault(h, len(host_ids))) for h in ranks)
        command += ["--overcommit", sys.executable, os.path.abspath(__file__), "--exec-fake-host", ids, "--"]
    else:
        hostfile = log_dir / f"attempt-{attempt}.slurm-hosts"
        hostfile.write_text("".join(h + "\n" for h in ranks))
        env["SLURM_HOSTFILE"] = str(hostfile.resolve())
        command += ["--distribution=arbitrary", f"--nodelist={','.join(h for h, _ in placed)}"]
    return command + program, env


def exec_fake_host(argv):
    """--exec-fake-host IDS -- PROGRAM...: this task's DTRAIN_HOST_ID from the comma list by
    its rank (SLURM_PROCID, or Open MPI's), then the program in this process."""
    ids, program = argv[0].split(","), argv[2:]
    rank = int(os.environ.get("SLURM_PROCID", os.environ.get("OMPI_COMM_WORLD_RANK", "0")))
    os.environ["DTRAIN_HOST_ID"] = ids[rank]
    os.execvp(program[0], program)


def mpirun_command(args, program, placed, env_names, host_ids):
    command = shlex.split(os.environ.get("MPIRUN", "mpirun")) + shlex.split(args.mpirun_args)
    if not args.fake_hosts:
        for name in env_names:
            command += ["-x", name]
    for i, (host, count) in enumerate(placed):
        if i:
            command.append(":")
        command += ["-np", str(count)]
        if args.fake_hosts:
            host_id = host_ids.setdefault(host, len(host_ids))
            if args.host_exec:
                command += shlex.split(args.host_exec.replace("{id}", str(host_id)))
            command += ["env", f"DTRAIN_HOST_ID={host_id}"]
        else:
            command += ["--host", f"{host}:{count}"]
        command += program
    return command


def with_resume(program):
    """The program's arguments with --resume auto (replacing a --resume it has)."""
    out, skip = [], False
    for arg in program:
        if skip:
            skip = False
            continue
        if arg == "--resume":
            skip = True
            continue
        if arg.startswith("--resume="):
            continue
        out.append(arg)
    return out + ["--resume", "auto"]


def checkpoint_dir(program):
    for i, arg in enumerate(program):
        if arg == "--checkpoint-dir" and i + 1 < len(program):
            return program[i + 1]
        if arg.startswith("--checkpoint-dir="):
            return arg.split("=", 1)[1]
    return None


class Attempt:
    """One run of mpirun: its stderr copied through and read for the ranks that failed."""

    def __init__(self, command, env, srun):
        self.died, self.waiters, self.waited, self.lost_hosts = [], set(), [], []
        self.srun = srun
        # In the launcher's process group: a terminal's Ctrl-C reaches the job too, and the job
        # does not outlive a launcher killed by its session's end.
        self.proc = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True, errors="replace")
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        # Drains the job's stderr whatever happens: a full pipe would block the job.
        for line in self.proc.stderr:
            try:
                sys.stderr.write(line)
                sys.stderr.flush()
            except OSError:
                pass
            try:
                self._parse(line)
            except ValueError:
                pass

    def _parse(self, line):
        m = DIED.search(line)
        if m:
            self.died.append(int(m.group(1)))
        m = SRUN_DIED.search(line)
        if m:
            for part in m.group(1).split(","):
                first, _, last = part.partition("-")
                self.died += range(int(first), int(last or first) + 1)
        m = WAITED.search(line)
        if m:
            self.waiters.add(int(m.group(1)))
            self.waited.append(int(m.group(2)))
        m = HOST_LOST.search(line)
        if m:
            self.lost_hosts.append(m.group(1) or m.group(2))

    def failed_hosts(self, ranks):
        """The hosts this attempt lost: those of ranks that died, machines reported gone, and
        hosts of ranks waited for where no rank of that host reported a wait itself."""
        known = lambda r: 0 <= r < len(ranks)
        hosts = [ranks[r] for r in self.died if known(r)] + [h for h in self.lost_hosts if h in ranks]
        if not hosts:
            alive = {ranks[r] for r in self.waiters if known(r)}
            hosts = [ranks[r] for r in self.waited if known(r) and ranks[r] not in alive]
        return list(dict.fromkeys(hosts))

    def failed_ranks(self, ranks):
        hosts = self.failed_hosts(ranks)
        named = [r for r in dict.fromkeys(self.died + self.waited) if 0 <= r < len(ranks) and ranks[r] in hosts]
        return named

    def signal(self, sig):
        # srun ends a step on SIGTERM (its first SIGINT only reports the tasks' state).
        try:
            self.proc.send_signal(signal.SIGTERM if self.srun else sig)
        except ProcessLookupError:
            pass

    def wait(self, poll, interval):
        """Waits for the exit status, calling poll() every `interval` seconds meanwhile."""
        while True:
            try:
                code = self.proc.wait(timeout=interval)
                self.reader.join(timeout=10)
                return code
            except subprocess.TimeoutExpired:
                poll()


def main():
    parser = argparse.ArgumentParser(prog="dtrain-launch", description=__doc__.split("\n\n")[0],
                                     usage="dtrain-launch --np MIN:MAX (--hosts H:S,... | --host-discovery CMD | "
                                           "--launcher srun) [options] -- PROGRAM [ARGS...]")
    parser.add_argument("--np", required=True, help="MIN:MAX ranks (or N: exactly N)")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--hosts", help="host:slots,host:slots,... (a fixed list)")
    source.add_argument("--host-discovery", help="a command printing host:slots lines, asked as the job runs")
    parser.add_argument("--fake-hosts", action="store_true", help="every rank on this machine, DTRAIN_HOST_ID=host")
    parser.add_argument("--host-exec", default=os.environ.get("DTRAIN_HOST_EXEC", ""),
                        help="with --fake-hosts: a command prefixing each host's ranks, {id} its number "
                             "(default: DTRAIN_HOST_EXEC)")
    parser.add_argument("--np-multiple", type=int, default=1, help="ranks come in multiples of this (pp x tp)")
    parser.add_argument("--max-restarts", type=int, default=3, help="relaunches after failures (default 3)")
    parser.add_argument("--restart-delay", type=float, default=1, help="seconds before a relaunch (default 1)")
    parser.add_argument("--cooldown", type=float, default=60,
                        help="seconds a failed host is left out, doubling per further failure (default 60)")
    parser.add_argument("--discovery-interval", type=float, default=5,
                        help="seconds between looks for hosts while the job runs (default 5)")
    parser.add_argument("--wait-for-hosts", type=float, default=120,
                        help="seconds to wait for MIN slots before ending the job (default 120: longer than a "
                             "first failure's cooldown, so a fixed list of MIN slots retries a host that failed once)")
    parser.add_argument("--log-dir", help="attempt records and the control file (default <checkpoint-dir>/launch)")
    parser.add_argument("--launcher", choices=["mpirun", "srun"], default="mpirun",
                        help="mpirun (default), or srun inside a Slurm allocation")
    parser.add_argument("--mpirun-args", default="",
                        help="more arguments for the launcher, one string (MPIRUN or SRUN name its program)")
    parser.add_argument("program", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    program = args.program[1:] if args.program[:1] == ["--"] else args.program
    if args.host_exec and (not args.fake_hosts or args.launcher != "mpirun"):
        parser.error("--host-exec (or DTRAIN_HOST_EXEC) goes with --fake-hosts under mpirun")
    if not args.hosts and not args.host_discovery:
        if args.launcher != "srun":
            parser.error("give the hosts: --hosts H:S,... or --host-discovery CMD (or --launcher srun in an allocation)")
        args.hosts = slurm_allocation()

    m = re.fullmatch(r"(\d+)(?::(\d+))?", args.np)
    if not m:
        parser.error(f"--np '{args.np}': expected MIN:MAX or N")
    args.min_np, args.max_np = int(m.group(1)), int(m.group(2) or m.group(1))
    if not 1 <= args.min_np <= args.max_np:
        parser.error(f"--np '{args.np}': expected 1 <= MIN <= MAX")
    if args.np_multiple < 1 or args.min_np % args.np_multiple:
        parser.error(f"--np-multiple {args.np_multiple}: MIN ({args.min_np}) must be a multiple of it")
    if not program:
        parser.error("no program given (after --)")
    if os.path.basename(program[0]) in ("mpirun", "mpiexec", "orterun", "srun"):
        parser.error("in elastic mode give the program, not a launcher line: dtrain-launch writes mpirun's (or srun's) "
                     "ranks and hosts (--mpirun-args for their other options)")
    ckpt = checkpoint_dir(program)
    if ckpt is None:
        parser.error("elastic mode needs the program's --checkpoint-dir: a relaunch resumes from it")
    log_dir = pathlib.Path(args.log_dir or os.path.join(ckpt, "launch"))
    log_dir.mkdir(parents=True, exist_ok=True)
    control = log_dir / "control"

    hosts = Hosts(args)
    host_ids = {}  # --fake-hosts: each host's DTRAIN_HOST_ID
    for host, _ in hosts.listed():
        host_ids.setdefault(host, len(host_ids))
    attempt, failures, status = 0, 0, 1
    current = None
    stopping = []

    def on_signal(sig, _frame):
        stopping.append(sig)
        if current is not None:
            current.signal(sig)

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)

    while True:
        # The hosts for this attempt: MIN slots, waiting a while for them.
        waited_from = time.monotonic()
        while True:
            usable = hosts.usable()
            np_ = ranks_for(sum(s for _, s in usable), args)
            if np_ >= args.min_np or time.monotonic() - waited_from >= args.wait_for_hosts or stopping:
                break
            time.sleep(1)
        if stopping:
            say("stopped by a signal; not relaunching")
            return 128 + stopping[0]
        if np_ < args.min_np:
            had = ", ".join(f"{h}:{s}" for h, s in usable) or "none"
            left = hosts.describe_left_out()
            say(f"{sum(s for _, s in usable)} slot(s) on the hosts left ({had}){'; left out: ' + left if left else ''}"
                f" is below the minimum of {args.min_np} rank(s) (--np {args.np}), after waiting "
                f"{args.wait_for_hosts:g} s for more: ending the job")
            return status if status not in (0, RELAUNCH_EXIT) else 1
        placed = layout(usable, np_)
        ranks = [h for h, c in placed for _ in range(c)]
        record = {"attempt": attempt, "hosts": dict(placed), "ranks": ranks, "started": time.time()}
        write_record(log_dir, record)
        control.write_text("")
        env = dict(os.environ, DTRAIN_RESTART_COUNT=str(attempt), DTRAIN_ELASTIC_CONTROL=str(control.resolve()))
        attempt_program = with_resume(program) if attempt > 0 else program
        if args.launcher == "srun":
            command, extra = srun_command(args, attempt_program, placed, host_ids, log_dir, attempt)
            env.update(extra)
        else:
            command = mpirun_command(args, attempt_program, placed, ["DTRAIN_RESTART_COUNT", "DTRAIN_ELASTIC_CONTROL"],
                                     host_ids)
        record["command"] = command
        write_record(log_dir, record)
        say(f"attempt {attempt}: {np_} rank(s) on " + ", ".join(f"{h}:{c}" for h, c in placed))
        if stopping:  # a signal while this attempt was being prepared
            say("stopped by a signal; not relaunching")
            return 128 + stopping[0]
        current = Attempt(command, env, args.launcher == "srun")
        asked = []

        def poll():
            # More slots than the job has (hosts back, or new): it grows at its next checkpoint.
            if asked or stopping:
                return
            now_usable = hosts.usable()
            more = ranks_for(sum(s for _, s in now_usable), args)
            if more > np_:
                control.write_text("relaunch\n")
                asked.append(more)
                say(f"{more} rank(s) possible now (hosts: " + ", ".join(f"{h}:{s}" for h, s in now_usable)
                    + "): the job stops at its next checkpoint and is relaunched on them")

        status = current.wait(poll, args.discovery_interval)
        if status < 0:
            status = 128 - status  # Popen's -N: ended by signal N, as a shell reports it
        failed_hosts = current.failed_hosts(ranks)
        failed_ranks = current.failed_ranks(ranks)
        current = None
        # The job's own word that it stopped for the relaunch: srun may report 143 for tasks it
        # ended while they were exiting 75 (--kill-on-bad-exit).
        stopped_for_relaunch = asked and control.read_text().startswith("stopped")
        record.update(ended=time.time(), exit=status, failed_ranks=failed_ranks, failed_hosts=failed_hosts)
        write_record(log_dir, record)
        if stopping:
            say(f"stopped by a signal (exit {status}); not relaunching")
            return status if status != 0 else 128 + stopping[0]
        if status == 0:
            if attempt > 0:
                say(f"the job finished after {attempt} relaunch(es)")
            return 0
        if stopped_for_relaunch:
            say(f"the job stopped at a checkpoint for the relaunch (exit {status})")
            attempt += 1
            continue
        failures += 1
        for host in failed_hosts:
            seconds = hosts.fail(host)
            named = ", ".join(str(r) for r in failed_ranks if ranks[r] == host) or "the machine"
            say(f"host {host} failed (rank {named} of attempt {attempt}): left out for {seconds:g} s")
        if not failed_hosts:
            say("could not tell which rank failed (no rank named in mpirun's or dtrain's messages): no host left out")
        if failures > args.max_restarts:
            say(f"the job failed (exit {status}) and {args.max_restarts} relaunch(es) are used up")
            return status
        say(f"the job failed (exit {status}); relaunch {failures} of {args.max_restarts} from the latest checkpoint")
        deadline = time.monotonic() + args.restart_delay
        while time.monotonic() < deadline and not stopping:
            time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
        attempt += 1


if __name__ == "__main__":
    if sys.argv[1:2] == ["--exec-fake-host"]:
        exec_fake_host(sys.argv[2:])
    sys.exit(main())
