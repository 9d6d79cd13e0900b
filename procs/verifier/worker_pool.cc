#include "procs/verifier/worker_pool.h"

#include <cmath>

#include "base/deadline.h"

namespace marlaas::verifier {

WorkerPool::WorkerPool(int workers, int cap, Fn run, Fn cancel)
    : cap_(cap), run_(std::move(run)), cancel_(std::move(cancel)) {
  for (int i = 0; i < workers; ++i) threads_.emplace_back([this] { Work(); });
}

WorkerPool::~WorkerPool() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void WorkerPool::Submit(std::shared_ptr<PoolJob> job) {
  {
    std::lock_guard<std::mutex> l(mu_);
    queue_.push_back(std::move(job));
  }
  cv_.notify_all();
}

void WorkerPool::Wake() {
  // Under the lock: a worker between its look at the queue and its wait would miss the notice
  // (a cancelled job then waited for the next completion).
  { std::lock_guard<std::mutex> l(mu_); }
  cv_.notify_all();
}

bool WorkerPool::IsDone(const PoolJob& job) {
  std::lock_guard<std::mutex> l(mu_);
  return job.done;
}

uint64_t WorkerPool::completions() {
  std::lock_guard<std::mutex> l(mu_);
  return completions_;
}

void WorkerPool::WaitForCompletion(uint64_t seen, std::chrono::microseconds timeout) {
  std::unique_lock<std::mutex> l(mu_);
  done_cv_.wait_for(l, timeout, [&] { return completions_ > seen || stop_; });
}

double WorkerPool::RecentUsage(const std::string& tenant, int64_t now) const {
  auto it = usage_.find(tenant);
  if (it == usage_.end()) return 0;
  return it->second.ns * std::exp(-double(now - it->second.at_ns) * 1e-10);  // tau 10 s
}

std::shared_ptr<PoolJob> WorkerPool::Pick() {
  const int64_t now = MonotonicNanos();
  auto best = queue_.end();
  double best_usage = 0;
  for (auto it = queue_.begin(); it != queue_.end(); ++it) {
    if ((*it)->cancelled.load()) {  // takes no time
      best = it;
      break;
    }
    const auto running = running_.find((*it)->tenant_key);
    if (running != running_.end() && running->second >= cap_) continue;
    const double usage = RecentUsage((*it)->tenant_key, now);
    if (best == queue_.end() || usage < best_usage) {
      best = it;
      best_usage = usage;
    }
  }
  if (best == queue_.end()) return nullptr;
  std::shared_ptr<PoolJob> job = *best;
  queue_.erase(best);
  return job;
}

void WorkerPool::Work() {
  std::unique_lock<std::mutex> l(mu_);
  for (;;) {
    std::shared_ptr<PoolJob> job;
    cv_.wait(l, [&] { return stop_ || (job = Pick()) != nullptr; });
    if (stop_) return;
    if (job->cancelled.load()) {
      cancel_(job.get());
      job->done = true;
      ++completions_;
      done_cv_.notify_all();
      continue;
    }
    ++running_[job->tenant_key];
    l.unlock();
    const int64_t t0 = MonotonicNanos();
    run_(job.get());
    l.lock();
    const int64_t end = MonotonicNanos();
    job->busy_ns = end - t0;
    job->done = true;
    if (--running_[job->tenant_key] == 0) running_.erase(job->tenant_key);
    Usage& u = usage_[job->tenant_key];
    u.ns = RecentUsage(job->tenant_key, end) + double(job->busy_ns);
    u.at_ns = end;
    // Tenants whose use has decayed to nothing are forgotten (a service sees many over its life).
    for (auto it = usage_.begin(); it != usage_.end();) {
      it = RecentUsage(it->first, end) < 1e3 && !running_.count(it->first) ? usage_.erase(it)
                                                                           : std::next(it);
    }
    ++completions_;
    cv_.notify_all();
    done_cv_.notify_all();
  }
}

}  // namespace marlaas::verifier
