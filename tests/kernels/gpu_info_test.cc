// The CUDA build path: on a machine without a GPU this test skips and says why.
#include "kernels/gpu_info.h"

#include <gtest/gtest.h>

namespace marlaas {
namespace {

TEST(GpuInfoTest, DevicesReportMemoryAndComputeCapability) {
  const GpuInfo info = QueryGpus();
  if (info.devices.empty()) GTEST_SKIP() << "needs a CUDA GPU: " << info.why_none;
  for (const GpuDevice& d : info.devices) {
    EXPECT_GT(d.memory_bytes, 0u);
    EXPECT_GE(d.compute_major, 5);
    EXPECT_FALSE(d.name.empty());
  }
}

}  // namespace
}  // namespace marlaas
