// bench_adapter_ipc: the adapter handoff between a trainer process and a rollout process on one
// GPU through the adapter store's CUDA IPC backend. The adapter is rank 16 on q,k,v,o,gate,up,down
// of a 7B Llama shape (32 layers, hidden 4096, intermediate 11008): 40.0 M parameters, 80 MB in
// bf16 and 160 MB in f32. A handoff is timed from the writer's Publish call (its writes already
// queued) to the reader's finished copy into its own device buffer, over 200 handoffs each; the
// writer waits for each to land before the next, so handoffs do not queue behind each other.
//
//   bench_adapter_ipc [--json FILE] [--quick]
//
// Target: p99 handoff under 1 ms (f32, the trainer's master weights). Exit status: 0, or 1 when
// a full run misses it or finds no GPU; --quick smoke-tests and skips (status 0) without a GPU.
#include <cuda_runtime_api.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "bench/report.h"
#include "kernels/gpu_info.h"
#include "shm/cuda_adapter_memory.h"

namespace marlaas::bench {
namespace {

constexpr int kMaxHandoffs = 200;

AdapterLayout Llama7BRank16(uint32_t dtype_bytes) {
  AdapterLayout l;
  l.rank = 16;
  l.alpha = 32;
  l.num_layers = 32;
  l.target_mask = (1u << kNumLoraTargets) - 1;
  l.dtype_bytes = dtype_bytes;
  const uint32_t h = 4096, ff = 11008;
  for (LoraTarget t : {LoraTarget::kQ, LoraTarget::kK, LoraTarget::kV, LoraTarget::kO}) {
    l.in_dim[uint32_t(t)] = h;
    l.out_dim[uint32_t(t)] = h;
  }
  for (LoraTarget t : {LoraTarget::kGate, LoraTarget::kUp}) {
    l.in_dim[uint32_t(t)] = h;
    l.out_dim[uint32_t(t)] = ff;
  }
  l.in_dim[uint32_t(LoraTarget::kDown)] = ff;
  l.out_dim[uint32_t(LoraTarget::kDown)] = h;
  return l;
}

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Shared by the two processes (anonymous MAP_SHARED).
struct Shared {
  std::atomic<int> reader_ready, failed;
  std::atomic<uint64_t> acked;  // last version the reader copied
  std::atomic<int64_t> publish_ns[kMaxHandoffs + 1];
  std::atomic<int64_t> done_ns[kMaxHandoffs + 1];
};

bool WaitUntil(const std::function<bool()>& cond, int seconds) {
  const int64_t until = NowNs() + int64_t(seconds) * 1000000000;
  while (!cond()) {
    if (NowNs() > until) return false;
    std::this_thread::yield();
  }
  return true;
}

int Writer(const std::string& instance, Shared* sh, int handoffs) {
  auto store = AdapterStore::Attach(instance, CudaIpcMemory());
  if (!store.ok()) {
    std::fprintf(stderr, "writer: %s\n", store.status().ToString().c_str());
    return 1;
  }
  if (!WaitUntil([&] { return sh->reader_ready.load() != 0; }, 60)) return 2;
  for (int v = 1; v <= handoffs; ++v) {
    auto span = store->BeginWrite(0);
    if (!span.ok()) return 3;
    cudaMemsetAsync(span->data, v & 0x7f, span->bytes, 0);  // the optimizer's write
    cudaDeviceSynchronize();  // timing starts at Publish, not during the write
    sh->publish_ns[v].store(NowNs());
    if (!store->Publish(0, uint64_t(v)).ok()) return 4;
    if (!WaitUntil([&] { return sh->acked.load() >= uint64_t(v) || sh->failed.load(); }, 30))
      return 5;
    if (sh->failed.load()) return 6;
  }
  return 0;
}

int Reader(const std::string& instance, Shared* sh, int handoffs, uint64_t bytes) {
  auto store = AdapterStore::Attach(instance, CudaIpcMemory());
  void* dst = nullptr;
  if (!store.ok() || cudaMalloc(&dst, bytes) != cudaSuccess) {
    sh->failed.store(1);
    return 1;
  }
  sh->reader_ready.store(1);
  for (uint64_t seen = 0; seen < uint64_t(handoffs);) {
    auto published = store->PublishedVersion(0);
    if (!published.ok() || *published == seen) continue;
    auto got = store->ReadLatest(0, dst, bytes, Deadline::AfterMs(1000));
    if (!got.ok()) {
      std::fprintf(stderr, "reader: %s\n", got.status().ToString().c_str());
      sh->failed.store(1);
      return 2;
    }
    sh->done_ns[*got].store(NowNs());
    seen = *got;
    sh->acked.store(seen);
  }
  cudaFree(dst);
  return 0;
}

struct Row {
  std::string dtype;
  uint64_t bytes;
  int handoffs;
  double p50_us, p99_us, max_us;
};

// Runs one writer and one reader process; fills `row` with the handoff percentiles.
bool Measure(uint32_t dtype_bytes, int handoffs, Row* row) {
  const AdapterLayout layout = Llama7BRank16(dtype_bytes);
  const std::string instance =
      "bipc" + std::to_string(getpid()) + "x" + std::to_string(dtype_bytes);
  AdapterStore::Options o;
  o.num_slots = 1;
  o.buffer_bytes = layout.NumBytes();
  o.backend = AdapterBackend::kCudaIpc;
  auto store = AdapterStore::Create(instance, o);
  if (!store.ok() || !store->Register(0, "bench", layout).ok()) {
    std::fprintf(stderr, "store: %s\n",
                 store.ok() ? "register failed" : store.status().ToString().c_str());
    return false;
  }
  void* mem =
      mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  auto* sh = new (mem) Shared();
  std::fflush(nullptr);
  const pid_t reader = fork();
  if (reader == 0) _exit(Reader(instance, sh, handoffs, layout.NumBytes()));
  const pid_t writer = fork();
  if (writer == 0) _exit(Writer(instance, sh, handoffs));
  int ws = 0, rs = 0;
  waitpid(writer, &ws, 0);
  if (!(WIFEXITED(ws) && WEXITSTATUS(ws) == 0)) sh->failed.store(1);
  if (sh->failed.load()) kill(reader, SIGKILL);
  waitpid(reader, &rs, 0);
  const bool ok = WIFEXITED(ws) && WEXITSTATUS(ws) == 0 && WIFEXITED(rs) && WEXITSTATUS(rs) == 0;
  std::vector<double> us;
  for (int v = 1; ok && v <= handoffs; ++v)
    us.push_back(double(sh->done_ns[v].load() - sh->publish_ns[v].load()) / 1e3);
  *row = Row{dtype_bytes == 2 ? "bf16" : "f32",
             layout.NumBytes(),
             handoffs,
             Percentile(us, 50),
             Percentile(us, 99),
             Percentile(us, 100)};
  munmap(mem, sizeof(Shared));
  (void)Segment::Remove(SegmentName{instance, "adapters"});
  if (!ok) std::fprintf(stderr, "handoff run failed (writer %d, reader %d)\n", ws, rs);
  return ok;
}

int Main(int argc, char** argv) {
  BenchArgs args;
  if (!ParseBenchArgs(argc, argv, "bench_adapter_ipc [--json FILE] [--quick]", &args)) return 2;
  const GpuInfo gpus = QueryGpusInChild();  // the children below initialise CUDA, not this one
  if (gpus.devices.empty()) {
    std::printf("bench_adapter_ipc: needs a CUDA GPU (%s); nothing measured\n",
                gpus.why_none.c_str());
    return args.quick ? 0 : 1;
  }
  const int handoffs = args.quick ? 10 : kMaxHandoffs;
  std::vector<Row> rows;
  for (uint32_t dtype_bytes : {2u, 4u}) {
    Row r;
    if (!Measure(dtype_bytes, handoffs, &r)) return 1;
    rows.push_back(r);
  }
  std::printf("%-5s %10s %9s %10s %10s %10s\n", "dtype", "MB", "handoffs", "p50_us", "p99_us",
              "max_us");
  std::vector<std::string> json;
  for (const Row& r : rows) {
    std::printf("%-5s %10.1f %9d %10.1f %10.1f %10.1f\n", r.dtype.c_str(), double(r.bytes) / 1e6,
                r.handoffs, r.p50_us, r.p99_us, r.max_us);
    char buf[256];
    std::snprintf(
        buf, sizeof(buf),
        R"({"dtype":"%s","bytes":%llu,"handoffs":%d,"p50_us":%s,"p99_us":%s,"max_us":%s})",
        r.dtype.c_str(), static_cast<unsigned long long>(r.bytes), r.handoffs,
        JsonNumber(r.p50_us).c_str(), JsonNumber(r.p99_us).c_str(), JsonNumber(r.max_us).c_str());
    json.push_back(buf);
  }
  return FinishBench(
      args, json,
      {Target{"IPC handoff p99, rank-16 7B adapter, f32 (ms)", rows[1].p99_us / 1e3, 1.0, false}});
}

}  // namespace
}  // namespace marlaas::bench

int main(int argc, char** argv) { return marlaas::bench::Main(argc, argv); }
