# Warnings, sanitizers and ccache for every target of this project.

find_program(SHARDREC_CCACHE ccache)
if(SHARDREC_CCACHE)
  set(CMAKE_C_COMPILER_LAUNCHER "${SHARDREC_CCACHE}")
  set(CMAKE_CXX_COMPILER_LAUNCHER "${SHARDREC_CCACHE}")
  set(CMAKE_CUDA_COMPILER_LAUNCHER "${SHARDREC_CCACHE}")
endif()

# Applied per target (not globally) so third-party headers and the CUDA
# compiler do not see host-compiler-only flags.
#
# GCC 12 at -O3 (the Release build) reports -Wrestrict on libstdc++'s own
# std::string concatenation (`"a" + s`): a known false positive (GCC bugs
# 105329 and 105651, fixed in GCC 13) that no code of ours can avoid. Only
# that warning, only for GCC 12; every other warning stays an error in every
# build type.
set(_shardrec_gcc12_flags "")
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_GREATER_EQUAL 12
   AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
  set(_shardrec_gcc12_flags -Wno-restrict)
endif()
# Shadowed locals: GCC's -Wshadow=local; clang (the fuzz build) spells it
# -Wshadow-uncaptured-local.
if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  set(_shardrec_shadow -Wshadow-uncaptured-local)
else()
  set(_shardrec_shadow -Wshadow=local)
endif()
function(shardrec_set_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:C,CXX>:-Wall -Wextra -Wpedantic ${_shardrec_shadow} -Wno-missing-field-initializers>
    $<$<COMPILE_LANGUAGE:CXX>:${_shardrec_gcc12_flags}>
    $<$<AND:$<COMPILE_LANGUAGE:C,CXX>,$<BOOL:${SHARDREC_WARNINGS_AS_ERRORS}>>:-Werror>)
endfunction()

# The fuzz build (scripts/fuzz.sh, clang): every object carries libFuzzer's
# coverage hooks; the targets in tests/fuzz link the fuzzer itself.
option(SHARDREC_FUZZ "Build the libFuzzer targets in tests/fuzz (clang only)" OFF)
if(SHARDREC_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "SHARDREC_FUZZ needs clang (CC=clang CXX=clang++); see scripts/fuzz.sh")
  endif()
  add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:-fsanitize=fuzzer-no-link>")
endif()

if(SHARDREC_SANITIZE)
  set(_san "-fsanitize=${SHARDREC_SANITIZE}" -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:${_san}>")
  add_link_options(${_san})
endif()
