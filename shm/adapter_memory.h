// AdapterMemory: where the two weight buffers of each adapter-store slot live. The store's
// control plane (slots, versions, seqlocks) is the same for every backend; only the bytes move.
// HostAdapterMemory keeps them in the store's segment. A CUDA backend keeps them in device
// memory exported through CUDA IPC handles, with an IPC event ordering reads after writes.
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
  // Where the writer puts buffer `buffer` (0 or 1) of `slot`: a host or device pointer.
  virtual void* WritableBuffer(int slot, int buffer) = 0;
  // Called by the writer after its writes to a buffer, before publishing it (a CUDA backend
  // records its event here).
  virtual Status FinishWrite(int slot, int buffer) = 0;
  // Copies `bytes` of buffer `buffer` of `slot` into `dst` (reader's memory).
  virtual Status CopyOut(int slot, int buffer, void* dst, size_t bytes) = 0;
};

// Host backend: the buffers follow the slot table in the same segment.
class HostAdapterMemory : public AdapterMemory {
 public:
  HostAdapterMemory(unsigned char* buffers, size_t buffer_bytes)
      : buffers_(buffers), buffer_bytes_(buffer_bytes) {}
  AdapterBackend backend() const override { return AdapterBackend::kHost; }
  void* WritableBuffer(int slot, int buffer) override { return At(slot, buffer); }
  Status FinishWrite(int, int) override { return Status::Ok(); }
  Status CopyOut(int slot, int buffer, void* dst, size_t bytes) override;

 private:
  unsigned char* At(int slot, int buffer) const {
    return buffers_ + (size_t(slot) * 2 + size_t(buffer)) * buffer_bytes_;
  }
  unsigned char* buffers_;
  size_t buffer_bytes_;
};

}  // namespace marlaas
