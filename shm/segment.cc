#include "shm/segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <boost/interprocess/shared_memory_object.hpp>
#include <cerrno>
#include <cstring>

namespace marlaas {
namespace {

namespace bip = boost::interprocess;

bool ValidChars(const std::string& s, bool allow_dot) {
  for (char c : s) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-' || (allow_dot && c == '.');
    if (!ok) return false;
  }
  return true;
}

// Boost.Interprocess creates and names the object; we map it ourselves with mmap so the mapping
// outlives the Boost handle and a Segment stays a plain movable value.
Result<void*> MapFd(int fd, size_t bytes) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return ErrnoStatus("mmap", errno);
  return p;
}

// Gives bytes [offset, offset + bytes) of the open shared-memory object `fd` (/`sys`) memory.
Status ReserveRange(int fd, const std::string& sys, size_t offset, size_t bytes) {
  if (bytes == 0) return Status::Ok();
  const int err = ::posix_fallocate(fd, off_t(offset), off_t(bytes));
  if (err == 0) return Status::Ok();
  const auto mib = [](uint64_t b) { return std::to_string((b + (1 << 20) - 1) >> 20); };
  if (err == ENOSPC || err == ENOMEM) {
    struct statvfs vfs {};
    const std::string free_now =
        ::statvfs("/dev/shm", &vfs) == 0 ? mib(uint64_t(vfs.f_bavail) * vfs.f_frsize) : "?";
    return Status(StatusCode::kResourceExhausted,
                  "/dev/shm has no room for " + mib(bytes) + " MiB of segment /" + sys + " (" +
                      free_now +
                      " MiB free there): make /dev/shm larger (a container: --shm-size), or "
                      "free it (`marlaas segments`; `df -h /dev/shm`)");
  }
  return Status(StatusCode::kIo,
                "reserving " + mib(bytes) + " MiB of segment /" + sys + ": " + std::strerror(err));
}

}  // namespace

const char* SegmentKindName(SegmentKind kind) {
  switch (kind) {
    case SegmentKind::kRing:
      return "ring";
    case SegmentKind::kAdapterStore:
      return "adapter store";
    case SegmentKind::kTenantTable:
      return "tenant table";
    case SegmentKind::kMetrics:
      return "metrics";
    case SegmentKind::kRendezvous:
      return "broadcast rendezvous";
    case SegmentKind::kDeviceRegion:
      return "shared device region";
    case SegmentKind::kTest:
      return "test";
  }
  return "unknown";
}

std::string SegmentName::SystemName() const { return "marlaas." + instance + "." + name; }

Status ValidateInstanceName(const std::string& instance) {
  if (instance.empty() || instance.size() > 32 || !ValidChars(instance, false)) {
    return Status(StatusCode::kInvalidArgument,
                  "instance name '" + instance + "' must be 1-32 characters of [A-Za-z0-9_-]");
  }
  return Status::Ok();
}

Status SegmentName::Validate() const {
  MARLAAS_RETURN_IF_ERROR(ValidateInstanceName(instance));
  if (name.empty() || name.size() > 48 || !ValidChars(name, true) || name[0] == '.') {
    return Status(StatusCode::kInvalidArgument,
                  "segment name '" + name + "' must be 1-48 characters of [A-Za-z0-9_.-]");
  }
  return Status::Ok();
}

Result<Segment> Segment::Create(const SegmentName& name, SegmentKind kind, uint32_t layout_version,
                                size_t payload_bytes, const Init& init, size_t reserve_bytes) {
  MARLAAS_RETURN_IF_ERROR(name.Validate());
  const std::string sys = name.SystemName();
  const size_t total = kPayloadOffset + payload_bytes;
  int fd = -1;
  try {
    bip::shared_memory_object shm(bip::create_only, sys.c_str(), bip::read_write,
                                  bip::permissions(0600));
    shm.truncate(static_cast<bip::offset_t>(total));
    fd = ::dup(shm.get_mapping_handle().handle);
  } catch (const bip::interprocess_exception& e) {
    if (e.get_error_code() == bip::already_exists_error) {
      return Status(StatusCode::kAlreadyExists,
                    "segment /" + sys +
                        " already exists (another service instance with the "
                        "same name, or a stale one: run `marlaas clean`)");
    }
    return Status(StatusCode::kIo, "cannot create segment /" + sys + ": " + e.what());
  }
  if (fd < 0) return ErrnoStatus("dup", errno);
  if (Status st = ReserveRange(fd, sys, 0, kPayloadOffset + std::min(reserve_bytes, payload_bytes));
      !st.ok()) {
    ::close(fd);
    (void)Remove(name);
    return st;
  }
  Result<void*> mapped = MapFd(fd, total);
  ::close(fd);
  if (!mapped.ok()) {
    (void)Remove(name);
    return mapped.status().Annotate("segment /" + sys);
  }
  Segment seg(name, mapped.value(), total);
  auto* h = static_cast<SegmentHeader*>(seg.base_);
  h->kind = static_cast<uint32_t>(kind);
  h->layout_version = layout_version;
  h->payload_bytes = payload_bytes;
  h->creator = SelfIdentity().Pack();
  std::strncpy(h->instance, name.instance.c_str(), sizeof(h->instance) - 1);
  std::strncpy(h->name, name.name.c_str(), sizeof(h->name) - 1);
  if (init) {
    Status st = init(seg.payload(), payload_bytes);
    if (!st.ok()) {
      (void)Remove(name);
      return st.Annotate("initialising segment /" + sys);
    }
  }
  h->magic.store(kSegmentMagic, std::memory_order_release);
  return seg;
}

Result<Segment> Segment::Attach(const SegmentName& name, SegmentKind kind,
                                uint32_t layout_version) {
  MARLAAS_RETURN_IF_ERROR(name.Validate());
  const std::string sys = name.SystemName();
  int fd = ::shm_open(("/" + sys).c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) {
    if (errno == ENOENT) {
      return Status(StatusCode::kNotFound, "segment /" + sys + " does not exist (is instance '" +
                                               name.instance + "' running?)");
    }
    return ErrnoStatus("shm_open /" + sys, errno);
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return ErrnoStatus("fstat /" + sys, err);
  }
  const size_t total = static_cast<size_t>(st.st_size);
  if (total < kPayloadOffset) {
    ::close(fd);
    return Status(StatusCode::kCorrupt, "segment /" + sys + " is " + std::to_string(total) +
                                            " bytes, smaller than its header");
  }
  Result<void*> mapped = MapFd(fd, total);
  ::close(fd);
  if (!mapped.ok()) return mapped.status().Annotate("segment /" + sys);
  Segment seg(name, mapped.value(), total);
  const SegmentHeader* h = seg.header();
  const uint64_t magic = h->magic.load(std::memory_order_acquire);
  if (magic != kSegmentMagic) {
    return Status(StatusCode::kUnavailable,
                  "segment /" + sys +
                      " is not initialised (its creator is still setting it up "
                      "or died doing so)");
  }
  if (h->kind != static_cast<uint32_t>(kind)) {
    return Status(StatusCode::kFailedPrecondition,
                  "segment /" + sys + " is a " +
                      SegmentKindName(static_cast<SegmentKind>(h->kind)) + " segment, not a " +
                      SegmentKindName(kind) + " segment");
  }
  const std::string owner(h->instance, strnlen(h->instance, sizeof(h->instance)));
  if (owner != name.instance) {
    return Status(StatusCode::kFailedPrecondition, "segment /" + sys +
                                                       " belongs to service instance '" + owner +
                                                       "', not '" + name.instance + "'");
  }
  if (h->layout_version != layout_version) {
    return Status(StatusCode::kFailedPrecondition,
                  "segment /" + sys + " has " + SegmentKindName(kind) + " layout version " +
                      std::to_string(h->layout_version) + " but this binary uses version " +
                      std::to_string(layout_version) +
                      ": stop the service that created it (or run `marlaas clean`) and restart");
  }
  if (kPayloadOffset + h->payload_bytes > total) {
    return Status(StatusCode::kCorrupt, "segment /" + sys + " header claims " +
                                            std::to_string(h->payload_bytes) +
                                            " payload bytes but the object is smaller");
  }
  return seg;
}

Status Segment::Reserve(size_t offset, size_t bytes) const {
  if (offset > payload_bytes() || bytes > payload_bytes() - offset) {
    return Status(StatusCode::kInvalidArgument,
                  "reserving past the end of segment /" + name_.SystemName());
  }
  const std::string sys = name_.SystemName();
  const int fd = ::shm_open(("/" + sys).c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) return ErrnoStatus("shm_open /" + sys, errno);
  Status st = ReserveRange(fd, sys, kPayloadOffset + offset, bytes);
  ::close(fd);
  return st;
}

Status Segment::Remove(const SegmentName& name) {
  MARLAAS_RETURN_IF_ERROR(name.Validate());
  const std::string sys = "/" + name.SystemName();
  if (::shm_unlink(sys.c_str()) != 0 && errno != ENOENT)
    return ErrnoStatus("shm_unlink " + sys, errno);
  return Status::Ok();
}

Segment::Segment(Segment&& o) noexcept
    : name_(std::move(o.name_)), base_(o.base_), mapped_bytes_(o.mapped_bytes_) {
  o.base_ = nullptr;
  o.mapped_bytes_ = 0;
}

Segment& Segment::operator=(Segment&& o) noexcept {
  if (this != &o) {
    Unmap();
    name_ = std::move(o.name_);
    base_ = o.base_;
    mapped_bytes_ = o.mapped_bytes_;
    o.base_ = nullptr;
    o.mapped_bytes_ = 0;
  }
  return *this;
}

Segment::~Segment() { Unmap(); }

void Segment::Unmap() {
  if (base_ != nullptr) ::munmap(base_, mapped_bytes_);
  base_ = nullptr;
}

}  // namespace marlaas
