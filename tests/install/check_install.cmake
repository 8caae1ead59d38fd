# Installs the build tree into a scratch prefix, then configures, builds and runs a
# consumer project against it with find_package(dtrain).
#   -DBUILD_DIR=<dtrain build tree> -DSOURCE_DIR=<consumer source> -DWORK_DIR=<scratch>
#   optional: -DEXECUTABLE=<the consumer's program, default app> -DLAUNCH=<a ;-list run
#   before it, e.g. mpirun -np 2> -DARGS=<a ;-list of its arguments> -DEXPECT=<a regular
#   expression its output must match>
# Fails (exit code 1) when any step fails or the output does not match: ctest reads the exit
# code, not the output, so a failing run that printed the expected line cannot pass.
file(REMOVE_RECURSE "${WORK_DIR}")
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "check_install: failed (exit ${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  message("${out}")
  set(last_output "${out}" PARENT_SCOPE)
endfunction()
run(${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${WORK_DIR}/prefix")
run(${CMAKE_COMMAND} -S "${SOURCE_DIR}" -B "${WORK_DIR}/build" -G Ninja "-DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix")
run(${CMAKE_COMMAND} --build "${WORK_DIR}/build")
if(NOT EXECUTABLE)
  set(EXECUTABLE app)
endif()
run(${LAUNCH} "${WORK_DIR}/build/${EXECUTABLE}" ${ARGS})
if(DEFINED EXPECT AND NOT last_output MATCHES "${EXPECT}")
  message(FATAL_ERROR "check_install: the output of ${EXECUTABLE} does not match '${EXPECT}'")
endif()
