# FindCUDNN: NVIDIA's deep-learning primitives, for the tensor layer's CUDA convolutions.
# Looks under CUDNN_ROOT (a prefix with include/ and lib/ or lib64/, such as the
# nvidia/cudnn folder of the nvidia-cudnn Python package, which ships only libcudnn.so.9),
# then beside the CUDA toolkit, then the system. Only libcudnn itself is linked: it loads
# its sub-libraries (libcudnn_cnn, ...) from its own folder when first used. Defines
# CUDNN_FOUND, CUDNN_VERSION and the imported target CUDNN::cudnn.
find_path(CUDNN_INCLUDE_DIR cudnn_version.h
  HINTS ${CUDNN_ROOT} $ENV{CUDNN_ROOT} ${CUDAToolkit_INCLUDE_DIRS}
  PATH_SUFFIXES include)
find_library(CUDNN_LIBRARY NAMES cudnn libcudnn.so.9 NAMES_PER_DIR
  HINTS ${CUDNN_ROOT} $ENV{CUDNN_ROOT} ${CUDAToolkit_LIBRARY_DIR}
  PATH_SUFFIXES lib lib64)
if(CUDNN_INCLUDE_DIR AND EXISTS "${CUDNN_INCLUDE_DIR}/cudnn_version.h")
  file(STRINGS "${CUDNN_INCLUDE_DIR}/cudnn_version.h" _cudnn_version_lines
       REGEX "^#define CUDNN_(MAJOR|MINOR|PATCHLEVEL) ")
  foreach(_part MAJOR MINOR PATCHLEVEL)
    string(REGEX REPLACE ".*#define CUDNN_${_part} ([0-9]+).*" "\\1" _cudnn_${_part} "${_cudnn_version_lines}")
  endforeach()
  set(CUDNN_VERSION "${_cudnn_MAJOR}.${_cudnn_MINOR}.${_cudnn_PATCHLEVEL}")
endif()
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(CUDNN
  REQUIRED_VARS CUDNN_LIBRARY CUDNN_INCLUDE_DIR
  VERSION_VAR CUDNN_VERSION
  REASON_FAILURE_MESSAGE "CUDA builds need cuDNN 9 for convolutions: set CUDNN_ROOT to its prefix (include/cudnn.h, lib/libcudnn.so*), e.g. python's site-packages/nvidia/cudnn")
if(CUDNN_FOUND AND NOT TARGET CUDNN::cudnn)
  add_library(CUDNN::cudnn UNKNOWN IMPORTED)
  set_target_properties(CUDNN::cudnn PROPERTIES
    IMPORTED_LOCATION "${CUDNN_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${CUDNN_INCLUDE_DIR}")
endif()
mark_as_advanced(CUDNN_INCLUDE_DIR CUDNN_LIBRARY)
