#include "shm/adapter_broadcast.h"

#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <thread>

#include "base/process.h"

namespace marlaas {
namespace {

static_assert(sizeof(ncclUniqueId) == kBroadcastIdBytes, "NCCL unique id size changed");

// A collective that has started is given this long to finish even when the caller's deadline is
// nearer: leaving it half done would wedge the group.
constexpr auto kCollectiveTimeout = std::chrono::seconds(20);

Status NcclError(const std::string& what, ncclResult_t r) {
  return Status(StatusCode::kInternal, what + ": " + ncclGetErrorString(r));
}

void Pause() { std::this_thread::sleep_for(std::chrono::microseconds(50)); }

}  // namespace

// A non-blocking communicator, the stream its broadcasts run on, and (members) a scratch buffer
// for an adapter larger than the caller's. Destroying it aborts the communicator.
struct GroupComm {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  bool own_stream = false;
  void* scratch = nullptr;
  size_t scratch_bytes = 0;
  cudaEvent_t after_default = nullptr;  // OrderAfterDefaultStream
  ~GroupComm() {
    if (comm != nullptr) ncclCommAbort(comm);
    if (scratch != nullptr) cudaFree(scratch);
    if (after_default != nullptr) cudaEventDestroy(after_default);
    if (own_stream && stream != nullptr) cudaStreamDestroy(stream);
  }
};

namespace {

// Waits until a non-blocking NCCL call on `comm` is no longer in progress. `peers_ok` is asked
// now and then; false means a peer died.
template <typename PeersOk>
Status WaitComm(ncclComm_t comm, Deadline deadline, PeersOk peers_ok, const char* what) {
  for (int i = 0;; ++i) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t r = ncclCommGetAsyncError(comm, &state);
    if (r != ncclSuccess) return NcclError(std::string(what) + ": ncclCommGetAsyncError", r);
    if (state == ncclSuccess) return Status::Ok();
    if (state != ncclInProgress) return NcclError(what, state);
    if (i % 64 == 0 && !peers_ok())
      return Status(StatusCode::kPeerDead, std::string(what) + ": a peer of the group died");
    if (deadline.Expired())
      return Status(StatusCode::kTimeout, std::string(what) + ": the group did not answer in time");
    Pause();
  }
}

// Waits until the work queued on `stream` (a broadcast) completed, watching `comm`'s errors.
template <typename PeersOk>
Status WaitStream(ncclComm_t comm, cudaStream_t stream, Deadline deadline, PeersOk peers_ok) {
  for (int i = 0;; ++i) {
    const cudaError_t q = cudaStreamQuery(stream);
    if (q == cudaSuccess) return Status::Ok();
    if (q != cudaErrorNotReady) {
      cudaGetLastError();
      return Status(StatusCode::kInternal,
                    std::string("adapter broadcast stream: ") + cudaGetErrorString(q));
    }
    ncclResult_t state = ncclSuccess;
    ncclCommGetAsyncError(comm, &state);
    if (state != ncclSuccess && state != ncclInProgress)
      return NcclError("adapter broadcast", state);
    if (i % 64 == 0 && !peers_ok())
      return Status(StatusCode::kPeerDead, "adapter broadcast: a peer of the group died");
    if (deadline.Expired())
      return Status(StatusCode::kTimeout, "adapter broadcast did not complete in time");
    Pause();
  }
}

Result<cudaStream_t> StreamFor(const BroadcastOptions& options, bool* own) {
  *own = options.stream == nullptr;
  if (!*own) return options.stream;
  cudaStream_t s = nullptr;
  // Non-blocking, so the caller's later default-stream work never waits behind a collective
  // that waits for its peers; OrderAfterDefaultStream orders each broadcast after the earlier.
  const cudaError_t err = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return Status(StatusCode::kInternal,
                  std::string("cudaStreamCreate: ") + cudaGetErrorString(err));
  }
  return s;
}

// One-way ordering for the group's own stream: the next broadcast starts after the work queued
// so far on the legacy default stream (the caller's writes of the adapter, or its reads of the
// previous one), and nothing there waits for the broadcast.
Status OrderAfterDefaultStream(GroupComm* c) {
  if (!c->own_stream) return Status::Ok();  // the caller's stream: ordered by the caller
  if (c->after_default == nullptr) {
    const cudaError_t err = cudaEventCreateWithFlags(&c->after_default, cudaEventDisableTiming);
    if (err != cudaSuccess) {
      c->after_default = nullptr;
      cudaGetLastError();
      return Status(StatusCode::kInternal,
                    std::string("cudaEventCreate: ") + cudaGetErrorString(err));
    }
  }
  cudaError_t err = cudaEventRecord(c->after_default, cudaStreamLegacy);
  if (err == cudaSuccess) err = cudaStreamWaitEvent(c->stream, c->after_default, 0);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return Status(StatusCode::kInternal,
                  std::string("ordering the broadcast stream: ") + cudaGetErrorString(err));
  }
  return Status::Ok();
}

Deadline CollectiveDeadline(Deadline caller) {
  const Deadline floor = Deadline::After(kCollectiveTimeout);
  return caller.Remaining() > floor.Remaining() ? caller : floor;
}

}  // namespace

// ---------------------------------------------------------------------------- root

AdapterBroadcaster::AdapterBroadcaster(BroadcastRendezvous* rendezvous,
                                       const BroadcastOptions& options)
    : rendezvous_(rendezvous), options_(options) {}

AdapterBroadcaster::~AdapterBroadcaster() { Abort(); }

void AdapterBroadcaster::Abort() { comm_.reset(); }

bool AdapterBroadcaster::GenerationAlive() {
  const std::array<uint64_t, kMaxBroadcastMembers> live = rendezvous_->LiveMembers();
  for (size_t m = 0; m < live.size(); ++m) {
    if (members_[m] == 0) continue;
    if (live[m] != members_[m]) return false;                              // died (or replaced)
    if (rendezvous_->LeftGeneration(int(m)) >= generation_) return false;  // gave up on it
  }
  return true;
}

std::array<uint64_t, kMaxBroadcastMembers> AdapterBroadcaster::EligibleMembers() {
  return strikes_.Eligible(rendezvous_->LiveMembers());
}

bool AdapterBroadcaster::NeedsForming() {
  return failed_ || generation_ == 0 || EligibleMembers() != members_ || !GenerationAlive();
}

void AdapterBroadcaster::CountStrikes() {
  BroadcastStrikes::Flags failed{};
  for (size_t m = 0; m < members_.size(); ++m) {
    failed[m] =
        members_[m] != 0 && (silent_[m] || rendezvous_->LeftGeneration(int(m)) >= generation_);
  }
  silent_ = {};
  for (int m : strikes_.EndGeneration(members_, failed)) {
    std::fprintf(stderr,
                 "adapter broadcast: member slot %d (pid %d) failed %d generations in a row (left "
                 "them, or did not take part); left out until another process registers\n",
                 m, int(ProcessIdentity::Unpack(members_[size_t(m)]).pid),
                 BroadcastStrikes::kMaxStrikes);
  }
}

void AdapterBroadcaster::BlameSilent(uint64_t seq) {
  for (size_t m = 0; m < members_.size(); ++m) {
    if (members_[m] != 0 &&
        BroadcastStrikes::Silent(rendezvous_->ProgressOf(int(m)), generation_, seq))
      silent_[m] = true;
  }
}

Status AdapterBroadcaster::Form(Deadline deadline) {
  Abort();
  failed_ = true;  // until this generation is up
  CountStrikes();
  const std::array<uint64_t, kMaxBroadcastMembers> live = EligibleMembers();
  BroadcastRound round;
  auto previous = rendezvous_->LatestRound();
  round.generation = std::max(generation_, previous.ok() ? previous->generation : 0) + 1;
  round.root_identity = SelfIdentity().Pack();
  round.first_seq = rendezvous_->NextSeq();
  int world = 1;
  for (int m = 0; m < kMaxBroadcastMembers; ++m) {
    round.rank_of[size_t(m)] = live[size_t(m)] != 0 ? world++ : -1;
    round.member_identity[size_t(m)] = live[size_t(m)];
  }
  round.world_size = world;
  generation_ = round.generation;
  members_ = live;
  world_size_ = world;
  if (world == 1) {  // nobody to send to: no communicator
    MARLAAS_RETURN_IF_ERROR(rendezvous_->PublishRound(round));
    failed_ = false;
    return Status::Ok();
  }
  ncclUniqueId id;
  ncclResult_t r = ncclGetUniqueId(&id);
  if (r != ncclSuccess) return NcclError("ncclGetUniqueId", r);
  std::memcpy(round.id.data(), &id, sizeof(id));
  MARLAAS_RETURN_IF_ERROR(rendezvous_->PublishRound(round));

  comm_ = std::make_unique<GroupComm>();
  MARLAAS_ASSIGN_OR_RETURN(comm_->stream, StreamFor(options_, &comm_->own_stream));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  r = ncclCommInitRankConfig(&comm_->comm, world, id, 0, &config);
  if (r != ncclSuccess && r != ncclInProgress) {
    Abort();  // aborts whatever NCCL left in comm_->comm
    return NcclError("ncclCommInitRankConfig (root)", r);
  }
  const auto members_alive = [&] { return GenerationAlive(); };
  Status st = WaitComm(comm_->comm, deadline, members_alive, "forming the broadcast group");
  if (!st.ok()) {
    if (st.code() == StatusCode::kTimeout) BlameSilent(0);
    Abort();
    return st;
  }
  failed_ = false;
  return Status::Ok();
}

Status AdapterBroadcaster::Broadcast(int slot, uint64_t tenant_generation, uint64_t version,
                                     const void* src, size_t bytes, Deadline deadline) {
  if (failed_) {
    return Status(StatusCode::kFailedPrecondition,
                  "the broadcast group must be formed again (a peer failed)");
  }
  if (world_size_ == 1) return Status::Ok();
  BroadcastAnnouncement a;
  a.generation = generation_;
  a.slot = slot;
  a.tenant_generation = tenant_generation;
  a.version = version;
  a.bytes = bytes;
  MARLAAS_ASSIGN_OR_RETURN(const uint64_t seq, rendezvous_->Announce(a));
  const auto members_alive = [&] { return GenerationAlive(); };
  const Deadline collective = CollectiveDeadline(deadline);
  Status st = OrderAfterDefaultStream(comm_.get());
  if (st.ok()) {
    const ncclResult_t r =
        ncclBroadcast(src, const_cast<void*>(src), bytes, ncclUint8, 0, comm_->comm, comm_->stream);
    st = r == ncclSuccess || r == ncclInProgress
             ? WaitComm(comm_->comm, collective, members_alive, "ncclBroadcast (root)")
             : NcclError("ncclBroadcast (root)", r);
  }
  if (st.ok()) st = WaitStream(comm_->comm, comm_->stream, collective, members_alive);
  if (!st.ok()) {
    if (st.code() == StatusCode::kTimeout) BlameSilent(seq);
    Abort();
    failed_ = true;
  }
  return st;
}

// ---------------------------------------------------------------------------- member

AdapterReceiver::AdapterReceiver(BroadcastRendezvous* rendezvous, const BroadcastOptions& options)
    : rendezvous_(rendezvous), options_(options) {}

AdapterReceiver::~AdapterReceiver() {
  Abort();
  if (member_ >= 0) rendezvous_->Unregister(member_);
}

void AdapterReceiver::Abort() { comm_.reset(); }

void AdapterReceiver::Abandon() {
  Abort();
  rendezvous_->Leave(member_, generation_);  // the root forms a generation without this one
}

bool AdapterReceiver::GroupCurrent() {
  if (!rendezvous_->RootAlive()) return false;
  auto round = rendezvous_->LatestRound();
  return !round.ok() || round->generation <= generation_;  // a newer one: the root moved on
}

Status AdapterReceiver::Join() {
  MARLAAS_ASSIGN_OR_RETURN(member_, rendezvous_->Register());
  return Status::Ok();
}

Status AdapterReceiver::JoinRound(const BroadcastRound& round, int rank, Deadline deadline) {
  Abort();
  generation_ = round.generation;  // never joined twice (its id is used up), whatever happens
  next_seq_ = round.first_seq;
  comm_ = std::make_unique<GroupComm>();
  auto stream = StreamFor(options_, &comm_->own_stream);
  if (!stream.ok()) return stream.status();
  comm_->stream = *stream;
  ncclUniqueId id;
  std::memcpy(&id, round.id.data(), sizeof(id));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  rendezvous_->Progress(member_, BroadcastProgress{round.generation, 0});  // began to join
  const ncclResult_t r = ncclCommInitRankConfig(&comm_->comm, round.world_size, id, rank, &config);
  if (r != ncclSuccess && r != ncclInProgress)
    return NcclError("ncclCommInitRankConfig (member)", r);  // the caller aborts comm_
  const auto group_ok = [&] { return GroupCurrent(); };
  return WaitComm(comm_->comm, CollectiveDeadline(deadline), group_ok,
                  "joining the broadcast group");
}

Result<ReceivedAdapter> AdapterReceiver::Receive(void* dst, size_t capacity, Deadline deadline) {
  if (member_ < 0) return Status(StatusCode::kFailedPrecondition, "Receive before Join");
  const uint64_t self = SelfIdentity().Pack();
  // After a failed join or collective: a dead root ends the call (kPeerDead); a root that moved
  // on to a newer generation is followed (nullopt: go on); otherwise this member leaves the
  // generation, so the root forms a new one, and the error is returned.
  auto after_failure = [&](const Status& st) -> std::optional<Status> {
    if (!rendezvous_->RootAlive()) {
      Abort();
      return Status(StatusCode::kPeerDead, "the adapter broadcast root (trainer) is not running");
    }
    auto latest = rendezvous_->LatestRound();
    if (latest.ok() && latest->generation > generation_) {
      Abort();
      return std::nullopt;
    }
    Abandon();
    return st;
  };
  for (;;) {
    if (!rendezvous_->RootAlive()) {
      Abort();
      return Status(StatusCode::kPeerDead, "the adapter broadcast root (trainer) is not running");
    }
    auto round = rendezvous_->LatestRound();
    if (round.ok() && round->generation > generation_) {
      const size_t m = size_t(member_);
      if (round->rank_of[m] >= 1 && round->member_identity[m] == self) {
        const Status joined = JoinRound(*round, round->rank_of[m], deadline);
        if (!joined.ok()) {
          if (auto st = after_failure(joined)) return *st;
          continue;
        }
      } else {
        Abort();  // a generation without us: the root will include us in its next one
        generation_ = round->generation;
      }
    }
    if (comm_ == nullptr) {
      if (deadline.Expired())
        return Status(StatusCode::kUnavailable, "not (yet) in a broadcast generation");
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      continue;
    }
    // Wait a little at a time, so a new generation or a dead root is noticed.
    const Deadline slice = Deadline::AfterMs(50);
    auto a = rendezvous_->AnnouncementAt(
        next_seq_, slice.Remaining() < deadline.Remaining() ? slice : deadline);
    if (!a.ok()) {
      if (a.status().code() != StatusCode::kUnavailable) {
        Abandon();  // fell behind the ring: join the root's next generation
        return a.status();
      }
      if (deadline.Expired()) return a.status();
      continue;
    }
    if (a->generation != generation_) {  // from an older generation, or a newer one is coming
      if (a->generation < generation_) ++next_seq_;
      continue;
    }
    void* buffer = dst;
    if (a->bytes > capacity) {
      if (comm_->scratch_bytes < a->bytes) {
        if (comm_->scratch != nullptr) cudaFree(comm_->scratch);
        comm_->scratch = nullptr;
        comm_->scratch_bytes = 0;
        if (cudaMalloc(&comm_->scratch, a->bytes) != cudaSuccess) {
          cudaGetLastError();
          Abandon();  // cannot take part: the root forms a generation without us
          return Status(StatusCode::kResourceExhausted,
                        "no device memory for an oversized adapter");
        }
        comm_->scratch_bytes = a->bytes;
      }
      buffer = comm_->scratch;
    }
    const auto group_ok = [&] { return GroupCurrent(); };
    const Deadline collective = CollectiveDeadline(deadline);
    Status st = OrderAfterDefaultStream(comm_.get());
    if (st.ok()) {
      rendezvous_->Progress(member_, BroadcastProgress{generation_, a->seq});  // entered it
      const ncclResult_t r =
          ncclBroadcast(buffer, buffer, a->bytes, ncclUint8, 0, comm_->comm, comm_->stream);
      st = r == ncclSuccess || r == ncclInProgress
               ? WaitComm(comm_->comm, collective, group_ok, "ncclBroadcast (member)")
               : NcclError("ncclBroadcast (member)", r);
    }
    if (st.ok()) st = WaitStream(comm_->comm, comm_->stream, collective, group_ok);
    if (!st.ok()) {
      if (auto failed = after_failure(st)) return *failed;
      continue;
    }
    ++next_seq_;
    if (a->bytes > capacity) {
      return Status(StatusCode::kResourceExhausted, "adapter of slot " + std::to_string(a->slot) +
                                                        " has " + std::to_string(a->bytes) +
                                                        " bytes; the buffer holds " +
                                                        std::to_string(capacity));
    }
    return ReceivedAdapter{a->slot, a->tenant_generation, a->version, a->bytes};
  }
}

}  // namespace marlaas
