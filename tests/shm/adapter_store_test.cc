// The adapter store: registration, publishing, and readers that never see a torn adapter.
#include "shm/adapter_store.h"

#include <fcntl.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "tests/test_util.h"

namespace marlaas {
namespace {

using testing::ForkChild;
using testing::ScopedInstance;
using testing::WaitChild;

AdapterLayout SmallLayout() {
  AdapterLayout l;
  l.rank = 4;
  l.alpha = 8;
  l.num_layers = 2;
  l.target_mask = (1u << uint32_t(LoraTarget::kQ)) | (1u << uint32_t(LoraTarget::kDown));
  l.in_dim[uint32_t(LoraTarget::kQ)] = 32;
  l.out_dim[uint32_t(LoraTarget::kQ)] = 32;
  l.in_dim[uint32_t(LoraTarget::kDown)] = 64;
  l.out_dim[uint32_t(LoraTarget::kDown)] = 32;
  return l;
}

// Element i of the adapter published as `version`.
float Pattern(uint64_t version, uint64_t i) { return float((version * 131 + i * 7) % 100003); }

void Fill(float* p, uint64_t n, uint64_t version) {
  for (uint64_t i = 0; i < n; ++i) p[i] = Pattern(version, i);
}

TEST(AdapterLayoutTest, OffsetsTileTheFlatBufferInOrder) {
  const AdapterLayout l = SmallLayout();
  ASSERT_TRUE(l.Validate().ok());
  const uint64_t q = 4 * (32 + 32), down = 4 * (64 + 32);
  EXPECT_EQ(l.NumElements(), 2 * (q + down));
  EXPECT_EQ(l.OffsetOfA(0, LoraTarget::kQ), 0u);
  EXPECT_EQ(l.OffsetOfB(0, LoraTarget::kQ), 4u * 32);
  EXPECT_EQ(l.OffsetOfA(0, LoraTarget::kDown), q);
  EXPECT_EQ(l.OffsetOfB(0, LoraTarget::kDown), q + 4 * 64);
  EXPECT_EQ(l.OffsetOfA(1, LoraTarget::kQ), q + down);
}

TEST(AdapterLayoutTest, InvalidLayoutsAreRejected) {
  AdapterLayout l = SmallLayout();
  l.rank = 0;
  EXPECT_FALSE(l.Validate().ok());
  l = SmallLayout();
  l.in_dim[uint32_t(LoraTarget::kQ)] = 0;
  EXPECT_NE(l.Validate().message().find("q_proj"), std::string::npos);
}

TEST(AdapterStoreTest, PublishThenReadReturnsTheNewestVersion) {
  ScopedInstance inst;
  auto store = AdapterStore::Create(inst.name(), {4, 1 << 16});
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  const AdapterLayout l = SmallLayout();
  ASSERT_TRUE(store->Register(2, "alice", l).ok());
  std::vector<float> out(l.NumElements());
  EXPECT_EQ(store->ReadLatest(2, out.data(), out.size() * 4, Deadline::AfterMs(10)).status().code(),
            StatusCode::kNotFound);
  for (uint64_t v = 1; v <= 3; ++v) {
    auto span = store->BeginWrite(2);
    ASSERT_TRUE(span.ok());
    ASSERT_EQ(span->bytes, l.NumBytes());
    Fill(static_cast<float*>(span->data), l.NumElements(), v);
    ASSERT_TRUE(store->Publish(2, v).ok());
  }
  auto reader = AdapterStore::Attach(inst.name());
  ASSERT_TRUE(reader.ok());
  auto v = reader->ReadLatest(2, out.data(), out.size() * 4, Deadline::AfterMs(100));
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(*v, 3u);
  for (uint64_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], Pattern(3, i));
  auto info = reader->Info(2);
  ASSERT_TRUE(info.ok());
  EXPECT_STREQ(info->tenant_id, "alice");
  EXPECT_EQ(info->layout.rank, 4u);
}

// The store's host buffers get their memory slot by slot, as tenants are admitted: a store far
// larger than /dev/shm is made, a slot that fits is reserved, and one that does not is refused by
// name (serve then refuses the tenant instead of the trainer dying of SIGBUS at its write).
TEST(AdapterStoreTest, SlotsAreReservedOneByOneAndOneWithoutRoomIsRefused) {
  ScopedInstance inst;
  const pid_t child = ForkChild([&]() -> int {
    if (!testing::UsePrivateDevShm("1m")) return 77;
    auto store = AdapterStore::Create(inst.name(), {8, 256 << 10});  // 4 MiB of buffers
    if (!store.ok()) return 1;
    if (!store->ReserveSlot(0).ok()) return 2;  // 512 KiB
    if (!store->ReserveSlot(0).ok()) return 3;  // again: nothing more
    const Status second = store->ReserveSlot(1);
    if (second.code() != StatusCode::kResourceExhausted ||
        second.message().find("/dev/shm has no room for 1 MiB of segment /marlaas." + inst.name() +
                              ".adapters") == std::string::npos)
      return 4;
    if (store->ReserveSlot(8).code() != StatusCode::kInvalidArgument) return 5;
    return 0;
  });
  const auto e = testing::WaitChildFor(child, 60);
  if (e.exited && e.code == 77) GTEST_SKIP() << "no mount namespace here (not root)";
  EXPECT_TRUE(e.exited && e.code == 0) << "exit " << e.code << " signal " << e.signal;
}

TEST(AdapterStoreTest, VersionsMustIncreaseAndSlotsBeHeld) {
  ScopedInstance inst;
  auto store = AdapterStore::Create(inst.name(), {2, 1 << 16});
  ASSERT_TRUE(store.ok());
  EXPECT_EQ(store->BeginWrite(0).status().code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(store->Register(0, "bob", SmallLayout()).ok());
  EXPECT_EQ(store->Register(0, "carol", SmallLayout()).code(), StatusCode::kAlreadyExists);
  ASSERT_TRUE(store->BeginWrite(0).ok());
  ASSERT_TRUE(store->Publish(0, 5).ok());
  ASSERT_TRUE(store->BeginWrite(0).ok());
  EXPECT_EQ(store->Publish(0, 5).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store->Register(7, "dave", SmallLayout()).code(), StatusCode::kInvalidArgument);
}

// A slot registered again for a new tenant (its row was reused) starts empty: nothing of the
// old tenant is readable, and the new tenant's versions start again from 1.
TEST(AdapterStoreTest, ASlotGivenToANewTenantStartsEmpty) {
  ScopedInstance inst;
  auto store = AdapterStore::Create(inst.name(), {2, 1 << 16});
  ASSERT_TRUE(store.ok());
  const AdapterLayout l = SmallLayout();
  ASSERT_TRUE(store->Register(1, "old", l).ok());
  for (uint64_t v = 1; v <= 7; ++v) {
    auto span = store->BeginWrite(1);
    ASSERT_TRUE(span.ok());
    Fill(static_cast<float*>(span->data), l.NumElements(), 100 + v);
    ASSERT_TRUE(store->Publish(1, v).ok());
  }
  ASSERT_TRUE(store->Release(1).ok());
  ASSERT_TRUE(store->Register(1, "new", l).ok());
  std::vector<float> out(l.NumElements());
  EXPECT_EQ(store->ReadLatest(1, out.data(), out.size() * 4, Deadline::AfterMs(10)).status().code(),
            StatusCode::kNotFound);
  EXPECT_EQ(*store->PublishedVersion(1), 0u);
  auto span = store->BeginWrite(1);
  ASSERT_TRUE(span.ok());
  Fill(static_cast<float*>(span->data), l.NumElements(), 201);
  ASSERT_TRUE(store->Publish(1, 1).ok());
  AdapterSlotInfo owner;
  auto v = store->ReadLatest(1, out.data(), out.size() * 4, Deadline::AfterMs(100), &owner);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(*v, 1u);
  EXPECT_STREQ(owner.tenant_id, "new");
  EXPECT_EQ(owner.generation, 2u);
  for (uint64_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], Pattern(201, i));
}

// Property: while the slot passes from tenant to tenant (each publishing a few versions), a
// reader's copy always belongs to the tenant ReadLatest names as its owner. Tenant k writes the
// pattern of 1000 k + version.
TEST(AdapterStoreTest, ReadsWhileTheSlotChangesHandsNameTheRightOwner) {
  ScopedInstance inst;
  auto store = AdapterStore::Create(inst.name(), {1, 1 << 16});
  ASSERT_TRUE(store.ok());
  const AdapterLayout l = SmallLayout();
  std::atomic<bool> stop{false};
  std::atomic<int> checked{0}, wrong{0};
  std::thread reader([&] {
    auto r = AdapterStore::Attach(inst.name());
    if (!r.ok()) {
      ++wrong;
      return;
    }
    std::vector<float> out(l.NumElements());
    while (!stop.load()) {
      AdapterSlotInfo owner;
      auto v = r->ReadLatest(0, out.data(), out.size() * 4, Deadline::AfterMs(100), &owner);
      if (!v.ok()) continue;
      const uint64_t tag = 1000 * std::stoull(owner.tenant_id + 1) + *v;
      for (uint64_t i = 0; i < out.size(); ++i) {
        if (out[i] != Pattern(tag, i)) {
          ++wrong;
          break;
        }
      }
      ++checked;
    }
  });
  // Stopped and joined however the test ends (a failed ASSERT with the thread joinable would
  // terminate the test process).
  auto stop_reader = [&] {
    stop = true;
    if (reader.joinable()) reader.join();
  };
  const testing::ScopeExit join_reader(stop_reader);
  // Until the reader has checked many copies (at most a million handovers).
  for (int k = 1; k <= 1000000 && (k <= 3000 || checked.load() < 20000); ++k) {
    if (k > 1) {
      ASSERT_TRUE(store->Release(0).ok());
    }
    ASSERT_TRUE(store->Register(0, "t" + std::to_string(k), l).ok());
    for (uint64_t v = 1; v <= 2; ++v) {
      auto span = store->BeginWrite(0);
      ASSERT_TRUE(span.ok());
      Fill(static_cast<float*>(span->data), l.NumElements(), 1000 * uint64_t(k) + v);
      ASSERT_TRUE(store->Publish(0, v).ok());
    }
  }
  stop_reader();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_GT(checked.load(), 0);
}

TEST(AdapterStoreTest, AdapterLargerThanTheBuffersIsRefused) {
  ScopedInstance inst;
  auto store = AdapterStore::Create(inst.name(), {1, 1024});
  ASSERT_TRUE(store.ok());
  Status st = store->Register(0, "big", SmallLayout());
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(st.message().find("big"), std::string::npos);
}

// Property: a reader in another process, reading continuously while the writer publishes
// thousands of versions, only ever gets whole adapters: every element matches the pattern of the
// version ReadLatest reports, and versions never go backwards. The writer keeps publishing until
// the reader has seen kDistinct different versions, so the two really overlap.
TEST(AdapterStoreTest, ConcurrentReaderNeverSeesATornAdapter) {
  ScopedInstance inst;
  auto store = AdapterStore::Create(inst.name(), {1, 1 << 20});
  ASSERT_TRUE(store.ok());
  AdapterLayout l = SmallLayout();
  l.num_layers = 24;  // ~40k floats: copies take long enough to overlap with publishes
  ASSERT_TRUE(store->Register(0, "t", l).ok());
  auto span = store->BeginWrite(0);
  ASSERT_TRUE(span.ok());
  Fill(static_cast<float*>(span->data), l.NumElements(), 1);
  ASSERT_TRUE(store->Publish(0, 1).ok());
  constexpr uint64_t kDistinct = 1000;
  int done[2];
  ASSERT_EQ(::pipe2(done, O_NONBLOCK), 0);

  pid_t reader = ForkChild([&]() -> int {
    auto r = AdapterStore::Attach(inst.name());
    if (!r.ok()) return 50;
    std::vector<float> out(l.NumElements());
    uint64_t last = 0, distinct = 0;
    // Past the writer's own limit (60 s) the child gives up too, so that WaitChild returns.
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(90);
    while (distinct < kDistinct) {
      if (std::chrono::steady_clock::now() > give_up) return 55;
      auto v = r->ReadLatest(0, out.data(), out.size() * 4, Deadline::AfterMs(10000));
      if (!v.ok()) return 51;
      if (*v < last) return 52;
      for (uint64_t i = 0; i < out.size(); ++i) {
        if (out[i] != Pattern(*v, i)) {
          std::fprintf(stderr, "torn: version %llu element %llu\n", (unsigned long long)*v,
                       (unsigned long long)i);
          return 53;
        }
      }
      distinct += *v != last;
      last = *v;
    }
    return ::write(done[1], "d", 1) == 1 ? 0 : 54;
  });
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  char x;
  uint64_t v = 2;
  for (; ::read(done[0], &x, 1) != 1 && std::chrono::steady_clock::now() < give_up; ++v) {
    auto w = store->BeginWrite(0);
    ASSERT_TRUE(w.ok());
    Fill(static_cast<float*>(w->data), l.NumElements(), v);
    ASSERT_TRUE(store->Publish(0, v).ok());
  }
  auto e = WaitChild(reader);
  EXPECT_TRUE(e.exited && e.code == 0) << "reader exit " << e.code << " signal " << e.signal;
  EXPECT_GT(v, kDistinct);
  ::close(done[0]);
  ::close(done[1]);
}

}  // namespace
}  // namespace marlaas
