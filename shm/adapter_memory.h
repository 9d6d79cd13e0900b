// AdapterMemory: where the two weight buffers of each adapter-store slot live. The store's
// control plane (slots, versions, seqlocks) is the same for every backend; only the bytes move.
// HostAdapterMemory keeps them in the store's segment. The CUDA backend
// (shm/cuda_adapter_memory.h) keeps them in device memory exported through CUDA IPC handles, with
// an IPC event ordering reads after writes; NoAdapterMemory stands in for it in processes that
// only manage slots (serve).
// One instance per process; not thread-safe.
#pragma once

#include <cstddef>

#include "base/status.h"

namespace marlaas {

enum class AdapterBackend : uint32_t { kHost = 1, kCudaIpc = 2 };

class AdapterMemory {
 public:
  virtual ~AdapterMemory() = default;
  virtual AdapterBackend backend() const = 0;
  // Where the writer puts buffer `buffer` (0 or 1) of `slot`: a host or device pointer. A CUDA
  // backend allocates the slot's buffers on first use.
  virtual Result<void*> WritableBuffer(int slot, int buffer) = 0;
  // Writer: whether `slot`'s buffers exist and hold what was published into them. False for a
  // CUDA backend's slot not yet written by this process: fresh buffers hold nothing yet.
  virtual bool HasBuffers(int /*slot*/) const { return true; }
  // Called by the writer after its writes to a buffer, before publishing it (a CUDA backend
  // records its event here).
  virtual Status FinishWrite(int slot, int buffer) = 0;
  // Copies `bytes` of buffer `buffer` of `slot` into `dst` (reader's memory: host, or for a CUDA
  // backend host or device) and returns once the copy is complete. A CUDA backend waits a
  // bounded time and then fails with kInternal; `dst` may then still be written later.
  virtual Status CopyOut(int slot, int buffer, void* dst, size_t bytes) = 0;
  // Writer: gives back the device memory of `slot` (its tenant left this writer). Host: nothing.
  virtual Status FreeBuffers(int /*slot*/) { return Status::Ok(); }
  // Reader: lets go of what it holds of buffers that were freed or whose owner died.
  virtual void Sweep() {}
};

// Host backend: the buffers follow the slot table in the same segment.
class HostAdapterMemory : public AdapterMemory {
 public:
  HostAdapterMemory(unsigned char* buffers, size_t buffer_bytes)
      : buffers_(buffers), buffer_bytes_(buffer_bytes) {}
  AdapterBackend backend() const override { return AdapterBackend::kHost; }
  Result<void*> WritableBuffer(int slot, int buffer) override {
    return static_cast<void*>(At(slot, buffer));
  }
  Status FinishWrite(int, int) override { return Status::Ok(); }
  Status CopyOut(int slot, int buffer, void* dst, size_t bytes) override;

 private:
  unsigned char* At(int slot, int buffer) const {
    return buffers_ + (size_t(slot) * 2 + size_t(buffer)) * buffer_bytes_;
  }
  unsigned char* buffers_;
  size_t buffer_bytes_;
};

// A process without the store's device backend (serve registers and releases slots only): every
// byte-moving call fails with a message naming the backend.
class NoAdapterMemory : public AdapterMemory {
 public:
  explicit NoAdapterMemory(AdapterBackend backend) : backend_(backend) {}
  AdapterBackend backend() const override { return backend_; }
  Result<void*> WritableBuffer(int, int) override { return Refuse(); }
  Status FinishWrite(int, int) override { return Refuse(); }
  Status CopyOut(int, int, void*, size_t) override { return Refuse(); }

 private:
  Status Refuse() const;
  AdapterBackend backend_;
};

}  // namespace marlaas
