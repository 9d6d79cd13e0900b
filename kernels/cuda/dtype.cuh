// Device-side element conversions shared by the kernels: every kernel loads f32, bf16 or f16 and
// computes in f32. Included only by .cu files (no LibTorch header anywhere here).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>

#include "kernels/cuda/tensor_ref.h"

namespace marlaas::kernels::cuda {

__device__ __forceinline__ float ToFloat(float v) { return v; }
__device__ __forceinline__ float ToFloat(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float ToFloat(__half v) { return __half2float(v); }

template <typename T>
__device__ __forceinline__ T FromFloat(float v);
template <>
__device__ __forceinline__ float FromFloat<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <>
__device__ __forceinline__ __half FromFloat<__half>(float v) {
  return __float2half_rn(v);
}

// Calls f(T{}) with the element type of a float dtype; returns f's Status. The launchers checked
// the dtype already, so the default branch is unreachable in practice.
template <typename F>
Status DispatchFloat(DType dtype, const char* op, F&& f) {
  switch (dtype) {
    case DType::kFloat32:
      return f(float{});
    case DType::kBFloat16:
      return f(__nv_bfloat16{});
    case DType::kFloat16:
      return f(__half{});
    default:
      break;
  }
  return Status(StatusCode::kInvalidArgument, std::string(op) + ": not a float dtype");
}

}  // namespace marlaas::kernels::cuda
