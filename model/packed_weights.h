// The frozen base weights packed into one block of memory, e.g. a block of device memory that
// the processes on one GPU share through CUDA IPC (model/device_base.h): one copy of the base in
// device memory however many stages read it.
//
// PackLayout lists every tensor of the base (NamedTensors: the lm_head is the embedding when
// tied, so it is stored once) with its offset; each tensor starts on a 256-byte boundary and is
// stored contiguously as f32. CopyPacked fills a block on `device`; ViewPacked makes
// BaseWeights whose tensors are views into a filled block (no copy). The views must not be
// written. Thread-safe (no shared state).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "model/base_weights.h"

namespace marlaas::model {

struct PackedTensor {
  std::string name;
  std::vector<int64_t> shape;
  uint64_t offset = 0;  // bytes from the block's start
};

struct PackedLayout {
  std::vector<PackedTensor> tensors;  // in NamedTensors' (name) order
  uint64_t bytes = 0;                 // the block's size
};

inline constexpr uint64_t kPackedAlignment = 256;

PackedLayout PackLayout(const BaseWeights& weights);

// Copies every tensor of `weights` into `block` (layout.bytes bytes of `device` memory).
// REQUIRES: layout == PackLayout(weights).
Status CopyPacked(const BaseWeights& weights, const PackedLayout& layout, void* block,
                  const torch::Device& device);

// BaseWeights of `config` viewing `block` (filled by CopyPacked with the same layout) on
// `device`. `keepalive` owns the block: the weights and every view taken from them hold it.
Result<std::shared_ptr<const BaseWeights>> ViewPacked(const ModelConfig& config,
                                                      const PackedLayout& layout, void* block,
                                                      const torch::Device& device,
                                                      std::shared_ptr<const void> keepalive);

// A packed copy of `weights` in one LibTorch allocation on `device` (the weights hold it): the
// base on a device without sharing it with other processes (benchmarks, tests).
Result<std::shared_ptr<const BaseWeights>> PackOnDevice(const BaseWeights& weights,
                                                        const torch::Device& device);

}  // namespace marlaas::model
