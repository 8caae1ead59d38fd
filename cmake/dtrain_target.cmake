# Shared compile settings for every dtrain target.
function(dtrain_set_target_options target)
  # -ffp-contract=off: the compiler never fuses a multiply and an add of dtrain's own loops
  # into one FMA, so the per-ISA clones of hot loops (src/tensor/cpu/isa_clones.h) compute
  # the baseline's bits. (It does not reach Eigen's explicit FMA and ISA-wide sums, which
  # a -march=native build still changes.)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter -ffp-contract=off>)
  if(DTRAIN_NATIVE)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-march=native>)
  endif()
  if(DTRAIN_SANITIZE)
    target_compile_options(${target} PRIVATE
      $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined>)
    target_link_options(${target} PRIVATE -fsanitize=address,undefined)
  endif()
endfunction()

# dtrain_add_layer(NAME SOURCES... DEPS ...): one library per architectural layer.
# The layer's sources are every .cpp (and .cu when CUDA is on) under src/<name>/,
# so adding a file never needs a CMake edit.
function(dtrain_add_layer name)
  cmake_parse_arguments(ARG "" "" "DEPS;PRIVATE_DEPS" ${ARGN})
  file(GLOB_RECURSE _srcs CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/${name}/*.cpp)
  if(DTRAIN_USE_CUDA)
    file(GLOB_RECURSE _cu CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/${name}/*.cu)
    list(APPEND _srcs ${_cu})
  endif()
  # Files under a cuda/ (mpi/) folder need the CUDA toolkit (MPI); files under nocuda/
  # (nompi/) answer the same declarations for a build without it. Exactly one of each
  # pair is compiled.
  foreach(_feature cuda mpi)
    string(TOUPPER ${_feature} _upper)
    if(DTRAIN_USE_${_upper})
      list(FILTER _srcs EXCLUDE REGEX "/no${_feature}/")
    else()
      list(FILTER _srcs EXCLUDE REGEX "/${_feature}/")
    endif()
  endforeach()
  if(NOT _srcs)
    message(STATUS "dtrain: layer '${name}' has no sources; skipped")
    return()
  endif()
  add_library(dtrain_${name} ${_srcs})
  add_library(dtrain::${name} ALIAS dtrain_${name})
  set_target_properties(dtrain_${name} PROPERTIES EXPORT_NAME ${name})
  # Private headers are included as "<name>/file.h". The private include directory holds
  # only a link <name> -> src/<name>, so a layer sees its own private headers and no other
  # layer's ("dist/..." does not resolve in tensor); what it needs of a lower layer is
  # that layer's public headers. tools/check_layering.py checks the same rule in CI.
  set(_private_include ${CMAKE_CURRENT_BINARY_DIR}/private_include/${name})
  file(MAKE_DIRECTORY ${_private_include})
  file(CREATE_LINK ${CMAKE_CURRENT_SOURCE_DIR}/${name} ${_private_include}/${name} SYMBOLIC)
  target_include_directories(dtrain_${name} PUBLIC
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
    $<BUILD_INTERFACE:${PROJECT_BINARY_DIR}/include>
    $<INSTALL_INTERFACE:include>
    PRIVATE ${_private_include})
  target_link_libraries(dtrain_${name} PUBLIC ${ARG_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
  target_compile_features(dtrain_${name} PUBLIC cxx_std_20)
  dtrain_set_target_options(dtrain_${name})
  set_property(GLOBAL APPEND PROPERTY DTRAIN_LAYERS dtrain_${name})
endfunction()
