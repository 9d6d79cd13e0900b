// A tenant's trainer checkpoint: everything needed to resume its training exactly, written to
// <tenant dir>/checkpoints/step-NNNNNNNN/ as
//   adapter_config.json + adapter_model.safetensors  (PEFT layout: exportable as it is)
//   optimizer.pt                                     (AdamW moments and step counts)
//   state.json                                       (counters, seen group ids, file checksums)
// state.json keeps the retired group ids as ranges ("retired_ranges"); a checkpoint with the
// older list ("retired_groups") loads too, but builds before the ranges cannot read the new one
// (they would set it aside as damaged): no going back to them on a state dir.
// The folder is filled under a temporary name and renamed into place, then LATEST names it, so a
// crash leaves the previous checkpoint intact. Loading verifies sizes and checksums of every
// file: a truncated or altered checkpoint is reported with the file named, and the loader falls
// back to the previous one. The two newest checkpoints are kept. Trainer thread only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/id_ranges.h"
#include "base/status.h"
#include "model/base_weights.h"
#include "model/lora_adapter.h"
#include "model/torch_pch.h"

namespace marlaas::trainer {

struct CheckpointState {
  uint64_t version = 0;  // the adapter version this checkpoint holds
  uint64_t steps = 0;
  uint64_t groups_trained = 0;
  uint64_t groups_dropped = 0;
  uint64_t groups_degenerate = 0;  // trained groups with all-equal rewards (no gradient)
  uint64_t data_cursor = 0;        // 1 + the highest prompt index trained on
  double last_reward_mean = 0;
  IdRanges retired_groups;  // ids of every group trained or dropped (state.json: as ranges)
};

// `adapter` and `optimizer` are those of the state's steps and version: when the newest
// checkpoint holds the same steps and version (a save with only counters and retired groups new),
// its adapter and optimizer files are hard-linked into the new folder, not serialised again.
Status SaveCheckpoint(const std::string& tenant_dir, const model::LoraAdapter& adapter,
                      torch::optim::Optimizer& optimizer, const CheckpointState& state);

struct LoadedCheckpoint {
  model::LoraAdapter adapter;
  CheckpointState state;
  std::string dir;
  std::vector<std::string> skipped;  // newer checkpoints that failed to load, with the reason
  // Groups the skipped checkpoints had retired (trained or dropped) beyond this one: the trainer
  // acknowledged them on the ring when it wrote those checkpoints, so they will not come again.
  uint64_t lost_retired = 0;
};
// The newest loadable checkpoint; kNotFound when the tenant has none. Newer ones that fail to
// load are renamed .bad-<name> once an older one loads (kept for inspection, and no longer taken
// for the newest: neither by the keep-two rule nor as "already saved" when training reaches the
// same step again); with none loadable, nothing is renamed and the error names each. The optimizer
// state is loaded into `optimizer`, which must already own `loaded.adapter.flat()` — so this
// returns the adapter first through `adapter_out` and then fills the optimizer via
// `make_optimizer`.
Result<LoadedCheckpoint> LoadLatestCheckpoint(
    const std::string& tenant_dir, const model::BaseWeights& base,
    const std::function<torch::optim::Optimizer*(model::LoraAdapter*)>& make_optimizer);

}  // namespace marlaas::trainer
