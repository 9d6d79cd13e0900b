// SGMV shrink launcher (lora_cuda.h). No LibTorch header here.
#include "kernels/cuda/lora_cuda.h"
#include "kernels/cuda/sgmv_shrink.cuh"

namespace marlaas::kernels::cuda {

Status SgmvShrink(const TensorRef& x, const LoraStack& stack, const TensorRef& seg_start,
                  const TensorRef& seg_adapter, const TensorRef& y, cudaStream_t stream) {
  constexpr const char* kOp = "SgmvShrink";
  MARLAAS_ASSIGN_OR_RETURN(const LoraShape s, CheckLoraArgs(kOp, true, x, stack, y));
  MARLAAS_ASSIGN_OR_RETURN(const int32_t segments, CheckSegments(kOp, seg_start, seg_adapter));
  if (s.rows == 0 || segments == 0) return Status::Ok();
  MARLAAS_RETURN_IF_ERROR(CheckOnCurrentDevice(kOp, {{"x", &x},
                                                     {"a", &stack.a},
                                                     {"seg_start", &seg_start},
                                                     {"seg_adapter", &seg_adapter},
                                                     {"y", &y}}));
  const dim3 grid(unsigned((s.rows + kSgmvRows - 1) / kSgmvRows), unsigned(segments));
  return DispatchFloat(x.dtype, kOp, [&](auto zero) {
    using T = decltype(zero);
    SgmvShrinkKernel<T><<<grid, kSgmvShrinkThreads, 0, stream>>>(
        static_cast<const T*>(x.data), x.strides[0], static_cast<const T*>(stack.a.data),
        s.num_adapters, s.rank, s.in_dim, static_cast<const int32_t*>(seg_start.data),
        static_cast<const int32_t*>(seg_adapter.data), static_cast<float*>(y.data), y.strides[0]);
    return LaunchStatus(kOp);
  });
}

}  // namespace marlaas::kernels::cuda
