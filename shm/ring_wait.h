// The blocking wait shared by both ends of a Ring: spin briefly, then sleep on a futex in slices,
// checking between slices that the peer process is still alive. Never unbounded: it returns
// kTimeout at the deadline and kPeerDead as soon as a slice finds the peer gone. With a deadline
// already passed it is a poll: kTimeout at once unless ready (a dead peer is found by a wait).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

#include "base/deadline.h"
#include "base/process.h"
#include "base/status.h"
#include "shm/futex.h"

namespace marlaas {

struct RingWaitOptions {
  // Busy-poll this long before sleeping: a reply that comes sooner skips the futex round trip.
  std::chrono::nanoseconds spin{std::chrono::microseconds(20)};
  // A sleeper wakes this often to check that its peer is alive.
  std::chrono::milliseconds liveness_interval{10};
};

struct WaitSite {
  std::atomic<uint32_t>* signal;      // futex word the peer bumps
  std::atomic<uint32_t>* waiting;     // our flag: set while we may sleep
  const std::atomic<uint64_t>* peer;  // the peer's packed ProcessIdentity
  const char* peer_role;              // "producer" / "consumer", for messages
  const char* waiting_for;            // "data" / "space", for messages
};

// Waits until ready() returns true. ready() must read the peer's cursor with seq_cst.
template <typename Ready>
Status WaitUntil(const Ready& ready, const WaitSite& site, const RingWaitOptions& opts,
                 Deadline deadline) {
  auto timed_out = [&](bool attached) {
    return Status(
        StatusCode::kTimeout,
        std::string("timed out waiting for ") + site.waiting_for +
            (attached ? std::string() : std::string(" (no ") + site.peer_role + " attached)"));
  };
  if (ready()) return Status::Ok();
  // A poll (deadline already passed) answers at once: no spin, no liveness check (a read of
  // /proc). Stage loops poll their rings many times a millisecond; spinning here cost each poll
  // 20 us of CPU.
  if (deadline.Expired()) {
    return timed_out(!ProcessIdentity::Unpack(site.peer->load(std::memory_order_acquire)).empty());
  }
  const int64_t spin_until =
      MonotonicNanos() +
      std::min<int64_t>(opts.spin.count(), std::chrono::nanoseconds(deadline.Remaining()).count());
  while (MonotonicNanos() < spin_until) {
    for (int i = 0; i < 64; ++i) CpuRelax();
    if (ready()) return Status::Ok();
  }
  for (;;) {
    const ProcessIdentity peer =
        ProcessIdentity::Unpack(site.peer->load(std::memory_order_acquire));
    if (!peer.empty() && !IsAlive(peer)) {
      if (ready()) return Status::Ok();
      return Status(StatusCode::kPeerDead, std::string(site.peer_role) + " (pid " +
                                               std::to_string(peer.pid) +
                                               ") exited while we "
                                               "waited for " +
                                               site.waiting_for);
    }
    if (deadline.Expired()) return timed_out(!peer.empty());
    const uint32_t seen = site.signal->load(std::memory_order_acquire);
    site.waiting->store(1, std::memory_order_seq_cst);
    if (ready()) {
      site.waiting->store(0, std::memory_order_relaxed);
      return Status::Ok();
    }
    auto slice = std::min<std::chrono::nanoseconds>(deadline.Remaining(), opts.liveness_interval);
    FutexWait(site.signal, seen, slice);
    site.waiting->store(0, std::memory_order_relaxed);
    if (ready()) return Status::Ok();
  }
}

// The waker's half: after a seq_cst store of its cursor, wake the peer if it may be asleep.
inline void SignalIfWaiting(std::atomic<uint32_t>* waiting, std::atomic<uint32_t>* signal) {
  if (waiting->load(std::memory_order_seq_cst) != 0) {
    signal->fetch_add(1, std::memory_order_release);
    FutexWakeAll(signal);
  }
}

}  // namespace marlaas
