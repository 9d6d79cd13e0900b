#include "shm/ring_consumer.h"

#include <cstring>

#include "base/check.h"
#include "shm/checksum.h"

namespace marlaas {

Result<RingConsumer> RingConsumer::Attach(const SegmentName& name, const RingWaitOptions& wait) {
  MARLAAS_ASSIGN_OR_RETURN(Segment seg,
                           Segment::Attach(name, SegmentKind::kRing, kRingLayoutVersion));
  auto* control = static_cast<RingControl*>(seg.payload());
  MARLAAS_RETURN_IF_ERROR(ClaimRingEnd(&control->consumer, "consumer", name.SystemName()));
  control->consumer_attaches.fetch_add(1, std::memory_order_relaxed);
  return RingConsumer(std::move(seg), wait);
}

RingConsumer::RingConsumer(Segment segment, const RingWaitOptions& wait)
    : segment_(std::move(segment)),
      control_(static_cast<RingControl*>(segment_.payload())),
      name_(segment_.name().SystemName()),
      wait_(wait),
      capacity_(control_->capacity) {
  // Replay starts at the ack cursor: whatever a dead consumer fetched but did not ack is
  // delivered again.
  ack_pos_ = control_->ack.load(std::memory_order_acquire);
  fetch_pos_ = ack_pos_;
  cached_tail_ = control_->tail.load(std::memory_order_acquire);
}

RingConsumer::RingConsumer(RingConsumer&& o) noexcept
    : segment_(std::move(o.segment_)),
      control_(o.control_),
      name_(std::move(o.name_)),
      wait_(o.wait_),
      capacity_(o.capacity_),
      fetch_pos_(o.fetch_pos_),
      ack_pos_(o.ack_pos_),
      cached_tail_(o.cached_tail_),
      expect_known_(o.expect_known_),
      expected_seq_(o.expected_seq_),
      corrupt_pending_(o.corrupt_pending_),
      corrupt_pos_(o.corrupt_pos_),
      corrupt_skip_(o.corrupt_skip_) {
  o.control_ = nullptr;
}

RingConsumer::~RingConsumer() {
  if (control_ != nullptr) ReleaseRingEnd(&control_->consumer);
}

Status RingConsumer::Corrupt(uint64_t pos, uint64_t skip_bytes, const std::string& what) {
  corrupt_pending_ = true;
  corrupt_pos_ = pos;
  corrupt_skip_ = skip_bytes;
  return Status(StatusCode::kCorrupt,
                "ring " + name_ + " record at position " + std::to_string(pos) + ": " + what);
}

Result<RecordView> RingConsumer::Fetch(Deadline deadline) {
  if (corrupt_pending_) {
    return Status(StatusCode::kFailedPrecondition,
                  "ring " + name_ + ": Quarantine() the corrupt record before fetching more");
  }
  uint64_t pos = fetch_pos_;
  for (;;) {
    if (pos == cached_tail_) {
      // SYNC POINT READ: tail (acquire, here seq_cst for the waiting handshake) pairs with the
      // producer's store: the record bytes before tail are visible after it.
      auto has_data = [&] {
        cached_tail_ = control_->tail.load(std::memory_order_seq_cst);
        return cached_tail_ != pos;
      };
      const WaitSite site{&control_->data_signal, &control_->consumer_waiting, &control_->producer,
                          "producer", "data"};
      MARLAAS_RETURN_IF_ERROR(WaitUntil(has_data, site, wait_, deadline).Annotate("ring " + name_));
    }
    const uint64_t room = capacity_ - pos % capacity_;
    if (room < sizeof(RecordHeader)) {  // implicit skip to the next lap
      pos += room;
      continue;
    }
    const unsigned char* slot = control_->data() + pos % capacity_;
    RecordHeader h;
    std::memcpy(&h, slot, sizeof(h));
    if (h.type == kPadType) {
      if (h.length != room || pos + room >= cached_tail_) {
        return Corrupt(pos, 0,
                       "pad record of " + std::to_string(h.length) +
                           " bytes does not end the lap (" + std::to_string(room) + ")");
      }
      pos += room;
      continue;
    }
    const uint64_t bytes = RecordBytes(h.length);
    if (h.length > control_->max_record || bytes > room || pos + bytes > cached_tail_) {
      return Corrupt(pos, 0, "length " + std::to_string(h.length) + " is out of bounds");
    }
    uint64_t trailer;
    std::memcpy(&trailer, slot + bytes - kRecordTrailerBytes, sizeof(trailer));
    if (trailer != h.seq) {
      return Corrupt(pos, pos + bytes - fetch_pos_,
                     "seq " + std::to_string(h.seq) + " disagrees with its trailer " +
                         std::to_string(trailer));
    }
    if (expect_known_ && h.seq != expected_seq_) {
      return Corrupt(pos, pos + bytes - fetch_pos_,
                     "seq " + std::to_string(h.seq) + " where " + std::to_string(expected_seq_) +
                         " was expected");
    }
    const unsigned char* payload = slot + sizeof(RecordHeader);
    const uint32_t sum = Fold32(Checksum64(payload, h.length, RecordSeed(h.type, h.length, h.seq)));
    if (sum != h.checksum) {
      return Corrupt(pos, pos + bytes - fetch_pos_,
                     "checksum mismatch in record seq " + std::to_string(h.seq));
    }
    fetch_pos_ = pos + bytes;
    expect_known_ = true;
    expected_seq_ = h.seq + 1;
    return RecordView{h.type, h.seq, payload, h.length, fetch_pos_};
  }
}

void RingConsumer::Ack(const RecordView& record) {
  MARLAAS_CHECK(record.end > ack_pos_ && record.end <= fetch_pos_);
  ack_pos_ = record.end;
  // SYNC POINT WRITE: ack. Releases the acked bytes to the producer; seq_cst for the
  // waiting-flag handshake below.
  control_->ack.store(ack_pos_, std::memory_order_seq_cst);
  SignalIfWaiting(&control_->producer_waiting, &control_->space_signal);
}

void RingConsumer::Rewind() {
  fetch_pos_ = ack_pos_;
  expect_known_ = false;
  corrupt_pending_ = false;
}

Result<uint64_t> RingConsumer::Quarantine(std::string* raw) {
  if (!corrupt_pending_) {
    return Status(StatusCode::kFailedPrecondition, "ring " + name_ + ": no corrupt record pending");
  }
  corrupt_pending_ = false;
  expect_known_ = false;
  raw->clear();
  uint64_t skipped;
  if (corrupt_skip_ != 0) {
    const uint64_t record_bytes = fetch_pos_ + corrupt_skip_ - corrupt_pos_;
    raw->assign(reinterpret_cast<const char*>(control_->data() + corrupt_pos_ % capacity_),
                record_bytes);
    skipped = corrupt_skip_;
    fetch_pos_ += corrupt_skip_;
  } else {
    // The framing is broken: no way to find the next record boundary but the committed tail.
    cached_tail_ = control_->tail.load(std::memory_order_acquire);
    skipped = cached_tail_ - fetch_pos_;
    fetch_pos_ = cached_tail_;
  }
  // Not acked here: records fetched before it may still be in flight. The next Ack covers it.
  return skipped;
}

}  // namespace marlaas
