// CUDA kernels (kernels/cuda) against the plain CPU references on random inputs, in f32, bf16 and
// f16, and the launchers' checks. Inputs are rounded to the tested dtype first, and the reference
// computes on the rounded values, so the only differences left are f32 accumulation order and the
// rounding of the output. On a machine without a GPU the kernel tests skip and say why; the
// launcher checks still run (they refuse bad arguments before asking for a device).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cuda/logprob_cuda.h"
#include "kernels/cuda/lora_cuda.h"
#include "kernels/gpu_info.h"
#include "kernels/logprob_ops.h"
#include "kernels/lora_reference.h"

namespace marlaas::kernels::cuda {
namespace {

#define SKIP_WITHOUT_GPU()                                                           \
  do {                                                                               \
    const GpuInfo info = QueryGpus();                                                \
    if (info.devices.empty()) GTEST_SKIP() << "needs a CUDA GPU: " << info.why_none; \
  } while (0)

// Device memory holding `n` elements of `dtype`, freed on destruction.
class DeviceBuffer {
 public:
  DeviceBuffer(DType dtype, size_t n) : dtype_(dtype), bytes_(n * size_t(DTypeBytes(dtype))) {
    // A constructor cannot ASSERT: the exception fails the test before the kernels use the buffer.
    if (cudaMalloc(&ptr_, bytes_ == 0 ? 1 : bytes_) != cudaSuccess)
      throw std::runtime_error("cudaMalloc of " + std::to_string(bytes_) + " bytes failed");
  }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return ptr_; }
  // All bits set: NaN in every float type, so an element a kernel should write but does not
  // fails the comparison instead of reading as the fresh allocation's zeros.
  void Poison() { ASSERT_EQ(cudaMemset(ptr_, 0xFF, bytes_), cudaSuccess); }
  TensorRef Ref(std::initializer_list<int64_t> sizes) const {
    return TensorRef::Contiguous(ptr_, dtype_, sizes);
  }

  // Host floats in, stored as dtype_ (the values must already be representable).
  void Upload(const std::vector<float>& v) {
    std::vector<unsigned char> raw(bytes_);
    for (size_t i = 0; i < v.size(); ++i) {
      if (dtype_ == DType::kFloat32) std::memcpy(&raw[i * 4], &v[i], 4);
      if (dtype_ == DType::kBFloat16) {
        const __nv_bfloat16 h = __float2bfloat16_rn(v[i]);
        std::memcpy(&raw[i * 2], &h, 2);
      }
      if (dtype_ == DType::kFloat16) {
        const __half h = __float2half_rn(v[i]);
        std::memcpy(&raw[i * 2], &h, 2);
      }
    }
    ASSERT_EQ(cudaMemcpy(ptr_, raw.data(), bytes_, cudaMemcpyHostToDevice), cudaSuccess);
  }
  void UploadInts(const std::vector<int32_t>& v) {
    ASSERT_EQ(cudaMemcpy(ptr_, v.data(), v.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  }
  std::vector<float> Download() const {
    std::vector<unsigned char> raw(bytes_);
    EXPECT_EQ(cudaMemcpy(raw.data(), ptr_, bytes_, cudaMemcpyDeviceToHost), cudaSuccess);
    const size_t n = bytes_ / size_t(DTypeBytes(dtype_));
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) {
      if (dtype_ == DType::kFloat32) std::memcpy(&v[i], &raw[i * 4], 4);
      if (dtype_ == DType::kBFloat16) {
        __nv_bfloat16 h;
        std::memcpy(&h, &raw[i * 2], 2);
        v[i] = __bfloat162float(h);
      }
      if (dtype_ == DType::kFloat16) {
        __half h;
        std::memcpy(&h, &raw[i * 2], 2);
        v[i] = __half2float(h);
      }
    }
    return v;
  }

 private:
  DType dtype_;
  size_t bytes_;
  void* ptr_ = nullptr;
};

// `v` rounded to what `dtype` can hold.
float Round(float v, DType dtype) {
  if (dtype == DType::kBFloat16) return __bfloat162float(__float2bfloat16_rn(v));
  if (dtype == DType::kFloat16) return __half2float(__float2half_rn(v));
  return v;
}

std::vector<float> RandomIn(std::mt19937& rng, size_t n, DType dtype, float scale = 1.0f) {
  std::uniform_real_distribution<float> d(-scale, scale);
  std::vector<float> v(n);
  for (float& e : v) e = Round(d(rng), dtype);
  return v;
}

// Relative tolerance of an output rounded to `dtype` (f32 sums of identical inputs otherwise).
float OutputTolerance(DType dtype) {
  return dtype == DType::kBFloat16 ? 8e-3f : dtype == DType::kFloat16 ? 1.5e-3f : 1e-4f;
}

void ExpectClose(const std::vector<float>& got, const std::vector<float>& want, float rtol,
                 const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) {
      ASSERT_TRUE(std::isnan(got[i])) << what << " at " << i;
      continue;
    }
    ASSERT_NEAR(got[i], want[i], rtol * (1.0f + std::fabs(want[i]))) << what << " at " << i;
  }
}

// For outputs much smaller than 1 (a softmax's gradients): each element within `rtol` of its own
// size, plus a floor of 1e-3 × rtol × the largest, where ExpectClose's floor of `rtol` would pass
// nearly any value.
void ExpectCloseToScale(const std::vector<float>& got, const std::vector<float>& want, float rtol,
                        const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  float scale = 0;
  for (float w : want) scale = std::max(scale, std::fabs(w));
  ASSERT_GT(scale, 0.0f) << what << ": the reference is all zeros";
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], rtol * (std::fabs(want[i]) + 1e-3f * scale))
        << what << " at " << i << " (largest " << scale << ")";
  }
}

// A stack of `num` adapters of rank `rank` (the last one rank/2, zero-padded as callers do) on
// the host, rounded to `dtype`, with the CPU references' AdapterRef views of it.
struct HostStack {
  int num, rank, in_dim, out_dim;
  std::vector<float> a, bt, scale;
  std::vector<AdapterRef> refs;
};

HostStack MakeStack(std::mt19937& rng, DType dtype, int num, int rank, int in_dim, int out_dim) {
  HostStack s{num, rank, in_dim, out_dim, {}, {}, {}, {}};
  s.a = RandomIn(rng, size_t(num) * rank * in_dim, dtype);
  s.bt = RandomIn(rng, size_t(num) * rank * out_dim, dtype);
  const int last_rank = rank / 2;
  for (size_t i = size_t(num - 1) * rank + last_rank; i < size_t(num) * rank; ++i) {
    std::fill_n(&s.a[i * size_t(in_dim)], in_dim, 0.0f);
    std::fill_n(&s.bt[i * size_t(out_dim)], out_dim, 0.0f);
  }
  for (int k = 0; k < num; ++k) {
    s.scale.push_back(0.25f + 0.5f * float(k));
    // The reference runs every adapter at the stack's rank too: the zero rows of the padded one
    // add nothing, and the GPU writes every y column below the stack's rank.
    s.refs.push_back(AdapterRef{&s.a[size_t(k) * rank * in_dim], &s.bt[size_t(k) * rank * out_dim],
                                rank, s.scale.back()});
  }
  return s;
}

struct DeviceStack {
  DeviceBuffer a, bt, scale;
  DeviceStack(const HostStack& h, DType dtype)
      : a(dtype, h.a.size()), bt(dtype, h.bt.size()), scale(DType::kFloat32, h.scale.size()) {
    a.Upload(h.a);
    bt.Upload(h.bt);
    scale.Upload(h.scale);
  }
  LoraStack Ref(const HostStack& h) const {
    return LoraStack{a.Ref({h.num, h.rank, h.in_dim}), bt.Ref({h.num, h.rank, h.out_dim}),
                     scale.Ref({h.num})};
  }
};

LoraProblem Problem(const HostStack& s, int rows, int64_t x_stride) {
  LoraProblem p;
  p.rows = rows;
  p.in_dim = s.in_dim;
  p.out_dim = s.out_dim;
  p.adapters = s.refs.data();
  p.num_adapters = s.num;
  p.x_stride = x_stride;
  p.y_stride = s.rank;
  p.out_stride = s.out_dim;
  return p;
}

class CudaLoraTest : public ::testing::TestWithParam<DType> {};

TEST_P(CudaLoraTest, BgmvMatchesTheReferenceIncludingBaseOnlyAndOutOfRangeRows) {
  SKIP_WITHOUT_GPU();
  const DType dtype = GetParam();
  std::mt19937 rng(11 + int(dtype));
  const int rows = 37, in_dim = 300, out_dim = 260, rank = 16, num = 5;
  const int64_t x_stride = in_dim + 8;  // rows of x wider than in_dim
  HostStack hs = MakeStack(rng, dtype, num, rank, in_dim, out_dim);
  std::vector<int32_t> idx(rows);
  for (int i = 0; i < rows; ++i) idx[i] = int32_t(rng() % (num + 2)) - 1;  // -1 .. num
  idx[0] = -1;
  idx[1] = num;  // out of range: base only, as documented
  std::vector<int32_t> ref_idx = idx;
  for (int32_t& k : ref_idx) k = k >= num ? -1 : k;
  std::vector<float> x = RandomIn(rng, size_t(rows) * x_stride, dtype);
  std::vector<float> y0(size_t(rows) * rank, 7.0f);  // sentinel: rows not written keep it
  std::vector<float> out = RandomIn(rng, size_t(rows) * out_dim, dtype);

  DeviceStack ds(hs, dtype);
  DeviceBuffer dx(dtype, x.size()), dy(DType::kFloat32, y0.size()), dout(dtype, out.size()),
      didx(DType::kInt32, idx.size());
  dx.Upload(x);
  dy.Upload(y0);
  dout.Upload(out);
  didx.UploadInts(idx);
  TensorRef xr = dx.Ref({rows, in_dim});
  xr.strides[0] = x_stride;
  const TensorRef yr = dy.Ref({rows, rank}), outr = dout.Ref({rows, out_dim}),
                  ir = didx.Ref({rows});
  ASSERT_TRUE(BgmvShrink(xr, ds.Ref(hs), ir, yr, 0).ok());
  ASSERT_TRUE(BgmvExpand(yr, ds.Ref(hs), ir, outr, 0).ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  const LoraProblem p = Problem(hs, rows, x_stride);
  std::vector<float> want_y = y0, want_out = out;
  reference::BgmvShrink(p, ref_idx.data(), x.data(), want_y.data());
  std::vector<float> got_y = dy.Download();
  ExpectClose(got_y, want_y, 1e-4f, "y");
  reference::BgmvExpand(p, ref_idx.data(), got_y.data(), want_out.data());
  for (float& v : want_out) v = Round(v, dtype);
  ExpectClose(dout.Download(), want_out, OutputTolerance(dtype), "out");
  // The rows that were base only are bit-for-bit untouched.
  const std::vector<float> got_out = dout.Download();
  for (int i : {0, 1}) {
    EXPECT_EQ(got_y[size_t(i) * rank], 7.0f);
    EXPECT_EQ(std::memcmp(&got_out[size_t(i) * out_dim], &out[size_t(i) * out_dim],
                          sizeof(float) * out_dim),
              0);
  }
}

TEST_P(CudaLoraTest, SgmvMatchesTheReferenceOnEmptyLongAndUncoveredSegments) {
  SKIP_WITHOUT_GPU();
  const DType dtype = GetParam();
  std::mt19937 rng(23 + int(dtype));
  const int rows = 64, in_dim = 300, out_dim = 260, rank = 32, num = 5;
  HostStack hs = MakeStack(rng, dtype, num, rank, in_dim, out_dim);
  // An empty segment, one spanning three row tiles, a base-only one; rows 60..63 in none.
  const std::vector<int32_t> start = {0, 5, 5, 42, 45, 60};
  const std::vector<int32_t> adapter = {2, 0, 4, -1, 1};
  std::vector<float> x = RandomIn(rng, size_t(rows) * in_dim, dtype);
  std::vector<float> y0(size_t(rows) * rank, 7.0f);
  std::vector<float> out = RandomIn(rng, size_t(rows) * out_dim, dtype);

  DeviceStack ds(hs, dtype);
  DeviceBuffer dx(dtype, x.size()), dy(DType::kFloat32, y0.size()), dout(dtype, out.size()),
      dstart(DType::kInt32, start.size()), dadapter(DType::kInt32, adapter.size());
  dx.Upload(x);
  dy.Upload(y0);
  dout.Upload(out);
  dstart.UploadInts(start);
  dadapter.UploadInts(adapter);
  const int segs = int(adapter.size());
  const TensorRef yr = dy.Ref({rows, rank});
  ASSERT_TRUE(SgmvShrink(dx.Ref({rows, in_dim}), ds.Ref(hs), dstart.Ref({segs + 1}),
                         dadapter.Ref({segs}), yr, 0)
                  .ok());
  ASSERT_TRUE(SgmvExpand(yr, ds.Ref(hs), dstart.Ref({segs + 1}), dadapter.Ref({segs}),
                         dout.Ref({rows, out_dim}), 0)
                  .ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  const LoraProblem p = Problem(hs, rows, in_dim);
  const RowSegments rs{start.data(), adapter.data(), segs};
  std::vector<float> want_y = y0, want_out = out;
  reference::SgmvShrink(p, rs, x.data(), want_y.data());
  const std::vector<float> got_y = dy.Download();
  ExpectClose(got_y, want_y, 1e-4f, "y");
  reference::SgmvExpand(p, rs, got_y.data(), want_out.data());
  for (float& v : want_out) v = Round(v, dtype);
  ExpectClose(dout.Download(), want_out, OutputTolerance(dtype), "out");
  EXPECT_EQ(got_y[size_t(62) * rank], 7.0f);  // uncovered row not written
}

TEST_P(CudaLoraTest, FusedLogprobAndItsBackwardMatchTheReference) {
  SKIP_WITHOUT_GPU();
  const DType dtype = GetParam();
  std::mt19937 rng(31 + int(dtype));
  const int rows = 9, vocab = 5003;  // not a multiple of any block width
  std::vector<float> logits = RandomIn(rng, size_t(rows) * vocab, dtype, 8.0f);
  for (int v = 0; v < vocab; v += 3) logits[v] = -INFINITY;  // masked entries in row 0
  std::vector<int32_t> targets(rows);
  for (int32_t& t : targets) t = int32_t(rng() % vocab);
  targets[0] = 1;  // a finite entry of row 0
  std::vector<float> grad = RandomIn(rng, rows, DType::kFloat32);
  const float inv_t = 1.0f / 0.7f;

  DeviceBuffer dl(dtype, logits.size()), dt(DType::kInt32, rows), dlp(DType::kFloat32, rows),
      dlse(DType::kFloat32, rows), dg(DType::kFloat32, rows), dd(dtype, logits.size());
  dl.Upload(logits);
  dt.UploadInts(targets);
  dg.Upload(grad);
  dlp.Poison();
  dlse.Poison();
  dd.Poison();
  const TensorRef lr = dl.Ref({rows, vocab});
  ASSERT_TRUE(TokenLogprobs(lr, dt.Ref({rows}), inv_t, dlp.Ref({rows}), dlse.Ref({rows}), 0).ok());
  ASSERT_TRUE(TokenLogprobsBackward(lr, dt.Ref({rows}), inv_t, dlse.Ref({rows}), dg.Ref({rows}),
                                    dd.Ref({rows, vocab}), 0)
                  .ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  const LogprobProblem p{rows, vocab, vocab, inv_t};
  std::vector<float> want_lp(rows), want_lse(rows), want_d(logits.size());
  reference::TokenLogprobs(p, logits.data(), targets.data(), want_lp.data(), want_lse.data());
  ExpectClose(dlp.Download(), want_lp, 2e-5f, "logprob");
  ExpectClose(dlse.Download(), want_lse, 2e-5f, "lse");
  reference::TokenLogprobsBackward(p, logits.data(), targets.data(), want_lse.data(), grad.data(),
                                   want_d.data());
  for (float& v : want_d) v = Round(v, dtype);
  ExpectCloseToScale(dd.Download(), want_d, OutputTolerance(dtype), "dlogits");
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaLoraTest,
                         ::testing::Values(DType::kFloat32, DType::kBFloat16, DType::kFloat16),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(DTypeName(info.param));
                         });

// The launchers refuse bad arguments by name before they ask for a device, so this runs on
// every machine.
TEST(CudaLauncherChecksTest, BadShapesDtypesAndLayoutsAreRefusedByName) {
  alignas(16) static float host[64];
  auto ref = [](DType d, std::initializer_list<int64_t> sizes) {
    return TensorRef::Contiguous(host, d, sizes);
  };
  const LoraStack stack{ref(DType::kBFloat16, {4, 16, 128}), ref(DType::kBFloat16, {4, 16, 96}),
                        ref(DType::kFloat32, {4})};
  const TensorRef x = ref(DType::kBFloat16, {8, 128}), y = ref(DType::kFloat32, {8, 16}),
                  idx = ref(DType::kInt32, {8});
  auto message = [](const Status& s) { return s.ok() ? std::string("OK") : s.message(); };

  // x in f16 while the stack is bf16.
  Status s = BgmvShrink(ref(DType::kFloat16, {8, 128}), stack, idx, y, 0);
  EXPECT_NE(message(s).find("BgmvShrink: a: expected f16"), std::string::npos) << message(s);
  // in_dim mismatch.
  s = BgmvShrink(ref(DType::kBFloat16, {8, 100}), stack, idx, y, 0);
  EXPECT_NE(message(s).find("x: dimension 1 must be 128"), std::string::npos) << message(s);
  // y must be f32 [rows, rank].
  s = BgmvExpand(ref(DType::kBFloat16, {8, 16}), stack, idx, ref(DType::kBFloat16, {8, 96}), 0);
  EXPECT_NE(message(s).find("BgmvExpand: y: expected f32"), std::string::npos) << message(s);
  // A stack that is not contiguous.
  LoraStack strided = stack;
  strided.a.strides[1] = 256;
  s = BgmvShrink(x, strided, idx, y, 0);
  EXPECT_NE(message(s).find("a: must be contiguous"), std::string::npos) << message(s);
  // Rank above the kernels' limit.
  const LoraStack wide{ref(DType::kBFloat16, {1, 65, 8}), ref(DType::kBFloat16, {1, 65, 8}),
                       ref(DType::kFloat32, {1})};
  s = BgmvShrink(ref(DType::kBFloat16, {2, 8}), wide, ref(DType::kInt32, {2}),
                 ref(DType::kFloat32, {2, 65}), 0);
  EXPECT_NE(message(s).find("rank 65 is outside 1..64"), std::string::npos) << message(s);
  // Indices of the wrong length.
  s = BgmvShrink(x, stack, ref(DType::kInt32, {7}), y, 0);
  EXPECT_NE(message(s).find("row_adapter: dimension 0 must be 8"), std::string::npos) << message(s);
  // Segments: seg_start must have one more entry than seg_adapter.
  s = SgmvShrink(x, stack, ref(DType::kInt32, {3}), ref(DType::kInt32, {3}), y, 0);
  EXPECT_NE(message(s).find("SgmvShrink: seg_start: dimension 0 must be 4"), std::string::npos)
      << message(s);
  // Overlapping rows (stride smaller than the row).
  TensorRef overlapping = x;
  overlapping.strides[0] = 64;
  s = BgmvShrink(overlapping, stack, idx, y, 0);
  EXPECT_NE(message(s).find("x: stride 64 of dimension 0 overlaps"), std::string::npos)
      << message(s);
  // Log-probs: temperature and aliasing.
  const TensorRef logits = ref(DType::kFloat32, {2, 8}), targets = ref(DType::kInt32, {2}),
                  rowv = ref(DType::kFloat32, {2});
  s = TokenLogprobs(logits, targets, 0.0f, rowv, TensorRef{}, 0);
  EXPECT_NE(message(s).find("inv_temperature must be finite and > 0"), std::string::npos)
      << message(s);
  s = TokenLogprobsBackward(logits, targets, 1.0f, rowv, rowv, logits, 0);
  EXPECT_NE(message(s).find("dlogits aliases logits"), std::string::npos) << message(s);

  // Well-formed arguments in host memory: refused as host memory on a GPU machine, and as "no
  // usable CUDA device" without one. Never launched either way.
  s = BgmvShrink(x, stack, idx, y, 0);
  ASSERT_FALSE(s.ok());
  if (QueryGpus().devices.empty()) {
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << message(s);
    EXPECT_NE(message(s).find("no usable CUDA device"), std::string::npos) << message(s);
  } else {
    EXPECT_NE(message(s).find("BgmvShrink: x: "), std::string::npos) << message(s);
  }
}

}  // namespace
}  // namespace marlaas::kernels::cuda
