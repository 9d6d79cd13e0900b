// TensorRef: a view of a device tensor handed to the CUDA launchers (kernels/cuda/*_cuda.h):
// pointer, element type, sizes and strides (in elements, row-major by default). Plain data, so
// any owner of device memory (LibTorch code, the adapter store, tests, benches) can describe its
// buffers without this folder depending on it; no LibTorch header here or in any .cu.
//
// The Check* functions are what every launcher runs before it launches: each names the launcher,
// the argument and what was expected, and none launches or synchronises anything. Thread-safe.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

#include "base/status.h"

namespace marlaas::kernels::cuda {

enum class DType : int32_t { kFloat32 = 0, kBFloat16 = 1, kFloat16 = 2, kInt32 = 3 };
const char* DTypeName(DType dtype);
int DTypeBytes(DType dtype);

inline constexpr int kMaxTensorDims = 4;

struct TensorRef {
  void* data = nullptr;
  DType dtype = DType::kFloat32;
  int32_t ndim = 0;
  int64_t sizes[kMaxTensorDims] = {};
  int64_t strides[kMaxTensorDims] = {};  // elements

  // A contiguous row-major view of `sizes`.
  static TensorRef Contiguous(const void* data, DType dtype, std::initializer_list<int64_t> sizes);
  int64_t numel() const;
  bool IsContiguous() const;
  std::string ShapeString() const;  // "[64, 4096] bf16"
};

// `t` has `ndim` dimensions, one of `dtypes`, a non-null pointer aligned to its element size, and
// rows of contiguous elements (innermost stride 1, other strides >= what they span). With
// `contiguous`, the whole tensor must be densely packed.
Status CheckTensor(const char* op, const char* name, const TensorRef& t, int ndim,
                   std::initializer_list<DType> dtypes, bool contiguous);
// Dimension `dim` of `t` is `expected`.
Status CheckSize(const char* op, const char* name, const TensorRef& t, int dim, int64_t expected);
// The current CUDA device, or kFailedPrecondition naming `op` when there is none.
Result<int> CurrentDevice(const char* op);
// `t`'s pointer is memory of `device` (cudaPointerGetAttributes). Run after the shape checks:
// these two are the only checks that ask the CUDA runtime.
Status CheckOnDevice(const char* op, const char* name, const TensorRef& t, int device);
// Every named tensor is memory of the current device.
struct NamedTensor {
  const char* name;
  const TensorRef* tensor;
};
Status CheckOnCurrentDevice(const char* op, std::initializer_list<NamedTensor> tensors);
// cudaGetLastError after a launch, as a Status naming the op.
Status LaunchStatus(const char* op);

}  // namespace marlaas::kernels::cuda
