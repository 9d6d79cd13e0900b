// SharedDeviceRegion between processes on one GPU: the second process opens the first one's block
// instead of allocating (one copy in device memory, same bytes), a different key and a second
// open in one process are refused by name, the owner frees only after the opener closed, and when
// the owner is kill -9'd before anyone opened the region the next process takes it over. Skips
// without a GPU; the parent test process never initialises CUDA.
#include "shm/shared_device_region.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <optional>
#include <thread>
#include <vector>

#include "kernels/gpu_info.h"
#include "tests/test_util.h"

namespace marlaas {
namespace {

using testing::ChildGuard;
using testing::MapShared;
using testing::ScopedInstance;
using testing::UnmapShared;
using testing::WaitForFlag;

constexpr uint64_t kBytes = 256ull << 20;  // a quarter GiB: far above the device's own churn

struct Shared {
  std::atomic<int> owner_ready, opener_opened, opener_closing;
};

SharedDeviceRegion::Fill FillWith(int byte) {
  return [byte](void* p, uint64_t n) {
    return cudaMemset(p, byte, n) == cudaSuccess ? Status::Ok()
                                                 : Status(StatusCode::kInternal, "memset");
  };
}

size_t FreeBytes() {
  size_t free = 0, total = 0;
  cudaMemGetInfo(&free, &total);
  return free;
}

class SharedDeviceRegionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const GpuInfo gpus = QueryGpusInChild();
    if (gpus.devices.empty()) GTEST_SKIP() << "needs a CUDA GPU: " << gpus.why_none;
    sh_ = MapShared<Shared>();
  }
  void TearDown() override { UnmapShared(sh_); }
  ScopedInstance inst_;
  Shared* sh_ = nullptr;
};

TEST_F(SharedDeviceRegionTest, TheSecondProcessOpensTheOwnersCopyAndTheOwnerWaitsForIt) {
  const std::string name = inst_.name();
  Shared* sh = sh_;
  ChildGuard children;
  const pid_t owner = children.Fork([&] {
    size_t before_free = 0;
    {
      auto created = SharedDeviceRegion::OpenOrCreate(name, "base", kBytes, "model-a",
                                                      FillWith(0x5A), Deadline::AfterMs(30000));
      if (!created.ok() || !created->owner()) return 10;
      std::optional<SharedDeviceRegion> region(std::move(*created));
      sh->owner_ready.store(1);
      if (!WaitForFlag(sh->opener_opened)) return 11;
      before_free = FreeBytes();
      region.reset();  // waits for the opener to close before it frees
    }
    // The opener, still holding the region 500 ms after it said it opened it, says so just
    // before it closes it: without that, the owner did not wait.
    if (sh->opener_closing.load() == 0) return 12;  // freed under a live opener
    // Then freed: the block comes back (the opener's own context may still be alive).
    return FreeBytes() + (64u << 20) >= before_free + kBytes ? 0 : 13;
  });
  const pid_t opener = children.Fork([&] {
    if (!WaitForFlag(sh->owner_ready)) return 20;
    FreeBytes();  // this process's context first
    const size_t before = FreeBytes();
    int rc = 0;
    {
      auto region = SharedDeviceRegion::OpenOrCreate(name, "base", kBytes, "model-a",
                                                     FillWith(0x00), Deadline::AfterMs(30000));
      if (!region.ok()) {
        std::fprintf(stderr, "%s\n", region.status().ToString().c_str());
        rc = 21;
      } else if (region->owner()) {
        rc = 22;  // it allocated a second copy
      } else if (FreeBytes() + (64u << 20) < before) {
        rc = 23;  // opening took device memory of the region's size
      } else {
        std::vector<unsigned char> host(1 << 20);
        cudaMemcpy(host.data(), static_cast<char*>(region->data()) + kBytes - host.size(),
                   host.size(), cudaMemcpyDeviceToHost);
        for (unsigned char c : host)
          if (c != 0x5A) rc = 24;  // not the owner's bytes
      }
      auto other = SharedDeviceRegion::OpenOrCreate(name, "base", kBytes, "model-b", nullptr,
                                                    Deadline::AfterMs(1000));
      if (other.ok() || other.status().message().find("holds 'model-a'") == std::string::npos)
        rc = rc ? rc : 25;
      auto twice = SharedDeviceRegion::OpenOrCreate(name, "base", kBytes, "model-a", nullptr,
                                                    Deadline::AfterMs(1000));
      if (twice.ok() || twice.status().code() != StatusCode::kAlreadyExists) rc = rc ? rc : 26;
      sh->opener_opened.store(1);
      std::this_thread::sleep_for(std::chrono::milliseconds(500));  // the owner must wait
      sh->opener_closing.store(1);
    }
    return rc;
  });
  const auto o = children.Wait(opener);
  const auto w = children.Wait(owner);
  EXPECT_TRUE(o.exited && o.code == 0) << "opener exit " << o.code;
  EXPECT_TRUE(w.exited && w.code == 0) << "owner exit " << w.code;
}

TEST_F(SharedDeviceRegionTest, ANewProcessTakesOverFromAKilledOwner) {
  const std::string name = inst_.name();
  Shared* sh = sh_;
  ChildGuard children;
  const pid_t owner = children.Fork([&] {
    auto region = SharedDeviceRegion::OpenOrCreate(name, "base", kBytes, "model-a", FillWith(1),
                                                   Deadline::AfterMs(30000));
    if (!region.ok()) return 10;
    sh->owner_ready.store(1);
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  });
  ASSERT_TRUE(WaitForFlag(sh->owner_ready));
  children.Kill(owner);
  const pid_t next = children.Fork([&] {
    auto region = SharedDeviceRegion::OpenOrCreate(name, "base", kBytes, "model-a", FillWith(2),
                                                   Deadline::AfterMs(30000));
    if (!region.ok()) return 20;
    if (!region->owner()) return 21;  // it must not open a dead owner's handle
    unsigned char c = 0;
    cudaMemcpy(&c, region->data(), 1, cudaMemcpyDeviceToHost);
    return c == 2 ? 0 : 22;
  });
  const auto n = children.Wait(next);
  EXPECT_TRUE(n.exited && n.code == 0) << "new owner exit " << n.code;
}

}  // namespace
}  // namespace marlaas
