// The adapter store's CUDA IPC backend between real processes: a writer (trainer role) and a
// reader (rollout role) forked from a test process that never initialises CUDA itself. Checks
// that readers see only whole, finished adapters (writes still running on the GPU at Publish are
// ordered by the IPC event), that retired buffers stay allocated while a live reader maps them
// and are freed once it lets go, that a kill -9'd reader does not hold up the free, that a
// kill -9'd writer's device memory comes back once the reader sweeps, and that a copy waiting on
// a writer whose GPU work hangs gives up within its bound. Without a GPU the device tests skip;
// the host-side behaviour of a CUDA IPC store is checked everywhere.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "kernels/gpu_info.h"
#include "shm/cuda_adapter_memory.h"
#include "tests/test_util.h"

namespace marlaas {
namespace {

using testing::ChildGuard;
using testing::MapShared;
using testing::ScopedInstance;
using testing::UnmapShared;
using testing::WaitForFlag;

// 32 MiB of f32 per buffer: the writer's fills are still running when it publishes, and a leaked
// pair of buffers (64 MiB) stands well clear of the device's own bookkeeping.
AdapterLayout Layout() {
  AdapterLayout l;
  l.rank = 16;
  l.alpha = 32;
  l.num_layers = 64;
  l.target_mask = 1u << uint32_t(LoraTarget::kQ);
  l.in_dim[0] = 4096;
  l.out_dim[0] = 4096;
  return l;
}

// Shared between the forked processes (an anonymous MAP_SHARED page).
struct Shared {
  std::atomic<int> writer_ready, reader_ready, reader_done, stop, baseline_ready;
  std::atomic<int> phase2, sweep_now, swept, kill_reader;
  std::atomic<uint64_t> reads, bad_reads;
  std::atomic<size_t> baseline;  // device free bytes before the writer allocated
};

size_t DeviceFreeBytes() {
  size_t free = 0, total = 0;
  cudaMemGetInfo(&free, &total);
  return free;
}

// Device free bytes once they stop changing (a dead process's memory returns asynchronously).
size_t SettledFreeBytes() {
  size_t last = DeviceFreeBytes();
  for (int same = 0, i = 0; same < 5 && i < 200; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const size_t now = DeviceFreeBytes();
    same = now == last ? same + 1 : 0;
    last = now;
  }
  return last;
}

constexpr size_t kSlack = 8u << 20;  // the device's own allocations that come and go

// Writes version v into the buffer the way a trainer's optimizer would, without waiting: eight
// passes of junk, then the value, all queued on the default stream; Publish follows at once.
bool WriteVersion(AdapterStore& store, uint64_t v, int slot = 0) {
  auto span = store.BeginWrite(slot);
  if (!span.ok()) return false;
  for (int pass = 0; pass < 8; ++pass) cudaMemsetAsync(span->data, 0xEE, span->bytes, 0);
  cudaMemsetAsync(span->data, int(v & 0x7f), span->bytes, 0);
  return store.Publish(slot, v).ok();
}

// A child's view of the store through the CUDA IPC backend, and a device buffer of `bytes` to
// copy adapters into. ok() is false when either could not be had.
struct Attached {
  std::optional<AdapterStore> store;
  void* dst = nullptr;
  bool ok() const { return store.has_value() && dst != nullptr; }
};

Attached AttachWithBuffer(const std::string& name, uint64_t bytes,
                          const CudaIpcOptions& options = {}) {
  Attached a;
  auto store = AdapterStore::Attach(name, CudaIpcMemory(options));
  if (!store.ok()) return a;
  a.store.emplace(std::move(*store));
  if (cudaMalloc(&a.dst, bytes) != cudaSuccess) a.dst = nullptr;
  return a;
}

// The first and last byte of `bytes` at device pointer `p` are both `value`.
bool EndsHold(const void* p, uint64_t bytes, int value) {
  unsigned char first = 0, last = 0;
  cudaMemcpy(&first, p, 1, cudaMemcpyDeviceToHost);
  cudaMemcpy(&last, static_cast<const char*>(p) + bytes - 1, 1, cudaMemcpyDeviceToHost);
  return first == value && last == value;
}

class CudaAdapterStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const GpuInfo gpus = QueryGpusInChild();  // this process must not touch CUDA before forking
    if (gpus.devices.empty()) GTEST_SKIP() << "needs a CUDA GPU: " << gpus.why_none;
    AdapterStore::Options o;
    o.num_slots = 2;
    o.buffer_bytes = Layout().NumBytes();
    o.backend = AdapterBackend::kCudaIpc;
    auto store = AdapterStore::Create(inst_.name(), o);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    ASSERT_TRUE(store->Register(0, "tenant-a", Layout()).ok());
    store_.emplace(std::move(*store));
    shared_ = MapShared<Shared>();
  }
  void TearDown() override { UnmapShared(shared_); }

  ScopedInstance inst_;
  std::optional<AdapterStore> store_;
  Shared* shared_ = nullptr;
};

TEST_F(CudaAdapterStoreTest, ReaderCopiesOnlyWholeFinishedAdaptersAcrossProcesses) {
  const std::string name = inst_.name();
  Shared* sh = shared_;
  const uint64_t bytes = Layout().NumBytes();
  ChildGuard children;
  const pid_t writer = children.Fork([&] {
    Attached w = AttachWithBuffer(name, bytes);
    if (!w.ok()) return 10;
    // The 200 versions take about a second: a reader whose CUDA start-up took as long would see
    // only the last few.
    if (!WaitForFlag(sh->reader_ready)) return 14;
    uint64_t v = 1;
    for (; v <= 200 && sh->stop.load() == 0; ++v) {
      if (!WriteVersion(*w.store, v)) return 11;
      sh->writer_ready.store(1);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    // The writer reads its own slot too (from its own buffers: a process cannot open the IPC
    // handles it exported).
    auto own = w.store->ReadLatest(0, w.dst, bytes, Deadline::AfterMs(5000));
    if (!own.ok() || *own != v - 1 || !EndsHold(w.dst, bytes, int((v - 1) & 0x7f))) return 12;
    WaitForFlag(sh->reader_done);  // readers' mappings need this process alive
    return 0;
  });
  const pid_t reader = children.Fork([&] {
    Attached r = AttachWithBuffer(name, bytes);
    if (!r.ok()) return 20;
    sh->reader_ready.store(1);
    AdapterStore* store = &*r.store;
    void* dst = r.dst;
    std::vector<unsigned char> host(bytes);
    uint64_t last = 0;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (last < 200 && std::chrono::steady_clock::now() < until) {
      auto published = store->PublishedVersion(0);
      if (!published.ok() || *published == last) continue;
      auto got = store->ReadLatest(0, dst, bytes, Deadline::AfterMs(1000));
      if (!got.ok()) continue;     // e.g. the writer overtook the copy for a whole second
      if (*got < last) return 22;  // versions never go back
      last = *got;
      cudaMemcpy(host.data(), dst, bytes, cudaMemcpyDeviceToHost);
      sh->reads.fetch_add(1);
      for (unsigned char c : host) {
        if (c != (last & 0x7f)) {
          sh->bad_reads.fetch_add(1);
          break;
        }
      }
    }
    sh->reader_done.store(1);
    return last == 200 ? 0 : 23;
  });
  const auto r = children.Wait(reader);
  sh->stop.store(1);
  sh->reader_done.store(1);
  const auto w = children.Wait(writer);
  EXPECT_TRUE(r.exited && r.code == 0) << "reader exit " << r.code << " signal " << r.signal;
  EXPECT_TRUE(w.exited && w.code == 0) << "writer exit " << w.code << " signal " << w.signal;
  EXPECT_GT(sh->reads.load(), 10u);
  EXPECT_EQ(sh->bad_reads.load(), 0u) << "a reader saw a torn or unfinished adapter";
}

TEST_F(CudaAdapterStoreTest, RetiredBuffersWaitForALiveReaderButNotForAKilledOne) {
  ASSERT_TRUE(store_->Register(1, "tenant-b", Layout()).ok());
  const std::string name = inst_.name();
  Shared* sh = shared_;
  const uint64_t bytes = Layout().NumBytes();
  ChildGuard children;
  // The reader sets up its CUDA context first, so the writer's baseline includes it; its death
  // only frees more.
  const pid_t reader = children.Fork([&] {
    Attached r = AttachWithBuffer(name, bytes);
    if (!r.ok()) return 20;
    AdapterStore* store = &*r.store;
    void* dst = r.dst;
    sh->reader_ready.store(1);
    if (!WaitForFlag(sh->writer_ready)) return 22;
    for (int slot : {0, 1})
      if (!store->ReadLatest(slot, dst, bytes, Deadline::AfterMs(5000)).ok()) return 23;
    sh->reader_done.store(1);  // maps both slots' buffers
    if (!WaitForFlag(sh->sweep_now)) return 24;
    store->Sweep();  // slot 0 was retired: let go of it; keep slot 1 until killed
    sh->swept.store(1);
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  });
  const pid_t writer = children.Fork([&] {
    auto store = AdapterStore::Attach(name, CudaIpcMemory());
    if (!store.ok()) return 10;
    if (!WaitForFlag(sh->reader_ready)) return 11;
    DeviceFreeBytes();  // this process's context first
    const size_t baseline = SettledFreeBytes();
    if (!WriteVersion(*store, 1)) return 12;
    if (!WriteVersion(*store, 1, 1)) return 12;
    cudaDeviceSynchronize();
    sh->writer_ready.store(1);
    if (!WaitForFlag(sh->phase2)) return 13;
    // A live reader maps slot 0: retiring it must not free it.
    if (!store->FreeBuffers(0).ok()) return 14;
    const size_t retired = SettledFreeBytes();
    if (retired > baseline - 4 * bytes + kSlack) return 15;  // freed under a live reader
    sh->sweep_now.store(1);
    if (!WaitForFlag(sh->swept)) return 16;
    store->Sweep();  // the reader let go: now it is freed
    if (SettledFreeBytes() + kSlack < retired + 2 * bytes) return 17;
    // Slot 1: the reader is killed while it maps it; the free does not wait for the dead.
    sh->kill_reader.store(1);
    if (!WaitForFlag(sh->stop)) return 18;
    if (!store->FreeBuffers(1).ok()) return 19;
    // Freed at once: a dead reader's entry does not count (counted, the buffers would wait).
    return SettledFreeBytes() + kSlack >= baseline ? 0 : 31;
  });
  ASSERT_TRUE(WaitForFlag(sh->reader_done)) << "the reader never mapped the adapters";
  sh->phase2.store(1);
  ASSERT_TRUE(WaitForFlag(sh->kill_reader)) << "the writer stopped before the kill";
  children.Kill(reader);
  sh->stop.store(1);
  const auto w = children.Wait(writer);
  EXPECT_TRUE(w.exited && w.code == 0) << "writer exit " << w.code << " signal " << w.signal;
}

TEST_F(CudaAdapterStoreTest, AKilledWritersMemoryComesBackWhenTheReaderSweeps) {
  const std::string name = inst_.name();
  Shared* sh = shared_;
  const uint64_t bytes = Layout().NumBytes();
  ChildGuard children;
  const pid_t writer = children.Fork([&] {
    auto store = AdapterStore::Attach(name, CudaIpcMemory());
    if (!store.ok()) return 10;
    if (!WaitForFlag(sh->baseline_ready)) return 11;  // the reader measured without this process
    if (!WriteVersion(*store, 1)) return 12;
    cudaDeviceSynchronize();
    sh->writer_ready.store(1);
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  });
  const pid_t reader = children.Fork([&] {
    Attached r = AttachWithBuffer(name, bytes);
    if (!r.ok()) return 20;
    AdapterStore* store = &*r.store;
    void* dst = r.dst;
    const size_t baseline = SettledFreeBytes();
    sh->baseline_ready.store(1);
    if (!WaitForFlag(sh->writer_ready)) return 22;
    if (!store->ReadLatest(0, dst, bytes, Deadline::AfterMs(5000)).ok()) return 23;
    sh->reader_ready.store(1);
    if (!WaitForFlag(sh->stop)) return 24;  // the parent killed the writer
    // The dead writer's buffers may stay allocated while this process maps them: Sweep lets go,
    // and the device's free memory comes back to what it was before the writer existed.
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < until) {
      store->Sweep();
      if (SettledFreeBytes() + kSlack >= baseline) return 0;
    }
    return 25;
  });
  ASSERT_TRUE(WaitForFlag(sh->reader_ready)) << "the reader never mapped the adapter";
  children.Kill(writer);
  sh->stop.store(1);
  const auto r = children.Wait(reader);
  EXPECT_TRUE(r.exited && r.code == 0) << "reader exit " << r.code << " signal " << r.signal;
}

void CUDART_CB SleepThreeSeconds(void*) { std::this_thread::sleep_for(std::chrono::seconds(3)); }

TEST_F(CudaAdapterStoreTest, ACopyWaitingOnAStuckWriterGivesUpWithinItsBound) {
  const std::string name = inst_.name();
  Shared* sh = shared_;
  const uint64_t bytes = Layout().NumBytes();
  ChildGuard children;
  // The writer's stream is held up for 3 s before the fill, so the event it records at Publish
  // completes only then, as when a trainer's GPU work hangs.
  const pid_t writer = children.Fork([&] {
    auto store = AdapterStore::Attach(name, CudaIpcMemory());
    if (!store.ok()) return 10;
    auto span = store->BeginWrite(0);
    if (!span.ok()) return 11;
    if (cudaLaunchHostFunc(0, SleepThreeSeconds, nullptr) != cudaSuccess) return 12;
    cudaMemsetAsync(span->data, 7, span->bytes, 0);
    if (!store->Publish(0, 1).ok()) return 13;
    sh->writer_ready.store(1);
    WaitForFlag(sh->reader_done);
    return 0;
  });
  const pid_t reader = children.Fork([&] {
    CudaIpcOptions o;
    o.copy_timeout_ms = 300;
    Attached r = AttachWithBuffer(name, bytes, o);
    if (!r.ok()) return 20;
    if (!WaitForFlag(sh->writer_ready)) return 21;
    const auto t0 = std::chrono::steady_clock::now();
    auto got = r.store->ReadLatest(0, r.dst, bytes, Deadline::AfterMs(5000));
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    sh->reader_done.store(1);
    if (got.ok()) return 22;  // the copy waited out the writer's 3 s: unbounded
    if (got.status().code() != StatusCode::kInternal) return 23;
    if (got.status().message().find("did not finish in 300 ms") == std::string::npos) return 24;
    return waited < 2.0 ? 0 : 25;
  });
  const auto r = children.Wait(reader);
  sh->reader_done.store(1);
  const auto w = children.Wait(writer);
  EXPECT_TRUE(r.exited && r.code == 0) << "reader exit " << r.code << " signal " << r.signal;
  EXPECT_TRUE(w.exited && w.code == 0) << "writer exit " << w.code << " signal " << w.signal;
}

// Runs everywhere: a CUDA IPC store is created and managed by a process without CUDA (serve),
// and byte-moving calls there fail by name instead of touching host memory.
TEST(CudaIpcStoreHostSideTest, SlotsWorkWithoutCudaAndBytesAreRefusedByName) {
  ScopedInstance inst;
  AdapterStore::Options o;
  o.num_slots = 3;
  o.buffer_bytes = 1 << 20;
  o.backend = AdapterBackend::kCudaIpc;
  auto store = AdapterStore::Create(inst.name(), o);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_EQ(store->backend(), AdapterBackend::kCudaIpc);
  auto attached = AdapterStore::Attach(inst.name());
  ASSERT_TRUE(attached.ok()) << attached.status().ToString();
  AdapterLayout small = Layout();
  small.num_layers = 1;
  small.in_dim[0] = small.out_dim[0] = 256;
  ASSERT_TRUE(attached->Register(2, "tenant-c", small).ok());
  auto span = attached->BeginWrite(2);
  ASSERT_FALSE(span.ok());
  EXPECT_EQ(span.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(span.status().message().find("without the CUDA backend"), std::string::npos)
      << span.status().ToString();
  EXPECT_TRUE(attached->FreeBuffers(2).ok());
  EXPECT_FALSE(attached->FreeBuffers(7).ok());  // no such slot
}

}  // namespace
}  // namespace marlaas
