// RingProducer: the writing end of a Ring (see ring_layout.h). One per ring at a time, used by
// one thread. Attaching takes over from a dead producer: it resumes after the last committed
// record, so a record that the dead one was writing, never committed, is simply overwritten.
#pragma once

#include <cstdint>

#include "base/deadline.h"
#include "base/status.h"
#include "shm/ring_layout.h"
#include "shm/ring_wait.h"
#include "shm/segment.h"

namespace marlaas {

class RingProducer {
 public:
  static Result<RingProducer> Attach(const SegmentName& name, const RingWaitOptions& wait = {});

  RingProducer(RingProducer&&) noexcept;
  RingProducer& operator=(RingProducer&&) = delete;
  ~RingProducer();

  // Copies `len` bytes into the next record and commits it. Waits for space until `deadline`.
  // A record larger than max_record_bytes() fails with kInvalidArgument (never truncated).
  Status Push(uint32_t type, const void* data, size_t len, Deadline deadline);

  // Zero-copy write: Reserve returns `len` writable bytes inside the ring; Commit publishes them
  // as one record. A reservation that is never committed (a new Reserve or Push drops it, and so
  // does a crash) is invisible to the consumer and is overwritten by the next record.
  Result<unsigned char*> Reserve(size_t len, Deadline deadline);
  Status Commit(uint32_t type);

  uint64_t next_seq() const { return next_seq_; }
  uint32_t max_record_bytes() const { return uint32_t(control_->max_record); }
  const std::string& ring_name() const { return name_; }

 private:
  RingProducer(Segment segment, const RingWaitOptions& wait);
  // Lays out a record of `len` bytes at the write position (skip or pad first), waits for room
  // and returns the position of its header.
  Result<uint64_t> Place(size_t len, Deadline deadline);
  void Publish(uint64_t header_pos, uint32_t type, uint32_t len, uint32_t checksum);

  Segment segment_;
  RingControl* control_;
  std::string name_;
  RingWaitOptions wait_;
  uint64_t capacity_;
  uint64_t write_pos_;   // == tail; private copy, we are the only writer
  uint64_t cached_ack_;  // last ack we read; refreshed only when space looks short
  uint64_t next_seq_;
  // The outstanding reservation, if any.
  uint64_t reserved_pos_ = 0;
  uint32_t reserved_len_ = 0;
  bool reserved_ = false;
};

}  // namespace marlaas
