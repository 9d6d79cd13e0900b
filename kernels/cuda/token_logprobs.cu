// Fused log-softmax + gather launchers (logprob_cuda.h). No LibTorch header here.
#include <cmath>

#include "kernels/cuda/logprob_cuda.h"
#include "kernels/cuda/token_logprobs.cuh"

namespace marlaas::kernels::cuda {
namespace {

Status CheckCommon(const char* op, const TensorRef& logits, const TensorRef& targets,
                   float inv_temperature) {
  MARLAAS_RETURN_IF_ERROR(CheckTensor(op, "logits", logits, 2,
                                      {DType::kFloat32, DType::kBFloat16, DType::kFloat16}, false));
  MARLAAS_RETURN_IF_ERROR(CheckTensor(op, "targets", targets, 1, {DType::kInt32}, true));
  MARLAAS_RETURN_IF_ERROR(CheckSize(op, "targets", targets, 0, logits.sizes[0]));
  if (!(inv_temperature > 0) || !std::isfinite(inv_temperature)) {
    return Status(StatusCode::kInvalidArgument,
                  std::string(op) + ": inv_temperature must be finite and > 0, got " +
                      std::to_string(inv_temperature));
  }
  if (logits.sizes[0] >= (int64_t(1) << 31) || logits.sizes[1] >= (int64_t(1) << 30))
    return Status(StatusCode::kInvalidArgument, std::string(op) + ": logits: too large");
  if (logits.sizes[1] == 0 && logits.sizes[0] > 0)
    return Status(StatusCode::kInvalidArgument, std::string(op) + ": logits: empty vocabulary");
  return Status::Ok();
}

Status CheckRowVector(const char* op, const char* name, const TensorRef& t, int64_t rows) {
  MARLAAS_RETURN_IF_ERROR(CheckTensor(op, name, t, 1, {DType::kFloat32}, true));
  return CheckSize(op, name, t, 0, rows);
}

}  // namespace

Status TokenLogprobs(const TensorRef& logits, const TensorRef& targets, float inv_temperature,
                     const TensorRef& logprob, const TensorRef& lse, cudaStream_t stream) {
  constexpr const char* kOp = "TokenLogprobs";
  MARLAAS_RETURN_IF_ERROR(CheckCommon(kOp, logits, targets, inv_temperature));
  const int64_t rows = logits.sizes[0];
  MARLAAS_RETURN_IF_ERROR(CheckRowVector(kOp, "logprob", logprob, rows));
  const bool want_lse = lse.ndim != 0;
  if (want_lse) MARLAAS_RETURN_IF_ERROR(CheckRowVector(kOp, "lse", lse, rows));
  if (rows == 0) return Status::Ok();
  MARLAAS_RETURN_IF_ERROR(CheckOnCurrentDevice(
      kOp, {{"logits", &logits}, {"targets", &targets}, {"logprob", &logprob}}));
  if (want_lse) MARLAAS_RETURN_IF_ERROR(CheckOnCurrentDevice(kOp, {{"lse", &lse}}));
  return DispatchFloat(logits.dtype, kOp, [&](auto zero) {
    using T = decltype(zero);
    TokenLogprobsKernel<T><<<unsigned(rows), kLogprobThreads, 0, stream>>>(
        static_cast<const T*>(logits.data), logits.strides[0], int32_t(logits.sizes[1]),
        inv_temperature, static_cast<const int32_t*>(targets.data),
        static_cast<float*>(logprob.data), want_lse ? static_cast<float*>(lse.data) : nullptr);
    return LaunchStatus(kOp);
  });
}

Status TokenLogprobsBackward(const TensorRef& logits, const TensorRef& targets,
                             float inv_temperature, const TensorRef& lse,
                             const TensorRef& grad_logprob, const TensorRef& dlogits,
                             cudaStream_t stream) {
  constexpr const char* kOp = "TokenLogprobsBackward";
  MARLAAS_RETURN_IF_ERROR(CheckCommon(kOp, logits, targets, inv_temperature));
  const int64_t rows = logits.sizes[0], vocab = logits.sizes[1];
  MARLAAS_RETURN_IF_ERROR(CheckRowVector(kOp, "lse", lse, rows));
  MARLAAS_RETURN_IF_ERROR(CheckRowVector(kOp, "grad_logprob", grad_logprob, rows));
  MARLAAS_RETURN_IF_ERROR(CheckTensor(kOp, "dlogits", dlogits, 2, {logits.dtype}, false));
  MARLAAS_RETURN_IF_ERROR(CheckSize(kOp, "dlogits", dlogits, 0, rows));
  MARLAAS_RETURN_IF_ERROR(CheckSize(kOp, "dlogits", dlogits, 1, vocab));
  if (dlogits.data == logits.data && rows > 0)
    return Status(StatusCode::kInvalidArgument, std::string(kOp) + ": dlogits aliases logits");
  if (rows == 0) return Status::Ok();
  MARLAAS_RETURN_IF_ERROR(CheckOnCurrentDevice(kOp, {{"logits", &logits},
                                                     {"targets", &targets},
                                                     {"lse", &lse},
                                                     {"grad_logprob", &grad_logprob},
                                                     {"dlogits", &dlogits}}));
  const int64_t per_block = int64_t(kLogprobThreads) * 4;
  const int64_t col_blocks = (vocab + per_block - 1) / per_block;
  if (col_blocks > 65535)
    return Status(StatusCode::kInvalidArgument,
                  std::string(kOp) + ": logits: vocabulary too large");
  const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>(col_blocks));
  return DispatchFloat(logits.dtype, kOp, [&](auto zero) {
    using T = decltype(zero);
    TokenLogprobsBackwardKernel<T><<<grid, kLogprobThreads, 0, stream>>>(
        static_cast<const T*>(logits.data), logits.strides[0], dlogits.strides[0], int32_t(vocab),
        inv_temperature, static_cast<const int32_t*>(targets.data),
        static_cast<const float*>(lse.data), static_cast<const float*>(grad_logprob.data),
        static_cast<T*>(dlogits.data));
    return LaunchStatus(kOp);
  });
}

}  // namespace marlaas::kernels::cuda
