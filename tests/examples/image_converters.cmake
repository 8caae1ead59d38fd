# The image converters end to end: dtrain-mnist-to-images writes a small JPEG class-folder
# tree from MNIST-format files, dtrain-make-shards packs it into tar shards, and the shards
# hold what the tree holds. Also the converter's refusals (an empty class folder, a folder
# that already holds shards).
#   -DMNIST_TO_IMAGES=<program> -DMAKE_SHARDS=<program> -DIDX_DIR=<dir> -DWORK_DIR=<dir>

# Runs the command (the remaining arguments) and fails unless its exit code is zero or
# non-zero as asked and its output matches the regex.
function(expect expect_exit expect_output)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 300)
  string(REPLACE ";" " " shown "${ARGN}")
  message("$ ${shown}\nexit: ${rc}\n${out}${err}")
  if(expect_exit STREQUAL "zero" AND NOT rc EQUAL 0)
    message(FATAL_ERROR "expected exit 0, got ${rc}")
  endif()
  if(expect_exit STREQUAL "nonzero" AND (rc EQUAL 0 OR NOT rc MATCHES "^[0-9]+$"))
    message(FATAL_ERROR "expected a non-zero exit code (not a crash), got '${rc}'")
  endif()
  if(NOT "${out}${err}" MATCHES "${expect_output}")
    message(FATAL_ERROR "output does not match '${expect_output}'")
  endif()
endfunction()

function(expect_file path)
  if(NOT EXISTS "${path}")
    message(FATAL_ERROR "expected '${path}' to exist")
  endif()
endfunction()

file(REMOVE_RECURSE "${WORK_DIR}")
set(images "${WORK_DIR}/images")
set(shards "${WORK_DIR}/shards")

expect(zero "wrote 20 training and 10 validation images"
  ${MNIST_TO_IMAGES} ${IDX_DIR} ${images} --limit-train 20 --limit-test 10)
file(GLOB_RECURSE jpegs "${images}/*.jpg")
list(LENGTH jpegs count)
if(NOT count EQUAL 30)
  message(FATAL_ERROR "expected 30 JPEG files under '${images}', found ${count}")
endif()
foreach(label RANGE 9)
  expect_file("${images}/train/${label}")  # every class folder, even those the subset leaves empty
endforeach()
expect(nonzero "already exists and is not empty"
  ${MNIST_TO_IMAGES} ${IDX_DIR} ${images} --limit-train 5 --limit-test 5)

# 16KB shards: the 20 training samples (about 2.5 KB of tar each) need several.
expect(zero "train: 20 samples of 10 classes in ([2-9]|1[0-9]) shard\\(s\\).*val: 10 samples of 10 classes in [0-9]+ shard"
  ${MAKE_SHARDS} ${images} ${shards} --shard-size 16KB --allow-empty-classes)
foreach(split train val)
  expect_file("${shards}/${split}/shard-000000.tar")
  expect_file("${shards}/${split}/shards.txt")
  file(READ "${shards}/${split}/classes.txt" classes)
  if(NOT classes STREQUAL "0\n1\n2\n3\n4\n5\n6\n7\n8\n9\n")
    message(FATAL_ERROR "${split}/classes.txt: expected the labels 0..9, one a line, got '${classes}'")
  endif()
endforeach()
file(STRINGS "${shards}/train/shards.txt" lines)
set(total 0)
foreach(line IN LISTS lines)
  string(REGEX REPLACE "^shard-[0-9]+\\.tar\t([0-9]+)$" "\\1" n "${line}")
  math(EXPR total "${total} + ${n}")
endforeach()
if(NOT total EQUAL 20)
  message(FATAL_ERROR "train/shards.txt counts ${total} samples, expected 20:\n${lines}")
endif()
find_program(TAR tar)
if(TAR)
  expect(zero "^000000000\\.jpg\n000000000\\.cls\n000000001\\.jpg\n" ${TAR} -tf "${shards}/val/shard-000000.tar")
endif()

expect(nonzero "dtrain-make-shards: error: .*already holds tar shards"
  ${MAKE_SHARDS} ${images} ${shards} --allow-empty-classes)
file(MAKE_DIRECTORY "${WORK_DIR}/sparse/train/b")
file(WRITE "${WORK_DIR}/sparse/train/a/1.jpg" "not decoded by the converter")
expect(nonzero "dtrain-make-shards: error: '.*sparse/train': class folder\\(s\\) 'b' hold no files"
  ${MAKE_SHARDS} "${WORK_DIR}/sparse" "${WORK_DIR}/sparse-shards")
if(EXISTS "${WORK_DIR}/sparse-shards/train")
  message(FATAL_ERROR "a refused tree must leave no output")
endif()
file(REMOVE_RECURSE "${WORK_DIR}")
