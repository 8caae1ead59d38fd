#!/usr/bin/env bash
# run_netns.sh: emulated hosts on one machine. Each host is a network namespace; two hosts
# are joined by a veth pair, more by veths to a bridge in a "switch" namespace of their
# own. Every link is shaped with tc (tbf for the bandwidth, netem for the latency when the
# kernel has it) and a benchmark runs under mpirun with --ranks-per-host ranks in each
# namespace, once per link speed. Every JSON line the benchmark prints is relayed with
# "link" (e.g. "10gbit_50us"), "hosts" and "ranks_per_host" added; other output goes to
# stderr. Everything created (namespaces, and with them their veths, bridge and qdiscs) is
# removed on every exit path, and the names carry a per-run id, so runs never collide.
# Traffic only flows between the run's own namespaces (10.200.0.0/24 exists only inside
# them); the root namespace gets no interface, address or route.
#
#   run_netns.sh [--hosts N] [--ranks-per-host R] [--links 1gbit,10gbit,25gbit]
#                [--latency 50us] [--bench-dir build/release/bench] [--out FILE]
#                [--timeout SECONDS] [--controller] [-- COMMAND [ARGS...]]
#
# --controller: COMMAND runs once per link speed in the root namespace, not under mpirun,
# with MPIRUN (this script's mpirun line up to the applications: in host 0's namespace, with
# the options below) and DTRAIN_HOST_EXEC ('ip netns exec <host {id}'s namespace>') in its
# environment: a launcher of its own places the ranks (dtrain-launch --fake-hosts, the
# elastic bench). Its output goes to stderr, its JSON lines relayed as a benchmark's.
#
# COMMAND defaults to `bench_allreduce --json --impls mpi,ring,shm`; a command without a
# slash is looked up in --bench-dir. Any program that prints JSON objects one per line
# works (bench_scaling --json ...).
#
# MPI: Open MPI 4.1, ranks started as `ip netns exec NS env DTRAIN_HOST_ID=i COMMAND` by
# one mpirun that itself runs in host 0's namespace: its PMIx server talks TCP, on
# loopback only by default, which other namespaces cannot reach, so
#   PMIX_MCA_ptl_tcp_remote_connections=1 PMIX_MCA_ptl_tcp_if_include=10.200.0.0/24
#   --mca oob_tcp_if_include 10.200.0.0/24
# put it (and mpirun's own OOB) on the namespaces' network: the ranks of other hosts reach
# it over the shaped links (a few KB at start and end). To Open MPI every rank is on one
# node, so:
#   --mca pml ob1 --mca btl tcp,self   no shared-memory (vader) or UCX transport: every
#                                      byte between ranks goes over TCP
#   --mca btl_tcp_if_include 10.200.0.0/24   only the namespaces' veths
#   --mca osc sm,pt2pt --mca coll ^sm,han    no shared-memory collectives; MPI windows
#                                      (dtrain's shared-memory all-reduce) stay in shm
#   DTRAIN_HOST_ID=i                   dtrain's host grouping (MPI sees one host)
# Consequences: ranks in one namespace talk to each other over TCP through that
# namespace's own stack (loopback path, unshaped), not shared memory as MPI would on a real
# host, which makes MPI_Allreduce and the plain ring slower inside a host than on real
# hardware with --ranks-per-host > 1; dtrain's hierarchical all-reduce uses a shared
# window inside a namespace, as on a real host. All namespaces share the machine's cores,
# so a link's shaped rate is a ceiling, not a promise: the veth and TCP copies cost CPU.
# Exits 77 with the reason when it cannot run here (not root, no CAP_NET_ADMIN, no ip,
# tc or mpirun, network namespaces refused).
set -euo pipefail

readonly SUBNET_PREFIX=10.200.0
program=${0##*/}

usage() {
  sed -n '13,16p' "$0" | sed 's/^#  //'
  exit "${1:-0}"
}
die() {
  echo "$program: $*" >&2
  exit 2
}
skip() {
  echo "$program: skipped: $*" >&2
  exit 77
}

hosts=2
ranks_per_host=1
links=1gbit,10gbit,25gbit
latency=50us
bench_dir=build/release/bench
out=""
timeout=0
command=()
controller=0
while (($#)); do
  case $1 in
    --hosts) hosts=${2:?}; shift 2 ;;
    --ranks-per-host) ranks_per_host=${2:?}; shift 2 ;;
    --links) links=${2:?}; shift 2 ;;
    --latency) latency=${2:?}; shift 2 ;;
    --bench-dir) bench_dir=${2:?}; shift 2 ;;
    --out) out=${2:?}; shift 2 ;;
    --timeout) timeout=${2:?}; shift 2 ;;
    --controller) controller=1; shift ;;
    -h | --help) usage 0 ;;
    --) shift; command=("$@"); break ;;
    *) echo "$program: unknown option '$1'" >&2; usage 2 >&2 ;;
  esac
done
((${#command[@]})) || command=(bench_allreduce --json --impls mpi,ring,shm)

[[ $hosts =~ ^[0-9]+$ ]] && ((hosts >= 2 && hosts <= 250)) || die "--hosts $hosts: expected 2..250"
[[ $ranks_per_host =~ ^[0-9]+$ ]] && ((ranks_per_host >= 1)) || die "--ranks-per-host $ranks_per_host: expected >= 1"
[[ $latency =~ ^[0-9]+(us|ms)$ ]] || die "--latency $latency: expected a delay such as 50us or 1ms (0us: none)"
[[ $timeout =~ ^[0-9]+$ ]] || die "--timeout $timeout: expected seconds"
IFS=, read -r -a link_rates <<<"$links"
((${#link_rates[@]})) || die "--links: expected rates such as 1gbit,10gbit"
for rate in "${link_rates[@]}"; do
  [[ $rate =~ ^[0-9]+(kbit|mbit|gbit)$ ]] || die "--links: '$rate' is not a rate such as 100mbit or 25gbit"
done
if [[ ${command[0]} != */* ]] && ((!controller)); then
  [[ -x $bench_dir/${command[0]} ]] || die "${command[0]} not found in --bench-dir $bench_dir (build it first)"
  command[0]=$(cd "$bench_dir" && pwd)/${command[0]}
fi

((EUID == 0)) || skip "needs root to create network namespaces"
cap_eff=$(awk '/^CapEff:/ {print $2}' /proc/self/status)
(((0x$cap_eff >> 12) & 1)) || skip "no CAP_NET_ADMIN (containers need --cap-add NET_ADMIN)"
for tool in ip tc mpirun; do
  command -v "$tool" >/dev/null || skip "'$tool' is not installed"
done

# The run's id: in every namespace name, checked free before use.
while :; do
  run_id=dtn$(printf '%04x%04x' $((RANDOM)) $(($$ & 0xffff)))
  [[ $'\n'$(ip netns list) != *$'\n'"$run_id-"* ]] && break
done
created=()
mpirun_pid=""
work_dir=$(mktemp -d "${TMPDIR:-/tmp}/$run_id.XXXXXX")
cleanup() {
  local status=$?
  trap - EXIT INT TERM HUP
  if [[ -n $mpirun_pid ]]; then
    kill "$mpirun_pid" 2>/dev/null && wait "$mpirun_pid" 2>/dev/null
  fi
  rm -rf "$work_dir"
  local ns
  for ns in "${created[@]}"; do ip netns del "$ns" 2>/dev/null || echo "$program: could not remove namespace $ns" >&2; done
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

add_namespace() {
  if ! ip netns add "$1" 2>/dev/null; then
    ((${#created[@]})) && die "cannot create network namespace $1"
    skip "network namespaces are refused here ('ip netns add' failed)"
  fi
  created+=("$1")
  ip -n "$1" link set lo up
}

# Host i: namespace $run_id-h$i, interface eth0, address $SUBNET_PREFIX.(i+1).
# shaped holds "namespace device delay" for each egress to shape: every host's eth0 with
# the latency, and with a bridge each switch port too (rate only: a packet crosses two
# shaped egresses and must see the latency once).
shaped=()
for ((i = 0; i < hosts; i++)); do add_namespace "$run_id-h$i"; done
if ((hosts == 2)); then
  ip -n "$run_id-h0" link add eth0 type veth peer name eth0 netns "$run_id-h1"
else
  switch=$run_id-sw
  add_namespace "$switch"
  ip -n "$switch" link add br0 type bridge
  ip -n "$switch" link set br0 up
  for ((i = 0; i < hosts; i++)); do
    ip -n "$run_id-h$i" link add eth0 type veth peer name "port$i" netns "$switch"
    ip -n "$switch" link set "port$i" master br0 up
    shaped+=("$switch port$i 0")
  done
fi
for ((i = 0; i < hosts; i++)); do
  ip -n "$run_id-h$i" addr add "$SUBNET_PREFIX.$((i + 1))/24" dev eth0
  ip -n "$run_id-h$i" link set eth0 up
  shaped+=("$run_id-h$i eth0 1")
done

# tbf's bucket holds 1 ms at the rate (at least 128 KB: a whole GSO packet must fit).
bucket_bytes() {
  local n=${1%%[kmg]bit} unit=${1##*[0-9]}
  local scale
  case $unit in kbit) scale=1000 ;; mbit) scale=1000000 ;; gbit) scale=1000000000 ;; esac
  local bytes=$((n * scale / 8 / 1000))
  echo $((bytes > 131072 ? bytes : 131072))
}

delay_applied=1
[[ $latency =~ ^0+(us|ms)$ ]] && delay_applied=0
shape() {
  local rate=$1 entry ns dev with_delay burst
  burst=$(bucket_bytes "$rate")
  for entry in "${shaped[@]}"; do
    read -r ns dev with_delay <<<"$entry"
    tc -n "$ns" qdisc del dev "$dev" root 2>/dev/null || true
    local tbf_parent=(root)
    if ((with_delay && delay_applied)); then
      if tc -n "$ns" qdisc add dev "$dev" root handle 1: netem delay "$latency" limit 100000 2>/dev/null; then
        tbf_parent=(parent 1:1)
      else
        echo "$program: tc has no netem qdisc here (kernel module sch_netem missing): links get no added latency" >&2
        delay_applied=0
      fi
    fi
    tc -n "$ns" qdisc add dev "$dev" "${tbf_parent[@]}" handle 10: tbf rate "$rate" burst "$burst" latency 50ms
  done
}

mpi_options=(--allow-run-as-root --oversubscribe --bind-to none
  --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include "$SUBNET_PREFIX.0/24"
  --mca oob_tcp_if_include "$SUBNET_PREFIX.0/24" --mca osc sm,pt2pt --mca coll ^sm,han)
launcher=(ip netns exec "$run_id-h0" env PMIX_MCA_ptl_tcp_remote_connections=1
  "PMIX_MCA_ptl_tcp_if_include=$SUBNET_PREFIX.0/24" mpirun)
((timeout > 0)) && mpi_options+=(--timeout "$timeout")
apps=()
for ((i = 0; i < hosts; i++)); do
  ((i > 0)) && apps+=(:)
  apps+=(-np "$ranks_per_host" ip netns exec "$run_id-h$i" env "DTRAIN_HOST_ID=$i" "${command[@]}")
done

if [[ -n $out ]]; then
  exec 3>"$out"
else
  exec 3>&1
fi
relay() {
  local line
  while IFS= read -r line; do
    if [[ $line == \{*\} ]]; then
      [[ $line == "{}" ]] && echo "{$1}" >&3 || echo "{$1,${line#\{}" >&3
    else
      echo "$line" >&2
    fi
  done
}
fifo=$work_dir/output
mkfifo "$fifo"
failed=0
for rate in "${link_rates[@]}"; do
  shape "$rate"
  label=$rate
  ((delay_applied)) && label+=_$latency
  fields="\"link\":\"$label\",\"hosts\":$hosts,\"ranks_per_host\":$ranks_per_host"
  echo "$program: $label, $hosts host(s) x $ranks_per_host rank(s): ${launcher[*]} ${mpi_options[*]} ${apps[*]}" >&2
  # JSON objects get the fields (first, so that "{}" stays valid); the rest goes to stderr.
  relay "$fields" <"$fifo" &
  relay_pid=$!
  if ((controller)); then
    MPIRUN="${launcher[*]} ${mpi_options[*]}" DTRAIN_HOST_EXEC="ip netns exec $run_id-h{id}" "${command[@]}" >"$fifo" &
  else
    "${launcher[@]}" "${mpi_options[@]}" "${apps[@]}" >"$fifo" &
  fi
  mpirun_pid=$!
  status=0
  wait "$mpirun_pid" || status=$?
  mpirun_pid=""
  wait "$relay_pid"
  if ((status != 0)); then
    echo "$program: $label: mpirun failed with exit code $status" >&2
    failed=1
  fi
done
exit $((failed))
