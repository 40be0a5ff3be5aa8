# Third-party dependencies, all from Debian packages (scripts/setup.sh
# installs them). Optional ones are detected, never assumed: a missing one
# turns its feature off with one line saying so.

find_package(Boost 1.74 REQUIRED COMPONENTS program_options)
find_package(spdlog REQUIRED)
find_package(fmt REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)
find_path(DLPACK_INCLUDE_DIR dlpack/dlpack.h REQUIRED)
# Dense layers' matrix products: OpenBLAS (libopenblas-dev), found through
# its pkg-config file so that the pthread build's own cblas.h is used, not
# whichever cblas.h the alternatives system points at.
find_package(PkgConfig REQUIRED)
pkg_check_modules(OPENBLAS REQUIRED IMPORTED_TARGET openblas)

# Checkpoint checksums: XXH3-64 from xxHash (libxxhash-dev), a stable
# documented hash other tools can recompute (xxhsum -H3, python-xxhash).
find_path(XXHASH_INCLUDE_DIR xxhash.h REQUIRED)
find_library(XXHASH_LIBRARY xxhash REQUIRED)
add_library(shardrec_xxhash INTERFACE)
target_include_directories(shardrec_xxhash SYSTEM INTERFACE ${XXHASH_INCLUDE_DIR})
target_link_libraries(shardrec_xxhash INTERFACE ${XXHASH_LIBRARY})

# Tables larger than memory: row files through io_uring (liburing-dev)
# when present; without it, or where the kernel refuses io_uring, a pool of
# pread/pwrite threads moves the rows (core/src/cache/uring_io.h).
pkg_check_modules(LIBURING IMPORTED_TARGET liburing)
if(LIBURING_FOUND)
  message(STATUS "shardrec: row files use io_uring (liburing ${LIBURING_VERSION})")
else()
  message(STATUS "shardrec: liburing not found (apt-get install liburing-dev): row files use a pool of I/O threads")
endif()

# Redis rendezvous across hosts: hiredis, the client Debian's Gloo links too.
find_path(HIREDIS_INCLUDE_DIR hiredis/hiredis.h REQUIRED)
find_library(HIREDIS_LIBRARY hiredis REQUIRED)
add_library(shardrec_hiredis INTERFACE)
target_include_directories(shardrec_hiredis SYSTEM INTERFACE ${HIREDIS_INCLUDE_DIR})
target_link_libraries(shardrec_hiredis INTERFACE ${HIREDIS_LIBRARY})
# The CPU kernel: oneTBB for parallel loops, Highway for portable SIMD with
# run-time dispatch (one binary uses AVX2 here and AVX-512 where present).
find_package(TBB 2021 REQUIRED COMPONENTS tbb)
find_package(ZLIB REQUIRED)  # gzip click logs (core/data)
find_package(hwy 1.0 REQUIRED)

# CUDA: the toolkit under /usr/local/cuda is used when present, even without
# a GPU (code must compile and link; GPU tests skip at run time).
set(SHARDREC_HAVE_CUDA OFF)
if(SHARDREC_WITH_CUDA)
  if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 80 90)
    endif()
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    set(SHARDREC_HAVE_CUDA ON)
  else()
    message(STATUS "CUDA: no CUDA compiler found; the CUDA kernel plugin is not built")
  endif()
endif()

set(SHARDREC_HAVE_NCCL OFF)
if(SHARDREC_WITH_NCCL AND SHARDREC_HAVE_CUDA)
  find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ENV NCCL_ROOT PATH_SUFFIXES include)
  find_library(NCCL_LIBRARY NAMES nccl HINTS ${CUDAToolkit_LIBRARY_DIR} ENV NCCL_ROOT PATH_SUFFIXES lib lib64)
  if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
    add_library(shardrec_nccl INTERFACE)
    target_include_directories(shardrec_nccl SYSTEM INTERFACE ${NCCL_INCLUDE_DIR})
    target_link_libraries(shardrec_nccl INTERFACE ${NCCL_LIBRARY})
    set(SHARDREC_HAVE_NCCL ON)
  else()
    message(STATUS "NCCL: nccl.h or libnccl not found; the NCCL comm plugin is not built")
  endif()
elseif(SHARDREC_WITH_NCCL)
  message(STATUS "NCCL: needs CUDA, which is off; the NCCL comm plugin is not built")
endif()

set(SHARDREC_HAVE_GLOO OFF)
if(SHARDREC_WITH_GLOO)
  find_package(Gloo QUIET)
  if(Gloo_FOUND)
    set(SHARDREC_HAVE_GLOO ON)
  else()
    message(STATUS "Gloo: not found (apt-get install libgloo-dev); the Gloo comm plugin is not built")
  endif()
endif()

find_package(GTest 1.10)
find_package(benchmark QUIET)
