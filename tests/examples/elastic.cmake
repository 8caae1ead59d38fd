# Elastic training end to end (scripts/dtrain-launch --np MIN:MAX; docs/ELASTIC.md), with
# 4 ranks on 2 fake hosts (DTRAIN_HOST_ID), run with cmake -P:
#   -DMODE=shrink_grow: host b's ranks (DTRAIN_HOST_ID 1) are killed at global step KILL_STEP; the launcher
#     relaunches on host a's 2 ranks from the newest checkpoint (the global batch kept, the
#     epoch continued), then host b comes back (HOSTS_SCRIPT, the discovery) and the job
#     stops at its next checkpoint and grows back to 4 ranks. It must finish (exit 0), every
#     sample of every epoch in exactly one applied update of the final lineage
#     (tools/check_sample_log.py over --sample-log), above MIN_ACCURACY percent.
#   -DMODE=below_min: the same loss with --np 4:4: the launcher ends the job with a message
#     naming the hosts left and the minimum (no hang, non-zero exit).
# LAUNCHER, PROGRAM (a ;-list: the trainer and its flags), DIR, CHECKER, PYTHON.
file(REMOVE_RECURSE ${DIR})

function(run name)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 600)
  string(REGEX REPLACE "[^\n]*\r" "" shown "${out}")  # progress redraws
  message("--- ${name}: exit ${rc} ---\n${shown}${err}")
  set(rc_${name} "${rc}" PARENT_SCOPE)
  set(out_${name} "${out}${err}" PARENT_SCOPE)
endfunction()

function(expect name pattern)
  if(NOT out_${name} MATCHES "${pattern}")
    message(FATAL_ERROR "${name}: no line matching '${pattern}'")
  endif()
endfunction()

if(MODE STREQUAL "shrink_grow")
  run(elastic ${CMAKE_COMMAND} -E env DTRAIN_FAULT=kill-host-at-step:1:${KILL_STEP}
      ${LAUNCHER} --np 2:4 --host-discovery "sh ${HOSTS_SCRIPT} ${DIR}/ckpt/launch ${DIR}/samples" --fake-hosts
      --cooldown 0 --restart-delay 0 --discovery-interval 0.2 --max-restarts 1 --
      ${PROGRAM} --checkpoint-dir ${DIR}/ckpt --sample-log ${DIR}/samples)
  if(NOT rc_elastic EQUAL 0)
    message(FATAL_ERROR "the elastic job failed with '${rc_elastic}'")
  endif()
  expect(elastic "attempt 0: 4 rank\\(s\\) on a:2, b:2")
  expect(elastic "host b failed \\(rank [23]")
  expect(elastic "attempt 1: 2 rank\\(s\\) on a:2\n")
  expect(elastic "the global batch of 96 is kept on 2 data-parallel shard\\(s\\) instead of the checkpoint's 4: 48 samples per shard and update \\(2 accumulation step\\(s\\) of 24\\)")
  expect(elastic "the job stops at its next checkpoint and is relaunched on them")
  expect(elastic "attempt 2: 4 rank\\(s\\) on a:2, b:2")
  expect(elastic "the global batch of 96 is kept on 4 data-parallel shard\\(s\\) instead of the checkpoint's 2: 24 samples per shard and update \\(1 accumulation step\\(s\\) of 24\\)")
  expect(elastic "the job finished after 2 relaunch")
  if(NOT out_elastic MATCHES "final test accuracy: ([0-9]+)\\.[0-9]+%" OR CMAKE_MATCH_1 LESS MIN_ACCURACY)
    message(FATAL_ERROR "the final test accuracy is missing or below ${MIN_ACCURACY}%")
  endif()
  run(audit ${PYTHON} ${CHECKER} ${DIR}/samples --epochs ${EPOCHS})
  if(NOT rc_audit EQUAL 0)
    message(FATAL_ERROR "the sample log's audit failed")
  endif()
  expect(audit "attempt 0: 4 rank\\(s\\)[^\n]*attempt 1: 2 rank\\(s\\)[^\n]*attempt 2: 4 rank\\(s\\)")
  message("the job shrank to host a, grew back, and took every sample once per epoch")
elseif(MODE STREQUAL "below_min")
  run(elastic ${CMAKE_COMMAND} -E env DTRAIN_FAULT=kill-host-at-step:1:${KILL_STEP}
      ${LAUNCHER} --np 4 --hosts a:2,b:2 --fake-hosts --cooldown 600 --wait-for-hosts 0 --restart-delay 0 --
      ${PROGRAM} --checkpoint-dir ${DIR}/ckpt)
  if(rc_elastic EQUAL 0)
    message(FATAL_ERROR "the launcher went on below its minimum")
  endif()
  expect(elastic "host b failed")
  expect(elastic "2 slot\\(s\\) on the hosts left \\(a:2\\); left out: b for [0-9]+ s more \\(1 failure\\(s\\)\\) is below the minimum of 4 rank\\(s\\) \\(--np 4\\)")
  message("the launcher ended the job below its minimum, naming the hosts")
else()
  message(FATAL_ERROR "MODE must be shrink_grow or below_min")
endif()
