// What accelerators this process can use. Built from kernels/cuda/gpu_info.cu when the CUDA
// toolkit is present, from kernels/cpu/gpu_info_none.cc otherwise. Tests and the launcher use it
// to decide whether GPU work can run here, and to say why not when it cannot.
#pragma once

#include <string>
#include <vector>

namespace marlaas {

struct GpuDevice {
  int index = 0;
  std::string name;
  size_t memory_bytes = 0;
  int compute_major = 0;
  int compute_minor = 0;
};

struct GpuInfo {
  bool built_with_cuda = false;
  std::vector<GpuDevice> devices;
  std::string why_none;  // set when devices is empty: no toolkit at build time, no driver, ...
};

GpuInfo QueryGpus();
// QueryGpus run in a short-lived child process, so that this process never initialises CUDA: a
// process that forks CUDA workers afterwards must not have (a CUDA context does not survive a
// fork). Devices carry index, name and memory; why_none says why there are none.
GpuInfo QueryGpusInChild();

}  // namespace marlaas
