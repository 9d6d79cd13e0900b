// How the members of the adapter-broadcast group find each other and agree on what comes next.
// The group: one root (the trainer, rank 0) and members (rollout processes on other GPUs). The
// root forms a communicator generation from the live members and publishes its NCCL unique id
// with each member's rank (a Round); before each broadcast it announces what the broadcast
// carries, so every member calls the same collective with the same size in the same order.
//
// BroadcastRendezvous is the interface shm/adapter_broadcast.h uses, so a multi-node group can
// meet over a TCP rendezvous later (README, "Multi-node"); ShmRendezvous implements it in the
// service's shared memory (segment "nccl") for one node.
//
// Who calls what: the root calls LiveMembers, PublishRound and Announce; a member calls Register,
// LatestRound, AnnouncementAt, Leave and RootAlive. Every wait is bounded by the caller's Deadline.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "base/deadline.h"
#include "base/process.h"
#include "base/status.h"
#include "shm/segment.h"
#include "shm/seqlock.h"

namespace marlaas {

inline constexpr int kMaxBroadcastMembers = 32;
inline constexpr int kBroadcastIdBytes = 128;  // NCCL_UNIQUE_ID_BYTES
inline constexpr int kAnnouncementRing = 16;

struct BroadcastRound {
  uint64_t generation = 0;  // 0: none yet
  int32_t world_size = 0;   // 1 + members with a rank
  // rank_of[m]: the rank of member slot m in this generation (1..world_size-1), or -1.
  std::array<int32_t, kMaxBroadcastMembers> rank_of{};
  // member_identity[m]: who held slot m when the round was formed (a new holder is not in it).
  std::array<uint64_t, kMaxBroadcastMembers> member_identity{};
  std::array<unsigned char, kBroadcastIdBytes> id{};
  uint64_t root_identity = 0;
  uint64_t first_seq = 0;  // the first announcement of this generation
};

// How far a member got: the generation it began to join (before its NCCL init) and the last
// announcement whose collective it entered (before its ncclBroadcast) in that generation (0:
// none yet). When a step of the group times out, the root blames the members that never got to
// it: they are silent (alive but not taking part), and a silent member is struck like one that
// left (shm/broadcast_strikes.h).
struct BroadcastProgress {
  uint64_t generation = 0;
  uint64_t seq = 0;
};

struct BroadcastAnnouncement {
  uint64_t seq = 0;  // 1, 2, ... over the life of the group
  uint64_t generation = 0;
  int32_t slot = -1;               // adapter-store slot (tenant row)
  uint64_t tenant_generation = 0;  // of the slot's tenant (a reused slot is another tenant's)
  uint64_t version = 0;
  uint64_t bytes = 0;
};

class BroadcastRendezvous {
 public:
  virtual ~BroadcastRendezvous() = default;
  // Root. The identities of live registered members, by member slot (0 for an empty or dead one).
  virtual std::array<uint64_t, kMaxBroadcastMembers> LiveMembers() = 0;
  virtual Status PublishRound(const BroadcastRound& round) = 0;
  // The sequence number the next announcement gets (1 for the first ever).
  virtual uint64_t NextSeq() = 0;
  // Announces the next broadcast under NextSeq() (a.seq is ignored) and returns its number.
  virtual Result<uint64_t> Announce(const BroadcastAnnouncement& a) = 0;

  // Member. Takes a member slot for this process (kResourceExhausted when all are held by live
  // processes); Unregister gives it back.
  virtual Result<int> Register() = 0;
  virtual void Unregister(int member) = 0;
  // A member gave up on `generation` (its communicator was aborted): the root forms a new one.
  virtual void Leave(int member, uint64_t generation) = 0;
  // Root: the last generation member slot `member` left (0: none).
  virtual uint64_t LeftGeneration(int member) = 0;
  // Member: records its progress (BroadcastProgress). Root: reads it (zeros: none yet, or
  // unreadable).
  virtual void Progress(int member, const BroadcastProgress& p) = 0;
  virtual BroadcastProgress ProgressOf(int member) = 0;
  virtual Result<BroadcastRound> LatestRound() = 0;
  // The announcement with sequence `seq`, once the root has made it; kUnavailable at `deadline`,
  // kResourceExhausted when the ring has moved past it.
  virtual Result<BroadcastAnnouncement> AnnouncementAt(uint64_t seq, Deadline deadline) = 0;
  virtual bool RootAlive() = 0;
};

// One node: the state lives in segment /marlaas.<instance>.nccl.
class ShmRendezvous : public BroadcastRendezvous {
 public:
  // serve creates it with the other segments; the root and the members attach.
  static Result<ShmRendezvous> Create(const std::string& instance);
  static Result<ShmRendezvous> Attach(const std::string& instance);
  // The root (the trainer, also after a restart) takes the role; kAlreadyExists while another
  // live process holds it. Members keep their slots across a change of root.
  Status ClaimRoot();

  std::array<uint64_t, kMaxBroadcastMembers> LiveMembers() override;
  Status PublishRound(const BroadcastRound& round) override;
  uint64_t NextSeq() override;
  Result<uint64_t> Announce(const BroadcastAnnouncement& a) override;
  Result<int> Register() override;
  void Unregister(int member) override;
  void Leave(int member, uint64_t generation) override;
  uint64_t LeftGeneration(int member) override;
  void Progress(int member, const BroadcastProgress& p) override;
  BroadcastProgress ProgressOf(int member) override;
  Result<BroadcastRound> LatestRound() override;
  Result<BroadcastAnnouncement> AnnouncementAt(uint64_t seq, Deadline deadline) override;
  bool RootAlive() override;

 private:
  struct Layout;
  explicit ShmRendezvous(Segment seg);
  Layout* layout() const;
  Segment segment_;
};

}  // namespace marlaas
