#!/usr/bin/env bash
# A throw-away one-node Slurm cluster on this machine, from Debian 12's packages (slurmctld,
# slurmd, slurm-client, munge), for tests and for trying `srun`/`sbatch` by hand:
#
#   scripts/slurm/one-node-slurm.sh start DIR   # writes DIR/slurm.conf, starts munged, slurmctld
#                                               # and slurmd, waits until the node is idle
#   export SLURM_CONF=DIR/slurm.conf            # (or: . DIR/env) then srun, sbatch, sinfo, ...
#   scripts/slurm/one-node-slurm.sh stop DIR    # cancels the jobs, stops the three daemons
#   scripts/slurm/one-node-slurm.sh status DIR  # exit 0 when the node answers and is idle/allocated
#
# Everything lives under DIR: the configuration, a fresh munge key and munged's own socket
# (the system's munged and /etc/munge are not used), the controller's state, slurmd's spool,
# pid files and logs (DIR/log). The node is this host (`hostname -s`, reached at 127.0.0.1)
# with the CPUs `slurmd -C` finds; the ports are the first free pair from 16817 (or
# ONE_NODE_SLURM_PORT and the next one), so a real Slurm on the default 6817/6818 is left
# alone. No cgroups (proctrack/linuxproc, task/none), no accounting; MPI through PMIx
# (MpiDefault=pmix: Debian's Open MPI talks PMIx only, `srun --mpi=pmi2` fails to start it).
#
# Exit codes: 0 done; 77 Slurm cannot run here (a package is missing, not root, a daemon
# refuses to start or the node never turns idle), with the reason on stderr, so that tests
# can skip; 2 usage. SLURMCTLD, SLURMD and MUNGED name the daemons' binaries (default: found
# on PATH or in /usr/sbin), e.g. SLURMCTLD=/nonexistent to see the skip.
set -uo pipefail

usage() {
  echo "usage: $0 start|stop|status DIR" >&2
  exit 2
}
[ $# -eq 2 ] || usage
action=$1
dir=$2
case "$action" in start | stop | status) ;; *) usage ;; esac
if [ "$action" = start ]; then
  mkdir -p "$dir" || exit 1
elif [ ! -d "$dir" ]; then
  echo "one-node-slurm: no directory $dir: nothing runs there"
  [ "$action" = stop ]
  exit
fi
dir=$(cd "$dir" && pwd)
deadline_s=${ONE_NODE_SLURM_WAIT_S:-60}

cannot() { # reason...: Slurm cannot run here
  echo "one-node-slurm: cannot start Slurm here: $*" >&2
  exit 77
}
find_bin() { # name: the binary from $NAME_UPPER, else PATH, else /usr/sbin
  local var
  var=$(echo "$1" | tr '[:lower:]' '[:upper:]')
  if [ -n "${!var:-}" ]; then
    echo "${!var}"
  else
    command -v "$1" 2>/dev/null || echo "/usr/sbin/$1"
  fi
}
pid_alive() { # pidfile [name]: its process runs (and is called name, so a reused pid is left alone)
  [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null &&
    { [ -z "${2:-}" ] || [ "$(cat "/proc/$(cat "$1")/comm" 2>/dev/null)" = "$2" ]; }
}
log_tail() { # file: its last lines, indented, for a reason
  [ -s "$1" ] && { echo "--- last lines of $1:"; tail -n 15 "$1" | sed 's/^/    /'; } >&2
}

export SLURM_CONF=$dir/slurm.conf
host=$(hostname -s)

node_state() { # the node's state as sinfo prints it ("idle", "down*", ...), or nothing
  timeout 10 sinfo -h -n "$host" -o %T 2>/dev/null | head -n 1
}

stop_pid() { # pidfile name: TERM, wait up to 20 s, then KILL
  local f=$1 pid i
  pid_alive "$f" "$2" || { rm -f "$f"; return 0; }
  pid=$(cat "$f")
  kill -TERM "$pid" 2>/dev/null
  for ((i = 0; i < 200; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    echo "one-node-slurm: $2 (pid $pid) did not stop in 20 s; killing it" >&2
    kill -KILL "$pid" 2>/dev/null
  fi
  rm -f "$f"
}

stop_all() {
  if [ -f "$SLURM_CONF" ] && pid_alive "$dir/slurmctld.pid"; then
    # Jobs first, so that slurmd ends their steps (and the ranks) before it goes.
    local jobs i
    jobs=$(timeout 10 squeue -h -o %i 2>/dev/null | tr '\n' ' ')
    if [ -n "${jobs// /}" ]; then
      # shellcheck disable=SC2086
      timeout 10 scancel $jobs 2>/dev/null
      for ((i = 0; i < 200; i++)); do
        [ -z "$(timeout 10 squeue -h -o %i 2>/dev/null)" ] && break
        sleep 0.1
      done
    fi
  fi
  stop_pid "$dir/slurmd.pid" slurmd
  stop_pid "$dir/slurmctld.pid" slurmctld
  stop_pid "$dir/munge/munged.pid" munged
}

case "$action" in
  stop)
    stop_all
    echo "one-node-slurm: stopped (${dir})"
    exit 0
    ;;
  status)
    state=$(node_state)
    echo "one-node-slurm: node $host: ${state:-no answer}"
    case "$state" in idle | mixed | allocated | completing) exit 0 ;; *) exit 1 ;; esac
    ;;
esac

# --- start ---
[ "$(id -u)" -eq 0 ] || cannot "needs root (slurmd runs the tasks as the submitting user)"
slurmctld_bin=$(find_bin slurmctld)
slurmd_bin=$(find_bin slurmd)
munged_bin=$(find_bin munged)
for b in "$slurmctld_bin:slurmctld" "$slurmd_bin:slurmd" "$munged_bin:munge"; do
  [ -x "${b%%:*}" ] || cannot "${b%%:*} not found (Debian package ${b##*:}; scripts/install-deps.sh --tests installs it)"
done
for c in srun sinfo squeue scancel:slurm-client mungekey:munge munge:munge unmunge:munge; do
  command -v "${c%%:*}" >/dev/null || cannot "${c%%:*} not found (Debian package ${c##*:}; scripts/install-deps.sh --tests installs it)"
done
[ -e /usr/lib/x86_64-linux-gnu/slurm-wlm/mpi_pmix.so ] || ls /usr/lib/*/slurm-wlm/mpi_pmix.so >/dev/null 2>&1 ||
  cannot "Slurm's PMIx plugin (mpi_pmix.so, Debian package slurm-wlm-basic-plugins) is missing"

# A previous instance in DIR (a test killed by its timeout) goes first.
stop_all
rm -rf "$dir/state" "$dir/spool" "$dir/log" "$dir/munge"
mkdir -p "$dir/state" "$dir/spool" "$dir/log" "$dir/munge" || exit 1
# munged wants its socket's directory searchable by all and not writable by others.
chmod 755 "$dir" "$dir/munge"

port_free() { # port: nothing listens on it
  ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}
if [ -n "${ONE_NODE_SLURM_PORT:-}" ]; then
  port=$ONE_NODE_SLURM_PORT
else
  port=16817
  while ! { port_free "$port" && port_free $((port + 1)); }; do
    port=$((port + 2))
    [ "$port" -lt 16917 ] || cannot "no two free ports from 16817 to 16917"
  done
fi

# The node as slurmd sees it (sockets, cores, threads, memory), reached at 127.0.0.1.
node_line=$("$slurmd_bin" -C 2>"$dir/log/slurmd-C.err" | head -n 1)
case "$node_line" in
  NodeName=*) ;;
  *) log_tail "$dir/log/slurmd-C.err"; cannot "slurmd -C cannot read this machine's hardware" ;;
esac
node_line=$(echo "$node_line" | sed -E "s/^NodeName=[^ ]+/NodeName=$host NodeAddr=127.0.0.1/")

cat >"$SLURM_CONF" <<EOF
# One-node Slurm for dtrain's tests, written by scripts/slurm/one-node-slurm.sh.
ClusterName=dtrain
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.socket
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/builtin
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=pmix
ReturnToService=2
SlurmdParameters=config_overrides
$node_line State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=60 State=UP
EOF
echo "export SLURM_CONF=$SLURM_CONF" >"$dir/env"

deadline=$(($(date +%s) + deadline_s))
wait_for() { # command...: polls the command until it succeeds or the deadline passes
  until "$@"; do
    [ "$(date +%s)" -lt "$deadline" ] || return 1
    sleep 0.2
  done
}
daemon_gone() { # name pidfile log: a daemon that should be running is not
  log_tail "$3"
  stop_all
  cannot "$1 exited at start (see $3)"
}

mungekey --create --keyfile="$dir/munge/munge.key" >/dev/null 2>&1 ||
  dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 2>/dev/null
chmod 400 "$dir/munge/munge.key"
# munged refuses a socket that some directory above it keeps from other users (it wants
# execute permission for all on each, since its clients may run as anyone). This one's clients
# all run as root (slurmctld, slurmd, srun here), so where such a directory is there (DIR
# under /root, or fresh-machine-check's debootstrap root, whose / is mode 0700) munged runs
# with --force, which turns that refusal into a warning in its log.
munged_force=()
d=$dir/munge
while :; do
  [ $(($(stat -c 0%a "$d") & 0111)) -eq $((0111)) ] || {
    munged_force=(--force)
    echo "one-node-slurm: $d is mode $(stat -c %a "$d"): munged runs with --force (only root uses it)" >&2
    break
  }
  [ "$d" != / ] || break
  d=$(dirname "$d")
done
"$munged_bin" "${munged_force[@]}" --socket="$dir/munge/munge.socket" --key-file="$dir/munge/munge.key" \
  --pid-file="$dir/munge/munged.pid" --log-file="$dir/munge/munged.log" \
  --seed-file="$dir/munge/munged.seed" >"$dir/log/munged.out" 2>&1 ||
  daemon_gone munged "$dir/munge/munged.pid" "$dir/munge/munged.log"
munge_works() { munge -n -S "$dir/munge/munge.socket" 2>/dev/null | unmunge -S "$dir/munge/munge.socket" >/dev/null 2>&1; }
wait_for munge_works || daemon_gone munged "$dir/munge/munged.pid" "$dir/munge/munged.log"

"$slurmctld_bin" -i -f "$SLURM_CONF" >"$dir/log/slurmctld.out" 2>&1 ||
  daemon_gone slurmctld "$dir/slurmctld.pid" "$dir/log/slurmctld.log"
ctld_answers() { pid_alive "$dir/slurmctld.pid" && timeout 10 scontrol ping 2>/dev/null | grep -q 'is UP'; }
wait_for ctld_answers || daemon_gone slurmctld "$dir/slurmctld.pid" "$dir/log/slurmctld.log"

"$slurmd_bin" -N "$host" -f "$SLURM_CONF" >"$dir/log/slurmd.out" 2>&1 ||
  daemon_gone slurmd "$dir/slurmd.pid" "$dir/log/slurmd.log"
node_idle() { pid_alive "$dir/slurmd.pid" && [ "$(node_state)" = idle ]; }
if ! wait_for node_idle; then
  state=$(node_state)
  log_tail "$dir/log/slurmd.log"
  log_tail "$dir/log/slurmctld.log"
  stop_all
  cannot "node $host is '${state:-not reported}', not idle, after ${deadline_s} s"
fi
echo "one-node-slurm: node $host idle ($(echo "$node_line" | grep -o 'CPUs=[0-9]*')), controller on 127.0.0.1:$port; export SLURM_CONF=$SLURM_CONF"
