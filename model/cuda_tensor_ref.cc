#include "model/cuda_tensor_ref.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>

namespace marlaas::model {

kernels::cuda::TensorRef RefOf(const torch::Tensor& t) {
  using kernels::cuda::DType;
  kernels::cuda::TensorRef r;
  switch (t.scalar_type()) {
    case torch::kFloat32:
      r.dtype = DType::kFloat32;
      break;
    case torch::kBFloat16:
      r.dtype = DType::kBFloat16;
      break;
    case torch::kFloat16:
      r.dtype = DType::kFloat16;
      break;
    case torch::kInt32:
      r.dtype = DType::kInt32;
      break;
    default:
      TORCH_CHECK(false, "no CUDA kernel takes tensors of ", t.scalar_type());
  }
  TORCH_CHECK(t.dim() <= kernels::cuda::kMaxTensorDims, "tensor has ", t.dim(), " dimensions");
  r.data = t.data_ptr();
  r.ndim = int32_t(t.dim());
  for (int64_t d = 0; d < t.dim(); ++d) {
    r.sizes[d] = t.size(d);
    r.strides[d] = t.stride(d);
  }
  return r;
}

void CheckLaunch(const Status& status) { TORCH_CHECK(status.ok(), status.ToString()); }

void CheckDefaultStream(const torch::Device& device) {
  const c10::Stream current = c10::impl::getDeviceGuardImpl(device.type())->getStream(device);
  TORCH_CHECK(current.id() == 0, "LibTorch's current stream on ", device,
              " is not the default stream; the CUDA launchers run on the default stream");
}

}  // namespace marlaas::model
