#include "sandbox/sandbox_pool.h"

#include <pthread.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <list>
#include <mutex>
#include <thread>

namespace marlaas::sandbox {
namespace {

class Pool {
 public:
  void SetTarget(int n) {
    std::list<PreparedSandbox> dropped;  // destroyed outside the lock
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return;
    target_ = n > 0 ? size_t(n) : 0;
    while (ready_.size() > target_) dropped.splice(dropped.end(), ready_, ready_.begin());
    if (target_ > 0 && !started_) {
      started_ = true;
      // The refill thread forks the helpers, whose PDEATHSIG follows the forking thread: it
      // runs as long as the process.
      std::thread([this] { Refill(); }).detach();
    }
    cv_.notify_all();
  }

  std::optional<PreparedSandbox> Take(bool cgroup) {
    std::list<PreparedSandbox> taken;  // destroyed outside the lock
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto it = ready_.begin(); it != ready_.end(); ++it) {
        if (it->has_cgroup() != cgroup) continue;
        taken.splice(taken.begin(), ready_, it);
        cv_.notify_all();
        break;
      }
    }
    // One that failed in set-up is dropped: the caller starts afresh.
    if (taken.empty() || !taken.front().SetUpAlive()) return std::nullopt;
    return std::move(taken.front());
  }

  // At exit: no more refills, and the ready ones go (their roots and cgroups with them).
  void Drop() {
    std::list<PreparedSandbox> dropped;
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopped_ = true;
      target_ = 0;
      dropped.swap(ready_);
    }
  }

 private:
  void Refill() {
    const bool cgroup = HostCgroupSupport().pids || HostCgroupSupport().memory;
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stopped_ || ready_.size() < target_; });
      if (stopped_) return;
      lock.unlock();
      auto s = PreparedSandbox::Prepare(cgroup);
      lock.lock();
      if (s.ok() && !stopped_ && ready_.size() < target_) {
        ready_.push_back(std::move(s).value());
      } else if (s.ok()) {  // the pool shrank or stopped meanwhile: not needed
        lock.unlock();
        { PreparedSandbox unneeded = std::move(s).value(); }
        lock.lock();
      } else {
        std::fprintf(stderr, "marlaas sandbox pool: %s\n", s.status().ToString().c_str());
        lock.unlock();
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        lock.lock();
      }
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::list<PreparedSandbox> ready_;
  size_t target_ = 0;
  bool started_ = false;
  bool stopped_ = false;  // exiting
};

// Never destroyed: the refill thread may still run during exit. A forked child starts with an
// empty pool of its own; the parent's (its sandboxes, its refill thread) is not the child's to
// touch, so it is left alone.
Pool* current = nullptr;

Pool& ThePool() {
  static std::once_flag once;
  std::call_once(once, [] {
    // The cgroup pool's exit handler must run after ours (ours returns the run cgroups it holds):
    // handlers run in reverse order, so make sure it is registered first.
    (void)HostCgroupSupport();
    current = new Pool;
    std::atexit([] { ThePool().Drop(); });
    ::pthread_atfork(nullptr, nullptr, [] { current = new Pool; });
  });
  return *current;
}

}  // namespace

void SetPreparedSandboxPool(int n) { ThePool().SetTarget(n); }

std::optional<PreparedSandbox> TakePreparedSandbox(bool cgroup) { return ThePool().Take(cgroup); }

}  // namespace marlaas::sandbox
