#include "kernels/cuda/tensor_ref.h"

#include <cuda_runtime_api.h>

#include <string>

namespace marlaas::kernels::cuda {
namespace {

Status Bad(const char* op, const char* name, const std::string& why) {
  return Status(StatusCode::kInvalidArgument, std::string(op) + ": " + name + ": " + why);
}

}  // namespace

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "f32";
    case DType::kBFloat16:
      return "bf16";
    case DType::kFloat16:
      return "f16";
    case DType::kInt32:
      return "i32";
  }
  return "unknown dtype";
}

int DTypeBytes(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
    case DType::kInt32:
      return 4;
    case DType::kBFloat16:
    case DType::kFloat16:
      return 2;
  }
  return 0;
}

TensorRef TensorRef::Contiguous(const void* data, DType dtype,
                                std::initializer_list<int64_t> sizes) {
  TensorRef t;
  t.data = const_cast<void*>(data);
  t.dtype = dtype;
  t.ndim = int32_t(sizes.size() > size_t(kMaxTensorDims) ? kMaxTensorDims : sizes.size());
  int i = 0;
  for (int64_t s : sizes) {
    if (i == t.ndim) break;
    t.sizes[i++] = s;
  }
  int64_t stride = 1;
  for (int d = t.ndim - 1; d >= 0; --d) {
    t.strides[d] = stride;
    stride *= t.sizes[d];
  }
  return t;
}

int64_t TensorRef::numel() const {
  int64_t n = 1;
  for (int d = 0; d < ndim; ++d) n *= sizes[d];
  return n;
}

bool TensorRef::IsContiguous() const {
  int64_t stride = 1;
  for (int d = ndim - 1; d >= 0; --d) {
    if (sizes[d] != 1 && strides[d] != stride) return false;
    stride *= sizes[d];
  }
  return true;
}

std::string TensorRef::ShapeString() const {
  std::string s = "[";
  for (int d = 0; d < ndim; ++d) s += (d ? ", " : "") + std::to_string(sizes[d]);
  return s + "] " + DTypeName(dtype);
}

Status CheckTensor(const char* op, const char* name, const TensorRef& t, int ndim,
                   std::initializer_list<DType> dtypes, bool contiguous) {
  if (t.ndim != ndim) {
    return Bad(op, name,
               "expected " + std::to_string(ndim) + " dimensions, got " + t.ShapeString());
  }
  bool dtype_ok = false;
  std::string wanted;
  for (DType d : dtypes) {
    dtype_ok = dtype_ok || d == t.dtype;
    wanted += (wanted.empty() ? "" : " or ") + std::string(DTypeName(d));
  }
  if (!dtype_ok) return Bad(op, name, "expected " + wanted + ", got " + t.ShapeString());
  for (int d = 0; d < ndim; ++d) {
    if (t.sizes[d] < 0) return Bad(op, name, "negative size in " + t.ShapeString());
  }
  if (t.numel() == 0) return Status::Ok();  // nothing will be read or written
  if (t.data == nullptr) return Bad(op, name, "null data pointer for " + t.ShapeString());
  if (reinterpret_cast<uintptr_t>(t.data) % uintptr_t(DTypeBytes(t.dtype)) != 0)
    return Bad(op, name, "data pointer not aligned to its element size");
  if (contiguous) {
    if (!t.IsContiguous()) return Bad(op, name, "must be contiguous, " + t.ShapeString());
    return Status::Ok();
  }
  if (t.sizes[ndim - 1] > 1 && t.strides[ndim - 1] != 1)
    return Bad(op, name, "the innermost dimension must have stride 1");
  int64_t span = t.sizes[ndim - 1];
  for (int d = ndim - 2; d >= 0; --d) {
    if (t.sizes[d] > 1 && t.strides[d] < span)
      return Bad(op, name,
                 "stride " + std::to_string(t.strides[d]) + " of dimension " + std::to_string(d) +
                     " overlaps the " + std::to_string(span) + " elements inside it");
    span = t.strides[d] * t.sizes[d];
  }
  return Status::Ok();
}

Status CheckSize(const char* op, const char* name, const TensorRef& t, int dim, int64_t expected) {
  if (dim >= t.ndim || t.sizes[dim] != expected) {
    return Bad(op, name,
               "dimension " + std::to_string(dim) + " must be " + std::to_string(expected) +
                   ", got " + t.ShapeString());
  }
  return Status::Ok();
}

Result<int> CurrentDevice(const char* op) {
  int device = -1;
  const cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear it
    return Status(StatusCode::kFailedPrecondition,
                  std::string(op) + ": no usable CUDA device: " + cudaGetErrorString(err));
  }
  return device;
}

Status CheckOnDevice(const char* op, const char* name, const TensorRef& t, int device) {
  if (t.numel() == 0) return Status::Ok();
  cudaPointerAttributes attr{};
  const cudaError_t err = cudaPointerGetAttributes(&attr, t.data);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return Bad(op, name, std::string("not CUDA memory: ") + cudaGetErrorString(err));
  }
  if (attr.type != cudaMemoryTypeDevice && attr.type != cudaMemoryTypeManaged)
    return Bad(op, name, "host memory, expected memory of CUDA device " + std::to_string(device));
  if (attr.device != device) {
    return Bad(op, name,
               "memory of CUDA device " + std::to_string(attr.device) +
                   ", but the launch is on device " + std::to_string(device));
  }
  return Status::Ok();
}

Status CheckOnCurrentDevice(const char* op, std::initializer_list<NamedTensor> tensors) {
  MARLAAS_ASSIGN_OR_RETURN(const int device, CurrentDevice(op));
  for (const NamedTensor& t : tensors)
    MARLAAS_RETURN_IF_ERROR(CheckOnDevice(op, t.name, *t.tensor, device));
  return Status::Ok();
}

Status LaunchStatus(const char* op) {
  const cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) return Status::Ok();
  return Status(StatusCode::kInternal,
                std::string(op) + ": kernel launch failed: " + cudaGetErrorString(err));
}

}  // namespace marlaas::kernels::cuda
