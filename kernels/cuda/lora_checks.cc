// The launch checks of the four multi-LoRA launchers (lora_cuda.h).
#include <string>

#include "kernels/cuda/lora_cuda.h"

namespace marlaas::kernels::cuda {

Result<LoraShape> CheckLoraArgs(const char* op, bool shrink, const TensorRef& act,
                                const LoraStack& stack, const TensorRef& y) {
  const auto floats = {DType::kFloat32, DType::kBFloat16, DType::kFloat16};
  const char* act_name = shrink ? "x" : "out";
  MARLAAS_RETURN_IF_ERROR(CheckTensor(op, act_name, act, 2, floats, false));
  MARLAAS_RETURN_IF_ERROR(CheckTensor(op, "a", stack.a, 3, {act.dtype}, true));
  MARLAAS_RETURN_IF_ERROR(CheckTensor(op, "bt", stack.bt, 3, {act.dtype}, true));
  MARLAAS_RETURN_IF_ERROR(CheckTensor(op, "scale", stack.scale, 1, {DType::kFloat32}, true));
  MARLAAS_RETURN_IF_ERROR(CheckTensor(op, "y", y, 2, {DType::kFloat32}, false));
  LoraShape s;
  const int64_t rank = stack.a.sizes[1], num = stack.a.sizes[0];
  if (rank < 1 || rank > kMaxCudaLoraRank) {
    return Status(StatusCode::kInvalidArgument, std::string(op) + ": a: rank " +
                                                    std::to_string(rank) + " is outside 1.." +
                                                    std::to_string(kMaxCudaLoraRank));
  }
  MARLAAS_RETURN_IF_ERROR(CheckSize(op, "bt", stack.bt, 0, num));
  MARLAAS_RETURN_IF_ERROR(CheckSize(op, "bt", stack.bt, 1, rank));
  MARLAAS_RETURN_IF_ERROR(CheckSize(op, "scale", stack.scale, 0, num));
  MARLAAS_RETURN_IF_ERROR(CheckSize(op, "y", y, 0, act.sizes[0]));
  MARLAAS_RETURN_IF_ERROR(CheckSize(op, "y", y, 1, rank));
  if (shrink) MARLAAS_RETURN_IF_ERROR(CheckSize(op, "x", act, 1, stack.a.sizes[2]));
  if (!shrink) MARLAAS_RETURN_IF_ERROR(CheckSize(op, "out", act, 1, stack.bt.sizes[2]));
  constexpr int64_t kMaxDim = int64_t(1) << 30;
  if (act.sizes[0] >= kMaxDim || stack.a.sizes[2] >= kMaxDim || stack.bt.sizes[2] >= kMaxDim ||
      num >= kMaxDim) {
    return Status(StatusCode::kInvalidArgument, std::string(op) + ": a dimension exceeds 2^30");
  }
  s.rows = int32_t(act.sizes[0]);
  s.in_dim = int32_t(stack.a.sizes[2]);
  s.out_dim = int32_t(stack.bt.sizes[2]);
  s.rank = int32_t(rank);
  s.num_adapters = int32_t(num);
  return s;
}

Result<int32_t> CheckSegments(const char* op, const TensorRef& seg_start,
                              const TensorRef& seg_adapter) {
  MARLAAS_RETURN_IF_ERROR(CheckTensor(op, "seg_adapter", seg_adapter, 1, {DType::kInt32}, true));
  MARLAAS_RETURN_IF_ERROR(CheckTensor(op, "seg_start", seg_start, 1, {DType::kInt32}, true));
  const int64_t num = seg_adapter.sizes[0];
  MARLAAS_RETURN_IF_ERROR(CheckSize(op, "seg_start", seg_start, 0, num + 1));
  if (num > 65535) {
    return Status(StatusCode::kInvalidArgument,
                  std::string(op) + ": seg_adapter: at most 65535 segments per call, got " +
                      std::to_string(num));
  }
  return int32_t(num);
}

}  // namespace marlaas::kernels::cuda
