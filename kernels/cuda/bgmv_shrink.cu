// BGMV shrink launcher (lora_cuda.h). No LibTorch header here.
#include "kernels/cuda/bgmv_shrink.cuh"
#include "kernels/cuda/lora_cuda.h"

namespace marlaas::kernels::cuda {

Status BgmvShrink(const TensorRef& x, const LoraStack& stack, const TensorRef& row_adapter,
                  const TensorRef& y, cudaStream_t stream) {
  constexpr const char* kOp = "BgmvShrink";
  MARLAAS_ASSIGN_OR_RETURN(const LoraShape s, CheckLoraArgs(kOp, true, x, stack, y));
  MARLAAS_RETURN_IF_ERROR(CheckTensor(kOp, "row_adapter", row_adapter, 1, {DType::kInt32}, true));
  MARLAAS_RETURN_IF_ERROR(CheckSize(kOp, "row_adapter", row_adapter, 0, s.rows));
  if (s.rows == 0) return Status::Ok();
  MARLAAS_RETURN_IF_ERROR(CheckOnCurrentDevice(
      kOp, {{"x", &x}, {"a", &stack.a}, {"row_adapter", &row_adapter}, {"y", &y}}));
  const dim3 grid(unsigned(s.rows),
                  unsigned((s.rank + kBgmvShrinkRanksPerBlock - 1) / kBgmvShrinkRanksPerBlock));
  return DispatchFloat(x.dtype, kOp, [&](auto zero) {
    using T = decltype(zero);
    BgmvShrinkKernel<T><<<grid, kBgmvShrinkThreads, 0, stream>>>(
        static_cast<const T*>(x.data), x.strides[0], static_cast<const T*>(stack.a.data),
        s.num_adapters, s.rank, s.in_dim, static_cast<const int32_t*>(row_adapter.data),
        static_cast<float*>(y.data), y.strides[0]);
    return LaunchStatus(kOp);
  });
}

}  // namespace marlaas::kernels::cuda
