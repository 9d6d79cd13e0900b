// A tenant's step log, <tenant dir>/steps.jsonl: one JSON line per training step, appended by the
// trainer after the step ({"step": N, ...}). A trainer that dies between checkpoints has logged
// steps that its successor resumes behind and trains again; TrimStepsLog, called when the tenant
// resumes, keeps the log one line per step of the tenant's history. Trainer thread only.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"

namespace marlaas::trainer {

struct TrimmedSteps {
  size_t moved = 0;  // lines taken out of steps.jsonl
};

// Keeps the lines of `tenant_dir`/steps.jsonl whose "step" is at most `steps` (the resumed
// checkpoint's), in their order, and moves the others — steps lost with the trainer that logged
// them, and a line the crash left torn or otherwise unreadable — to the end of steps.lost.jsonl
// beside it, so nothing is thrown away. steps.jsonl is replaced atomically, and only when a line
// moves. No log: nothing to do. A read or write error is returned naming the file; steps.jsonl is
// then left as it was.
Result<TrimmedSteps> TrimStepsLog(const std::string& tenant_dir, uint64_t steps);

}  // namespace marlaas::trainer
