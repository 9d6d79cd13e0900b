// Deadline: a point on the monotonic clock by which a wait must give up. Every wait on another
// process takes one, so no wait is unbounded. Plain value type; any thread.
#pragma once

#include <chrono>
#include <cstdint>

namespace marlaas {

class Deadline {
 public:
  using Clock = std::chrono::steady_clock;

  static Deadline After(std::chrono::nanoseconds d) { return Deadline(Clock::now() + d); }
  static Deadline AfterMs(int64_t ms) { return After(std::chrono::milliseconds(ms)); }
  // Already expired: a non-blocking attempt.
  static Deadline Now() { return Deadline(Clock::now()); }

  bool Expired() const { return Clock::now() >= when_; }
  std::chrono::nanoseconds Remaining() const {
    auto r = when_ - Clock::now();
    return r.count() > 0 ? std::chrono::duration_cast<std::chrono::nanoseconds>(r)
                         : std::chrono::nanoseconds(0);
  }
  Clock::time_point when() const { return when_; }

 private:
  explicit Deadline(Clock::time_point when) : when_(when) {}
  Clock::time_point when_;
};

inline int64_t MonotonicNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace marlaas
