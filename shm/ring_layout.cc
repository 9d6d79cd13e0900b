#include "shm/ring_layout.h"

#include <unistd.h>

#include <new>

namespace marlaas {

Status RingOptions::Validate() const {
  if (capacity_bytes < 4096 || (capacity_bytes & (capacity_bytes - 1)) != 0) {
    return Status(StatusCode::kInvalidArgument, "ring capacity " + std::to_string(capacity_bytes) +
                                                    " must be a power of two >= 4096");
  }
  if (max_record_bytes == 0 || 2 * RecordBytes(max_record_bytes) > capacity_bytes) {
    return Status(StatusCode::kInvalidArgument,
                  "ring max record " + std::to_string(max_record_bytes) +
                      " bytes is too large for capacity " + std::to_string(capacity_bytes) +
                      ": the capacity must hold two records of the maximum size");
  }
  return Status::Ok();
}

Result<Segment> CreateRing(const SegmentName& name, const RingOptions& options) {
  MARLAAS_RETURN_IF_ERROR(options.Validate());
  return Segment::Create(name, SegmentKind::kRing, kRingLayoutVersion,
                         kRingDataOffset + options.capacity_bytes,
                         [&](void* payload, size_t) -> Status {
                           auto* c = new (payload) RingControl();
                           c->capacity = options.capacity_bytes;
                           c->max_record = options.max_record_bytes;
                           c->data_offset = kRingDataOffset;
                           return Status::Ok();
                         });
}

Status ClaimRingEnd(std::atomic<uint64_t>* owner, const char* role, const std::string& ring) {
  const ProcessIdentity self = SelfIdentity();
  uint64_t current = owner->load(std::memory_order_acquire);
  for (;;) {
    if (current != 0) {
      const ProcessIdentity holder = ProcessIdentity::Unpack(current);
      if (IsAlive(holder)) {
        return Status(StatusCode::kAlreadyExists, "ring " + ring + " already has a live " + role +
                                                      " (pid " + std::to_string(holder.pid) + ")");
      }
    }
    // acq_rel: our takeover is ordered after the dead owner's last writes that we then read.
    if (owner->compare_exchange_weak(current, self.Pack(), std::memory_order_acq_rel)) {
      return Status::Ok();
    }
  }
}

void ReleaseRingEnd(std::atomic<uint64_t>* owner) {
  uint64_t self = SelfIdentity().Pack();
  owner->compare_exchange_strong(self, 0, std::memory_order_acq_rel);
}

}  // namespace marlaas
