# CUDA is optional: with nvcc, kernels/cuda and the NCCL code are compiled and linked even on a
# machine without a GPU; tests that need a device skip with a message.
option(MARLAAS_WITH_CUDA "Build the CUDA kernels and NCCL code when nvcc is found" ON)
set(MARLAAS_HAVE_CUDA OFF)
if(MARLAAS_WITH_CUDA)
  if(NOT DEFINED ENV{CUDACXX} AND NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(ENV{CUDACXX} /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    # NCCL from the toolkit's folders, or from NCCL_ROOT (e.g. PyTorch's nvidia-nccl wheel, which
    # ships only libnccl.so.2). NAMES_PER_DIR: the library beside the header found (NCCL_ROOT
    # first), not a system libnccl.so of another version found by its first name.
    find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2 NAMES_PER_DIR
      HINTS ${NCCL_ROOT}/lib ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}/lib)
    find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${NCCL_ROOT}/include ${CUDAToolkit_INCLUDE_DIRS})
    set(MARLAAS_HAVE_NCCL OFF)
    if(NCCL_LIBRARY AND NCCL_INCLUDE_DIR)
      set(MARLAAS_HAVE_NCCL ON)
    endif()
    set(MARLAAS_HAVE_CUDA ON)
    message(STATUS "CUDA ${CUDAToolkit_VERSION}: kernels/cuda enabled (archs ${CMAKE_CUDA_ARCHITECTURES}); NCCL: ${NCCL_LIBRARY}")
  else()
    message(STATUS "nvcc not found: building without CUDA")
  endif()
endif()
