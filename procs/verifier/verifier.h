// The verifier stage (DESIGN.md §1): consumes each rollout replica's ring (whole GRPO groups and
// tool calls), scores groups with each tenant's verifier and runs tool calls, on a pool of worker
// threads whose sandbox runs are child processes. Scored groups go to the trainer's ring, tool
// results back to the replica whose ring the call came on. A record is acknowledged only after
// its output is committed, so a killed verifier's successor redoes exactly the unfinished work
// (duplicates are dropped by id downstream). Outputs are committed as they finish (each tenant's
// scored groups in ring order, and its tool results in ring order), so one slow or hanging tenant
// verifier delays only its own tenant's groups: each tenant may occupy at most workers-1 workers
// (when there are two or more), and records committed behind a slow one do not stop the verifier
// from taking more. A group is verified with one
// call (tasks::Task::VerifyAll: python_functions scores it in one sandbox run); a custom command
// runs per completion, and after an infrastructure failure the rest of that group is not run.
// A group with a verifier failure is forwarded with `failure` set (never scored as wrong).
// Untrusted code (python_functions, custom verifiers, the python tool) is refused with a clear
// error when the host lacks a required isolation layer, unless --allow-weak-sandbox was given.
#pragma once

#include "base/status.h"
#include "procs/common/pipeline.h"

namespace marlaas::verifier {

Status RunVerifier(const pipeline::StageArgs& args);

}  // namespace marlaas::verifier
