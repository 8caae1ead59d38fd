# Installs the build tree into a scratch prefix, then configures, builds and runs a
# consumer project against it with find_package(dtrain).
#   -DBUILD_DIR=<dtrain build tree> -DSOURCE_DIR=<consumer source> -DWORK_DIR=<scratch>
#   optional: -DEXECUTABLE=<the consumer's program, default app> -DLAUNCH=<a ;-list run
#   before it, e.g. mpirun -np 2> -DARGS=<a ;-list of its arguments>
file(REMOVE_RECURSE "${WORK_DIR}")
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed: ${ARGN}\n${out}\n${err}")
  endif()
  message("${out}")
endfunction()
run(${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${WORK_DIR}/prefix")
run(${CMAKE_COMMAND} -S "${SOURCE_DIR}" -B "${WORK_DIR}/build" -G Ninja "-DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix")
run(${CMAKE_COMMAND} --build "${WORK_DIR}/build")
if(NOT EXECUTABLE)
  set(EXECUTABLE app)
endif()
run(${LAUNCH} "${WORK_DIR}/build/${EXECUTABLE}" ${ARGS})
