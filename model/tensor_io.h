// Between safetensors views and LibTorch tensors. f32 data that is suitably aligned is wrapped
// without a copy (the tensor then points into the read-only mapping: never write to it, and keep
// the SafetensorsFile alive as long as the tensor); bf16/f16 are widened to f32 copies.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "base/status.h"
#include "model/safetensors.h"
#include "model/torch_pch.h"

namespace marlaas::model {

// The tensor for `view` as f32 (floating dtypes) or int64 (integer dtypes).
Result<torch::Tensor> ToTensor(const TensorView& view, bool allow_zero_copy);
// As ToTensor, for a model weight: kInvalidArgument naming `what` (e.g. "tensor 'x' in <file>")
// unless `view` is floating point (F32, F16, BF16, F64). An integer or bool weight would fail at
// the first forward or compute wrongly.
Result<torch::Tensor> ToWeightTensor(const TensorView& view, bool allow_zero_copy,
                                     const std::string& what);
// ToWeightTensor's dtype check alone (no conversion).
Status CheckWeightDType(const TensorView& view, const std::string& what);
// A view over a contiguous CPU tensor's memory (f32, bf16, f16, i64, i32 supported).
Result<TensorView> ViewOf(const torch::Tensor& t);
// Writes named tensors (made contiguous first) as one safetensors file.
Status SaveTensors(const std::string& path, const std::map<std::string, torch::Tensor>& tensors,
                   const std::map<std::string, std::string>& metadata = {});
// Loads every tensor of one safetensors file as owned f32/int64 copies.
Result<std::map<std::string, torch::Tensor>> LoadTensors(const std::string& path);

}  // namespace marlaas::model
