// `marlaas gpus`: what CUDA devices this build sees.
#include <cstdio>

#include "kernels/gpu_info.h"
#include "procs/cli/cli.h"

namespace marlaas::cli {

int RunGpus(const std::vector<std::string>& args) {
  if (int rc = RejectRest("gpus", args)) return rc;
  const GpuInfo info = QueryGpus();
  if (info.devices.empty()) {
    std::printf("no GPU: %s\n", info.why_none.c_str());
    return 0;
  }
  for (const GpuDevice& d : info.devices) {
    std::printf("gpu %d: %s, %.1f GiB, compute %d.%d\n", d.index, d.name.c_str(),
                double(d.memory_bytes) / (1 << 30), d.compute_major, d.compute_minor);
  }
  return 0;
}

}  // namespace marlaas::cli
