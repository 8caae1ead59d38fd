# Runs COMMAND_A and COMMAND_B (;-lists) and checks that both succeed and print the same
# epoch summaries up to the samples/s and seconds (train loss and accuracy to 4 and 2
# decimals, test loss and accuracy), for flags that must not change the numbers beyond
# float rounding (e.g. --accumulate with the same global batch):
#   -DCOMMAND_A=...  -DCOMMAND_B=...
foreach(which A B)
  execute_process(COMMAND ${COMMAND_${which}} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 600)
  message("--- ${which}: exit ${rc} ---\n${out}${err}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "command ${which} failed with '${rc}'")
  endif()
  string(REGEX MATCHALL "epoch [0-9]+/[0-9]+: train loss [0-9.]+, train accuracy [0-9.]+%, test loss [0-9.]+, test accuracy [0-9.]+%"
         summaries_${which} "${out}")
  if(NOT summaries_${which})
    message(FATAL_ERROR "command ${which} printed no epoch summary")
  endif()
endforeach()
if(NOT summaries_A STREQUAL summaries_B)
  message(FATAL_ERROR "the runs differ:\n  A: ${summaries_A}\n  B: ${summaries_B}")
endif()
message("same epoch summaries: ${summaries_A}")
