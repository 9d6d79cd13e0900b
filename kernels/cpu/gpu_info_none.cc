#include "kernels/gpu_info.h"

namespace marlaas {

GpuInfo QueryGpus() {
  GpuInfo info;
  info.why_none = "this build has no CUDA support (nvcc was not found at configure time)";
  return info;
}

}  // namespace marlaas
