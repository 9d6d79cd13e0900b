#include "shm/shared_device_region.h"

#include <cuda_runtime_api.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <new>
#include <thread>

#include "base/process.h"
#include "shm/adapter_ipc_layout.h"
#include "shm/ipc_readers.h"

namespace marlaas {
namespace {

constexpr uint32_t kRegionLayoutVersion = 1;
constexpr size_t kKeyBytes = 64;

Status CudaFailure(const std::string& what, cudaError_t err) {
  cudaGetLastError();
  return Status(StatusCode::kInternal, what + ": " + cudaGetErrorString(err));
}

Status DeviceUuid(unsigned char out[16]) {
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return CudaFailure("cudaGetDevice", err);
  cudaDeviceProp prop{};
  err = cudaGetDeviceProperties(&prop, device);
  if (err != cudaSuccess) return CudaFailure("cudaGetDeviceProperties", err);
  std::memcpy(out, prop.uuid.bytes, 16);
  return Status::Ok();
}

bool ValidName(const std::string& name) {
  if (name.empty() || name.size() > 32) return false;
  for (char c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') return false;
  return true;
}

}  // namespace

struct SharedDeviceRegion::Record {
  // (epoch << 1) | 1 while the fields below describe allocation `epoch`. WRITER: the owner.
  // SYNC POINT: release-stored after the fields; openers acquire-load it and re-check it after.
  std::atomic<uint64_t> state;
  // The owner's ProcessIdentity, CAS-claimed (from 0 or a dead owner) before it allocates.
  std::atomic<uint64_t> owner;
  std::atomic<uint64_t> publisher;  // the owner that wrote the fields below
  unsigned char device_uuid[16];
  uint64_t bytes;
  char key[kKeyBytes];
  unsigned char mem[kIpcHandleBytes];
  IpcReaderEntry readers[kMaxIpcReaders];
};

SharedDeviceRegion::SharedDeviceRegion(Segment seg, void* data, uint64_t bytes, bool owner,
                                       uint64_t epoch, int reader_entry)
    : segment_(std::move(seg)),
      data_(data),
      bytes_(bytes),
      owner_(owner),
      epoch_(epoch),
      reader_entry_(reader_entry) {}

SharedDeviceRegion::SharedDeviceRegion(SharedDeviceRegion&& o) noexcept
    : segment_(std::move(o.segment_)),
      data_(o.data_),
      bytes_(o.bytes_),
      owner_(o.owner_),
      epoch_(o.epoch_),
      reader_entry_(o.reader_entry_) {
  o.data_ = nullptr;
  o.reader_entry_ = -1;
}

SharedDeviceRegion::Record* SharedDeviceRegion::record() const {
  return static_cast<Record*>(segment_.payload());
}

SharedDeviceRegion::~SharedDeviceRegion() {
  if (data_ == nullptr) return;
  Record* r = record();
  if (!owner_) {
    cudaIpcCloseMemHandle(data_);
    ReleaseIpcReader(r->readers, reader_entry_);  // after the close: the owner may free now
    return;
  }
  r->state.store(epoch_ << 1, std::memory_order_seq_cst);  // unpublished: nobody opens it now
  const std::string holders = WaitForIpcReaders(r->readers, epoch_, Deadline::AfterMs(kFreeWaitMs));
  if (holders.empty()) {
    cudaFree(data_);
  } else {
    // Freeing memory another process maps is undefined behaviour in CUDA IPC; leaving it is
    // not: it goes back to the device when this process exits.
    std::fprintf(stderr, "device region %s: processes %s still map it; left allocated\n",
                 segment_.name().name.c_str(), holders.c_str());
  }
  uint64_t self = SelfIdentity().Pack();
  r->owner.compare_exchange_strong(self, 0);
}

Result<SharedDeviceRegion> SharedDeviceRegion::Publish(Segment& seg, const std::string& name,
                                                       uint64_t bytes, const std::string& key,
                                                       const Fill& fill) {
  Record* r = static_cast<Record*>(seg.payload());
  const uint64_t self = SelfIdentity().Pack();
  const uint64_t epoch = (r->state.load(std::memory_order_acquire) >> 1) + 1;
  r->state.store(epoch << 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);  // even before the fields change
  void* data = nullptr;
  auto give_up = [&](const Status& st) {
    if (data != nullptr) cudaFree(data);
    uint64_t me = self;
    r->owner.compare_exchange_strong(me, 0);
    return st;
  };
  unsigned char mine[16];
  Status st = DeviceUuid(mine);
  if (!st.ok()) return give_up(st);
  cudaError_t err = cudaMalloc(&data, bytes);
  if (err != cudaSuccess) {
    data = nullptr;
    return give_up(CudaFailure(
        "cudaMalloc of device region '" + name + "' (" + std::to_string(bytes) + " bytes)", err));
  }
  st = fill ? fill(data, bytes) : Status::Ok();
  if (!st.ok()) return give_up(st.Annotate("filling device region '" + name + "'"));
  err = cudaDeviceSynchronize();
  if (err != cudaSuccess) return give_up(CudaFailure("cudaDeviceSynchronize", err));
  cudaIpcMemHandle_t handle;
  err = cudaIpcGetMemHandle(&handle, data);
  if (err != cudaSuccess) return give_up(CudaFailure("cudaIpcGetMemHandle", err));
  r->publisher.store(self, std::memory_order_relaxed);
  std::memcpy(r->device_uuid, mine, 16);
  r->bytes = bytes;
  std::memset(r->key, 0, kKeyBytes);
  std::memcpy(r->key, key.data(), key.size());
  std::memcpy(r->mem, &handle, sizeof(handle));
  r->state.store((epoch << 1) | 1, std::memory_order_release);
  return SharedDeviceRegion(std::move(seg), data, bytes, true, epoch, -1);
}

Result<SharedDeviceRegion> SharedDeviceRegion::Open(Segment& seg, const std::string& name,
                                                    uint64_t bytes, const std::string& key,
                                                    uint64_t state) {
  Record* r = static_cast<Record*>(seg.payload());
  const uint64_t self = SelfIdentity().Pack();
  char held_key[kKeyBytes];
  unsigned char uuid[16];
  cudaIpcMemHandle_t handle;
  std::memcpy(held_key, r->key, kKeyBytes);
  std::memcpy(uuid, r->device_uuid, 16);
  std::memcpy(&handle, r->mem, sizeof(handle));
  const uint64_t held_bytes = r->bytes;
  std::atomic_thread_fence(std::memory_order_acquire);
  if (r->state.load(std::memory_order_relaxed) != state)
    return Status(StatusCode::kUnavailable, "changing");
  held_key[kKeyBytes - 1] = 0;
  if (held_bytes != bytes || key != held_key) {
    return Status(StatusCode::kFailedPrecondition,
                  "device region '" + name + "' holds '" + held_key + "' (" +
                      std::to_string(held_bytes) + " bytes), not '" + key + "' (" +
                      std::to_string(bytes) + " bytes)");
  }
  unsigned char mine[16];
  MARLAAS_RETURN_IF_ERROR(DeviceUuid(mine));
  if (std::memcmp(uuid, mine, 16) != 0) {
    return Status(StatusCode::kFailedPrecondition,
                  "device region '" + name + "' lives on another GPU than this process's");
  }
  const uint64_t epoch = state >> 1;
  for (const IpcReaderEntry& e : r->readers) {
    if (e.identity.load() == self && e.epoch.load() == epoch) {
      return Status(StatusCode::kAlreadyExists,
                    "this process has device region '" + name + "' open already");
    }
  }
  const int entry = ClaimIpcReader(r->readers, self, epoch);
  if (entry < 0) {
    return Status(StatusCode::kResourceExhausted, "device region '" + name + "' has " +
                                                      std::to_string(kMaxIpcReaders) +
                                                      " live openers already");
  }
  if (r->state.load(std::memory_order_seq_cst) != state) {  // unpublished meanwhile
    ReleaseIpcReader(r->readers, entry);
    return Status(StatusCode::kUnavailable, "unpublished");
  }
  void* data = nullptr;
  const cudaError_t err = cudaIpcOpenMemHandle(&data, handle, cudaIpcMemLazyEnablePeerAccess);
  if (err != cudaSuccess) {
    ReleaseIpcReader(r->readers, entry);
    return CudaFailure("cudaIpcOpenMemHandle of device region '" + name + "'", err);
  }
  return SharedDeviceRegion(std::move(seg), data, bytes, false, epoch, entry);
}

Result<SharedDeviceRegion> SharedDeviceRegion::OpenOrCreate(const std::string& instance,
                                                            const std::string& name, uint64_t bytes,
                                                            const std::string& key,
                                                            const Fill& fill, Deadline deadline) {
  if (!ValidName(name))
    return Status(StatusCode::kInvalidArgument, "device region name '" + name + "' is not valid");
  if (key.size() >= kKeyBytes) {
    return Status(StatusCode::kInvalidArgument,
                  "device region key is " + std::to_string(key.size()) + " bytes, at most 63");
  }
  if (bytes == 0) return Status(StatusCode::kInvalidArgument, "device region of 0 bytes");
  const SegmentName seg_name{instance, "region." + name};
  auto created = Segment::Create(seg_name, SegmentKind::kDeviceRegion, kRegionLayoutVersion,
                                 sizeof(Record), [](void* p, size_t) {
                                   new (p) Record();
                                   return Status::Ok();
                                 });
  Result<Segment> seg =
      created.ok() ? std::move(created)
                   : Segment::Attach(seg_name, SegmentKind::kDeviceRegion, kRegionLayoutVersion);
  if (!seg.ok()) return seg.status();
  Record* r = static_cast<Record*>(seg->payload());
  const uint64_t self = SelfIdentity().Pack();

  for (;;) {
    const uint64_t owner = r->owner.load(std::memory_order_seq_cst);
    const uint64_t state = r->state.load(std::memory_order_seq_cst);
    const bool owner_alive = owner != 0 && IsAlive(ProcessIdentity::Unpack(owner));
    if (owner == self) {
      return Status(StatusCode::kAlreadyExists,
                    "this process owns device region '" + name + "' already");
    }
    // Published by a live publisher (the owner that wrote the fields; a new owner may already
    // hold the owner field while the state still shows a dead publisher's handle).
    if ((state & 1) && IsAlive(ProcessIdentity::Unpack(r->publisher.load())) && owner_alive) {
      auto opened = Open(*seg, name, bytes, key, state);
      if (opened.ok() || opened.status().code() != StatusCode::kUnavailable) return opened;
      continue;  // unpublished while we looked
    }
    if (!owner_alive) {  // nobody (alive) owns it: claim it, allocate, fill, publish
      uint64_t expected = owner;
      if (!r->owner.compare_exchange_strong(expected, self)) continue;
      return Publish(*seg, name, bytes, key, fill);
    }
    // A live owner is still filling it.
    if (deadline.Expired()) {
      return Status(StatusCode::kTimeout, "device region '" + name + "': its owner (pid " +
                                              std::to_string(ProcessIdentity::Unpack(owner).pid) +
                                              ") has not finished filling it");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace marlaas
