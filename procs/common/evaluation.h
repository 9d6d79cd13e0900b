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

struct EvalJob {
  pb::JobSpec spec;
  std::string adapter_dir;  // "" for the base (an untrained adapter)
};

// EvaluateHeldOut (greedy, each job's dataset.eval_prompts examples) for every job, `workers` at
// a time on threads of their own, each with its own model and generator: results in the jobs'
// order, each exactly what EvaluateHeldOut gives alone. A job's failure is its own result. With
// more than one worker the process computes on one thread per worker while it runs (OpenBLAS's
// pthread pool deadlocks when called from two threads); the setting is put back after.
// Sandboxed verifiers (python_functions) spend most of an evaluation in child processes, so on
// two cores two workers halve the time.
std::vector<Result<EvalResult>> EvaluateHeldOutAll(const std::string& model_dir,
                                                   const std::vector<EvalJob>& jobs, int workers);

}  // namespace marlaas::pipeline
