// Segment: a named POSIX shared-memory region of one service instance, mapped read-write.
// Name on the system: /marlaas.<instance>.<name>. Every segment starts with a SegmentHeader
// (magic, kind, layout version, creator identity, sizes); the payload follows at kPayloadOffset.
// Create() initialises the payload through a callback and only then publishes the magic, so an
// attacher never sees a half-initialised segment. A Segment object is owned by one thread; the
// memory it maps is shared, and its synchronisation is the business of the types placed in it.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "base/process.h"
#include "base/status.h"

namespace marlaas {

enum class SegmentKind : uint32_t {
  kRing = 1,
  kAdapterStore = 2,
  kTenantTable = 3,
  kMetrics = 4,
  kRendezvous = 5,
  kDeviceRegion = 6,
  kTest = 99,
};
const char* SegmentKindName(SegmentKind kind);

// An instance name names a running service's segments: 1-32 characters of [A-Za-z0-9_-].
Status ValidateInstanceName(const std::string& instance);

struct SegmentName {
  std::string instance;  // [A-Za-z0-9_-]{1,32}
  std::string name;      // [A-Za-z0-9_.-]{1,48}
  // "marlaas.<instance>.<name>" (the shm_open name without the leading slash).
  std::string SystemName() const;
  Status Validate() const;
};

inline constexpr uint64_t kSegmentMagic = 0x53414c52414d2e31ULL;  // "1.MARLAS" little-endian
inline constexpr size_t kPayloadOffset = 4096;

// Lives at offset 0 of every segment. Written once by the creator before `magic` is published.
struct SegmentHeader {
  // SYNC POINT: release-stored last by Create(); an attacher acquire-loads it, so every other
  // header field and the initialised payload are visible once it reads kSegmentMagic.
  std::atomic<uint64_t> magic;
  uint32_t kind;
  uint32_t layout_version;
  uint64_t payload_bytes;
  uint64_t creator;  // ProcessIdentity::Pack() of the creating process
  char instance[40];
  char name[56];
};
static_assert(sizeof(SegmentHeader) <= kPayloadOffset, "header must fit before the payload");

class Segment {
 public:
  using Init = std::function<Status(void* payload, size_t bytes)>;

  // Creates a new segment; fails with kAlreadyExists if the name is taken. `init` runs on the
  // zeroed payload before the segment becomes attachable. The header and the first
  // `reserve_bytes` of the payload (all of it by default) get their memory now (Reserve): a
  // /dev/shm without room for them is kResourceExhausted naming it, where a page it could not
  // hold was a SIGBUS at its first write, in whichever process wrote it.
  static Result<Segment> Create(const SegmentName& name, SegmentKind kind, uint32_t layout_version,
                                size_t payload_bytes, const Init& init = nullptr,
                                size_t reserve_bytes = SIZE_MAX);
  // Gives payload bytes [offset, offset + bytes) their memory in /dev/shm (posix_fallocate), so
  // that writing them cannot fault; kResourceExhausted naming /dev/shm, the segment, what it
  // needs and what is free, when there is no room. Already reserved bytes cost nothing.
  Status Reserve(size_t offset, size_t bytes) const;
  // Maps an existing segment and checks magic, kind, layout version and instance.
  static Result<Segment> Attach(const SegmentName& name, SegmentKind kind, uint32_t layout_version);
  // Unlinks the name; mappings stay valid until unmapped. OK if it does not exist.
  static Status Remove(const SegmentName& name);

  Segment(Segment&&) noexcept;
  Segment& operator=(Segment&&) noexcept;
  ~Segment();

  void* payload() const { return static_cast<char*>(base_) + kPayloadOffset; }
  size_t payload_bytes() const { return header()->payload_bytes; }
  const SegmentHeader* header() const { return static_cast<const SegmentHeader*>(base_); }
  ProcessIdentity creator() const { return ProcessIdentity::Unpack(header()->creator); }
  const SegmentName& name() const { return name_; }

 private:
  Segment(SegmentName name, void* base, size_t mapped_bytes)
      : name_(std::move(name)), base_(base), mapped_bytes_(mapped_bytes) {}
  void Unmap();

  SegmentName name_;
  void* base_ = nullptr;
  size_t mapped_bytes_ = 0;
};

}  // namespace marlaas
