// bench_lora_cuda: the CUDA kernels of kernels/cuda on a GPU. BGMV (decode: batch 64, rank 16,
// hidden 4096, shrink + expand) with 32 distinct adapters against one shared adapter; SGMV
// (prefill: 2048 rows in 32 segments of 64 against one segment); the fused log-softmax + gather
// forward and backward at 512 rows of a 128256-token vocabulary. bf16 and f16. Each figure is the
// median over 7 repeats of the mean time of 50 calls replayed from a CUDA graph (CUDA events),
// after a warm-up: the kernels' time, without the launchers' host work.
//
//   bench_lora_cuda [--json FILE] [--quick]
//
// Target: BGMV bf16 with 32 distinct adapters within 1.5x of the time with one shared adapter.
// Exit status: 0, or 1 when a full run misses the target or finds no GPU (nothing measured);
// --quick smoke-tests and skips (status 0) without a GPU.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "bench/report.h"
#include "kernels/cuda/logprob_cuda.h"
#include "kernels/cuda/lora_cuda.h"
#include "kernels/gpu_info.h"

namespace marlaas::bench {
namespace {

using kernels::cuda::DType;
using kernels::cuda::LoraStack;
using kernels::cuda::TensorRef;

// Device memory of `bytes`, freed on destruction. FillSmall writes small finite values of a
// 2-byte float dtype (timing does not depend on them).
class Buffer {
 public:
  explicit Buffer(size_t bytes) : bytes_(bytes) {
    if (cudaMalloc(&ptr_, bytes) != cudaSuccess) ptr_ = nullptr;
  }
  ~Buffer() { cudaFree(ptr_); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  void* get() const { return ptr_; }
  bool ok() const { return ptr_ != nullptr; }
  void FillSmall(DType dtype, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<uint16_t> half(bytes_ / 2);
    // bf16 0x3c00..0x3cff is about 0.0078..0.0156, f16 0x2000..0x20ff about 0.0078; random sign.
    const uint16_t base = dtype == DType::kBFloat16 ? 0x3c00 : 0x2000;
    for (auto& h : half) h = uint16_t(base | (rng() & 0xff) | ((rng() & 1) << 15));
    cudaMemcpy(ptr_, half.data(), half.size() * 2, cudaMemcpyHostToDevice);
  }
  void FillInts(const std::vector<int32_t>& v) {
    cudaMemcpy(ptr_, v.data(), v.size() * 4, cudaMemcpyHostToDevice);
  }
  void FillFloats(float value, size_t n) {
    std::vector<float> v(n, value);
    cudaMemcpy(ptr_, v.data(), n * 4, cudaMemcpyHostToDevice);
  }

 private:
  size_t bytes_;
  void* ptr_ = nullptr;
};

// Median over repeats of the mean microseconds per call of `launch`; -1 when a launch fails.
// The `iters` calls are captured once into a CUDA graph and the graph is replayed, so the
// figure is the kernels' time on the device: timed as plain launches, the launchers' host-side
// checks (pointer attributes, about 10 us a call) left the GPU idle between kernels of a few
// microseconds, and any two kernels that short timed alike.
using Launch = std::function<Status(cudaStream_t)>;
double TimeUs(const Launch& launch, bool quick) {
  const int iters = quick ? 3 : 50, repeats = quick ? 1 : 7;
  cudaStream_t stream = nullptr;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  bool ok = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess;
  // Plain launches first: their statuses name a failing launch, which a graph would not.
  for (int i = 0; ok && i < (quick ? 1 : 10); ++i) ok = launch(stream).ok();
  ok = ok && cudaStreamSynchronize(stream) == cudaSuccess;
  // Relaxed: the launchers' checks (cudaPointerGetAttributes) may run during the capture.
  ok = ok && cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed) == cudaSuccess;
  if (ok) {
    bool launched = true;
    for (int i = 0; launched && i < iters; ++i) launched = launch(stream).ok();
    ok = cudaStreamEndCapture(stream, &graph) == cudaSuccess && launched;  // always end it
  }
  ok = ok && cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess;
  ok = ok && cudaGraphLaunch(exec, stream) == cudaSuccess &&  // the graph's own first upload
       cudaStreamSynchronize(stream) == cudaSuccess;
  ok = ok && cudaEventCreate(&start) == cudaSuccess && cudaEventCreate(&stop) == cudaSuccess;
  std::vector<double> samples;
  for (int r = 0; ok && r < repeats; ++r) {
    float ms = 0;
    ok = cudaEventRecord(start, stream) == cudaSuccess &&
         cudaGraphLaunch(exec, stream) == cudaSuccess &&
         cudaEventRecord(stop, stream) == cudaSuccess &&
         cudaEventSynchronize(stop) == cudaSuccess &&
         cudaEventElapsedTime(&ms, start, stop) == cudaSuccess;
    if (ok) samples.push_back(1000.0 * ms / iters);
  }
  if (start != nullptr) cudaEventDestroy(start);
  if (stop != nullptr) cudaEventDestroy(stop);
  if (exec != nullptr) cudaGraphExecDestroy(exec);
  if (graph != nullptr) cudaGraphDestroy(graph);
  ok = ok && cudaDeviceSynchronize() == cudaSuccess;
  if (stream != nullptr) cudaStreamDestroy(stream);
  if (!ok) cudaGetLastError();  // clear a sticky launch error before the next measurement
  return ok ? Percentile(samples, 50) : -1;
}

struct Row {
  std::string op, dtype, mode;
  int rows, adapters;
  double us;
};

std::string RowJson(const Row& r) {
  char buf[256];
  std::snprintf(
      buf, sizeof(buf), R"({"op":"%s","dtype":"%s","mode":"%s","rows":%d,"adapters":%d,"us":%s})",
      r.op.c_str(), r.dtype.c_str(), r.mode.c_str(), r.rows, r.adapters, JsonNumber(r.us).c_str());
  return buf;
}

constexpr int kHidden = 4096, kRank = 16, kAdapters = 32;

// Shrink + expand of `rows` rows, adapters assigned by `segments` contiguous blocks (SGMV) or row
// by row (BGMV) across `distinct` adapters.
double LoraUs(DType dtype, bool sgmv, int rows, int distinct, bool quick) {
  const size_t el = dtype == DType::kFloat32 ? 4 : 2;
  Buffer a(size_t(kAdapters) * kRank * kHidden * el), bt(size_t(kAdapters) * kRank * kHidden * el),
      scale(kAdapters * 4), x(size_t(rows) * kHidden * el), out(size_t(rows) * kHidden * el),
      y(size_t(rows) * kRank * 4), idx(size_t(rows) * 4), start(size_t(rows + 1) * 4);
  if (!a.ok() || !bt.ok() || !x.ok() || !out.ok() || !y.ok()) return -1;
  a.FillSmall(dtype, 1);
  bt.FillSmall(dtype, 2);
  x.FillSmall(dtype, 3);
  out.FillSmall(dtype, 4);
  scale.FillFloats(0.5f, kAdapters);
  const LoraStack stack{TensorRef::Contiguous(a.get(), dtype, {kAdapters, kRank, kHidden}),
                        TensorRef::Contiguous(bt.get(), dtype, {kAdapters, kRank, kHidden}),
                        TensorRef::Contiguous(scale.get(), DType::kFloat32, {kAdapters})};
  const TensorRef xr = TensorRef::Contiguous(x.get(), dtype, {rows, kHidden}),
                  outr = TensorRef::Contiguous(out.get(), dtype, {rows, kHidden}),
                  yr = TensorRef::Contiguous(y.get(), DType::kFloat32, {rows, kRank});
  if (!sgmv) {
    std::vector<int32_t> row_adapter(static_cast<size_t>(rows));
    for (int i = 0; i < rows; ++i) row_adapter[size_t(i)] = i % distinct;
    idx.FillInts(row_adapter);
    const TensorRef ir = TensorRef::Contiguous(idx.get(), DType::kInt32, {rows});
    return TimeUs(
        [&](cudaStream_t st) {
          MARLAAS_RETURN_IF_ERROR(kernels::cuda::BgmvShrink(xr, stack, ir, yr, st));
          return kernels::cuda::BgmvExpand(yr, stack, ir, outr, st);
        },
        quick);
  }
  std::vector<int32_t> seg_start, seg_adapter;
  for (int s = 0; s < distinct; ++s) {
    seg_start.push_back(int32_t(int64_t(rows) * s / distinct));
    seg_adapter.push_back(s);
  }
  seg_start.push_back(rows);
  start.FillInts(seg_start);
  idx.FillInts(seg_adapter);
  const TensorRef sr = TensorRef::Contiguous(start.get(), DType::kInt32, {distinct + 1}),
                  ar = TensorRef::Contiguous(idx.get(), DType::kInt32, {distinct});
  return TimeUs(
      [&](cudaStream_t st) {
        MARLAAS_RETURN_IF_ERROR(kernels::cuda::SgmvShrink(xr, stack, sr, ar, yr, st));
        return kernels::cuda::SgmvExpand(yr, stack, sr, ar, outr, st);
      },
      quick);
}

// Forward (backward when `backward`) of the fused log-softmax + gather.
double LogprobUs(DType dtype, int rows, int vocab, bool backward, bool quick) {
  Buffer logits(size_t(rows) * vocab * 2), dlogits(size_t(rows) * vocab * 2), targets(rows * 4),
      lp(rows * 4), lse(rows * 4), grad(rows * 4);
  if (!logits.ok() || !dlogits.ok()) return -1;
  logits.FillSmall(dtype, 5);
  std::vector<int32_t> t(static_cast<size_t>(rows));
  for (int i = 0; i < rows; ++i) t[size_t(i)] = int32_t((int64_t(i) * 7919) % vocab);
  targets.FillInts(t);
  grad.FillFloats(1.0f, size_t(rows));
  const TensorRef lr = TensorRef::Contiguous(logits.get(), dtype, {rows, vocab}),
                  dr = TensorRef::Contiguous(dlogits.get(), dtype, {rows, vocab}),
                  tr = TensorRef::Contiguous(targets.get(), DType::kInt32, {rows}),
                  lpr = TensorRef::Contiguous(lp.get(), DType::kFloat32, {rows}),
                  lser = TensorRef::Contiguous(lse.get(), DType::kFloat32, {rows}),
                  gr = TensorRef::Contiguous(grad.get(), DType::kFloat32, {rows});
  if (!kernels::cuda::TokenLogprobs(lr, tr, 1.0f, lpr, lser, 0).ok()) return -1;
  if (!backward) {
    return TimeUs(
        [&](cudaStream_t st) { return kernels::cuda::TokenLogprobs(lr, tr, 1.0f, lpr, lser, st); },
        quick);
  }
  return TimeUs(
      [&](cudaStream_t st) {
        return kernels::cuda::TokenLogprobsBackward(lr, tr, 1.0f, lser, gr, dr, st);
      },
      quick);
}

int Main(int argc, char** argv) {
  BenchArgs args;
  if (!ParseBenchArgs(argc, argv, "bench_lora_cuda [--json FILE] [--quick]", &args)) return 2;
  const GpuInfo gpus = QueryGpus();
  if (gpus.devices.empty()) {
    std::printf("bench_lora_cuda: needs a CUDA GPU (%s); nothing measured\n",
                gpus.why_none.c_str());
    return args.quick ? 0 : 1;
  }
  std::printf("device: %s\n", gpus.devices[0].name.c_str());
  std::vector<Row> rows;
  const int decode = 64, prefill = args.quick ? 256 : 2048;
  const int vocab = args.quick ? 32000 : 128256, lp_rows = args.quick ? 16 : 512;
  for (DType dtype : {DType::kBFloat16, DType::kFloat16}) {
    const std::string dn = kernels::cuda::DTypeName(dtype);
    rows.push_back({"bgmv", dn, "32 distinct", decode, kAdapters,
                    LoraUs(dtype, false, decode, kAdapters, args.quick)});
    rows.push_back(
        {"bgmv", dn, "1 shared", decode, 1, LoraUs(dtype, false, decode, 1, args.quick)});
    rows.push_back({"sgmv", dn, "32 segments", prefill, kAdapters,
                    LoraUs(dtype, true, prefill, kAdapters, args.quick)});
    rows.push_back(
        {"sgmv", dn, "1 segment", prefill, 1, LoraUs(dtype, true, prefill, 1, args.quick)});
    rows.push_back({"logprob", dn, "forward", lp_rows, 0,
                    LogprobUs(dtype, lp_rows, vocab, false, args.quick)});
    rows.push_back({"logprob", dn, "backward", lp_rows, 0,
                    LogprobUs(dtype, lp_rows, vocab, true, args.quick)});
  }
  std::printf("%-8s %-5s %-12s %6s %8s %10s\n", "op", "dtype", "mode", "rows", "adapters", "us");
  std::vector<std::string> json;
  for (const Row& r : rows) {
    std::printf("%-8s %-5s %-12s %6d %8d %10.2f\n", r.op.c_str(), r.dtype.c_str(), r.mode.c_str(),
                r.rows, r.adapters, r.us);
    json.push_back(RowJson(r));
  }
  const double distinct = rows[0].us, shared = rows[1].us;
  const double ratio = distinct > 0 && shared > 0 ? distinct / shared : 1e9;
  std::printf("logprob forward bf16: %.0f GB/s of logits read\n",
              rows[4].us > 0 ? double(lp_rows) * vocab * 2 / (rows[4].us * 1e3) : 0.0);
  // A launch that failed timed nothing (-1): the bench fails rather than print a partial table.
  int failed = 0;
  for (const Row& r : rows) failed += r.us < 0;
  return FinishBench(
      args, json,
      {Target{"BGMV bf16 b64 r16 h4096: 32 distinct adapters / 1 shared (time)", ratio, 1.5, false},
       Target{"operations that failed to run", double(failed), 0, false}});
}

}  // namespace
}  // namespace marlaas::bench

int main(int argc, char** argv) { return marlaas::bench::Main(argc, argv); }
