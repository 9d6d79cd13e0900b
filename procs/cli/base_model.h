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

}  // namespace marlaas::cli
