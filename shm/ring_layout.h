// The shared-memory layout of a Ring: one single-producer/single-consumer byte ring carrying
// variable-size records. Cursors are ever-increasing 64-bit byte positions; the slot of a
// position is position % capacity. Only RingProducer and RingConsumer touch these structs.
//
// A record at position p (8-byte aligned) is
//   RecordHeader (24 B) | payload (length B, padded to 8) | trailer (u64: the record's seq)
// A record never wraps: if fewer than sizeof(RecordHeader) bytes are left before the end of the
// buffer, both sides skip to the next lap implicitly; if the header fits but the record does
// not, the producer writes a pad header (type kPadType) that covers the rest of the lap. The
// producer commits a record (with any skip/pad before it) by one store of `tail`.
// seq counts committed records from 0. The trailer lets a restarted producer recover the next
// seq from the last committed record alone, which one store of `tail` cannot publish too.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "base/status.h"
#include "shm/segment.h"

namespace marlaas {

inline constexpr uint32_t kRingLayoutVersion = 1;
inline constexpr uint32_t kPadType = 0xffffffffu;

struct RecordHeader {
  uint32_t length;    // payload bytes
  uint32_t type;      // caller-defined; kPadType is reserved
  uint64_t seq;       // record number; the trailer repeats it
  uint32_t checksum;  // Fold32(Checksum64(payload, length, RecordSeed(type, length, seq)))
  uint32_t reserved;
};
static_assert(sizeof(RecordHeader) == 24, "record header is part of the layout");
inline constexpr size_t kRecordTrailerBytes = sizeof(uint64_t);

inline constexpr uint64_t AlignUp8(uint64_t n) { return (n + 7) & ~uint64_t(7); }
// Bytes a record with `length` payload bytes occupies in the ring.
inline constexpr uint64_t RecordBytes(uint64_t length) {
  return sizeof(RecordHeader) + AlignUp8(length) + kRecordTrailerBytes;
}
inline uint64_t RecordSeed(uint32_t type, uint32_t length, uint64_t seq) {
  return (seq * 0x9e3779b97f4a7c15ULL) ^ ((uint64_t(type) << 32) | length);
}

struct RingOptions {
  uint64_t capacity_bytes = 1 << 20;  // power of two, >= 4096
  uint32_t max_record_bytes = 64 << 10;
  Status Validate() const;
};

struct RingControl {
  uint64_t capacity;     // immutable after creation
  uint64_t max_record;   // immutable after creation
  uint64_t data_offset;  // from the start of RingControl to the data area

  // WRITER: producer. Bytes committed; the release side of every record's publication.
  alignas(64) std::atomic<uint64_t> tail;
  // WRITER: consumer. Bytes acknowledged: the producer may overwrite everything before it.
  alignas(64) std::atomic<uint64_t> ack;

  // ProcessIdentity::Pack() of the attached producer / consumer, 0 when none. Each side CASes
  // its own word on attach (taking over from a dead owner) and clears it on detach; the other
  // side only reads it, to tell a dead peer from a slow one.
  alignas(64) std::atomic<uint64_t> producer;
  std::atomic<uint64_t> consumer;
  std::atomic<uint64_t> producer_attaches;  // how many producers have attached (restarts + 1)
  std::atomic<uint64_t> consumer_attaches;

  // Futex words. A sleeper sets its waiting flag, re-checks the cursor, then sleeps on the
  // signal; the other side stores its cursor (seq_cst), then reads the flag (seq_cst) and bumps
  // and wakes the signal if set. The seq_cst pair guarantees one of them sees the other.
  alignas(64) std::atomic<uint32_t> data_signal;   // bumped by the producer
  std::atomic<uint32_t> consumer_waiting;          // WRITER: consumer
  alignas(64) std::atomic<uint32_t> space_signal;  // bumped by the consumer
  std::atomic<uint32_t> producer_waiting;          // WRITER: producer

  unsigned char* data() { return reinterpret_cast<unsigned char*>(this) + data_offset; }
};

inline constexpr size_t kRingDataOffset = 4096;
static_assert(sizeof(RingControl) <= kRingDataOffset, "ring control must fit in one page");

// Creates the ring segment `name` (kAlreadyExists if present).
Result<Segment> CreateRing(const SegmentName& name, const RingOptions& options);

}  // namespace marlaas

namespace marlaas {

// Registers the calling process in `owner` (RingControl::producer or ::consumer). Fails with
// kAlreadyExists while another live process holds it; takes over from a dead one.
Status ClaimRingEnd(std::atomic<uint64_t>* owner, const char* role, const std::string& ring);
// Clears `owner` if it still names the calling process.
void ReleaseRingEnd(std::atomic<uint64_t>* owner);

}  // namespace marlaas
