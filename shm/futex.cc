#include "shm/futex.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>

namespace marlaas {

FutexWaitOutcome FutexWait(std::atomic<uint32_t>* word, uint32_t expected,
                           std::chrono::nanoseconds timeout) {
  if (timeout.count() <= 0) return FutexWaitOutcome::kTimedOut;
  struct timespec ts;
  ts.tv_sec = static_cast<time_t>(timeout.count() / 1000000000);
  ts.tv_nsec = static_cast<long>(timeout.count() % 1000000000);
  long rc = ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts,
                      nullptr, 0);
  if (rc == 0) return FutexWaitOutcome::kWoken;
  switch (errno) {
    case EAGAIN:
      return FutexWaitOutcome::kValueChanged;
    case ETIMEDOUT:
      return FutexWaitOutcome::kTimedOut;
    default:
      return FutexWaitOutcome::kInterrupted;
  }
}

void FutexWakeAll(std::atomic<uint32_t>* word) {
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT32_MAX, nullptr, nullptr,
            0);
}

}  // namespace marlaas
