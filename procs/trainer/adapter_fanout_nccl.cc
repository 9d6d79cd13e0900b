// The NCCL AdapterFanout (built with CUDA and NCCL; adapter_fanout_none.cc otherwise).
#include "procs/common/pipeline.h"
#include "procs/trainer/adapter_fanout.h"
#include "shm/adapter_broadcast.h"
#include "shm/broadcast_rendezvous.h"

namespace marlaas::trainer {
namespace {

constexpr int64_t kFormMs = 20'000;       // members initialise NCCL within this
constexpr int64_t kBroadcastMs = 10'000;  // one adapter reaches every member within this

class NcclFanout : public AdapterFanout {
 public:
  explicit NcclFanout(std::unique_ptr<ShmRendezvous> rendezvous)
      : rendezvous_(std::move(rendezvous)), caster_(rendezvous_.get(), BroadcastOptions{}) {}

  void Published(int slot, uint64_t generation, uint64_t version, const at::Tensor& flat) override {
    if (caster_.NeedsForming()) {
      const Status formed = caster_.Form(Deadline::AfterMs(kFormMs));
      if (!formed.ok()) {
        pipeline::StageLog("trainer", "adapter broadcast: forming the group: %s",
                           formed.ToString().c_str());
        return;
      }
      pipeline::StageLog("trainer", "adapter broadcast: generation %llu with %d member(s)",
                         (unsigned long long)caster_.generation(), caster_.members());
    }
    const Status sent = caster_.Broadcast(slot, generation, version, flat.data_ptr(),
                                          size_t(flat.numel()) * flat.element_size(),
                                          Deadline::AfterMs(kBroadcastMs));
    if (!sent.ok()) {
      pipeline::StageLog("trainer", "adapter broadcast of slot %d version %llu: %s", slot,
                         (unsigned long long)version, sent.ToString().c_str());
    }
  }

 private:
  std::unique_ptr<ShmRendezvous> rendezvous_;  // before caster_, which points at it
  AdapterBroadcaster caster_;
};

}  // namespace

Result<std::unique_ptr<AdapterFanout>> AdapterFanout::Start(const std::string& instance) {
  MARLAAS_ASSIGN_OR_RETURN(ShmRendezvous rendezvous, ShmRendezvous::Attach(instance));
  MARLAAS_RETURN_IF_ERROR(rendezvous.ClaimRoot());
  return std::unique_ptr<AdapterFanout>(
      new NcclFanout(std::make_unique<ShmRendezvous>(std::move(rendezvous))));
}

}  // namespace marlaas::trainer
