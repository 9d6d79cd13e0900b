// Shared set-up of the multi-process pipeline tests: the tiny base model (pretrained once per
// build tree and cached, under a file lock so concurrent test processes do not race), a fresh
// state dir per test, a service on a unique instance, and helpers that drive it.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "procs/serve/service.h"
#include "proto/marlaas.pb.h"

namespace marlaas::testing {

// The cached tiny base model folder (pretrains on first use).
std::string TestBaseModel();

// A job on a built-in task with small, fast settings.
pb::JobSpec SmallJob(const std::string& tenant, const std::string& task, int steps, uint64_t seed);

class PipelineTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;
  // The service's options on the test's instance and state dir (what StartService starts).
  serve::ServiceOptions Options() const;
  // Starts the service on the test's instance and state dir.
  void StartService();
  // Calls Tick() every 20 ms (and `each` after it) until `done` or `timeout_s`; false on timeout.
  bool RunUntil(const std::function<bool()>& done, double timeout_s,
                const std::function<void()>& each = nullptr);
  // True once every tenant's trainer has retired (trained or dropped) all the groups its
  // rollout committed.
  bool Drained() const;
  // Group ids from a tenant's produced.log, and from its final checkpoint's retired set.
  std::set<uint64_t> Produced(const std::string& tenant) const;
  std::set<uint64_t> Retired(const std::string& tenant) const;
  std::string TenantDir(const std::string& tenant) const;
  std::string ReadAll(const std::string& path) const;

  uint64_t memory_budget_bytes_ = 0;    // StartService's admission budget (0: none)
  int max_tenants_ = 16;                // StartService's tenants at a time
  int rollout_replicas_ = 1;            // StartService's rollout processes
  int env_latency_ms_ = 0;              // StartService's modelled tool/environment latency
  int64_t stall_timeout_ms_ = 300'000;  // StartService's stall watchdog
  std::string instance_;
  std::string state_dir_;
  std::unique_ptr<serve::Service> service_;
};

// The lines of a file, without their '\n' (none when it does not exist).
std::vector<std::string> LinesOf(const std::string& path);

}  // namespace marlaas::testing
