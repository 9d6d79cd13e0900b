# Dependencies of the GPU-check build (MARLAAS_GPU_CHECK_ONLY, bench/gpu_check.sh): only what
# base/, shm/, kernels/ and their CUDA tests and benchmarks need, for a GPU host that has CUDA,
# CMake and ninja but cannot install packages. Boost's headers and GoogleTest's sources may come
# from Debian packages unpacked into a folder (bench/gpu_deps.sh fetches them):
#   -DMARLAAS_BOOST_INCLUDE=<root>/usr/include  -DMARLAAS_GTEST_SOURCE=<root>/usr/src/googletest
find_package(Threads REQUIRED)

# With MARLAAS_GPU_CHECK_TORCH, model/ and rl/ and the model's CUDA test too: LibTorch from the
# host's PyTorch (CMAKE_PREFIX_PATH=torch.utils.cmake_prefix_path) and nlohmann/json's headers,
# from -DMARLAAS_NLOHMANN_INCLUDE=<root>/usr/include or installed.
option(MARLAAS_GPU_CHECK_TORCH "Also build the model and its CUDA test (needs LibTorch)" OFF)
if(MARLAAS_GPU_CHECK_TORCH)
  if(MARLAAS_NLOHMANN_INCLUDE)
    if(NOT EXISTS "${MARLAAS_NLOHMANN_INCLUDE}/nlohmann/json.hpp")
      message(FATAL_ERROR "MARLAAS_NLOHMANN_INCLUDE=${MARLAAS_NLOHMANN_INCLUDE} holds no nlohmann/json.hpp")
    endif()
    add_library(nlohmann_json::nlohmann_json INTERFACE IMPORTED)
    set_target_properties(nlohmann_json::nlohmann_json PROPERTIES INTERFACE_INCLUDE_DIRECTORIES
                          "${MARLAAS_NLOHMANN_INCLUDE}")
  else()
    find_package(nlohmann_json 3.10 REQUIRED)
  endif()
  include(cmake/Torch.cmake)  # first: its ABI flags apply to GoogleTest too
endif()


if(MARLAAS_BOOST_INCLUDE)
  if(NOT EXISTS "${MARLAAS_BOOST_INCLUDE}/boost/interprocess")
    message(FATAL_ERROR "MARLAAS_BOOST_INCLUDE=${MARLAAS_BOOST_INCLUDE} holds no boost/interprocess")
  endif()
  add_library(Boost::headers INTERFACE IMPORTED)
  set_target_properties(Boost::headers PROPERTIES INTERFACE_INCLUDE_DIRECTORIES
                        "${MARLAAS_BOOST_INCLUDE}")
else()
  find_package(Boost 1.71 REQUIRED)
endif()

if(MARLAAS_GTEST_SOURCE)
  set(INSTALL_GTEST OFF CACHE BOOL "" FORCE)
  set(BUILD_GMOCK OFF CACHE BOOL "" FORCE)
  add_subdirectory(${MARLAAS_GTEST_SOURCE} ${CMAKE_BINARY_DIR}/googletest EXCLUDE_FROM_ALL)
  if(NOT TARGET GTest::gtest)  # googletest 1.11+ defines these aliases itself
    add_library(GTest::gtest ALIAS gtest)
    add_library(GTest::gtest_main ALIAS gtest_main)
  endif()
else()
  find_package(GTest REQUIRED)
endif()

include(cmake/Cuda.cmake)
if(NOT MARLAAS_HAVE_CUDA)
  message(FATAL_ERROR "MARLAAS_GPU_CHECK_ONLY needs nvcc (set CUDACXX or put it on PATH)")
endif()
