#include "shm/broadcast_strikes.h"

namespace marlaas {

bool BroadcastStrikes::Silent(const BroadcastProgress& p, uint64_t generation, uint64_t seq) {
  if (p.generation != generation) return p.generation < generation;
  return seq > 0 && p.seq < seq;
}

std::vector<int> BroadcastStrikes::EndGeneration(const Slots& members, const Flags& failed) {
  std::vector<int> now_left_out;
  for (size_t m = 0; m < members.size(); ++m) {
    if (members[m] == 0) continue;
    if (whose_[m] != members[m]) {  // a new process in the slot starts from 0
      whose_[m] = members[m];
      strikes_[m] = 0;
    }
    if (!failed[m]) {
      strikes_[m] = 0;  // it got through the generation
      continue;
    }
    if (++strikes_[m] >= kMaxStrikes && left_out_[m] != members[m]) {
      left_out_[m] = members[m];
      now_left_out.push_back(int(m));
    }
  }
  return now_left_out;
}

BroadcastStrikes::Slots BroadcastStrikes::Eligible(Slots live) const {
  for (size_t m = 0; m < live.size(); ++m) {
    if (live[m] != 0 && live[m] == left_out_[m]) live[m] = 0;
  }
  return live;
}

}  // namespace marlaas
