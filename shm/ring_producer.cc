#include "shm/ring_producer.h"

#include <cstring>

#include "base/check.h"
#include "shm/checksum.h"

namespace marlaas {

Result<RingProducer> RingProducer::Attach(const SegmentName& name, const RingWaitOptions& wait) {
  MARLAAS_ASSIGN_OR_RETURN(Segment seg,
                           Segment::Attach(name, SegmentKind::kRing, kRingLayoutVersion));
  auto* control = static_cast<RingControl*>(seg.payload());
  MARLAAS_RETURN_IF_ERROR(ClaimRingEnd(&control->producer, "producer", name.SystemName()));
  control->producer_attaches.fetch_add(1, std::memory_order_relaxed);
  return RingProducer(std::move(seg), wait);
}

RingProducer::RingProducer(Segment segment, const RingWaitOptions& wait)
    : segment_(std::move(segment)),
      control_(static_cast<RingControl*>(segment_.payload())),
      name_(segment_.name().SystemName()),
      wait_(wait),
      capacity_(control_->capacity) {
  // Recovery: everything up to `tail` is committed; anything a dead producer wrote past it is
  // garbage we will overwrite. The last committed record's trailer holds its seq.
  write_pos_ = control_->tail.load(std::memory_order_acquire);
  cached_ack_ = control_->ack.load(std::memory_order_acquire);
  next_seq_ = 0;
  if (write_pos_ != 0) {
    uint64_t trailer;
    std::memcpy(&trailer, control_->data() + (write_pos_ - kRecordTrailerBytes) % capacity_,
                sizeof(trailer));
    next_seq_ = trailer + 1;
  }
}

RingProducer::RingProducer(RingProducer&& o) noexcept
    : segment_(std::move(o.segment_)),
      control_(o.control_),
      name_(std::move(o.name_)),
      wait_(o.wait_),
      capacity_(o.capacity_),
      write_pos_(o.write_pos_),
      cached_ack_(o.cached_ack_),
      next_seq_(o.next_seq_),
      reserved_pos_(o.reserved_pos_),
      reserved_len_(o.reserved_len_),
      reserved_(o.reserved_) {
  o.control_ = nullptr;
}

RingProducer::~RingProducer() {
  if (control_ != nullptr) ReleaseRingEnd(&control_->producer);
}

Result<uint64_t> RingProducer::Place(size_t len, Deadline deadline) {
  reserved_ = false;  // a new placement drops an uncommitted reservation
  if (len > control_->max_record) {
    return Status(StatusCode::kInvalidArgument,
                  "record of " + std::to_string(len) + " bytes exceeds the maximum of " +
                      std::to_string(control_->max_record) + " bytes of ring " + name_);
  }
  const uint64_t need = RecordBytes(len);
  const uint64_t room = capacity_ - write_pos_ % capacity_;
  // A record never wraps: skip (room < header) or pad (header fits, record does not) to the
  // next lap. Both sides apply the same rule, so the skip itself needs no marker.
  const bool wraps = room < need;
  const uint64_t header_pos = wraps ? write_pos_ + room : write_pos_;
  const uint64_t end = header_pos + need;
  if (end - cached_ack_ > capacity_) {
    auto has_room = [&] {
      // seq_cst: pairs with the consumer's seq_cst ack store in the waiting handshake.
      cached_ack_ = control_->ack.load(std::memory_order_seq_cst);
      return end - cached_ack_ <= capacity_;
    };
    const WaitSite site{&control_->space_signal, &control_->producer_waiting, &control_->consumer,
                        "consumer", "space"};
    MARLAAS_RETURN_IF_ERROR(WaitUntil(has_room, site, wait_, deadline).Annotate("ring " + name_));
  }
  if (wraps && room >= sizeof(RecordHeader)) {
    RecordHeader pad{uint32_t(room), kPadType, next_seq_, 0, 0};
    std::memcpy(control_->data() + write_pos_ % capacity_, &pad, sizeof(pad));
  }
  return header_pos;
}

void RingProducer::Publish(uint64_t header_pos, uint32_t type, uint32_t len, uint32_t checksum) {
  unsigned char* slot = control_->data() + header_pos % capacity_;
  const RecordHeader header{len, type, next_seq_, checksum, 0};
  std::memcpy(slot, &header, sizeof(header));
  std::memcpy(slot + sizeof(RecordHeader) + AlignUp8(len), &next_seq_, sizeof(next_seq_));
  const uint64_t end = header_pos + RecordBytes(len);
  // SYNC POINT WRITE: tail. Releases the record bytes to the consumer's acquire of tail; seq_cst
  // so the waiting-flag read below cannot move before it (lost wake-up handshake).
  control_->tail.store(end, std::memory_order_seq_cst);
  write_pos_ = end;
  ++next_seq_;
  SignalIfWaiting(&control_->consumer_waiting, &control_->data_signal);
}

Status RingProducer::Push(uint32_t type, const void* data, size_t len, Deadline deadline) {
  if (type == kPadType)
    return Status(StatusCode::kInvalidArgument, "record type 0xffffffff is reserved");
  MARLAAS_ASSIGN_OR_RETURN(uint64_t pos, Place(len, deadline));
  unsigned char* payload = control_->data() + pos % capacity_ + sizeof(RecordHeader);
  const uint64_t sum =
      CopyWithChecksum64(payload, data, len, RecordSeed(type, uint32_t(len), next_seq_));
  Publish(pos, type, uint32_t(len), Fold32(sum));
  return Status::Ok();
}

Result<unsigned char*> RingProducer::Reserve(size_t len, Deadline deadline) {
  MARLAAS_ASSIGN_OR_RETURN(uint64_t pos, Place(len, deadline));
  reserved_ = true;
  reserved_pos_ = pos;
  reserved_len_ = uint32_t(len);
  return control_->data() + pos % capacity_ + sizeof(RecordHeader);
}

Status RingProducer::Commit(uint32_t type) {
  if (!reserved_) return Status(StatusCode::kFailedPrecondition, "Commit without Reserve");
  if (type == kPadType)
    return Status(StatusCode::kInvalidArgument, "record type 0xffffffff is reserved");
  const unsigned char* payload =
      control_->data() + reserved_pos_ % capacity_ + sizeof(RecordHeader);
  const uint64_t sum =
      Checksum64(payload, reserved_len_, RecordSeed(type, reserved_len_, next_seq_));
  reserved_ = false;
  Publish(reserved_pos_, type, reserved_len_, Fold32(sum));
  return Status::Ok();
}

}  // namespace marlaas
