#include "model/packed_weights.h"

#include <map>

namespace marlaas::model {
namespace {

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s;
  for (int64_t d : shape) s += (s.empty() ? "" : ",") + std::to_string(d);
  return "[" + s + "]";
}

}  // namespace

PackedLayout PackLayout(const BaseWeights& weights) {
  PackedLayout layout;
  for (const auto& [name, tensor] : weights.NamedTensors()) {
    PackedTensor p;
    p.name = name;
    p.shape = tensor.sizes().vec();
    p.offset = layout.bytes;
    layout.bytes += (uint64_t(tensor.numel()) * sizeof(float) + kPackedAlignment - 1) /
                    kPackedAlignment * kPackedAlignment;
    layout.tensors.push_back(std::move(p));
  }
  return layout;
}

Status CopyPacked(const BaseWeights& weights, const PackedLayout& layout, void* block,
                  const torch::Device& device) {
  const std::map<std::string, torch::Tensor> named = weights.NamedTensors();
  if (named.size() != layout.tensors.size()) {
    return Status(StatusCode::kInvalidArgument,
                  "packed layout lists " + std::to_string(layout.tensors.size()) +
                      " tensors, the weights have " + std::to_string(named.size()));
  }
  const auto options = torch::TensorOptions().dtype(torch::kFloat32).device(device);
  for (const PackedTensor& p : layout.tensors) {
    auto it = named.find(p.name);
    if (it == named.end() || it->second.sizes().vec() != p.shape) {
      return Status(StatusCode::kInvalidArgument, "packed layout's tensor '" + p.name + "' " +
                                                      ShapeString(p.shape) +
                                                      " is not in the weights with that shape");
    }
    auto dst = torch::from_blob(static_cast<char*>(block) + p.offset, p.shape, options);
    dst.copy_(it->second.to(torch::kFloat32));
  }
  return Status::Ok();
}

Result<std::shared_ptr<const BaseWeights>> ViewPacked(const ModelConfig& config,
                                                      const PackedLayout& layout, void* block,
                                                      const torch::Device& device,
                                                      std::shared_ptr<const void> keepalive) {
  std::map<std::string, const PackedTensor*> by_name;
  for (const PackedTensor& p : layout.tensors) by_name[p.name] = &p;
  const auto options = torch::TensorOptions().dtype(torch::kFloat32).device(device);
  MARLAAS_ASSIGN_OR_RETURN(
      std::shared_ptr<BaseWeights> w,
      BaseWeights::FromLookup(
          config,
          [&](const std::string& name, std::vector<int64_t> shape) -> Result<torch::Tensor> {
            auto it = by_name.find(name);
            if (it == by_name.end())
              return Status(StatusCode::kNotFound, "packed weights have no tensor '" + name + "'");
            if (it->second->shape != shape) {
              return Status(StatusCode::kInvalidArgument,
                            "packed tensor '" + name + "' has shape " +
                                ShapeString(it->second->shape) + ", the config implies " +
                                ShapeString(shape));
            }
            // Each view holds the block: a tensor taken out of the weights keeps it alive.
            return torch::from_blob(
                static_cast<char*>(block) + it->second->offset, shape, [keepalive](void*) {},
                options);
          }));
  w->storage = std::move(keepalive);
  return std::shared_ptr<const BaseWeights>(std::move(w));
}

Result<std::shared_ptr<const BaseWeights>> PackOnDevice(const BaseWeights& weights,
                                                        const torch::Device& device) {
  const PackedLayout layout = PackLayout(weights);
  auto block = std::make_shared<torch::Tensor>(
      torch::empty({int64_t(layout.bytes / sizeof(float))},
                   torch::TensorOptions(torch::kFloat32).device(device)));
  MARLAAS_RETURN_IF_ERROR(CopyPacked(weights, layout, block->data_ptr(), block->device()));
  return ViewPacked(weights.config, layout, block->data_ptr(), block->device(), block);
}

}  // namespace marlaas::model
