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
    std::lock_guard<std::mutex> lock(mu_);
    target_ = n > 0 ? size_t(n) : 0;
    while (ready_.size() > target_) ready_.pop_front();
    if (target_ > 0 && !started_) {
      started_ = true;
      // The refill thread forks the helpers, whose PDEATHSIG follows the forking thread: it
      // runs as long as the process.
      std::thread([this] { Refill(); }).detach();
    }
    cv_.notify_all();
  }

  std::optional<PreparedSandbox> Take(bool cgroup) {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = ready_.begin(); it != ready_.end(); ++it) {
      if (it->has_cgroup() != cgroup) continue;
      PreparedSandbox s = std::move(*it);
      ready_.erase(it);
      cv_.notify_all();
      if (!s.SetUpAlive()) return std::nullopt;  // it failed in set-up: the caller starts afresh
      return s;
    }
    return std::nullopt;
  }

  void Drop() {
    std::lock_guard<std::mutex> lock(mu_);
    target_ = 0;
    ready_.clear();
  }

 private:
  void Refill() {
    const bool cgroup = HostCgroupSupport().pids || HostCgroupSupport().memory;
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return ready_.size() < target_; });
      lock.unlock();
      auto s = PreparedSandbox::Prepare(cgroup);
      lock.lock();
      if (s.ok()) {
        ready_.push_back(std::move(s).value());
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
