// The verifier's worker threads. Jobs are queued by the stage's loop and run by `workers`
// threads, at most `cap` of one tenant's at once (so that one slow tenant never holds every
// worker). Of the tenants under their cap, the one that used the workers least lately (worker
// time, decayed with a 10 s time constant) goes first, its oldest job: in plain queue order, two
// tenants whose verifiers time out kept both workers, and a healthy tenant's quick jobs waited
// seconds behind each of theirs. A job cancelled before it runs (its tenant left) is not run: it
// is handed to `cancel` at once, whatever its tenant's cap. Thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace marlaas::verifier {

struct PoolJob {
  virtual ~PoolJob() = default;
  std::string tenant_key;  // the unit of fairness
  // Set by anyone: if the job has not started, it is cancelled rather than run.
  std::atomic<bool> cancelled{false};
  // Set by the pool (read through WorkerPool::IsDone).
  bool done = false;
  int64_t busy_ns = 0;  // wall time it ran
};

class WorkerPool {
 public:
  using Fn = std::function<void(PoolJob*)>;
  // `run` runs a job on a worker thread; `cancel` fills in a cancelled one's outcome instead,
  // with the pool's lock held (it must not call the pool).
  WorkerPool(int workers, int cap, Fn run, Fn cancel);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  void Submit(std::shared_ptr<PoolJob> job);
  // Workers look at the queue again (jobs were cancelled: they may be taken past the cap).
  void Wake();
  bool IsDone(const PoolJob& job);
  // Jobs finished so far; WaitForCompletion returns once more than `seen` have (or at `timeout`).
  uint64_t completions();
  void WaitForCompletion(uint64_t seen, std::chrono::microseconds timeout);

 private:
  void Work();
  double RecentUsage(const std::string& tenant, int64_t now) const;  // under mu_
  // The next job to run or cancel, under mu_; null when none may start now.
  std::shared_ptr<PoolJob> Pick();

  const int cap_;
  const Fn run_, cancel_;
  std::mutex mu_;
  std::condition_variable cv_;       // workers: a job was queued or a tenant's job finished
  std::condition_variable done_cv_;  // the stage's loop: a job finished
  uint64_t completions_ = 0;
  std::deque<std::shared_ptr<PoolJob>> queue_;
  std::map<std::string, int> running_;
  struct Usage {
    double ns = 0;
    int64_t at_ns = 0;
  };
  std::map<std::string, Usage> usage_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace marlaas::verifier
