// SeqlockCell<T>: one value of a trivially copyable T in shared memory, written by a single
// writer process and read by any number of readers without blocking the writer. The value is
// held as relaxed atomic words, so a racing read is defined behaviour, only inconsistent, and
// the sequence check discards it. A writer that dies mid-store leaves the sequence odd: readers
// then fail at once when they see that its process is gone (the cell records the pid of the
// process storing), and otherwise by their deadline, never spinning forever; the next Store
// repairs it.
#pragma once

#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "base/deadline.h"
#include "shm/futex.h"

namespace marlaas {

template <typename T>
class SeqlockCell {
  static_assert(std::is_trivially_copyable_v<T>, "seqlock values are copied word by word");
  static constexpr size_t kWords = (sizeof(T) + 7) / 8;

 public:
  // Writer only.
  void Store(const T& value) {
    uint64_t words[kWords] = {};
    std::memcpy(words, &value, sizeof(T));
    uint64_t s = seq_.load(std::memory_order_relaxed);
    if (s & 1) ++s;  // the previous writer died mid-store; overwrite its half-written value
    writer_.store(int32_t(getpid()), std::memory_order_relaxed);
    // Release: a reader that sees the sequence odd also sees whose store it is.
    seq_.store(s + 1, std::memory_order_release);
    // SYNC POINT WRITE: the odd sequence is ordered before the data stores (release fence), so
    // a reader that sees new data also sees the sequence move.
    std::atomic_thread_fence(std::memory_order_release);
    for (size_t i = 0; i < kWords; ++i) words_[i].store(words[i], std::memory_order_relaxed);
    // Pairs with the reader's acquire load of seq_ at the start of its next attempt.
    seq_.store(s + 2, std::memory_order_release);
  }

  // Copies a consistent value into *out. Returns false when none could be had: at once once the
  // writer is seen to have died mid-store, and by `deadline` when it was descheduled mid-store
  // for that long. Spins briefly, then yields the CPU, so a reader never starves a writer that
  // shares its core.
  bool Load(T* out, Deadline deadline = Deadline::AfterMs(500)) const {
    uint64_t words[kWords];
    for (int attempt = 0;; ++attempt) {
      const uint64_t s1 = seq_.load(std::memory_order_acquire);
      if ((s1 & 1) == 0) {
        for (size_t i = 0; i < kWords; ++i) words[i] = words_[i].load(std::memory_order_relaxed);
        // SYNC POINT READ: the data loads complete before the second sequence read.
        std::atomic_thread_fence(std::memory_order_acquire);
        if (seq_.load(std::memory_order_relaxed) == s1) {
          std::memcpy(out, words, sizeof(T));
          return true;
        }
      }
      if (attempt < 64) {
        CpuRelax();
      } else {
        if (deadline.Expired()) return false;
        // Odd for this long: is the writer still there? (Every 256 attempts: a syscall.)
        if ((s1 & 1) != 0 && attempt % 256 == 64 && WriterGone()) return false;
        sched_yield();
      }
    }
  }

  // Number of completed stores.
  uint64_t stores() const { return seq_.load(std::memory_order_acquire) / 2; }

 private:
  friend struct SeqlockCellTestPeer;  // tests/shm/seqlock_test.cc: a store cut short

  bool WriterGone() const {
    const pid_t pid = writer_.load(std::memory_order_relaxed);
    return pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH;
  }

  std::atomic<uint64_t> seq_{0};
  std::atomic<int32_t> writer_{0};  // the pid of the process that stored last (or is storing)
  std::atomic<uint64_t> words_[kWords] = {};
};

}  // namespace marlaas
