// Tenant table and metrics segments: single writer, any readers, whole rows only.
#include "shm/tenant_table.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>

#include "shm/metrics.h"
#include "tests/test_util.h"

namespace marlaas {
namespace {

using testing::ForkChild;
using testing::ScopedInstance;
using testing::WaitChild;

TenantRecord MakeRecord(const std::string& id, uint64_t n) {
  TenantRecord r{};
  EXPECT_TRUE(CopyField(id, r.id, sizeof(r.id), "id").ok());
  EXPECT_TRUE(CopyField("arithmetic", r.task, sizeof(r.task), "task").ok());
  r.state = TenantState::kRunning;
  r.adapter_slot = int32_t(n % 64);
  r.max_staleness = uint32_t(n % 7);
  r.group_size = uint32_t(n % 1000);
  r.prompts_per_step = uint32_t(n % 999);
  r.max_steps = uint32_t(n);
  r.admitted_unix_ms = int64_t(n) * 3;
  r.generation = n;
  std::memset(r.reason, char('a' + n % 26), sizeof(r.reason) - 1);
  return r;
}

bool Consistent(const TenantRecord& r) {
  const uint64_t n = r.generation;
  return r.adapter_slot == int32_t(n % 64) && r.max_staleness == uint32_t(n % 7) &&
         r.group_size == uint32_t(n % 1000) && r.prompts_per_step == uint32_t(n % 999) &&
         r.max_steps == uint32_t(n) && r.admitted_unix_ms == int64_t(n) * 3 &&
         r.reason[0] == char('a' + n % 26) && r.reason[sizeof(r.reason) - 2] == r.reason[0];
}

TEST(TenantTableTest, PutFindSnapshotAndFreeRows) {
  ScopedInstance inst;
  auto table = TenantTable::Create(inst.name());
  ASSERT_TRUE(table.ok()) << table.status().ToString();
  ASSERT_TRUE(table->Put(0, MakeRecord("alice", 1)).ok());
  ASSERT_TRUE(table->Put(5, MakeRecord("bob", 2)).ok());
  auto reader = TenantTable::Attach(inst.name());
  ASSERT_TRUE(reader.ok());
  EXPECT_EQ(*reader->Find("bob"), 5);
  EXPECT_EQ(reader->Find("carol").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(*reader->FreeRow(), 1);
  auto all = reader->Snapshot();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_STREQ(all[1].second.id, "bob");
  EXPECT_EQ(reader->Put(1, MakeRecord("x", 1)).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(table->Put(kMaxTenants, MakeRecord("x", 1)).code(), StatusCode::kInvalidArgument);
  TenantRecord r{};
  EXPECT_EQ(CopyField(std::string(64, 'x'), r.id, sizeof(r.id), "id").code(),
            StatusCode::kInvalidArgument);
}

// Property: while the writer rewrites a row thousands of times, a reader in another process
// always gets a row whose fields all come from the same write.
TEST(TenantTableTest, ReaderInAnotherProcessNeverSeesATornRow) {
  ScopedInstance inst;
  auto table = TenantTable::Create(inst.name());
  ASSERT_TRUE(table.ok());
  ASSERT_TRUE(table->Put(3, MakeRecord("t", 1)).ok());
  constexpr uint64_t kWrites = 200000;
  pid_t reader = ForkChild([&]() -> int {
    auto t = TenantTable::Attach(inst.name());
    if (!t.ok()) return 60;
    uint64_t last = 0;
    // A writer that stopped early (a failed ASSERT) leaves it a deadline, not an endless loop.
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (last < kWrites) {
      if (std::chrono::steady_clock::now() > give_up) return 64;
      auto r = t->Get(3);
      if (!r.ok()) return 61;
      if (!Consistent(*r)) return 62;
      if (r->generation < last) return 63;
      last = r->generation;
    }
    return 0;
  });
  for (uint64_t n = 2; n <= kWrites; ++n) ASSERT_TRUE(table->Put(3, MakeRecord("t", n)).ok());
  auto e = WaitChild(reader);
  EXPECT_TRUE(e.exited && e.code == 0) << e.code;
}

TEST(MetricsTest, StageWritesAndOthersReadSnapshots) {
  ScopedInstance inst;
  auto created = MetricsSegment::Create(inst.name(), "trainer");
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  auto writer = MetricsSegment::Attach(inst.name(), "trainer");
  ASSERT_TRUE(writer.ok());
  EngineMetrics e{};
  e.busy_ns = 123;
  e.items = 9;
  writer->StoreEngine(e);
  TenantMetrics t{};
  t.steps = 4;
  t.reward_sum = 2.5;
  t.staleness[1] = 3;
  ASSERT_TRUE(writer->StoreTenant(7, t).ok());
  EXPECT_EQ(writer->StoreTenant(-1, t).code(), StatusCode::kInvalidArgument);
  auto got = created->LoadEngine();
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->busy_ns, 123u);
  EXPECT_EQ(got->items, 9u);
  auto gt = created->LoadTenant(7);
  ASSERT_TRUE(gt.ok());
  EXPECT_EQ(gt->steps, 4u);
  EXPECT_EQ(gt->reward_sum, 2.5);
  EXPECT_EQ(gt->staleness[1], 3u);
  EXPECT_EQ(MetricsSegment::Attach(inst.name(), "rollout").status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace marlaas
