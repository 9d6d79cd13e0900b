// AdapterStore: one slot per tenant holding its LoRA adapter (segment "adapters"). Who may call:
//  - the admitting process (serve) registers and releases slots;
//  - exactly one writer per slot (the trainer) calls BeginWrite/Publish;
//  - any process reads with ReadLatest.
// Each slot has two buffers. The writer fills the one that is not published (its sequence is odd
// meanwhile), then publishes (version, buffer) with one atomic store. A reader copies the
// published buffer and re-checks that buffer's sequence: if the writer started rewriting it
// during the copy, the copy is discarded and retried. So readers never see a torn adapter and
// never block the writer.
//
// Backends: kHost keeps both buffers in this segment. kCudaIpc keeps them in the writer's device
// memory and puts their IPC handles in the segment (shm/adapter_ipc_layout.h); a process moves
// their bytes only through the CUDA backend (shm/cuda_adapter_memory.h) handed to Attach, and
// ReadLatest's `dst` may then be device memory. Slots and versions work the same either way.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "base/deadline.h"
#include "base/status.h"
#include "shm/adapter_ipc_layout.h"
#include "shm/adapter_layout.h"
#include "shm/adapter_memory.h"
#include "shm/segment.h"
#include "shm/seqlock.h"

namespace marlaas {

inline constexpr uint32_t kAdapterStoreLayoutVersion = 3;

struct AdapterSlotInfo {
  uint64_t generation = 0;  // 0: never used; bumped on each Register
  bool active = false;
  char tenant_id[64] = {};
  AdapterLayout layout;
};

struct AdapterBufferState {
  // Odd while the writer fills this buffer. SYNC POINT: the writer's release store of the even
  // value pairs with a reader's acquire load before its copy; the reader's fence + reload after
  // the copy detects a rewrite that overlapped it.
  std::atomic<uint64_t> seq;
  std::atomic<uint64_t> version;  // stored while seq is odd
};

struct AdapterSlot {
  SeqlockCell<AdapterSlotInfo> info;  // WRITER: the admitting process
  // (version << 1) | buffer index; 0 while nothing is published. WRITER: the slot's trainer.
  // SYNC POINT: release-stored after the buffer's seq goes even; readers acquire-load it.
  std::atomic<uint64_t> published;
  AdapterBufferState buffers[2];
};

struct AdapterStoreHeader {
  uint32_t num_slots;
  uint32_t backend;       // AdapterBackend
  uint64_t buffer_bytes;  // capacity of each buffer
  uint64_t slots_offset;
  uint64_t buffers_offset;  // host: the buffers; CUDA IPC: one IpcSlotRecord per slot
};

// Makes the device backend of a store whose buffers live in device memory, from the slot records
// in its segment (shm/cuda_adapter_memory.h provides one).
using DeviceMemoryFactory = std::function<Result<std::unique_ptr<AdapterMemory>>(
    IpcSlotRecord* records, int num_slots, uint64_t buffer_bytes)>;

// A buffer handed to the writer by BeginWrite.
struct AdapterWriteSpan {
  void* data;  // host pointer for the host backend, device pointer for CUDA
  uint64_t bytes;
  int buffer;
};

class AdapterStore {
 public:
  struct Options {
    int num_slots = 64;
    uint64_t buffer_bytes = 8 << 20;  // largest adapter it can hold
    AdapterBackend backend = AdapterBackend::kHost;
  };
  // Creates the store. With kCudaIpc the creator moves no bytes itself (it registers slots).
  static Result<AdapterStore> Create(const std::string& instance, const Options& options);
  // Attaches. A kCudaIpc store needs `device` to move bytes; without it, slot management works
  // and byte-moving calls fail with kFailedPrecondition naming the backend.
  static Result<AdapterStore> Attach(const std::string& instance,
                                     const DeviceMemoryFactory& device = nullptr);

  AdapterStore(AdapterStore&&) noexcept = default;
  ~AdapterStore();

  int num_slots() const { return int(header_->num_slots); }
  AdapterBackend backend() const { return AdapterBackend(header_->backend); }
  uint64_t buffer_bytes() const { return header_->buffer_bytes; }

  // Admitting process only.
  // The creator, before a tenant gets `slot`: gives the slot's host buffers their memory in
  // /dev/shm (Segment::Reserve), so that no write of its adapters can fault; kResourceExhausted
  // naming /dev/shm when there is no room. Nothing to do with device buffers.
  Status ReserveSlot(int slot) const;
  Status Register(int slot, const std::string& tenant_id, const AdapterLayout& layout);
  Status Release(int slot);
  Result<AdapterSlotInfo> Info(int slot) const;

  // The slot's writer only. BeginWrite returns the idle buffer; Publish makes it current with
  // `version`, which must exceed the published one.
  Result<AdapterWriteSpan> BeginWrite(int slot);
  Status Publish(int slot, uint64_t version);

  // Latest published version of `slot` (0: none yet).
  Result<uint64_t> PublishedVersion(int slot) const;
  // Copies the latest published adapter into dst (>= layout.NumBytes() bytes) and returns its
  // version; `owner`, when given, receives the slot info (tenant, generation, layout) that the
  // copy belongs to. Retries while the writer overtakes the copy, until `deadline`. Fails with
  // kFailedPrecondition if the slot was registered again (to a new tenant) during the copy.
  // With the CUDA backend, kInternal means a device copy failed or did not finish in the
  // backend's bound: `dst` may still be written, so the caller must never reuse it.
  Result<uint64_t> ReadLatest(int slot, void* dst, size_t dst_bytes, Deadline deadline,
                              AdapterSlotInfo* owner = nullptr);

  // The slot's writer, when its tenant leaves it: frees the slot's device buffers (CUDA IPC),
  // after the readers that hold them let go or die. Host backend: nothing to do.
  Status FreeBuffers(int slot);
  // Readers, now and then (the rollout on each tenant sync): close device mappings of buffers
  // that were freed or whose writer died, so their memory goes back to the device.
  void Sweep() { memory_->Sweep(); }

 private:
  AdapterStore(Segment seg, std::unique_ptr<AdapterMemory> memory);
  Result<AdapterSlot*> SlotAt(int slot) const;

  Segment segment_;
  AdapterStoreHeader* header_;
  AdapterSlot* slots_;
  std::unique_ptr<AdapterMemory> memory_;
};

}  // namespace marlaas
