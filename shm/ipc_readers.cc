#include "shm/ipc_readers.h"

#include <chrono>
#include <thread>

#include "base/process.h"

namespace marlaas {

int ClaimIpcReader(IpcReaderEntry* entries, uint64_t self, uint64_t epoch) {
  for (int i = 0; i < kMaxIpcReaders; ++i) {
    IpcReaderEntry& e = entries[i];
    uint64_t id = e.identity.load(std::memory_order_seq_cst);
    // Never an entry this process holds already: each open of an allocation (even of another
    // epoch) has its own entry, so closing one cannot release another's.
    if (id != 0 && (id == self || IsAlive(ProcessIdentity::Unpack(id)))) continue;
    if (e.identity.compare_exchange_strong(id, self, std::memory_order_seq_cst)) {
      e.epoch.store(epoch, std::memory_order_seq_cst);
      return i;
    }
  }
  return -1;
}

void ReleaseIpcReader(IpcReaderEntry* entries, int entry) {
  if (entry >= 0 && entry < kMaxIpcReaders)
    entries[entry].identity.store(0, std::memory_order_seq_cst);
}

std::string WaitForIpcReaders(IpcReaderEntry* entries, uint64_t epoch, Deadline deadline) {
  for (;;) {
    std::string holders;
    for (int i = 0; i < kMaxIpcReaders; ++i) {
      const uint64_t id = entries[i].identity.load(std::memory_order_seq_cst);
      if (id == 0 || entries[i].epoch.load(std::memory_order_seq_cst) != epoch) continue;
      const ProcessIdentity who = ProcessIdentity::Unpack(id);
      if (!IsAlive(who)) continue;
      holders += (holders.empty() ? "" : " ") + std::to_string(who.pid);
    }
    if (holders.empty() || deadline.Expired()) return holders;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace marlaas
