# LibTorch, for the full build (cmake/Dependencies.cmake) and for the GPU-check build with
# MARLAAS_GPU_CHECK_TORCH (cmake/GpuCheckDependencies.cmake). Include before cmake/Cuda.cmake.
# LibTorch: Debian's libtorch-dev (1.13, CPU) here; on GPU hosts a CUDA LibTorch (2.x) through
# CMAKE_PREFIX_PATH. Only model/, rl/ and the processes that run them link it.
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES 90)  # H100/H200; override with -DCMAKE_CUDA_ARCHITECTURES
endif()
set(MARLAAS_CUDA_ARCHITECTURES ${CMAKE_CUDA_ARCHITECTURES})
find_package(Torch REQUIRED)
message(STATUS "LibTorch ${Torch_VERSION}: ${TORCH_LIBRARIES}")
# A CUDA LibTorch 2.x's config enables CUDA itself, appends its own -gencode list to
# CMAKE_CUDA_FLAGS (with archs that CUDA 13's nvcc rejects) and sets CMAKE_CUDA_ARCHITECTURES OFF.
# No .cu of ours includes LibTorch: ours are restored (a -DCMAKE_CUDA_FLAGS cache entry stays).
unset(CMAKE_CUDA_FLAGS)
set(CMAKE_CUDA_ARCHITECTURES ${MARLAAS_CUDA_ARCHITECTURES})
# The C++ ABI flags LibTorch was built with (a pip LibTorch states _GLIBCXX_USE_CXX11_ABI), so
# GoogleTest and our code built from source link with it.
string(APPEND CMAKE_CXX_FLAGS " ${TORCH_CXX_FLAGS}")

