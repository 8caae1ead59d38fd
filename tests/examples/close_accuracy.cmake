# Runs COMMAND_A and COMMAND_B (;-lists), checks that both succeed and that their final
# test accuracies ("final test accuracy: X%") differ by at most TOLERANCE points:
#   -DCOMMAND_A=...  -DCOMMAND_B=...  -DTOLERANCE=1.5
foreach(which A B)
  execute_process(COMMAND ${COMMAND_${which}} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 600)
  string(REGEX REPLACE "[^\n]*\r" "" shown "${out}")  # progress redraws
  message("--- ${which}: exit ${rc} ---\n${shown}${err}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "command ${which} failed with '${rc}'")
  endif()
  if(NOT out MATCHES "final test accuracy: ([0-9.]+)%")
    message(FATAL_ERROR "command ${which} printed no final test accuracy")
  endif()
  set(accuracy_${which} ${CMAKE_MATCH_1})
endforeach()
# Accuracies print with two decimals ("85.60"), the tolerance with one ("1.5" -> 150).
string(REPLACE "." "" a "${accuracy_A}")
string(REPLACE "." "" b "${accuracy_B}")
string(REPLACE "." "" tolerance "${TOLERANCE}0")
math(EXPR difference "${a} - ${b}")
if(difference LESS 0)
  math(EXPR difference "-${difference}")
endif()
if(difference GREATER tolerance)
  message(FATAL_ERROR "final test accuracies ${accuracy_A}% and ${accuracy_B}% differ by more than ${TOLERANCE} points")
endif()
message("final test accuracies ${accuracy_A}% and ${accuracy_B}%: within ${TOLERANCE} points")
