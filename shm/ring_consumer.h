// RingConsumer: the reading end of a Ring (see ring_layout.h). One per ring at a time, used by
// one thread. Fetch returns zero-copy views in order; Ack releases everything up to a view to
// the producer. Ack only after your output for that record is committed downstream: a consumer
// that dies before acking is replaced by one that replays from the ack cursor (at-least-once).
#pragma once

#include <cstdint>
#include <string>

#include "base/deadline.h"
#include "base/status.h"
#include "shm/ring_layout.h"
#include "shm/ring_wait.h"
#include "shm/segment.h"

namespace marlaas {

// A record inside the ring. Valid until the consumer acks it (or a later record) or is destroyed.
struct RecordView {
  uint32_t type = 0;
  uint64_t seq = 0;
  const unsigned char* data = nullptr;
  uint32_t size = 0;
  uint64_t end = 0;  // ring position just past this record: what Ack stores
};

class RingConsumer {
 public:
  static Result<RingConsumer> Attach(const SegmentName& name, const RingWaitOptions& wait = {});

  RingConsumer(RingConsumer&&) noexcept;
  RingConsumer& operator=(RingConsumer&&) = delete;
  ~RingConsumer();

  // The next record after the fetch cursor, waiting until `deadline` for one. kTimeout when none
  // came; kPeerDead when the ring is empty and its producer exited; kCorrupt when the next
  // record fails its integrity checks (then Quarantine() moves past it).
  Result<RecordView> Fetch(Deadline deadline);
  // Acknowledges `record` and every record before it. REQUIRES: `record` came from Fetch and
  // was not acked yet.
  void Ack(const RecordView& record);
  // Sets the fetch cursor back to the ack cursor: unacked records will be fetched again.
  void Rewind();
  // After Fetch returned kCorrupt: copies the bad record's bytes (header included; empty when
  // its framing is broken) into `raw`, skips it (broken framing: everything committed so far)
  // and returns how many ring bytes were skipped. The next Ack releases the skipped bytes.
  Result<uint64_t> Quarantine(std::string* raw);

  uint64_t unacked_bytes() const { return fetch_pos_ - ack_pos_; }
  const std::string& ring_name() const { return name_; }

 private:
  RingConsumer(Segment segment, const RingWaitOptions& wait);
  Status Corrupt(uint64_t pos, uint64_t skip_bytes, const std::string& what);

  Segment segment_;
  RingControl* control_;
  std::string name_;
  RingWaitOptions wait_;
  uint64_t capacity_;
  uint64_t fetch_pos_;         // private fetch cursor
  uint64_t ack_pos_;           // == control_->ack; we are its only writer
  uint64_t cached_tail_;       // last tail we read
  bool expect_known_ = false;  // false until the first record after attach/quarantine
  uint64_t expected_seq_ = 0;
  // Set by a kCorrupt Fetch, consumed by Quarantine().
  bool corrupt_pending_ = false;
  uint64_t corrupt_pos_ = 0;
  uint64_t corrupt_skip_ = 0;  // 0: framing broken, skip to tail
};

}  // namespace marlaas
