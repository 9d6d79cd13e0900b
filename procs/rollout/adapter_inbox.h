// AdapterInbox: a rollout replica's side of the NCCL adapter broadcast (DESIGN.md §2;
// procs/trainer/adapter_fanout.h is the trainer's). serve starts a replica on a GPU other than
// the trainer's with --adapter-broadcast; the inbox joins the instance's broadcast group and, on
// a thread of its own, receives every adapter the trainer broadcasts into device memory, keeping
// the latest per store slot. The rollout takes an adapter from it only when it is exactly the
// version the store publishes for the slot's current tenant (slot generation and version match):
// otherwise (missed, older, or a reused slot's previous tenant) it reads the store as before.
// Take() may be called from any thread; the receiving thread stops in the destructor.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <memory>
#include <string>

#include "base/status.h"

namespace marlaas::rollout {

// What the inbox holds for one slot.
struct InboxEntry {
  uint64_t generation = 0;
  uint64_t version = 0;
  at::Tensor flat;  // fp32, on the replica's device; undefined when empty
};

// Whether `entry` is the adapter a slot's store now publishes: same slot generation, same
// version, and as many elements as the slot's layout. Pure; the rule Take() applies.
bool InboxEntryMatches(const InboxEntry& entry, uint64_t generation, uint64_t version,
                       int64_t elements);

class AdapterInbox {
 public:
  virtual ~AdapterInbox() = default;
  // Joins the broadcast group of `instance` (segment "nccl") as a member receiving onto CUDA
  // device `device` (the rollout's model device).
  static Result<std::unique_ptr<AdapterInbox>> Start(const std::string& instance, int device);
  // The received adapter of `slot` if InboxEntryMatches; an undefined tensor otherwise. The
  // entry is handed over (taken out of the inbox).
  virtual at::Tensor Take(int slot, uint64_t generation, uint64_t version, int64_t elements) = 0;
};

}  // namespace marlaas::rollout
