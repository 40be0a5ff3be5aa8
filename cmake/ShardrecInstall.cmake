# `cmake --install`: the host, the in-tree plugins (via their targets), and
# the plugin SDK: C headers, the C++ helper headers, shardrecConfig.cmake
# with shardrec_add_plugin(). The package version is the ABI version, read
# from abi/base.h so the two cannot drift; find_package(shardrec 1) accepts
# any SDK that builds v1 plugins.
file(STRINGS "${CMAKE_CURRENT_SOURCE_DIR}/plugin_api/include/shardrec/abi/base.h" _abi_lines
     REGEX "^#define SR_ABI_(MAJOR|MINOR) [0-9]+")
string(REGEX REPLACE ".*SR_ABI_MAJOR ([0-9]+).*" "\\1" SHARDREC_ABI_MAJOR "${_abi_lines}")
string(REGEX REPLACE ".*SR_ABI_MINOR ([0-9]+).*" "\\1" SHARDREC_ABI_MINOR "${_abi_lines}")
set(_cmake_dir "${CMAKE_INSTALL_LIBDIR}/cmake/shardrec")

install(TARGETS shardrec_plugin_api EXPORT shardrecTargets)
install(DIRECTORY plugin_api/include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT shardrecTargets NAMESPACE shardrec:: DESTINATION ${_cmake_dir})
configure_package_config_file(cmake/shardrecConfig.cmake.in
  "${CMAKE_CURRENT_BINARY_DIR}/shardrecConfig.cmake" INSTALL_DESTINATION ${_cmake_dir})
write_basic_package_version_file("${CMAKE_CURRENT_BINARY_DIR}/shardrecConfigVersion.cmake"
  VERSION ${SHARDREC_ABI_MAJOR}.${SHARDREC_ABI_MINOR} COMPATIBILITY SameMajorVersion ARCH_INDEPENDENT)
install(FILES "${CMAKE_CURRENT_BINARY_DIR}/shardrecConfig.cmake"
              "${CMAKE_CURRENT_BINARY_DIR}/shardrecConfigVersion.cmake"
              cmake/shardrecPluginHelpers.cmake cmake/shardrec_plugin.map
        DESTINATION ${_cmake_dir})
