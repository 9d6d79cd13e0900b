#include "procs/rollout/adapter_inbox.h"

namespace marlaas::rollout {

bool InboxEntryMatches(const InboxEntry& entry, uint64_t generation, uint64_t version,
                       int64_t elements) {
  return entry.flat.defined() && entry.generation == generation && entry.version == version &&
         entry.flat.numel() == elements;
}

}  // namespace marlaas::rollout
