# Warnings, sanitizers and ccache for every target of this project.

find_program(SHARDREC_CCACHE ccache)
if(SHARDREC_CCACHE)
  set(CMAKE_C_COMPILER_LAUNCHER "${SHARDREC_CCACHE}")
  set(CMAKE_CXX_COMPILER_LAUNCHER "${SHARDREC_CCACHE}")
  set(CMAKE_CUDA_COMPILER_LAUNCHER "${SHARDREC_CCACHE}")
endif()

# Applied per target (not globally) so third-party headers and the CUDA
# compiler do not see host-compiler-only flags.
function(shardrec_set_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:C,CXX>:-Wall -Wextra -Wpedantic -Wshadow=local -Wno-missing-field-initializers>
    $<$<AND:$<COMPILE_LANGUAGE:C,CXX>,$<BOOL:${SHARDREC_WARNINGS_AS_ERRORS}>>:-Werror>)
endfunction()

if(SHARDREC_SANITIZE)
  set(_san "-fsanitize=${SHARDREC_SANITIZE}" -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:${_san}>")
  add_link_options(${_san})
endif()
