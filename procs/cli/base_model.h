// The built-in tiny base model in a state dir: <state>/models/tiny, pretrained on first use on
// the built-in tasks' corpus and cached afterwards (model/pretrain.h). Used by serve and demo.
#pragma once

#include <string>

#include "base/status.h"

namespace marlaas::cli {

// The default state dir: $MARLAAS_STATE_DIR, else ~/.local/share/marlaas.
std::string DefaultStateDir();
// Pretrains (or finds cached) the tiny base; returns its folder. Prints progress to stderr.
Result<std::string> EnsureTinyBase(const std::string& state_dir, double* seconds, bool* cached);

// What the stages would refuse about a base model folder (model::BaseWeights::Check and its
// tokenizer.json), and about a device (model::ParseDevice: "cuda" with a CPU-only LibTorch, or
// an index past the GPUs serve sees; not checked against GPUs when a model stage is given its own
// list, MARLAAS_<ROLE>_GPUS, which serve does not see), found by serve before it starts them
// instead of after their restarts.
Status CheckBaseModel(const std::string& model_dir);
Status CheckDevice(const std::string& device);

}  // namespace marlaas::cli
