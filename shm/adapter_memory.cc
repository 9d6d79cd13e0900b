#include "shm/adapter_memory.h"

#include <cstring>

namespace marlaas {

Status HostAdapterMemory::CopyOut(int slot, int buffer, void* dst, size_t bytes) {
  if (bytes > buffer_bytes_) {
    return Status(StatusCode::kInvalidArgument,
                  "copy of " + std::to_string(bytes) + " bytes exceeds the adapter buffer size");
  }
  // The source may be rewritten concurrently; the store's seqlock detects that and retries.
  std::memcpy(dst, At(slot, buffer), bytes);
  return Status::Ok();
}

Status NoAdapterMemory::Refuse() const {
  return Status(StatusCode::kFailedPrecondition,
                "the adapter store keeps its buffers in device memory (CUDA IPC); this process "
                "attached without the CUDA backend");
}

}  // namespace marlaas
