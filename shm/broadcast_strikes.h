// The broadcast root's count of members that fail generations of the group in a row
// (shm/adapter_broadcast.h). A member fails a generation when it leaves it (its communicator
// was aborted) or when it is silent at a step of the group that timed out: registered and alive,
// but it never began to join the generation, or never entered the broadcast the others waited
// in (BroadcastProgress). Without the second rule a member that stays registered but stops
// taking part made every broadcast wait the collective timeout, generation after generation.
// A member that fails kMaxStrikes generations in a row is left out until another process
// registers in its slot (a restarted rollout); the others are not held up by it. A left-out
// rollout replica reads adapters from the adapter store instead. Root thread only.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "shm/broadcast_rendezvous.h"

namespace marlaas {

class BroadcastStrikes {
 public:
  static constexpr int kMaxStrikes = 3;
  using Slots = std::array<uint64_t, kMaxBroadcastMembers>;  // identity per member slot, 0: none
  using Flags = std::array<bool, kMaxBroadcastMembers>;

  // Whether a member whose progress is `p` never got to step `seq` of `generation` (seq 0: the
  // forming of the generation, which it joins; otherwise the announcement it broadcasts).
  static bool Silent(const BroadcastProgress& p, uint64_t generation, uint64_t seq);

  // The generation of `members` ended; failed[m]: member slot m left it or was silent. Returns
  // the slots left out now (each once).
  std::vector<int> EndGeneration(const Slots& members, const Flags& failed);
  // `live` less the members left out (a slot's new process is not).
  Slots Eligible(Slots live) const;

 private:
  std::array<int, kMaxBroadcastMembers> strikes_{};
  Slots whose_{};  // the process strikes_[m] counts
  Slots left_out_{};
};

}  // namespace marlaas
