// The adapter store's CUDA backend: each slot's two buffers live in the writer's device memory and
// cross to reader processes on the same GPU as CUDA IPC handles (protocol: adapter_ipc_layout.h).
//  - Writer (the trainer): allocates a slot's buffers and their interprocess events on first
//    write, records the buffer's event on `write_stream` after its writes (FinishWrite), and
//    retires the buffers when its tenant leaves (FreeBuffers). Retired buffers are freed only
//    once no live reader maps them (freeing memory another process maps is undefined behaviour
//    in CUDA IPC): at once when the readers already let go, else on a later FreeBuffers, write
//    or Sweep. At destruction, buffers still mapped by live readers are left to process exit.
//    Every write to a buffer must go on `write_stream` and be queued after BeginWrite: that, and
//    CopyOut completing before it returns, is what makes the store's seqlock re-check sound for
//    GPU copies.
//  - Reader (a rollout on the same GPU): opens a slot's handles once per allocation, and copies
//    on swap on its own stream, ordered after the writer's last writes by the event, waiting at
//    most `copy_timeout_ms` for it; Sweep closes the mappings of freed buffers and of dead
//    writers.
// Built only with the CUDA toolkit (library marlaas_shm_cuda). One instance per process, used
// from one thread at a time. A process on another GPU gets kFailedPrecondition naming both GPUs:
// adapters reach other GPUs by NCCL broadcast.
#pragma once

#include <cuda_runtime_api.h>

#include "base/deadline.h"
#include "shm/adapter_store.h"

namespace marlaas {

struct CudaIpcOptions {
  // The stream the writer's writes to a buffer were issued on (FinishWrite records after them).
  cudaStream_t write_stream = nullptr;
  // How long the destructor waits for live readers to let go of retired buffers (FreeBuffers
  // waits at most 200 ms, then leaves them to a later call).
  int64_t free_wait_ms = 2000;
  // How long a reader's copy may wait for the writer's GPU work before CopyOut gives up with
  // kInternal. The copy cannot be called back: its destination may still be written later, so a
  // process that sees this must not reuse that memory (the rollout exits and is restarted).
  int64_t copy_timeout_ms = 10000;
};

// The factory AdapterStore::Attach takes. The process's current CUDA device at the time of the
// first write (writer) or copy (reader) is the one it uses.
DeviceMemoryFactory CudaIpcMemory(const CudaIpcOptions& options = {});

}  // namespace marlaas
