// No LibTorch header here: .cu files include only the CUDA runtime and our own headers.
#include <cuda_runtime.h>

#include "kernels/gpu_info.h"

namespace marlaas {

GpuInfo QueryGpus() {
  GpuInfo info;
  info.built_with_cuda = true;
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    info.why_none = std::string("no usable CUDA device: ") + cudaGetErrorString(err);
    cudaGetLastError();  // clear the sticky error
    return info;
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    info.devices.push_back(GpuDevice{i, prop.name, prop.totalGlobalMem, prop.major, prop.minor});
  }
  if (info.devices.empty()) info.why_none = "the CUDA runtime reports no devices";
  return info;
}

}  // namespace marlaas
