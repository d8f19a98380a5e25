# The installed package: CMake config (find_package(sparkrt) gives
# sparkrt::runtime and sparkrt::plugin_sdk) and a pkg-config file.
#
# Headers, libsparkrt, plugins, kernels and the CLI install from their own
# folders. Nothing here records the install prefix: the runtime finds its
# plugins and kernels relative to libsparkrt.so, the config file relative to
# itself and sparkrt.pc through ${pcfiledir}, so an installed tree can be moved.
include(CMakePackageConfigHelpers)

set_target_properties(sparkrt PROPERTIES EXPORT_NAME runtime)
set_target_properties(sparkrt_plugin_sdk PROPERTIES EXPORT_NAME plugin_sdk)

set(SPARKRT_CMAKE_SUBDIR ${CMAKE_INSTALL_LIBDIR}/cmake/sparkrt)
install(EXPORT sparkrtTargets NAMESPACE sparkrt:: DESTINATION ${SPARKRT_CMAKE_SUBDIR})

configure_package_config_file(
  ${PROJECT_SOURCE_DIR}/cmake/sparkrtConfig.cmake.in
  ${PROJECT_BINARY_DIR}/package/sparkrtConfig.cmake
  INSTALL_DESTINATION ${SPARKRT_CMAKE_SUBDIR}
  PATH_VARS SPARKRT_PLUGIN_SUBDIR SPARKRT_KERNEL_SUBDIR)
# 0.x: a minor release may break the API, so only the same minor matches.
write_basic_package_version_file(
  ${PROJECT_BINARY_DIR}/package/sparkrtConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES
  ${PROJECT_BINARY_DIR}/package/sparkrtConfig.cmake
  ${PROJECT_BINARY_DIR}/package/sparkrtConfigVersion.cmake
  ${PROJECT_SOURCE_DIR}/cmake/sparkrtPluginHelpers.cmake
  DESTINATION ${SPARKRT_CMAKE_SUBDIR})

# sparkrt.pc lives in <libdir>/pkgconfig; the prefix is found from there. Its
# Libs carry an rpath to that libdir, so a program linked with
# `pkg-config --libs sparkrt` starts without LD_LIBRARY_PATH (the rpath is
# where the package was when the program was linked).
set(pc_dir ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
file(RELATIVE_PATH SPARKRT_PC_TO_PREFIX /root/${pc_dir} /root)
string(REGEX REPLACE "/$" "" SPARKRT_PC_TO_PREFIX "${SPARKRT_PC_TO_PREFIX}")
configure_file(${PROJECT_SOURCE_DIR}/cmake/sparkrt.pc.in ${PROJECT_BINARY_DIR}/package/sparkrt.pc @ONLY)
# sparkrt_c.pc: the C API alone, for C programs and other languages' builds.
configure_file(${PROJECT_SOURCE_DIR}/cmake/sparkrt_c.pc.in ${PROJECT_BINARY_DIR}/package/sparkrt_c.pc
               @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/package/sparkrt.pc ${PROJECT_BINARY_DIR}/package/sparkrt_c.pc
        DESTINATION ${pc_dir})
