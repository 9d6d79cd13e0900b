#include "shm/cuda_adapter_memory.h"

#include <cuda_runtime_api.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "base/process.h"

namespace marlaas {
namespace {

static_assert(sizeof(cudaIpcMemHandle_t) == kIpcHandleBytes, "CUDA IPC handle size changed");
static_assert(sizeof(cudaIpcEventHandle_t) == kIpcHandleBytes, "CUDA IPC handle size changed");

Status CudaError(const std::string& what, cudaError_t err) {
  cudaGetLastError();  // clear a non-sticky error so later calls are not blamed for it
  return Status(StatusCode::kInternal, what + ": " + cudaGetErrorString(err));
}

#define MARLAAS_CUDA_RETURN(what, call)                    \
  do {                                                     \
    const cudaError_t _err = (call);                       \
    if (_err != cudaSuccess) return CudaError(what, _err); \
  } while (0)

std::string UuidString(const unsigned char* uuid) {
  char buf[48];
  std::snprintf(buf, sizeof(buf),
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", uuid[0],
                uuid[1], uuid[2], uuid[3], uuid[4], uuid[5], uuid[6], uuid[7], uuid[8], uuid[9],
                uuid[10], uuid[11], uuid[12], uuid[13], uuid[14], uuid[15]);
  return buf;
}

Status CurrentDeviceUuid(unsigned char out[16]) {
  int device = 0;
  MARLAAS_CUDA_RETURN("cudaGetDevice", cudaGetDevice(&device));
  cudaDeviceProp prop{};
  MARLAAS_CUDA_RETURN("cudaGetDeviceProperties", cudaGetDeviceProperties(&prop, device));
  std::memcpy(out, prop.uuid.bytes, 16);
  return Status::Ok();
}

class CudaIpcAdapterMemory : public AdapterMemory {
 public:
  CudaIpcAdapterMemory(IpcSlotRecord* records, int num_slots, uint64_t buffer_bytes,
                       const CudaIpcOptions& options)
      : records_(records),
        buffer_bytes_(buffer_bytes),
        options_(options),
        self_(SelfIdentity().Pack()),
        owned_(size_t(num_slots)),
        mapped_(size_t(num_slots)) {}

  ~CudaIpcAdapterMemory() override {
    for (size_t slot = 0; slot < mapped_.size(); ++slot) CloseMapping(int(slot));
    for (size_t slot = 0; slot < owned_.size(); ++slot) Retire(int(slot));
    (void)Reap(Deadline::AfterMs(options_.free_wait_ms));
    for (const Pending& p : pending_) {
      // Freeing memory a live reader still maps is undefined behaviour; leaving it is not: it
      // goes back to the device when this process exits.
      std::fprintf(stderr, "adapter slot %d: readers %s still map its buffers; left allocated\n",
                   p.slot, p.holders.c_str());
    }
    if (copied_ != nullptr) cudaEventDestroy(copied_);
    if (read_stream_ != nullptr) cudaStreamDestroy(read_stream_);
  }

  AdapterBackend backend() const override { return AdapterBackend::kCudaIpc; }

  bool HasBuffers(int slot) const override { return owned_[size_t(slot)].ptr[0] != nullptr; }

  Result<void*> WritableBuffer(int slot, int buffer) override {
    Owned& o = owned_[size_t(slot)];
    if (o.ptr[0] == nullptr) {
      (void)Reap(Deadline::Now());  // retired buffers whose readers have let go since
      MARLAAS_RETURN_IF_ERROR(Allocate(slot));
    }
    return o.ptr[buffer];
  }

  Status FinishWrite(int slot, int buffer) override {
    Owned& o = owned_[size_t(slot)];
    if (o.ptr[0] == nullptr) {
      return Status(StatusCode::kFailedPrecondition,
                    "adapter slot " + std::to_string(slot) + ": no buffers written here");
    }
    MARLAAS_CUDA_RETURN("cudaEventRecord", cudaEventRecord(o.event[buffer], options_.write_stream));
    return Status::Ok();
  }

  Status CopyOut(int slot, int buffer, void* dst, size_t bytes) override {
    if (bytes > buffer_bytes_) {
      return Status(StatusCode::kInvalidArgument,
                    "copy of " + std::to_string(bytes) + " bytes exceeds the adapter buffer size");
    }
    // The writer reading its own slot copies from its own buffers (a process cannot open the
    // IPC handles it exported).
    const Owned& own = owned_[size_t(slot)];
    const bool mine =
        own.ptr[0] != nullptr &&
        records_[slot].state.load(std::memory_order_acquire) == ((own.epoch << 1) | 1);
    if (!mine) MARLAAS_RETURN_IF_ERROR(OpenMapping(slot));
    const Mapped& m = mapped_[size_t(slot)];
    void* src = mine ? own.ptr[buffer] : m.ptr[buffer];
    cudaEvent_t written = mine ? own.event[buffer] : m.event[buffer];
    if (read_stream_ == nullptr) {
      MARLAAS_CUDA_RETURN("cudaStreamCreateWithFlags",
                          cudaStreamCreateWithFlags(&read_stream_, cudaStreamNonBlocking));
    }
    // Ordered after the writer's last writes to this buffer: the event it recorded before
    // publishing. A later rewrite is caught by the store's seqlock re-check after this returns,
    // which is sound because this copy is complete before we return and the writer queues its
    // GPU writes only after BeginWrite marked the buffer (cuda_adapter_memory.h).
    MARLAAS_CUDA_RETURN("cudaStreamWaitEvent", cudaStreamWaitEvent(read_stream_, written, 0));
    MARLAAS_CUDA_RETURN("cudaMemcpyAsync",
                        cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, read_stream_));
    return AwaitCopy(slot);
  }

  Status FreeBuffers(int slot) override {
    if (owned_[size_t(slot)].ptr[0] == nullptr) return Status::Ok();
    const uint64_t epoch = owned_[size_t(slot)].epoch;
    Retire(slot);
    // Readers close on their next Sweep or copy; a short wait on this slot's readers lets the
    // common case free now. Other retired buffers are only looked at, not waited for.
    (void)WaitForIpcReaders(records_[slot].readers, epoch,
                            Deadline::AfterMs(std::min<int64_t>(options_.free_wait_ms, 200)));
    return Reap(Deadline::Now());
  }

  void Sweep() override {
    (void)Reap(Deadline::Now());  // writer: retired buffers whose readers let go
    for (size_t slot = 0; slot < mapped_.size(); ++slot) {
      Mapped& m = mapped_[slot];
      if (m.ptr[0] == nullptr) continue;
      const IpcSlotRecord& r = records_[slot];
      const bool current = r.state.load(std::memory_order_acquire) == ((m.epoch << 1) | 1);
      const bool owner_alive = IsAlive(ProcessIdentity::Unpack(r.owner.load()));
      if (!current || !owner_alive) CloseMapping(int(slot));
    }
  }

 private:
  struct Owned {  // writer side
    uint64_t epoch = 0;
    void* ptr[2] = {nullptr, nullptr};
    cudaEvent_t event[2] = {nullptr, nullptr};
  };
  struct Pending {  // writer side: retired buffers waiting for their readers to let go
    int slot;
    Owned o;
    std::string holders;  // pids of the live readers at the last look
  };

  // Unpublishes `slot`'s buffers: no reader opens them any more; they wait in pending_.
  void Retire(int slot) {
    Owned& o = owned_[size_t(slot)];
    if (o.ptr[0] == nullptr) return;
    records_[slot].state.store(o.epoch << 1, std::memory_order_seq_cst);
    pending_.push_back(Pending{slot, o, {}});
    o = Owned{};
  }

  // Frees the retired buffers that no live reader maps, waiting for readers until `deadline`.
  // Never frees memory a live reader maps (undefined behaviour in CUDA IPC).
  Status Reap(Deadline deadline) {
    Status st;
    for (size_t i = 0; i < pending_.size();) {
      Pending& p = pending_[i];
      p.holders = WaitForIpcReaders(records_[p.slot].readers, p.o.epoch, deadline);
      if (!p.holders.empty()) {
        ++i;
        continue;
      }
      for (int b = 0; b < 2; ++b) {
        const cudaError_t ev = p.o.event[b] ? cudaEventDestroy(p.o.event[b]) : cudaSuccess;
        if (ev != cudaSuccess && st.ok()) st = CudaError("cudaEventDestroy", ev);
        const cudaError_t mem = p.o.ptr[b] ? cudaFree(p.o.ptr[b]) : cudaSuccess;
        if (mem != cudaSuccess && st.ok()) st = CudaError("cudaFree", mem);
      }
      pending_.erase(pending_.begin() + std::ptrdiff_t(i));
    }
    return st;
  }

  // Waits until the copy queued on read_stream_ is done, at most options_.copy_timeout_ms: the
  // copy waits on the writer's event, so a writer whose GPU work hangs would otherwise hold this
  // process forever. A copy that does not finish cannot be called back and may still write into
  // its destination; the stream is given up (its resources go once its work ends) and the
  // caller is told to stop using that memory.
  Status AwaitCopy(int slot) {
    if (copied_ == nullptr) {
      MARLAAS_CUDA_RETURN("cudaEventCreateWithFlags",
                          cudaEventCreateWithFlags(&copied_, cudaEventDisableTiming));
    }
    MARLAAS_CUDA_RETURN("cudaEventRecord", cudaEventRecord(copied_, read_stream_));
    const Deadline bound = Deadline::AfterMs(options_.copy_timeout_ms);
    for (int polls = 0;; ++polls) {
      const cudaError_t q = cudaEventQuery(copied_);
      if (q == cudaSuccess) return Status::Ok();
      if (q != cudaErrorNotReady) return CudaError("cudaEventQuery after an adapter copy", q);
      if (bound.Expired()) break;
      // A rank-16 adapter copies in well under a millisecond: poll closely at first.
      if (polls < 256) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    }
    cudaStreamDestroy(read_stream_);  // both return at once and let go once the work is done
    cudaEventDestroy(copied_);
    read_stream_ = nullptr;
    copied_ = nullptr;
    return Status(StatusCode::kInternal,
                  "adapter slot " + std::to_string(slot) + ": the device copy did not finish in " +
                      std::to_string(options_.copy_timeout_ms) +
                      " ms (the writer's GPU work or the GPU is stuck); it may still write into "
                      "the destination, which must not be reused");
  }

  struct Mapped {  // reader side
    uint64_t epoch = 0;
    int reader_entry = -1;
    void* ptr[2] = {nullptr, nullptr};
    cudaEvent_t event[2] = {nullptr, nullptr};
  };

  Status Allocate(int slot) {
    IpcSlotRecord& r = records_[slot];
    Owned o;
    // A new epoch: readers still mapping an older allocation (of a writer that died) see it
    // change and close theirs.
    o.epoch = (r.state.load(std::memory_order_acquire) >> 1) + 1;
    r.state.store(o.epoch << 1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);  // even state before the fields change
    auto fail = [&](const Status& st) {
      for (int b = 0; b < 2; ++b) {
        if (o.event[b] != nullptr) cudaEventDestroy(o.event[b]);
        if (o.ptr[b] != nullptr) cudaFree(o.ptr[b]);
      }
      return st;
    };
    cudaIpcMemHandle_t mem[2];
    cudaIpcEventHandle_t event[2];
    for (int b = 0; b < 2; ++b) {
      cudaError_t err = cudaMalloc(&o.ptr[b], buffer_bytes_);
      if (err != cudaSuccess) {
        o.ptr[b] = nullptr;
        return fail(CudaError(
            "cudaMalloc of an adapter buffer (" + std::to_string(buffer_bytes_) + " bytes)", err));
      }
      err = cudaEventCreateWithFlags(&o.event[b], cudaEventDisableTiming | cudaEventInterprocess);
      if (err != cudaSuccess) {
        o.event[b] = nullptr;
        return fail(CudaError("cudaEventCreateWithFlags(interprocess)", err));
      }
      err = cudaIpcGetMemHandle(&mem[b], o.ptr[b]);
      if (err != cudaSuccess) return fail(CudaError("cudaIpcGetMemHandle", err));
      err = cudaIpcGetEventHandle(&event[b], o.event[b]);
      if (err != cudaSuccess) return fail(CudaError("cudaIpcGetEventHandle", err));
    }
    unsigned char uuid[16];
    Status st = CurrentDeviceUuid(uuid);
    if (!st.ok()) return fail(st);
    std::memcpy(r.device_uuid, uuid, 16);
    r.bytes = buffer_bytes_;
    for (int b = 0; b < 2; ++b) {
      std::memcpy(r.mem[b], &mem[b], kIpcHandleBytes);
      std::memcpy(r.event[b], &event[b], kIpcHandleBytes);
    }
    r.owner.store(self_, std::memory_order_relaxed);
    r.state.store((o.epoch << 1) | 1, std::memory_order_release);
    owned_[size_t(slot)] = o;
    return Status::Ok();
  }

  // Opens (once per allocation) the handles of `slot` in this process.
  Status OpenMapping(int slot) {
    IpcSlotRecord& r = records_[slot];
    Mapped& m = mapped_[size_t(slot)];
    const uint64_t state = r.state.load(std::memory_order_acquire);
    if (m.ptr[0] != nullptr && state == ((m.epoch << 1) | 1)) return Status::Ok();
    CloseMapping(slot);  // a stale allocation, if any
    if ((state & 1) == 0 || !IsAlive(ProcessIdentity::Unpack(r.owner.load()))) {
      // Not published, or published by a writer that died (its handles cannot be opened): a
      // restarted writer publishes new ones.
      return Status(StatusCode::kUnavailable, "adapter slot " + std::to_string(slot) +
                                                  ": its device buffers are not available");
    }
    // Read the fields under the seqlock.
    unsigned char uuid[16];
    cudaIpcMemHandle_t mem[2];
    cudaIpcEventHandle_t event[2];
    std::memcpy(uuid, r.device_uuid, 16);
    for (int b = 0; b < 2; ++b) {
      std::memcpy(&mem[b], r.mem[b], kIpcHandleBytes);
      std::memcpy(&event[b], r.event[b], kIpcHandleBytes);
    }
    std::atomic_thread_fence(std::memory_order_acquire);
    if (r.state.load(std::memory_order_relaxed) != state) {
      return Status(StatusCode::kUnavailable,
                    "adapter slot " + std::to_string(slot) + ": its device buffers are changing");
    }
    unsigned char mine[16];
    MARLAAS_RETURN_IF_ERROR(CurrentDeviceUuid(mine));
    if (std::memcmp(mine, uuid, 16) != 0) {
      return Status(StatusCode::kFailedPrecondition,
                    "adapter slot " + std::to_string(slot) + ": buffers live on " +
                        UuidString(uuid) + ", this process uses " + UuidString(mine) +
                        " (adapters reach other GPUs by NCCL broadcast)");
    }
    // Register before the re-check (seq_cst both sides; see adapter_ipc_layout.h).
    const uint64_t epoch = state >> 1;
    const int entry = ClaimIpcReader(r.readers, self_, epoch);
    if (entry < 0) {
      return Status(StatusCode::kResourceExhausted,
                    "adapter slot " + std::to_string(slot) + ": more than " +
                        std::to_string(kMaxIpcReaders) + " live reader processes");
    }
    m.reader_entry = entry;
    m.epoch = epoch;
    if (r.state.load(std::memory_order_seq_cst) != state) {
      CloseMapping(slot);
      return Status(StatusCode::kUnavailable,
                    "adapter slot " + std::to_string(slot) + ": its device buffers were freed");
    }
    for (int b = 0; b < 2; ++b) {
      cudaError_t err = cudaIpcOpenMemHandle(&m.ptr[b], mem[b], cudaIpcMemLazyEnablePeerAccess);
      if (err != cudaSuccess) {
        m.ptr[b] = nullptr;
        const Status st = CudaError("cudaIpcOpenMemHandle", err);
        CloseMapping(slot);
        return st;
      }
      err = cudaIpcOpenEventHandle(&m.event[b], event[b]);
      if (err != cudaSuccess) {
        m.event[b] = nullptr;
        const Status st = CudaError("cudaIpcOpenEventHandle", err);
        CloseMapping(slot);
        return st;
      }
    }
    return Status::Ok();
  }

  void CloseMapping(int slot) {
    Mapped& m = mapped_[size_t(slot)];
    for (int b = 0; b < 2; ++b) {
      if (m.event[b] != nullptr) cudaEventDestroy(m.event[b]);
      if (m.ptr[b] != nullptr) cudaIpcCloseMemHandle(m.ptr[b]);
    }
    // Closed before the entry is cleared: the writer frees only after it sees the entry go.
    ReleaseIpcReader(records_[slot].readers, m.reader_entry);
    m = Mapped{};
  }

  IpcSlotRecord* records_;
  uint64_t buffer_bytes_;
  CudaIpcOptions options_;
  uint64_t self_;
  std::vector<Owned> owned_;
  std::vector<Mapped> mapped_;
  std::vector<Pending> pending_;
  cudaStream_t read_stream_ = nullptr;
  cudaEvent_t copied_ = nullptr;  // recorded after each copy on read_stream_
};

}  // namespace

DeviceMemoryFactory CudaIpcMemory(const CudaIpcOptions& options) {
  return [options](IpcSlotRecord* records, int num_slots,
                   uint64_t buffer_bytes) -> Result<std::unique_ptr<AdapterMemory>> {
    return std::unique_ptr<AdapterMemory>(
        new CudaIpcAdapterMemory(records, num_slots, buffer_bytes, options));
  };
}

}  // namespace marlaas
