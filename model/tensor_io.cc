#include "model/tensor_io.h"

namespace marlaas::model {

Result<torch::Tensor> ToTensor(const TensorView& view, bool allow_zero_copy) {
  c10::ScalarType type;
  switch (view.dtype) {
    case DType::kF32:
      type = torch::kFloat32;
      break;
    case DType::kF16:
      type = torch::kFloat16;
      break;
    case DType::kBF16:
      type = torch::kBFloat16;
      break;
    case DType::kF64:
      type = torch::kFloat64;
      break;
    case DType::kI64:
      type = torch::kInt64;
      break;
    case DType::kI32:
      type = torch::kInt32;
      break;
    case DType::kI16:
      type = torch::kInt16;
      break;
    case DType::kI8:
      type = torch::kInt8;
      break;
    case DType::kU8:
      type = torch::kUInt8;
      break;
    case DType::kBool:
      type = torch::kBool;
      break;
    default:
      return Status(StatusCode::kInvalidArgument, "unsupported dtype");
  }
  const size_t elem = DTypeSize(view.dtype);
  const bool aligned = reinterpret_cast<uintptr_t>(view.data) % elem == 0;
  // from_blob never writes; the const_cast only satisfies its signature.
  auto src = torch::from_blob(const_cast<unsigned char*>(view.data), view.shape,
                              torch::TensorOptions().dtype(type));
  const bool floating = torch::isFloatingType(type);
  const auto want = floating ? torch::kFloat32 : torch::kInt64;
  if (type == want && aligned && allow_zero_copy) return src;
  if (!aligned) {  // copy the bytes to aligned memory first
    auto buf = torch::empty({int64_t(view.bytes)}, torch::kUInt8);
    std::memcpy(buf.data_ptr(), view.data, view.bytes);
    src = buf.view(type).reshape(view.shape);
  }
  return src.to(want, /*non_blocking=*/false, /*copy=*/true);
}

Status CheckWeightDType(const TensorView& view, const std::string& what) {
  switch (view.dtype) {
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
    case DType::kF64:
      return Status::Ok();
    default:
      return Status(StatusCode::kInvalidArgument,
                    what + " has dtype " + DTypeName(view.dtype) +
                        "; weights must be floating point (F32, F16, BF16 or F64)");
  }
}

Result<torch::Tensor> ToWeightTensor(const TensorView& view, bool allow_zero_copy,
                                     const std::string& what) {
  MARLAAS_RETURN_IF_ERROR(CheckWeightDType(view, what));
  return ToTensor(view, allow_zero_copy);
}

Result<TensorView> ViewOf(const torch::Tensor& t) {
  if (!t.is_contiguous() || !t.device().is_cpu()) {
    return Status(StatusCode::kInvalidArgument, "tensor must be contiguous and on the CPU");
  }
  TensorView v;
  switch (t.scalar_type()) {
    case torch::kFloat32:
      v.dtype = DType::kF32;
      break;
    case torch::kBFloat16:
      v.dtype = DType::kBF16;
      break;
    case torch::kFloat16:
      v.dtype = DType::kF16;
      break;
    case torch::kInt64:
      v.dtype = DType::kI64;
      break;
    case torch::kInt32:
      v.dtype = DType::kI32;
      break;
    default:
      return Status(StatusCode::kInvalidArgument, "unsupported tensor dtype");
  }
  v.shape = t.sizes().vec();
  v.data = static_cast<const unsigned char*>(t.data_ptr());
  v.bytes = size_t(t.numel()) * t.element_size();
  return v;
}

Status SaveTensors(const std::string& path, const std::map<std::string, torch::Tensor>& tensors,
                   const std::map<std::string, std::string>& metadata) {
  std::map<std::string, torch::Tensor> owned;
  std::map<std::string, TensorView> views;
  for (const auto& [name, t] : tensors) {
    owned[name] = t.detach().contiguous();
    MARLAAS_ASSIGN_OR_RETURN(views[name], ViewOf(owned[name]));
  }
  return WriteSafetensors(path, views, metadata);
}

Result<std::map<std::string, torch::Tensor>> LoadTensors(const std::string& path) {
  MARLAAS_ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open(path));
  std::map<std::string, torch::Tensor> out;
  for (const std::string& name : file->names()) {
    MARLAAS_ASSIGN_OR_RETURN(TensorView v, file->Get(name));
    MARLAAS_ASSIGN_OR_RETURN(out[name], ToTensor(v, /*allow_zero_copy=*/false));
  }
  return out;
}

}  // namespace marlaas::model
