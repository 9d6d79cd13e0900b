#include "shm/broadcast_rendezvous.h"

#include <sched.h>

#include <new>
#include <thread>

namespace marlaas {
namespace {

// 3: announcements carry the tenant generation; 4: members' progress
constexpr uint32_t kRendezvousLayoutVersion = 4;

SegmentName RendezvousName(const std::string& instance) { return {instance, "nccl"}; }

}  // namespace

struct ShmRendezvous::Layout {
  std::atomic<uint64_t> root;  // ProcessIdentity::Pack() of the root; WRITER: the root
  // WRITER of slot m: the member that CAS-claimed it (identity 0 -> its own).
  std::atomic<uint64_t> members[kMaxBroadcastMembers];
  std::atomic<uint64_t> left[kMaxBroadcastMembers];               // WRITER of slot m: its member
  SeqlockCell<BroadcastProgress> progress[kMaxBroadcastMembers];  // WRITER of slot m: its member
  SeqlockCell<BroadcastRound> round;                              // WRITER: the root
  // SYNC POINT: release-incremented by the root after announcements[(n-1) % ring] is stored;
  // members acquire-load it before reading that entry.
  std::atomic<uint64_t> announced;
  SeqlockCell<BroadcastAnnouncement> announcements[kAnnouncementRing];  // WRITER: the root
};

Result<ShmRendezvous> ShmRendezvous::Create(const std::string& instance) {
  MARLAAS_ASSIGN_OR_RETURN(
      Segment seg, Segment::Create(RendezvousName(instance), SegmentKind::kRendezvous,
                                   kRendezvousLayoutVersion, sizeof(Layout), [](void* p, size_t) {
                                     new (p) Layout();
                                     return Status::Ok();
                                   }));
  return ShmRendezvous(std::move(seg));
}

Result<ShmRendezvous> ShmRendezvous::Attach(const std::string& instance) {
  MARLAAS_ASSIGN_OR_RETURN(Segment seg,
                           Segment::Attach(RendezvousName(instance), SegmentKind::kRendezvous,
                                           kRendezvousLayoutVersion));
  if (seg.payload_bytes() < sizeof(Layout))
    return Status(StatusCode::kCorrupt, "broadcast rendezvous segment is too small");
  return ShmRendezvous(std::move(seg));
}

ShmRendezvous::ShmRendezvous(Segment seg) : segment_(std::move(seg)) {}

ShmRendezvous::Layout* ShmRendezvous::layout() const {
  return static_cast<Layout*>(segment_.payload());
}

Status ShmRendezvous::ClaimRoot() {
  const uint64_t self = SelfIdentity().Pack();
  for (;;) {
    uint64_t current = layout()->root.load();
    if (current == self) return Status::Ok();
    if (current != 0 && IsAlive(ProcessIdentity::Unpack(current))) {
      return Status(StatusCode::kAlreadyExists,
                    "the broadcast group already has a live root (pid " +
                        std::to_string(ProcessIdentity::Unpack(current).pid) + ")");
    }
    if (layout()->root.compare_exchange_strong(current, self)) return Status::Ok();
  }
}

std::array<uint64_t, kMaxBroadcastMembers> ShmRendezvous::LiveMembers() {
  std::array<uint64_t, kMaxBroadcastMembers> live{};
  for (int m = 0; m < kMaxBroadcastMembers; ++m) {
    const uint64_t id = layout()->members[m].load();
    if (id != 0 && IsAlive(ProcessIdentity::Unpack(id))) live[size_t(m)] = id;
  }
  return live;
}

Status ShmRendezvous::PublishRound(const BroadcastRound& round) {
  layout()->round.Store(round);
  return Status::Ok();
}

uint64_t ShmRendezvous::NextSeq() { return layout()->announced.load() + 1; }

Result<uint64_t> ShmRendezvous::Announce(const BroadcastAnnouncement& a) {
  BroadcastAnnouncement stored = a;
  stored.seq = layout()->announced.load(std::memory_order_relaxed) + 1;
  layout()->announcements[(stored.seq - 1) % kAnnouncementRing].Store(stored);
  layout()->announced.store(stored.seq, std::memory_order_release);
  return stored.seq;
}

Result<int> ShmRendezvous::Register() {
  const uint64_t self = SelfIdentity().Pack();
  for (int m = 0; m < kMaxBroadcastMembers; ++m) {
    uint64_t id = layout()->members[m].load();
    if (id == self) return m;
    if (id != 0 && IsAlive(ProcessIdentity::Unpack(id))) continue;
    if (layout()->members[m].compare_exchange_strong(id, self)) {
      layout()->left[m].store(0);
      layout()->progress[m].Store(BroadcastProgress{});
      return m;
    }
  }
  return Status(StatusCode::kResourceExhausted,
                "all " + std::to_string(kMaxBroadcastMembers) +
                    " broadcast member slots are held by live processes");
}

void ShmRendezvous::Unregister(int member) {
  if (member < 0 || member >= kMaxBroadcastMembers) return;
  uint64_t self = SelfIdentity().Pack();
  layout()->members[member].compare_exchange_strong(self, 0);
}

void ShmRendezvous::Leave(int member, uint64_t generation) {
  if (member >= 0 && member < kMaxBroadcastMembers) layout()->left[member].store(generation);
}

uint64_t ShmRendezvous::LeftGeneration(int member) {
  return member >= 0 && member < kMaxBroadcastMembers ? layout()->left[member].load() : 0;
}

void ShmRendezvous::Progress(int member, const BroadcastProgress& p) {
  if (member >= 0 && member < kMaxBroadcastMembers) layout()->progress[member].Store(p);
}

BroadcastProgress ShmRendezvous::ProgressOf(int member) {
  BroadcastProgress p;
  if (member < 0 || member >= kMaxBroadcastMembers || !layout()->progress[member].Load(&p))
    return BroadcastProgress{};
  return p;
}

Result<BroadcastRound> ShmRendezvous::LatestRound() {
  BroadcastRound r;
  if (!layout()->round.Load(&r))
    return Status(StatusCode::kUnavailable, "the broadcast round is being rewritten");
  return r;
}

Result<BroadcastAnnouncement> ShmRendezvous::AnnouncementAt(uint64_t seq, Deadline deadline) {
  for (int spins = 0;; ++spins) {
    const uint64_t n = layout()->announced.load(std::memory_order_acquire);
    if (n >= seq) {
      if (n - seq >= uint64_t(kAnnouncementRing)) {
        return Status(StatusCode::kResourceExhausted, "announcement " + std::to_string(seq) +
                                                          " was overwritten (the root is at " +
                                                          std::to_string(n) + ")");
      }
      BroadcastAnnouncement a;
      if (layout()->announcements[(seq - 1) % kAnnouncementRing].Load(&a, deadline) && a.seq == seq)
        return a;
      if (a.seq > seq) {
        return Status(StatusCode::kResourceExhausted,
                      "announcement " + std::to_string(seq) + " was overwritten");
      }
    }
    if (deadline.Expired()) {
      return Status(StatusCode::kUnavailable, "no announcement " + std::to_string(seq) + " yet");
    }
    if (spins < 64) {
      sched_yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
}

bool ShmRendezvous::RootAlive() {
  const uint64_t id = layout()->root.load();
  return id != 0 && IsAlive(ProcessIdentity::Unpack(id));
}

}  // namespace marlaas
