# Checkpoint program tests, run with cmake -P:
#   -DMODE=restart: COMMAND (a ;-list ending in the trainer's flags) runs once through to
#     the end into DIR/whole, and once under dtrain-launch (LAUNCHER) into DIR/restarted
#     with DTRAIN_FAULT=FAULT killing a rank on the first attempt. The restarted job must
#     resume (its output matching EXPECT_RESUME) and end with the same model, byte for
#     byte (the final manifests' model checksums), and the same epoch lines.
#   -DMODE=reshard: COMMAND trains EPOCHS_A epochs into DIR/ckpt; RESUME_COMMAND resumes it
#     on another number of ranks for EPOCHS_B epochs, and must print EXPECT_RESUME and a
#     final accuracy within TOLERANCE points of COMMAND's for EPOCHS_B epochs run whole, and
#     both must pass MIN_ACCURACY percent (two runs at chance would agree too).
file(REMOVE_RECURSE ${DIR})

function(run name expect_success)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 600)
  string(REGEX REPLACE "[^\n]*\r" "" shown "${out}")  # progress redraws
  message("--- ${name}: exit ${rc} ---\n${shown}${err}")
  if(expect_success AND NOT rc EQUAL 0)
    message(FATAL_ERROR "${name} failed with '${rc}'")
  endif()
  set(out_${name} "${out}${err}" PARENT_SCOPE)
endfunction()

# The final checkpoint's name and the checksums of its model files (model*.safetensors).
function(model_checksum dir var)
  file(READ ${dir}/latest latest)
  string(STRIP "${latest}" latest)
  file(READ ${dir}/${latest}/manifest.json manifest)
  string(JSON count LENGTH "${manifest}" files)
  math(EXPR last "${count} - 1")
  set(sums "${latest}")
  foreach(i RANGE ${last})
    string(JSON name GET "${manifest}" files ${i} name)
    if(name MATCHES "^model")
      string(JSON sum GET "${manifest}" files ${i} xxh3)
      string(APPEND sums " ${name}:${sum}")
    endif()
  endforeach()
  if(NOT sums MATCHES "model")
    message(FATAL_ERROR "${dir}/${latest}/manifest.json lists no model file")
  endif()
  set(${var} "${sums}" PARENT_SCOPE)
endfunction()

function(epoch_lines text var)
  string(REGEX MATCHALL "epoch [0-9]+/[0-9]+: train loss [0-9.]+, train accuracy [0-9.]+%, test loss [0-9.]+, test accuracy [0-9.]+%"
         lines "${text}")
  set(${var} "${lines}" PARENT_SCOPE)
endfunction()

function(final_accuracy text var)
  if(NOT text MATCHES "final test accuracy: ([0-9]+)\\.([0-9]+)%")
    message(FATAL_ERROR "no final test accuracy printed")
  endif()
  set(${var} "${CMAKE_MATCH_1}${CMAKE_MATCH_2}" PARENT_SCOPE)  # hundredths of a point
endfunction()

if(MODE STREQUAL "restart")
  run(whole TRUE ${COMMAND} --checkpoint-dir ${DIR}/whole)
  run(restarted TRUE ${CMAKE_COMMAND} -E env DTRAIN_FAULT=${FAULT}
      ${LAUNCHER} --max-restarts 2 --restart-delay 0 -- ${COMMAND} --checkpoint-dir ${DIR}/restarted)
  if(NOT out_restarted MATCHES "restart 1 of 2")
    message(FATAL_ERROR "the launcher did not restart the job")
  endif()
  if(NOT out_restarted MATCHES "${EXPECT_RESUME}")
    message(FATAL_ERROR "the restarted job did not print '${EXPECT_RESUME}'")
  endif()
  model_checksum(${DIR}/whole whole)
  model_checksum(${DIR}/restarted restarted)
  if(NOT whole STREQUAL restarted)
    message(FATAL_ERROR "the restarted job's final model differs: ${restarted}, uninterrupted ${whole}")
  endif()
  epoch_lines("${out_whole}" lines_whole)
  epoch_lines("${out_restarted}" lines_restarted)
  if(NOT lines_whole OR NOT lines_whole STREQUAL lines_restarted)
    message(FATAL_ERROR "the epoch lines differ:\n  whole: ${lines_whole}\n  restarted: ${lines_restarted}")
  endif()
  message("same final model (${whole}) and epoch lines after a restart")
elseif(MODE STREQUAL "reshard")
  run(first TRUE ${COMMAND} --epochs ${EPOCHS_A} --checkpoint-dir ${DIR}/ckpt)
  run(resumed TRUE ${RESUME_COMMAND} --epochs ${EPOCHS_B} --checkpoint-dir ${DIR}/ckpt --resume auto)
  run(whole TRUE ${COMMAND} --epochs ${EPOCHS_B})
  if(NOT out_resumed MATCHES "${EXPECT_RESUME}")
    message(FATAL_ERROR "the resumed job did not print '${EXPECT_RESUME}'")
  endif()
  final_accuracy("${out_resumed}" resumed)
  final_accuracy("${out_whole}" whole)
  foreach(run resumed whole)
    if(${${run}} LESS "${MIN_ACCURACY}00")
      message(FATAL_ERROR "the ${run} run's final test accuracy (${${run}} hundredths of a point) is below ${MIN_ACCURACY}%")
    endif()
  endforeach()
  math(EXPR difference "${resumed} - ${whole}")
  string(REPLACE "." "" tolerance "${TOLERANCE}0")
  if(difference GREATER ${tolerance} OR difference LESS -${tolerance})
    message(FATAL_ERROR "resumed on other ranks: ${resumed}, uninterrupted ${whole} (hundredths of a point); tolerance ${TOLERANCE}")
  endif()
  message("resumed on other ranks within ${TOLERANCE} points: ${resumed} vs ${whole}")
else()
  message(FATAL_ERROR "MODE must be restart or reshard")
endif()
