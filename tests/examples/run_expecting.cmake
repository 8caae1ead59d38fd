# Runs COMMAND (a ;-list) and checks its outcome, for end-to-end tests of the programs:
#   -DCOMMAND=...  -DEXPECT_EXIT=zero|nonzero  -DEXPECT_OUTPUT=<regex over stdout+stderr>
#   -DSETUP_BAD_DATA=<dir>: first writes an MNIST directory whose files are garbage.
if(SETUP_BAD_DATA)
  file(REMOVE_RECURSE "${SETUP_BAD_DATA}")
  file(MAKE_DIRECTORY "${SETUP_BAD_DATA}")
  foreach(name train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte)
    file(WRITE "${SETUP_BAD_DATA}/${name}" "this is not an IDX file")
  endforeach()
endif()
# The failure tests (dist.dead_rank and the like) must fail without the mechanism they test:
# DTRAIN_TEST_WATCHDOG_OFF=1 in ctest's environment turns the watchdog off (DTRAIN_TIMEOUT far
# beyond any test) and stops the command after 30 s (SIGTERM, which mpirun passes on to its
# ranks), so that a hang shows as a failure instead of outliving ctest's timeout.
if(DEFINED ENV{DTRAIN_TEST_WATCHDOG_OFF})
  set(ENV{DTRAIN_TIMEOUT} 10000000)
  set(COMMAND timeout -s TERM 30 ${COMMAND})
endif()
execute_process(COMMAND ${COMMAND} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 600)
message("exit: ${rc}\n--- stdout ---\n${out}\n--- stderr ---\n${err}")
if(EXPECT_EXIT STREQUAL "zero" AND NOT rc EQUAL 0)
  message(FATAL_ERROR "expected exit 0, got ${rc}")
endif()
if(EXPECT_EXIT STREQUAL "nonzero" AND (rc EQUAL 0 OR NOT rc MATCHES "^[0-9]+$"))
  message(FATAL_ERROR "expected a non-zero exit code (not a crash), got '${rc}'")
endif()
if(NOT "${out}${err}" MATCHES "${EXPECT_OUTPUT}")
  message(FATAL_ERROR "output does not match '${EXPECT_OUTPUT}'")
endif()
