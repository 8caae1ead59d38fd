#!/bin/sh
# The host discovery of ctest elastic.np4_two_hosts_shrink_and_grow (Horovod's contract:
# host:slots lines). Host a is always there. Host b is there until attempt 0 has ended (its
# ranks were killed), away while the job trains on a alone, and back once attempt 1 has
# applied 10 updates: a condition on the job's progress, not on time.
#   elastic_hosts.sh LAUNCH_DIR SAMPLE_LOG_DIR
launch=$1 samples=$2
echo a:2
if ! grep -qs '"ended"' "$launch/attempt-0.json"; then
  echo b:2
  exit 0
fi
updates=$(grep -vs '^#' "$samples/attempt-1-rank-0.txt" | wc -l)
if [ "$updates" -ge 10 ]; then echo b:2; fi
exit 0
