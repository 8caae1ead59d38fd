# Installs the libraries and headers and exports dtrain::dtrain for find_package(dtrain).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)
get_property(_layers GLOBAL PROPERTY DTRAIN_LAYERS)
install(TARGETS ${_layers} dtrain EXPORT dtrainTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY include/dtrain DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${PROJECT_BINARY_DIR}/include/dtrain/config.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/dtrain)
install(EXPORT dtrainTargets NAMESPACE dtrain:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/dtrain)
configure_package_config_file(cmake/dtrainConfig.cmake.in
  ${PROJECT_BINARY_DIR}/dtrainConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/dtrain)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/dtrainConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/dtrainConfig.cmake ${PROJECT_BINARY_DIR}/dtrainConfigVersion.cmake
  ${PROJECT_SOURCE_DIR}/cmake/FindNCCL.cmake ${PROJECT_SOURCE_DIR}/cmake/FindCUDNN.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/dtrain)
