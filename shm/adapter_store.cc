#include "shm/adapter_store.h"

#include <sched.h>

#include <new>

namespace marlaas {
namespace {

SegmentName StoreName(const std::string& instance) { return {instance, "adapters"}; }

constexpr uint64_t AlignUp(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }

}  // namespace

Result<AdapterStore> AdapterStore::Create(const std::string& instance, const Options& options) {
  if (options.num_slots < 1 || options.num_slots > 4096) {
    return Status(StatusCode::kInvalidArgument, "adapter store slots must be in [1, 4096]");
  }
  if (options.buffer_bytes == 0) {
    return Status(StatusCode::kInvalidArgument, "adapter store buffer size must be > 0");
  }
  const uint64_t buffer_bytes = AlignUp(options.buffer_bytes, 64);
  const uint64_t slots_offset = AlignUp(sizeof(AdapterStoreHeader), 64);
  const uint64_t buffers_offset =
      AlignUp(slots_offset + sizeof(AdapterSlot) * uint64_t(options.num_slots), 4096);
  const bool host = options.backend == AdapterBackend::kHost;
  if (!host && options.backend != AdapterBackend::kCudaIpc) {
    return Status(StatusCode::kInvalidArgument, "unknown adapter store backend");
  }
  const uint64_t per_slot = host ? 2 * buffer_bytes : sizeof(IpcSlotRecord);
  const uint64_t total = buffers_offset + per_slot * uint64_t(options.num_slots);
  MARLAAS_ASSIGN_OR_RETURN(
      Segment seg,
      Segment::Create(
          StoreName(instance), SegmentKind::kAdapterStore, kAdapterStoreLayoutVersion, total,
          [&](void* p, size_t) {
            auto* h = new (p) AdapterStoreHeader();
            h->num_slots = uint32_t(options.num_slots);
            h->backend = uint32_t(options.backend);
            h->buffer_bytes = buffer_bytes;
            h->slots_offset = slots_offset;
            h->buffers_offset = buffers_offset;
            auto* slots = reinterpret_cast<AdapterSlot*>(static_cast<char*>(p) + slots_offset);
            for (int i = 0; i < options.num_slots; ++i) {
              new (&slots[i]) AdapterSlot();
            }
            if (!host) {
              auto* records =
                  reinterpret_cast<IpcSlotRecord*>(static_cast<char*>(p) + buffers_offset);
              for (int i = 0; i < options.num_slots; ++i) new (&records[i]) IpcSlotRecord();
            }
            return Status::Ok();
          },
          // Host buffers get their memory slot by slot, as
          // tenants come (ReserveSlot): 1 GiB for 64 slots.
          host ? size_t(buffers_offset) : SIZE_MAX));
  auto* h = static_cast<AdapterStoreHeader*>(seg.payload());
  std::unique_ptr<AdapterMemory> memory;
  if (host) {
    memory = std::make_unique<HostAdapterMemory>(
        static_cast<unsigned char*>(seg.payload()) + h->buffers_offset, h->buffer_bytes);
  } else {
    memory = std::make_unique<NoAdapterMemory>(options.backend);
  }
  return AdapterStore(std::move(seg), std::move(memory));
}

Status AdapterStore::ReserveSlot(int slot) const {
  if (slot < 0 || slot >= num_slots())
    return Status(StatusCode::kInvalidArgument, "adapter slot " + std::to_string(slot));
  if (backend() != AdapterBackend::kHost) return Status::Ok();  // no host buffers
  const uint64_t per_slot = 2 * buffer_bytes();
  return segment_.Reserve(size_t(header_->buffers_offset + per_slot * uint64_t(slot)),
                          size_t(per_slot));
}

Result<AdapterStore> AdapterStore::Attach(const std::string& instance,
                                          const DeviceMemoryFactory& device) {
  MARLAAS_ASSIGN_OR_RETURN(
      Segment seg,
      Segment::Attach(StoreName(instance), SegmentKind::kAdapterStore, kAdapterStoreLayoutVersion));
  auto* h = static_cast<AdapterStoreHeader*>(seg.payload());
  const bool host = h->backend == uint32_t(AdapterBackend::kHost);
  if (!host && h->backend != uint32_t(AdapterBackend::kCudaIpc)) {
    return Status(StatusCode::kCorrupt, "adapter store of instance '" + instance +
                                            "' names an unknown backend " +
                                            std::to_string(h->backend));
  }
  const uint64_t per_slot = host ? 2 * h->buffer_bytes : sizeof(IpcSlotRecord);
  const uint64_t need = h->buffers_offset + per_slot * uint64_t(h->num_slots);
  if (need > seg.payload_bytes()) {
    return Status(StatusCode::kCorrupt,
                  "adapter store header describes more memory than its segment");
  }
  unsigned char* region = static_cast<unsigned char*>(seg.payload()) + h->buffers_offset;
  std::unique_ptr<AdapterMemory> memory;
  if (host) {
    memory = std::make_unique<HostAdapterMemory>(region, h->buffer_bytes);
  } else if (device) {
    MARLAAS_ASSIGN_OR_RETURN(memory, device(reinterpret_cast<IpcSlotRecord*>(region),
                                            int(h->num_slots), h->buffer_bytes));
  } else {
    memory = std::make_unique<NoAdapterMemory>(AdapterBackend::kCudaIpc);
  }
  return AdapterStore(std::move(seg), std::move(memory));
}

AdapterStore::AdapterStore(Segment seg, std::unique_ptr<AdapterMemory> memory)
    : segment_(std::move(seg)),
      header_(static_cast<AdapterStoreHeader*>(segment_.payload())),
      slots_(reinterpret_cast<AdapterSlot*>(static_cast<char*>(segment_.payload()) +
                                            header_->slots_offset)),
      memory_(std::move(memory)) {}

AdapterStore::~AdapterStore() = default;

Result<AdapterSlot*> AdapterStore::SlotAt(int slot) const {
  if (slot < 0 || slot >= num_slots()) {
    return Status(StatusCode::kInvalidArgument, "adapter slot " + std::to_string(slot) +
                                                    " out of range [0, " +
                                                    std::to_string(num_slots()) + ")");
  }
  return &slots_[slot];
}

Status AdapterStore::Register(int slot, const std::string& tenant_id, const AdapterLayout& layout) {
  MARLAAS_ASSIGN_OR_RETURN(AdapterSlot * s, SlotAt(slot));
  MARLAAS_RETURN_IF_ERROR(layout.Validate());
  if (layout.NumBytes() > header_->buffer_bytes) {
    return Status(StatusCode::kResourceExhausted, "adapter of tenant '" + tenant_id + "' needs " +
                                                      std::to_string(layout.NumBytes()) +
                                                      " bytes; the store's buffers hold " +
                                                      std::to_string(header_->buffer_bytes));
  }
  AdapterSlotInfo info;
  if (!s->info.Load(&info)) return Status(StatusCode::kUnavailable, "adapter slot info unreadable");
  if (info.active) {
    return Status(StatusCode::kAlreadyExists, "adapter slot " + std::to_string(slot) +
                                                  " is held by tenant '" + info.tenant_id + "'");
  }
  AdapterSlotInfo next;
  next.generation = info.generation + 1;
  next.active = true;
  if (tenant_id.empty() || tenant_id.size() >= sizeof(next.tenant_id)) {
    return Status(StatusCode::kInvalidArgument, "tenant id must be 1-63 bytes");
  }
  tenant_id.copy(next.tenant_id, tenant_id.size());
  next.layout = layout;
  s->published.store(0, std::memory_order_release);
  s->info.Store(next);
  return Status::Ok();
}

Status AdapterStore::Release(int slot) {
  MARLAAS_ASSIGN_OR_RETURN(AdapterSlot * s, SlotAt(slot));
  AdapterSlotInfo info;
  if (!s->info.Load(&info)) return Status(StatusCode::kUnavailable, "adapter slot info unreadable");
  info.active = false;
  s->info.Store(info);
  return Status::Ok();
}

Result<AdapterSlotInfo> AdapterStore::Info(int slot) const {
  MARLAAS_ASSIGN_OR_RETURN(AdapterSlot * s, SlotAt(slot));
  AdapterSlotInfo info;
  if (!s->info.Load(&info)) return Status(StatusCode::kUnavailable, "adapter slot info unreadable");
  return info;
}

Result<AdapterWriteSpan> AdapterStore::BeginWrite(int slot) {
  MARLAAS_ASSIGN_OR_RETURN(AdapterSlotInfo info, Info(slot));
  if (!info.active) {
    return Status(StatusCode::kFailedPrecondition,
                  "adapter slot " + std::to_string(slot) + " is free");
  }
  AdapterSlot* s = &slots_[slot];
  if (!memory_->HasBuffers(slot)) {
    // Device buffers about to be allocated by this writer (a restarted trainer's) hold nothing
    // yet: both go "being written" and nothing counts as published until Publish. A reader
    // copying from a dead writer's buffers sees the seq change and retries.
    for (AdapterBufferState& state : s->buffers) {
      const uint64_t seq = state.seq.load(std::memory_order_relaxed);
      if ((seq & 1) == 0) state.seq.store(seq + 1, std::memory_order_relaxed);
    }
    s->published.store(0, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_seq_cst);
  }
  const uint64_t published = s->published.load(std::memory_order_acquire);
  const int buffer = published == 0 ? 0 : int(1 - (published & 1));
  AdapterBufferState& b = s->buffers[buffer];
  const uint64_t seq = b.seq.load(std::memory_order_relaxed);
  if ((seq & 1) == 0) {  // odd already: an earlier BeginWrite (maybe a dead writer's) holds it
    b.seq.store(seq + 1, std::memory_order_relaxed);
    // SYNC POINT WRITE: the odd seq is ordered before every write to the buffer.
    std::atomic_thread_fence(std::memory_order_release);
  }
  MARLAAS_ASSIGN_OR_RETURN(void* data, memory_->WritableBuffer(slot, buffer));
  return AdapterWriteSpan{data, info.layout.NumBytes(), buffer};
}

Status AdapterStore::FreeBuffers(int slot) {
  MARLAAS_RETURN_IF_ERROR(SlotAt(slot).status());
  return memory_->FreeBuffers(slot);
}

Status AdapterStore::Publish(int slot, uint64_t version) {
  MARLAAS_ASSIGN_OR_RETURN(AdapterSlot * s, SlotAt(slot));
  const uint64_t published = s->published.load(std::memory_order_acquire);
  if (version == 0 || version >= (uint64_t(1) << 62) || version <= (published >> 1)) {
    return Status(StatusCode::kInvalidArgument, "adapter version " + std::to_string(version) +
                                                    " must exceed the published " +
                                                    std::to_string(published >> 1));
  }
  const int buffer = published == 0 ? 0 : int(1 - (published & 1));
  AdapterBufferState& b = s->buffers[buffer];
  const uint64_t seq = b.seq.load(std::memory_order_relaxed);
  if ((seq & 1) == 0) {
    return Status(StatusCode::kFailedPrecondition,
                  "Publish without BeginWrite on adapter slot " + std::to_string(slot));
  }
  MARLAAS_RETURN_IF_ERROR(memory_->FinishWrite(slot, buffer));
  b.version.store(version, std::memory_order_relaxed);
  b.seq.store(seq + 1, std::memory_order_release);  // buffer complete and stable
  s->published.store((version << 1) | uint64_t(buffer), std::memory_order_release);
  return Status::Ok();
}

Result<uint64_t> AdapterStore::PublishedVersion(int slot) const {
  MARLAAS_ASSIGN_OR_RETURN(AdapterSlot * s, SlotAt(slot));
  return s->published.load(std::memory_order_acquire) >> 1;
}

Result<uint64_t> AdapterStore::ReadLatest(int slot, void* dst, size_t dst_bytes, Deadline deadline,
                                          AdapterSlotInfo* owner) {
  MARLAAS_ASSIGN_OR_RETURN(AdapterSlotInfo info, Info(slot));
  if (!info.active) {
    return Status(StatusCode::kFailedPrecondition,
                  "adapter slot " + std::to_string(slot) + " is free");
  }
  const uint64_t bytes = info.layout.NumBytes();
  if (dst_bytes < bytes) {
    return Status(StatusCode::kInvalidArgument, "destination holds " + std::to_string(dst_bytes) +
                                                    " bytes; the adapter needs " +
                                                    std::to_string(bytes));
  }
  AdapterSlot* s = &slots_[slot];
  for (int attempt = 0;; ++attempt) {
    const uint64_t published = s->published.load(std::memory_order_acquire);
    if (published == 0) {
      return Status(StatusCode::kNotFound,
                    "tenant '" + std::string(info.tenant_id) + "' has no published adapter yet");
    }
    const int buffer = int(published & 1);
    AdapterBufferState& b = s->buffers[buffer];
    const uint64_t seq1 = b.seq.load(std::memory_order_acquire);
    if ((seq1 & 1) == 0) {
      const uint64_t version = b.version.load(std::memory_order_relaxed);
      const Status copied = memory_->CopyOut(slot, buffer, dst, bytes);
      // kUnavailable: device buffers being replaced or retired right now; retry to the deadline.
      if (!copied.ok() && copied.code() != StatusCode::kUnavailable) return copied;
      if (!copied.ok()) {
        if (deadline.Expired()) return copied;
        sched_yield();
        continue;
      }
      // SYNC POINT READ: the copy completes before the re-check of seq.
      std::atomic_thread_fence(std::memory_order_acquire);
      if (b.seq.load(std::memory_order_relaxed) == seq1) {
        // The slot may have gone to another tenant while we copied (its row was reused): then
        // the copy may be the new tenant's, and the caller asked for the old one's.
        AdapterSlotInfo now;
        if (s->info.Load(&now) && now.generation == info.generation) {
          if (owner != nullptr) *owner = info;
          return version;
        }
        return Status(StatusCode::kFailedPrecondition,
                      "adapter slot " + std::to_string(slot) + " of tenant '" +
                          std::string(info.tenant_id) + "' went to another tenant");
      }
    }
    if (deadline.Expired()) {
      return Status(StatusCode::kTimeout, "could not copy a stable adapter of tenant '" +
                                              std::string(info.tenant_id) +
                                              "': the writer kept rewriting it");
    }
    if (attempt < 64) {
      CpuRelax();
    } else {
      sched_yield();  // the writer may need this core to finish
    }
  }
}

}  // namespace marlaas
