// Thin wrappers over the Linux futex syscall on a 32-bit word in shared memory (not
// FUTEX_PRIVATE: waiter and waker are different processes). Callers build their own protocol
// around these: see Ring for the waiting-flag handshake that prevents lost wake-ups.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace marlaas {

static_assert(sizeof(std::atomic<uint32_t>) == 4 && std::atomic<uint32_t>::is_always_lock_free,
              "futex words must be plain lock-free 32-bit atomics");

enum class FutexWaitOutcome { kWoken, kValueChanged, kTimedOut, kInterrupted };

// Sleeps while *word == expected, for at most `timeout`.
FutexWaitOutcome FutexWait(std::atomic<uint32_t>* word, uint32_t expected,
                           std::chrono::nanoseconds timeout);
// Wakes every process sleeping on `word`.
void FutexWakeAll(std::atomic<uint32_t>* word);

// One CPU relax hint for spin loops.
inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace marlaas
