// BGMV expand launcher (lora_cuda.h). No LibTorch header here.
#include "kernels/cuda/bgmv_expand.cuh"
#include "kernels/cuda/lora_cuda.h"

namespace marlaas::kernels::cuda {

Status BgmvExpand(const TensorRef& y, const LoraStack& stack, const TensorRef& row_adapter,
                  const TensorRef& out, cudaStream_t stream) {
  constexpr const char* kOp = "BgmvExpand";
  MARLAAS_ASSIGN_OR_RETURN(const LoraShape s, CheckLoraArgs(kOp, false, out, stack, y));
  MARLAAS_RETURN_IF_ERROR(CheckTensor(kOp, "row_adapter", row_adapter, 1, {DType::kInt32}, true));
  MARLAAS_RETURN_IF_ERROR(CheckSize(kOp, "row_adapter", row_adapter, 0, s.rows));
  if (s.rows == 0 || s.out_dim == 0) return Status::Ok();
  MARLAAS_RETURN_IF_ERROR(CheckOnCurrentDevice(kOp, {{"y", &y},
                                                     {"bt", &stack.bt},
                                                     {"scale", &stack.scale},
                                                     {"row_adapter", &row_adapter},
                                                     {"out", &out}}));
  const int64_t col_blocks = (int64_t(s.out_dim) + kBgmvExpandThreads - 1) / kBgmvExpandThreads;
  if (col_blocks > 65535) {
    return Status(StatusCode::kInvalidArgument, std::string(kOp) + ": out: at most " +
                                                    std::to_string(65535 * kBgmvExpandThreads) +
                                                    " columns, got " + std::to_string(s.out_dim));
  }
  const dim3 grid(unsigned(s.rows), unsigned(col_blocks));
  return DispatchFloat(out.dtype, kOp, [&](auto zero) {
    using T = decltype(zero);
    BgmvExpandKernel<T><<<grid, kBgmvExpandThreads, 0, stream>>>(
        static_cast<const float*>(y.data), y.strides[0], static_cast<const T*>(stack.bt.data),
        static_cast<const float*>(stack.scale.data), s.num_adapters, s.rank, s.out_dim,
        static_cast<const int32_t*>(row_adapter.data), static_cast<T*>(out.data), out.strides[0]);
    return LaunchStatus(kOp);
  });
}

}  // namespace marlaas::kernels::cuda
