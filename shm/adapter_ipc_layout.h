// How the CUDA backend of the adapter store (shm/cuda_adapter_memory.h) describes each slot's two
// device buffers in the store's segment: the allocation's CUDA IPC handles as opaque bytes (no
// CUDA header here, so every process can map the segment), which GPU holds them, and which
// reader processes have them open.
//
// Protocol (all in cuda_adapter_memory.cc):
//  - The slot's writer (the trainer) allocates both buffers and their interprocess events, then
//    publishes them: `state` = (epoch << 1) | 1. Before it rewrites the handles or frees the
//    buffers it stores (epoch << 1), even: "not available".
//  - A reader registers in `readers` before it opens the handles, and the writer frees only after
//    live readers let go (shm/ipc_readers.h): a reader never opens memory being freed, and the
//    writer never frees memory a live reader has open.
//  - A reader closes its mappings when the epoch changes or the owner dies, so a dead writer's
//    memory is released by the driver once the last reader lets go.
#pragma once

#include <atomic>
#include <cstdint>

#include "shm/ipc_readers.h"

namespace marlaas {

inline constexpr int kIpcHandleBytes = 64;  // CUDA_IPC_HANDLE_SIZE

struct IpcSlotRecord {
  // (epoch << 1) | 1 while the fields below describe allocation `epoch`; even otherwise.
  // WRITER: the slot's writer. SYNC POINT: release-stored after the fields; a reader
  // acquire-loads it before reading them and re-checks it after (a seqlock).
  std::atomic<uint64_t> state;
  std::atomic<uint64_t> owner;  // ProcessIdentity::Pack() of the allocating process
  unsigned char device_uuid[16];
  uint64_t bytes;  // capacity of each buffer
  unsigned char mem[2][kIpcHandleBytes];
  unsigned char event[2][kIpcHandleBytes];
  IpcReaderEntry readers[kMaxIpcReaders];
};

}  // namespace marlaas
