// How the CUDA backend of the adapter store (shm/cuda_adapter_memory.h) describes each slot's two
// device buffers in the store's segment: the allocation's CUDA IPC handles as opaque bytes (no
// CUDA header here, so every process can map the segment), which GPU holds them, and which
// reader processes have them open.
//
// Protocol (all in cuda_adapter_memory.cc):
//  - The slot's writer (the trainer) allocates both buffers and their interprocess events, then
//    publishes them: `state` = (epoch << 1) | 1. Before it rewrites the handles or frees the
//    buffers it stores (epoch << 1), even: "not available".
//  - A reader registers itself in `readers` (its identity and the epoch) BEFORE it re-checks that
//    `state` is still that epoch and opens the handles; the writer, after storing the even state,
//    waits until no live reader holds the epoch before it frees. Both sides use seq_cst, so one
//    of them sees the other: a reader never opens memory that is being freed, and the writer
//    never frees memory a live reader has open (a dead reader's mappings die with it).
//  - A reader closes its mappings when the epoch changes or the owner dies, so a dead writer's
//    memory is released by the driver once the last reader lets go.
#pragma once

#include <atomic>
#include <cstdint>

namespace marlaas {

inline constexpr int kIpcHandleBytes = 64;  // CUDA_IPC_HANDLE_SIZE
inline constexpr int kMaxIpcReaders = 16;   // reader processes per slot (rollouts on one GPU)

struct IpcReaderEntry {
  std::atomic<uint64_t> identity;  // ProcessIdentity::Pack() of the reader; 0: free entry
  std::atomic<uint64_t> epoch;     // the allocation it has open (or is opening)
};

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
