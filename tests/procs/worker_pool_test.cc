// The verifier's worker pool (procs/verifier/worker_pool.h), with real threads: a tenant's cap,
// the least-used tenant first, and cancelled jobs handed back without running.
#include "procs/verifier/worker_pool.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace marlaas::verifier {
namespace {

// Jobs that run until released, recording the order in which they started.
class Gate {
 public:
  void Run(PoolJob* job) {
    std::unique_lock<std::mutex> l(mu_);
    started_.push_back(Name(job));
    cv_.notify_all();
    cv_.wait(l, [&] { return open_.count(Name(job)) != 0; });
  }
  void Cancel(PoolJob* job) {
    std::lock_guard<std::mutex> l(mu_);
    cancelled_.push_back(Name(job));
  }
  void Open(const std::string& name) {
    std::lock_guard<std::mutex> l(mu_);
    open_.insert(name);
    cv_.notify_all();
  }
  // Waits (at most 10 s) until `n` jobs have started; their names in order.
  std::vector<std::string> Started(size_t n) {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait_for(l, std::chrono::seconds(10), [&] { return started_.size() >= n; });
    return started_;
  }
  std::vector<std::string> cancelled() {
    std::lock_guard<std::mutex> l(mu_);
    return cancelled_;
  }

 private:
  struct Named : PoolJob {
    std::string name;
  };
  static std::string Name(PoolJob* job) { return static_cast<Named*>(job)->name; }

 public:
  static std::shared_ptr<PoolJob> Job(const std::string& tenant, const std::string& name) {
    auto job = std::make_shared<Named>();
    job->tenant_key = tenant;
    job->name = name;
    return job;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> started_, cancelled_;
  std::set<std::string> open_;
};

TEST(WorkerPoolTest, TheTenantThatUsedTheWorkersLeastGoesFirst) {
  Gate gate;
  WorkerPool pool(
      2, 1, [&](PoolJob* j) { gate.Run(j); }, [&](PoolJob* j) { gate.Cancel(j); });
  // Two slow tenants hold both workers (one each: their cap).
  pool.Submit(Gate::Job("a", "a1"));
  pool.Submit(Gate::Job("b", "b1"));
  ASSERT_EQ(gate.Started(2).size(), 2u);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // they have used the workers
  // Queued behind more of theirs: a quick tenant's job.
  pool.Submit(Gate::Job("a", "a2"));
  pool.Submit(Gate::Job("b", "b2"));
  pool.Submit(Gate::Job("c", "c1"));
  const uint64_t seen = pool.completions();
  gate.Open("a1");
  // The freed worker takes c1 (c used none), not a2 (first in the queue, under a's cap again).
  const std::vector<std::string> started = gate.Started(3);
  ASSERT_EQ(started.size(), 3u);
  EXPECT_EQ(started[2], "c1");
  pool.WaitForCompletion(seen, std::chrono::seconds(10));
  for (const char* name : {"b1", "c1", "a2", "b2"}) gate.Open(name);
  EXPECT_EQ(gate.Started(5).size(), 5u);
}

TEST(WorkerPoolTest, ACancelledJobIsHandedBackWithoutRunningPastItsTenantsCap) {
  Gate gate;
  WorkerPool pool(
      2, 1, [&](PoolJob* j) { gate.Run(j); }, [&](PoolJob* j) { gate.Cancel(j); });
  auto a1 = Gate::Job("a", "a1"), a2 = Gate::Job("a", "a2");
  pool.Submit(a1);
  ASSERT_EQ(gate.Started(1).size(), 1u);
  pool.Submit(a2);  // waits: a is at its cap
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(pool.IsDone(*a2));
  a2->cancelled.store(true);
  pool.Wake();
  for (int i = 0; i < 1000 && !pool.IsDone(*a2); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_TRUE(pool.IsDone(*a2));
  EXPECT_EQ(gate.cancelled(), std::vector<std::string>{"a2"});
  EXPECT_EQ(gate.Started(1), std::vector<std::string>{"a1"});  // a2 never ran
  EXPECT_FALSE(pool.IsDone(*a1));
  gate.Open("a1");
}

}  // namespace
}  // namespace marlaas::verifier
