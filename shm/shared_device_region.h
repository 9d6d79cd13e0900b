// SharedDeviceRegion: one block of device memory that the processes of a service on one GPU use
// as a single copy, e.g. the frozen base model's weights, which the rollout and the trainer both
// read. The first process that asks for region `name` becomes its owner: it allocates the block,
// fills it and publishes its CUDA IPC handle in segment /marlaas.<instance>.region.<name>. Every
// later process on the same GPU opens that handle instead of allocating (its pointer aliases the
// owner's memory).
//
//  - A region carries a content key (e.g. the model's path and size): asking for the same name
//    with another key or size is refused by name, so two models never share bytes.
//  - The owner frees the block only after the live processes that opened it close it (their
//    registration: shm/ipc_readers.h); a dead opener does not hold it up. If live openers still
//    map it after kFreeWaitMs, the owner leaves it allocated to its own exit rather than free
//    memory another process maps (undefined behaviour in CUDA IPC).
//  - A process opens a region once: a second OpenOrCreate of the same region in one process
//    fails with kAlreadyExists.
//  - When the owner dies, openers keep using their mapping; the next process that asks while no
//    live owner exists becomes the new owner and allocates a fresh copy (until the old openers
//    restart, the device then holds two).
// Built only with CUDA (library marlaas_shm_cuda). Callers never initialise CUDA in a process
// they later fork CUDA workers from. Use one object from one thread at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "base/deadline.h"
#include "base/status.h"
#include "shm/segment.h"

namespace marlaas {

class SharedDeviceRegion {
 public:
  // Fills the freshly allocated block (device pointer, `bytes`); runs in the owner only. The
  // region is published once it returns OK, after a device synchronisation.
  using Fill = std::function<Status(void* device, uint64_t bytes)>;

  // Opens region `name` (1-32 of [A-Za-z0-9_-]) of `bytes` holding `key` (at most 63 bytes), or
  // becomes its owner and fills it. Waits, until `deadline`, for an owner that is still filling.
  static Result<SharedDeviceRegion> OpenOrCreate(const std::string& instance,
                                                 const std::string& name, uint64_t bytes,
                                                 const std::string& key, const Fill& fill,
                                                 Deadline deadline);

  SharedDeviceRegion(SharedDeviceRegion&& other) noexcept;
  SharedDeviceRegion& operator=(SharedDeviceRegion&&) = delete;
  SharedDeviceRegion(const SharedDeviceRegion&) = delete;
  ~SharedDeviceRegion();  // opener: closes; owner: unpublishes, waits for openers, frees

  void* data() const { return data_; }
  uint64_t bytes() const { return bytes_; }
  bool owner() const { return owner_; }

  // How long the owner's destructor waits for live openers to close before it frees anyway.
  static constexpr int64_t kFreeWaitMs = 5000;

 private:
  struct Record;
  SharedDeviceRegion(Segment seg, void* data, uint64_t bytes, bool owner, uint64_t epoch,
                     int reader_entry);
  // The owner's half of OpenOrCreate, once it holds the owner field: allocate, fill, publish.
  // Both halves move `seg` into the region only on success.
  static Result<SharedDeviceRegion> Publish(Segment& seg, const std::string& name, uint64_t bytes,
                                            const std::string& key, const Fill& fill);
  // An opener's half: register, re-check `state`, open the handle. kUnavailable: retry.
  static Result<SharedDeviceRegion> Open(Segment& seg, const std::string& name, uint64_t bytes,
                                         const std::string& key, uint64_t state);
  Record* record() const;
  Segment segment_;
  void* data_ = nullptr;
  uint64_t bytes_ = 0;
  bool owner_ = false;
  uint64_t epoch_ = 0;
  int reader_entry_ = -1;
};

}  // namespace marlaas
