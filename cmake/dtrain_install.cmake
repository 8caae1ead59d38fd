# Installs the libraries and headers and exports dtrain::dtrain for find_package(dtrain).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)
get_property(_layers GLOBAL PROPERTY DTRAIN_LAYERS)
install(TARGETS ${_layers} dtrain EXPORT dtrainTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# dtrain/core/cuda/ declares functions that only a CUDA build compiles: a CPU-only
# install leaves it out.
set(_cpu_only_exclude "")
if(NOT DTRAIN_USE_CUDA)
  set(_cpu_only_exclude REGEX "/dtrain/core/cuda$" EXCLUDE)
endif()
install(DIRECTORY include/dtrain DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} ${_cpu_only_exclude})
install(FILES ${PROJECT_BINARY_DIR}/include/dtrain/config.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/dtrain)
install(PROGRAMS scripts/dtrain-launch DESTINATION ${CMAKE_INSTALL_BINDIR})  # restarts a failed job from its checkpoint
install(PROGRAMS scripts/dtrain_elastic.py DESTINATION ${CMAKE_INSTALL_BINDIR})  # its elastic mode (--np MIN:MAX)
install(EXPORT dtrainTargets NAMESPACE dtrain:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/dtrain)
configure_package_config_file(cmake/dtrainConfig.cmake.in
  ${PROJECT_BINARY_DIR}/dtrainConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/dtrain)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/dtrainConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/dtrainConfig.cmake ${PROJECT_BINARY_DIR}/dtrainConfigVersion.cmake
  ${PROJECT_SOURCE_DIR}/cmake/FindNCCL.cmake ${PROJECT_SOURCE_DIR}/cmake/FindCUDNN.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/dtrain)
