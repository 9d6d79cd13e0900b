// Adapter broadcast over NCCL between real processes on two GPUs: the root (trainer role, GPU 0)
// sends two tenants' adapters to a member (rollout role, GPU 1); the member is kill -9'd, the
// root's next broadcast fails instead of hanging, a new member joins, and after the root forms a
// new generation and re-broadcasts each tenant's latest adapter the new member has all of them.
// NCCL refuses two ranks on one GPU, so with fewer than two GPUs this skips and says so.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "kernels/gpu_info.h"
#include "shm/adapter_broadcast.h"
#include "tests/test_util.h"

namespace marlaas {
namespace {

using testing::ChildGuard;
using testing::MapShared;
using testing::ScopedInstance;
using testing::UnmapShared;
using testing::WaitForFlag;

constexpr size_t kBytes = 4 << 20;

struct Shared {
  std::atomic<int> a_done, a_killed, b_done, root_broke;
};

// Receives until it holds `want[slot]` of every slot, each buffer all bytes == version.
int Member(const std::string& instance, const std::vector<uint64_t>& want) {
  cudaSetDevice(1);
  auto rv = ShmRendezvous::Attach(instance);
  if (!rv.ok()) return 30;
  AdapterReceiver receiver(&*rv, {});
  if (!receiver.Join().ok()) return 31;
  void* dst = nullptr;
  if (cudaMalloc(&dst, kBytes) != cudaSuccess) return 32;
  std::vector<uint64_t> have(want.size(), 0);
  std::vector<unsigned char> host(kBytes);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (have != want) {
    if (std::chrono::steady_clock::now() > until) return 33;
    auto got = receiver.Receive(dst, kBytes, Deadline::AfterMs(500));
    if (!got.ok()) {
      if (got.status().code() == StatusCode::kUnavailable) continue;
      std::fprintf(stderr, "member: %s\n", got.status().ToString().c_str());
      return 34;
    }
    if (got->slot < 0 || size_t(got->slot) >= want.size() || got->bytes != kBytes) return 35;
    if (got->tenant_generation != uint64_t(got->slot) + 7) return 37;  // the root's tag
    cudaMemcpy(host.data(), dst, kBytes, cudaMemcpyDeviceToHost);
    for (unsigned char c : host)
      if (c != (got->version & 0x7f)) return 36;  // torn or wrong content
    have[size_t(got->slot)] = got->version;
  }
  return 0;
}

TEST(NcclBroadcastTest, MembersGetEveryTenantAndTheGroupReformsAfterAKill) {
  const GpuInfo gpus = QueryGpusInChild();
  if (gpus.devices.size() < 2)
    GTEST_SKIP() << "needs two GPUs (NCCL refuses two ranks on one GPU); this machine has "
                 << gpus.devices.size() << (gpus.devices.empty() ? ": " + gpus.why_none : "");
  ScopedInstance inst;
  auto created = ShmRendezvous::Create(inst.name());
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  auto* sh = MapShared<Shared>();
  const std::string name = inst.name();
  ChildGuard children;
  const pid_t root = children.Fork([&] {
    cudaSetDevice(0);
    auto rv = ShmRendezvous::Attach(name);
    if (!rv.ok() || !rv->ClaimRoot().ok()) return 10;
    void* buf[2] = {nullptr, nullptr};
    for (void*& b : buf)
      if (cudaMalloc(&b, kBytes) != cudaSuccess) return 11;
    uint64_t version[2] = {0, 0};
    AdapterBroadcaster caster(&*rv, {});
    auto publish = [&](int slot, uint64_t v) {
      // Queued on the legacy default stream behind a 200 ms host callback, and not waited for:
      // the broadcast must still carry the new bytes (its stream waits for the default stream).
      cudaLaunchHostFunc(
          0, [](void*) { usleep(200000); }, nullptr);
      cudaMemsetAsync(buf[slot], int(v & 0x7f), kBytes, 0);
      version[slot] = v;
      return caster.Broadcast(slot, uint64_t(slot) + 7, v, buf[slot], kBytes,
                              Deadline::AfterMs(30000));
    };
    // Phase 1: member A joins; versions 1..5 of both tenants.
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (caster.members() == 0) {
      if (std::chrono::steady_clock::now() > until) return 12;
      if (caster.NeedsForming() && !caster.Form(Deadline::AfterMs(30000)).ok()) return 13;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    for (uint64_t v = 1; v <= 5; ++v)
      for (int slot = 0; slot < 2; ++slot)
        if (!publish(slot, v).ok()) return 14;
    if (!WaitForFlag(sh->a_done) || !WaitForFlag(sh->a_killed)) return 15;
    // Phase 2: A is dead. The next broadcast fails (it must not hang).
    const auto t0 = std::chrono::steady_clock::now();
    const Status broke = publish(0, 6);
    if (broke.ok()) return 16;
    if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(40)) return 17;
    sh->root_broke.store(1);
    // Phase 3: B joins; form again and re-broadcast every tenant's latest adapter.
    const auto until_b = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!(caster.members() == 1 && !caster.NeedsForming())) {
      if (std::chrono::steady_clock::now() > until_b) return 18;
      if (caster.NeedsForming()) (void)caster.Form(Deadline::AfterMs(30000));
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    for (int slot = 0; slot < 2; ++slot)
      if (!caster
               .Broadcast(slot, uint64_t(slot) + 7, version[slot], buf[slot], kBytes,
                          Deadline::AfterMs(30000))
               .ok())
        return 19;
    return WaitForFlag(sh->b_done) ? 0 : 20;
  });
  const pid_t a = children.Fork([&] {
    const int rc = Member(name, {5, 5});
    sh->a_done.store(rc == 0 ? 1 : 2);
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
    return rc;
  });
  ASSERT_TRUE(WaitForFlag(sh->a_done)) << "member A never got both tenants";
  EXPECT_EQ(sh->a_done.load(), 1) << "member A saw wrong content";
  children.Kill(a);
  sh->a_killed.store(1);
  ASSERT_TRUE(WaitForFlag(sh->root_broke)) << "the root did not notice the dead member";
  const pid_t b = children.Fork([&] {
    const int rc = Member(name, {6, 5});  // slot 0 moved on to 6 while A was gone
    sh->b_done.store(1);
    return rc;
  });
  const auto rb = children.Wait(b);
  const auto rr = children.Wait(root);
  EXPECT_TRUE(rb.exited && rb.code == 0) << "member B exit " << rb.code << " signal " << rb.signal;
  EXPECT_TRUE(rr.exited && rr.code == 0) << "root exit " << rr.code << " signal " << rr.signal;
  UnmapShared(sh);
}

}  // namespace
}  // namespace marlaas
