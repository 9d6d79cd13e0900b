// SGMV expand launcher (lora_cuda.h). No LibTorch header here.
#include "kernels/cuda/lora_cuda.h"
#include "kernels/cuda/sgmv_expand.cuh"

namespace marlaas::kernels::cuda {

Status SgmvExpand(const TensorRef& y, const LoraStack& stack, const TensorRef& seg_start,
                  const TensorRef& seg_adapter, const TensorRef& out, cudaStream_t stream) {
  constexpr const char* kOp = "SgmvExpand";
  MARLAAS_ASSIGN_OR_RETURN(const LoraShape s, CheckLoraArgs(kOp, false, out, stack, y));
  MARLAAS_ASSIGN_OR_RETURN(const int32_t segments, CheckSegments(kOp, seg_start, seg_adapter));
  if (s.rows == 0 || s.out_dim == 0 || segments == 0) return Status::Ok();
  const int64_t row_tiles = (s.rows + kSgmvRows - 1) / kSgmvRows;
  if (row_tiles > 65535) {
    return Status(StatusCode::kInvalidArgument,
                  std::string(kOp) + ": out: at most " + std::to_string(65535 * kSgmvRows) +
                      " rows per call, got " + std::to_string(s.rows));
  }
  MARLAAS_RETURN_IF_ERROR(CheckOnCurrentDevice(kOp, {{"y", &y},
                                                     {"bt", &stack.bt},
                                                     {"scale", &stack.scale},
                                                     {"seg_start", &seg_start},
                                                     {"seg_adapter", &seg_adapter},
                                                     {"out", &out}}));
  const dim3 grid(unsigned((s.out_dim + kSgmvExpandThreads - 1) / kSgmvExpandThreads),
                  unsigned(row_tiles), unsigned(segments));
  return DispatchFloat(out.dtype, kOp, [&](auto zero) {
    using T = decltype(zero);
    SgmvExpandKernel<T><<<grid, kSgmvExpandThreads, 0, stream>>>(
        static_cast<const float*>(y.data), y.strides[0], static_cast<const T*>(stack.bt.data),
        static_cast<const float*>(stack.scale.data), s.num_adapters, s.rank, s.out_dim,
        static_cast<const int32_t*>(seg_start.data), static_cast<const int32_t*>(seg_adapter.data),
        static_cast<T*>(out.data), out.strides[0]);
    return LaunchStatus(kOp);
  });
}

}  // namespace marlaas::kernels::cuda
