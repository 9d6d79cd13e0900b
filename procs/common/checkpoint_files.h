// A tenant's checkpoints as files, without LibTorch: the folder LATEST names, and a file of a
// checkpoint read back checked against the size and checksum its state.json records. The trainer
// writes and loads checkpoints (procs/trainer/checkpoint.h); serve's export reads them through
// this, so that a damaged checkpoint is refused there as it is at a resume. Thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"

namespace marlaas::pipeline {

// The checksum state.json records for a checkpoint file's bytes.
uint64_t CheckpointChecksum(const std::string& bytes);

// <tenant_dir>/checkpoints/<the name LATEST holds>; when LATEST is missing or names no folder,
// the newest complete step-* folder (the one a trainer's load tries first). kNotFound when there
// is neither (no checkpoint yet); kCorrupt, naming LATEST, when it names no folder and there is
// none to fall back on.
Result<std::string> LatestCheckpointDir(const std::string& tenant_dir);

// The file `name` of the checkpoint folder `dir`, checked against dir/state.json: kCorrupt
// naming the file when it is missing from that record, truncated or altered, or naming
// state.json when that cannot be read as a checkpoint state.
Result<std::string> ReadCheckedCheckpointFile(const std::string& dir, const std::string& name);

}  // namespace marlaas::pipeline
