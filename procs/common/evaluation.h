// Held-out evaluation of a tenant: the mean reward of greedy completions on the first n examples
// of its held-out set (TaskSource::Eval), scored by the tenant's verifier. Tool calls are
// executed as in the pipeline (the completion stops at </tool>, the real result is appended,
// generation resumes; at most 2 tool turns). With an empty adapter_dir the base model alone is
// evaluated, which is exactly an untrained adapter (LoRA B starts at zero). No LibTorch here.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "proto/marlaas.pb.h"

namespace marlaas::pipeline {

struct EvalResult {
  double mean_reward = 0;
  int examples = 0;
  int verifier_errors = 0;  // examples the verifier could not score (counted as 0)
  std::vector<std::string> prompts, completions;
  std::vector<double> rewards;
};

// temperature 0: greedy (the reported metric); > 0: sampled with spec.sampling's seed, to see
// what the rollout sees.
Result<EvalResult> EvaluateHeldOut(const std::string& model_dir, const pb::JobSpec& spec,
                                   const std::string& adapter_dir, int n, float temperature = 0);

}  // namespace marlaas::pipeline
