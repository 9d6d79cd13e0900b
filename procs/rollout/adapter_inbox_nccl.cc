// The NCCL AdapterInbox (built with CUDA and NCCL; adapter_inbox_none.cc otherwise).
#include <cuda_runtime_api.h>
#include <torch/torch.h>

#include <atomic>
#include <map>
#include <mutex>
#include <thread>

#include "procs/common/pipeline.h"
#include "procs/rollout/adapter_inbox.h"
#include "shm/adapter_broadcast.h"
#include "shm/broadcast_rendezvous.h"

namespace marlaas::rollout {
namespace {

constexpr size_t kFirstCapacity = size_t(16) << 20;  // grows to the largest adapter seen
constexpr size_t kMaxCapacity = size_t(4) << 30;

class NcclInbox : public AdapterInbox {
 public:
  NcclInbox(std::unique_ptr<ShmRendezvous> rendezvous, int device)
      : rendezvous_(std::move(rendezvous)),
        receiver_(rendezvous_.get(), BroadcastOptions{}),
        device_(device) {
    thread_ = std::thread([this] { Loop(); });
  }
  ~NcclInbox() override {
    stop_.store(true);
    thread_.join();
    if (buffer_ != nullptr) cudaFree(buffer_);
  }

  at::Tensor Take(int slot, uint64_t generation, uint64_t version, int64_t elements) override {
    std::lock_guard<std::mutex> l(mu_);
    auto it = entries_.find(slot);
    if (it == entries_.end() || !InboxEntryMatches(it->second, generation, version, elements))
      return at::Tensor();
    at::Tensor flat = std::move(it->second.flat);
    entries_.erase(it);
    return flat;
  }

 private:
  void Log(const Status& st) {
    // The same failure repeats while the root is away: once per kind is enough.
    if (st.code() == last_logged_) return;
    last_logged_ = st.code();
    pipeline::StageLog("rollout", "adapter broadcast: %s (adapters come from the store)",
                       st.ToString().c_str());
  }

  bool Grow(size_t bytes) {
    if (buffer_ != nullptr) cudaFree(buffer_);
    buffer_ = nullptr;
    capacity_ = 0;
    if (bytes > kMaxCapacity || cudaMalloc(&buffer_, bytes) != cudaSuccess) {
      cudaGetLastError();
      buffer_ = nullptr;
      return false;
    }
    capacity_ = bytes;
    return true;
  }

  void Loop() {
    cudaSetDevice(device_);
    if (!Grow(kFirstCapacity)) {
      Log(Status(StatusCode::kResourceExhausted, "no device memory for the receive buffer"));
      return;
    }
    if (Status joined = receiver_.Join(); !joined.ok()) {
      Log(joined);
      return;
    }
    while (!stop_.load()) {
      auto got = receiver_.Receive(buffer_, capacity_, Deadline::AfterMs(200));
      if (!got.ok()) {
        const StatusCode code = got.status().code();
        if (code == StatusCode::kUnavailable) continue;
        Log(got.status());
        // Larger than the buffer: received into scratch and dropped (the store has it); the
        // next one of that size fits.
        if (code == StatusCode::kResourceExhausted && !Grow(capacity_ * 2)) return;
        if (code == StatusCode::kPeerDead)
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
        continue;
      }
      last_logged_ = StatusCode::kOk;
      const int64_t elements = int64_t(got->bytes / sizeof(float));
      at::Tensor flat = torch::empty(
          {elements}, torch::TensorOptions(torch::kFloat32).device(torch::kCUDA, device_));
      // Synchronous, on the legacy default stream (the one the rollout's kernels use): complete
      // before the entry is visible.
      if (cudaMemcpy(flat.data_ptr(), buffer_, got->bytes, cudaMemcpyDeviceToDevice) !=
          cudaSuccess) {
        cudaGetLastError();
        continue;
      }
      std::lock_guard<std::mutex> l(mu_);
      entries_[got->slot] = InboxEntry{got->tenant_generation, got->version, std::move(flat)};
    }
  }

  std::unique_ptr<ShmRendezvous> rendezvous_;  // before receiver_, which points at it
  AdapterReceiver receiver_;
  const int device_;
  void* buffer_ = nullptr;
  size_t capacity_ = 0;
  StatusCode last_logged_ = StatusCode::kOk;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::map<int, InboxEntry> entries_;  // GUARDED_BY(mu_)
  std::thread thread_;                 // last: started once everything above exists
};

}  // namespace

Result<std::unique_ptr<AdapterInbox>> AdapterInbox::Start(const std::string& instance, int device) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || device < 0 || device >= count) {
    cudaGetLastError();
    return Status(StatusCode::kFailedPrecondition,
                  "no CUDA device " + std::to_string(device) + " for the adapter inbox");
  }
  MARLAAS_ASSIGN_OR_RETURN(ShmRendezvous rendezvous, ShmRendezvous::Attach(instance));
  return std::unique_ptr<AdapterInbox>(
      new NcclInbox(std::make_unique<ShmRendezvous>(std::move(rendezvous)), device));
}

}  // namespace marlaas::rollout
