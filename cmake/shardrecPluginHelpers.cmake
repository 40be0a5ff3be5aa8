# shardrec_add_plugin(<target> KIND <kind> NAME <name> SOURCES <src>... [LIBS <lib>...])
#
# Builds a drop-in plugin: a MODULE library named libshardrec_<kind>_<name>.so
# (the host checks the name against what the library says it is), with hidden
# visibility, a linker script that exports only shardrec_plugin_get_api_v1,
# no undefined symbols, and a static CUDA runtime if it has CUDA sources.
# <kind> is sharder, kernel, comm, eviction, codec, or bundle for a library that
# carries components of several kinds.
#
# Installed with the SDK; in-tree plugins use the same function. Set
# SHARDREC_PLUGIN_OUTPUT_DIR to choose where the .so lands in the build tree.
set(_shardrec_plugin_helpers_dir "${CMAKE_CURRENT_LIST_DIR}")

function(shardrec_add_plugin target)
  cmake_parse_arguments(ARG "" "KIND;NAME" "SOURCES;LIBS" ${ARGN})
  if(NOT ARG_KIND MATCHES "^(sharder|kernel|comm|eviction|codec|bundle)$")
    message(FATAL_ERROR "shardrec_add_plugin(${target}): KIND must be sharder, kernel, comm, eviction, codec or bundle, got '${ARG_KIND}'")
  endif()
  if(NOT ARG_NAME MATCHES "^[a-z0-9_]+$")
    message(FATAL_ERROR "shardrec_add_plugin(${target}): NAME must match [a-z0-9_]+, got '${ARG_NAME}'")
  endif()
  add_library(${target} MODULE ${ARG_SOURCES})
  target_link_libraries(${target} PRIVATE shardrec::plugin_api ${ARG_LIBS})
  target_compile_features(${target} PRIVATE cxx_std_20)
  set_target_properties(${target} PROPERTIES
    PREFIX "lib"
    OUTPUT_NAME "shardrec_${ARG_KIND}_${ARG_NAME}"
    SUFFIX ".so"
    C_VISIBILITY_PRESET hidden
    CXX_VISIBILITY_PRESET hidden
    CUDA_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON
    POSITION_INDEPENDENT_CODE ON
    CUDA_RUNTIME_LIBRARY Static)
  if(DEFINED SHARDREC_PLUGIN_OUTPUT_DIR)
    set_target_properties(${target} PROPERTIES LIBRARY_OUTPUT_DIRECTORY "${SHARDREC_PLUGIN_OUTPUT_DIR}")
  endif()
  if(CMAKE_SYSTEM_NAME STREQUAL "Linux")
    set(_map "${_shardrec_plugin_helpers_dir}/shardrec_plugin.map")
    target_link_options(${target} PRIVATE "LINKER:--no-undefined" "LINKER:--exclude-libs,ALL"
                        "LINKER:--version-script=${_map}")
    set_property(TARGET ${target} APPEND PROPERTY LINK_DEPENDS "${_map}")
  endif()
endfunction()
