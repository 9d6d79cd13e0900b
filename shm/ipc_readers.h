// The reader registry of a device allocation exported by CUDA IPC (the adapter store's buffers,
// shm/adapter_ipc_layout.h; a shared device region, shm/shared_device_region.h). A reader claims
// an entry for the allocation's epoch BEFORE it re-checks that the allocation is still published
// and opens it; the exporter, after unpublishing, waits until no live reader holds the epoch
// before it frees. Both sides use seq_cst, so one of them always sees the other. A dead reader's
// entry does not count: its mappings died with it. Plain data in shared memory; lock-free.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "base/deadline.h"

namespace marlaas {

inline constexpr int kMaxIpcReaders = 16;  // reader processes per allocation (rollouts on a GPU)

struct IpcReaderEntry {
  std::atomic<uint64_t> identity;  // ProcessIdentity::Pack() of the reader; 0: free entry
  std::atomic<uint64_t> epoch;     // the allocation it has open (or is opening)
};

// Claims a free entry of `entries` (kMaxIpcReaders of them), or a dead reader's, for `self` and
// `epoch`: one per open, never one `self` holds already. -1 when every entry is held by a live
// reader.
int ClaimIpcReader(IpcReaderEntry* entries, uint64_t self, uint64_t epoch);
// Gives entry `entry` back (after the reader closed its mapping).
void ReleaseIpcReader(IpcReaderEntry* entries, int entry);
// Exporter: waits until no live reader holds `epoch`, or until `deadline`. Returns the pids of
// the readers still holding it, space-separated (empty: none).
std::string WaitForIpcReaders(IpcReaderEntry* entries, uint64_t epoch, Deadline deadline);

}  // namespace marlaas
