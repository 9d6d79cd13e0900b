// Which GPUs a stage process sees. launch/marlaas-node assigns GPUs per role and passes them to
// serve as MARLAAS_TRAINER_GPUS, MARLAAS_ROLLOUT_GPUS and MARLAAS_VERIFIER_GPUS (comma-separated
// device indices or UUIDs, as CUDA_VISIBLE_DEVICES takes them; empty: no GPU). serve sets the
// stage's CUDA_VISIBLE_DEVICES from its role's variable when it spawns it; a role without one
// inherits serve's own. Pure functions of the environment; thread-safe.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

namespace marlaas::serve {

// "MARLAAS_TRAINER_GPUS" for role "trainer".
std::string StageGpusVariable(const std::string& role);
// The CUDA_VISIBLE_DEVICES value for a `role` stage, or nullopt to inherit. kInvalidArgument,
// naming the variable, for a value that is not a comma-separated list of indices or GPU UUIDs.
Result<std::optional<std::string>> StageVisibleDevices(const std::string& role);
// The CUDA_VISIBLE_DEVICES value for rollout replica `replica` of `replicas`: with one replica,
// the rollout's (StageVisibleDevices); with several and MARLAAS_ROLLOUT_GPUS listing k GPUs,
// replica r sees the list's GPU r % k alone (more replicas than GPUs share them); nullopt (no
// list): inherit serve's.
Result<std::optional<std::string>> ReplicaVisibleDevices(int replica, int replicas);
// For each of the `replicas` rollout replicas: whether it sees other GPUs than the trainer (then,
// on GPUs, the trainer broadcasts adapters to it over NCCL: procs/trainer/adapter_fanout.h).
Result<std::vector<bool>> ReplicasOffTrainerGpus(int replicas);
// Whether the trainer and every one of the `replicas` rollout replicas see the same GPUs (all
// inherit, or all are given the same list): then adapters cross between them by CUDA IPC
// instead of through host memory.
Result<bool> TrainerAndRolloutShareGpus(int replicas = 1);

}  // namespace marlaas::serve
