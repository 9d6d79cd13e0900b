// Adapter broadcast over NCCL, from the trainer (root, rank 0) to rollout processes on other GPUs
// (members): one flat device buffer per tenant, one ncclBroadcast per published adapter. The
// group meets through a BroadcastRendezvous (shm/broadcast_rendezvous.h): the root publishes each
// communicator generation's NCCL unique id, and announces every broadcast (slot, version, bytes)
// before it makes it, so members enter the same collective with the same size.
//
// Failure: every wait polls the operation, ncclCommGetAsyncError and the peers' liveness, and
// gives up at its Deadline. On a dead or stuck peer the communicator is aborted and the call
// fails (kPeerDead or kTimeout); the root then Forms a new generation from the live members and
// re-broadcasts the latest adapter of every tenant (members that missed one catch up), and a
// member re-joins when it sees the new generation. No tenant is lost: the adapters themselves
// stay in the trainer's adapter store.
//
// Communicators are non-blocking (ncclConfig_t::blocking = 0). Built only with CUDA and NCCL
// (library marlaas_shm_nccl). One object per process, used from one thread.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>

#include "base/deadline.h"
#include "shm/broadcast_rendezvous.h"
#include "shm/broadcast_strikes.h"

namespace marlaas {

struct GroupComm;  // a communicator of one generation and its stream (adapter_broadcast.cc)

struct BroadcastOptions {
  // Where broadcasts run, after the caller's prior work on it. Default: a stream of the group's
  // own; each broadcast on it waits for the work queued before it on the legacy default stream
  // (the caller's writes of the adapter, or its reads of the previous one), one way only.
  cudaStream_t stream = nullptr;
};

class AdapterBroadcaster {
 public:
  AdapterBroadcaster(BroadcastRendezvous* rendezvous, const BroadcastOptions& options);
  ~AdapterBroadcaster();
  AdapterBroadcaster(const AdapterBroadcaster&) = delete;
  AdapterBroadcaster& operator=(const AdapterBroadcaster&) = delete;

  // True when the live members differ from the current generation's (one joined, one died) or
  // the last broadcast failed: Form, then re-broadcast every tenant's latest adapter.
  bool NeedsForming();
  // A new generation from the live members (none: broadcasts become no-ops). On failure (a
  // member did not initialise by `deadline`) the communicator is aborted; try again later.
  Status Form(Deadline deadline);
  int members() const { return world_size_ - 1; }
  uint64_t generation() const { return generation_; }

  // Sends `bytes` of device memory `src` (the adapter of store slot `slot`, whose tenant is of
  // `tenant_generation`, at `version`) to every member; returns when it is complete everywhere.
  Status Broadcast(int slot, uint64_t tenant_generation, uint64_t version, const void* src,
                   size_t bytes, Deadline deadline);

 private:
  void Abort();
  bool GenerationAlive();  // every member of the current generation still runs
  // Live members, less those left out (shm/broadcast_strikes.h): a member that fails
  // generations in a row (it cannot join or keep up, or stays registered without taking part)
  // would otherwise make the root re-form forever, or every broadcast wait its timeout.
  std::array<uint64_t, kMaxBroadcastMembers> EligibleMembers();
  void CountStrikes();  // before forming: who left or was silent in the generation that ends
  // After step `seq` (0: forming) of the current generation timed out: the members that never
  // got to it are silent.
  void BlameSilent(uint64_t seq);
  BroadcastStrikes strikes_;
  BroadcastStrikes::Flags silent_{};
  BroadcastRendezvous* rendezvous_;
  BroadcastOptions options_;
  std::unique_ptr<GroupComm> comm_;
  std::array<uint64_t, kMaxBroadcastMembers> members_{};  // of the current generation
  uint64_t generation_ = 0;
  uint64_t seq_ = 0;
  int world_size_ = 1;
  bool failed_ = false;
};

struct ReceivedAdapter {
  int slot = -1;
  uint64_t tenant_generation = 0;
  uint64_t version = 0;
  uint64_t bytes = 0;
};

class AdapterReceiver {
 public:
  AdapterReceiver(BroadcastRendezvous* rendezvous, const BroadcastOptions& options);
  ~AdapterReceiver();
  AdapterReceiver(const AdapterReceiver&) = delete;
  AdapterReceiver& operator=(const AdapterReceiver&) = delete;

  // Registers this process as a member (the root includes it in its next generation).
  Status Join();
  // Waits for the next broadcast and receives it into device memory `dst` (`capacity` bytes),
  // joining a new generation first when the root formed one (also in the middle of a call).
  // kUnavailable when nothing came by `deadline` (call again); kPeerDead when the root died;
  // kResourceExhausted when the adapter is larger than `capacity` (the broadcast is still received
  // into a scratch buffer, so the group goes on).
  Result<ReceivedAdapter> Receive(void* dst, size_t capacity, Deadline deadline);

 private:
  Status JoinRound(const BroadcastRound& round, int rank, Deadline deadline);
  void Abort();
  void Abandon();       // Abort, and tell the root this member left its generation
  bool GroupCurrent();  // the root runs and has not moved on to a newer generation
  BroadcastRendezvous* rendezvous_;
  BroadcastOptions options_;
  std::unique_ptr<GroupComm> comm_;
  int member_ = -1;
  uint64_t generation_ = 0;
  uint64_t next_seq_ = 0;  // the announcement after the last one handled
};

}  // namespace marlaas
