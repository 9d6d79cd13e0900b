// AdapterFanout: the trainer's side of the NCCL adapter broadcast (DESIGN.md §2). When rollout
// replicas run on GPUs other than the trainer's, serve starts the trainer with
// --adapter-broadcast: after each publish to the adapter store the trainer also broadcasts the
// adapter's flat device buffer (shm/adapter_broadcast.h) to those replicas, tagged with the
// store slot's generation and version, so they skip the store's host copy.
//  - The adapter store stays the source of truth: a replica without the broadcast of the version
//    the store holds (it joined late, the group was being re-formed, a broadcast failed) reads
//    the store as before. So a failed broadcast is logged and never fails a step, and after a
//    member joins or dies the group is re-formed before the next broadcast without re-sending
//    older adapters (each tenant's next publish reaches the new group).
// Built with NCCL only; elsewhere Start() fails with a message naming the missing support.
// One thread (the trainer's).
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>

#include "base/status.h"

namespace marlaas::trainer {

class AdapterFanout {
 public:
  virtual ~AdapterFanout() = default;
  // Claims the root of the instance's broadcast group (segment "nccl", created by serve).
  static Result<std::unique_ptr<AdapterFanout>> Start(const std::string& instance);
  // Store slot `slot` (generation `generation`) now holds `version`; `flat` is that adapter's
  // contiguous fp32 device tensor, unchanged until this returns.
  virtual void Published(int slot, uint64_t generation, uint64_t version,
                         const at::Tensor& flat) = 0;
};

}  // namespace marlaas::trainer
