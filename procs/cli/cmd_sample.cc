// `marlaas sample --task T [--model-dir DIR] [--adapter DIR] [--n N] [--temperature X]
// [--difficulty D] [--seed S] [--quiet]`: shows what a model (optionally with a tenant's adapter,
// e.g. a checkpoint folder) answers on held-out examples of a task, with each reward and the mean,
// the same way the demo evaluates (greedy unless --temperature is given; tools executed).
#include <cstdio>

#include "procs/cli/base_model.h"
#include "procs/cli/cli.h"
#include "procs/common/evaluation.h"
#include "proto/job_spec.h"

namespace marlaas::cli {

int RunSample(const std::vector<std::string>& argv) {
  std::vector<std::string> args = argv;
  std::string task, model_dir, adapter;
  TakeFlag(&args, "--task", &task);
  TakeFlag(&args, "--model-dir", &model_dir);
  TakeFlag(&args, "--adapter", &adapter);
  long long n = 8, difficulty = 1, seed = 0;
  double temperature = 0;  // greedy
  if (!TakeInteger(&args, "sample", "--n", 1, 100000, &n) ||
      !TakeNumber(&args, "sample", "--temperature", 0, 10, &temperature) ||
      !TakeInteger(&args, "sample", "--difficulty", 1, 5, &difficulty) ||
      !TakeInteger(&args, "sample", "--seed", 0, (1LL << 62), &seed))
    return 2;
  if (temperature != 0 && temperature < 0.01) {  // 1/T would be infinite below 3e-39
    std::fprintf(stderr,
                 "marlaas sample: --temperature %g is below 0.01 (0 samples greedily, the "
                 "most probable token)\n",
                 temperature);
    return 2;
  }
  const bool quiet = TakeSwitch(&args, "--quiet");
  if (int rc = RejectRest("sample", args)) return rc;
  if (task.empty()) {  // the job spec's check would say "field 'task': ''"
    std::fprintf(stderr, "marlaas sample: --task T is required (see `marlaas tasks --help`)\n");
    return 2;
  }
  pb::JobSpec j;
  j.set_tenant("sample");
  j.set_task(task);
  j.mutable_dataset()->set_difficulty(uint32_t(difficulty));
  j.mutable_dataset()->set_seed(uint64_t(seed));
  j.mutable_dataset()->set_eval_prompts(uint32_t(n));
  ApplyJobSpecDefaults(&j);
  if (Status st = ValidateJobSpec(j); !st.ok()) {
    std::fprintf(stderr, "marlaas sample: %s\n", st.message().c_str());
    return 2;
  }
  if (model_dir.empty()) {
    auto dir = EnsureTinyBase(DefaultStateDir(), nullptr, nullptr);
    if (!dir.ok()) {
      std::fprintf(stderr, "marlaas sample: %s\n", dir.status().message().c_str());
      return 1;
    }
    model_dir = *dir;
  }
  auto r = pipeline::EvaluateHeldOut(model_dir, j, adapter, int(j.dataset().eval_prompts()),
                                     float(temperature));
  if (!r.ok()) {
    std::fprintf(stderr, "marlaas sample: %s\n", r.status().message().c_str());
    return 1;
  }
  for (size_t i = 0; i < r->completions.size() && !quiet; ++i)
    std::printf("[%.2f] %s%s\n", r->rewards[i], r->prompts[i].c_str(), r->completions[i].c_str());
  std::printf("mean reward %.3f over %d examples (%d verifier errors)\n", r->mean_reward,
              r->examples, r->verifier_errors);
  return 0;
}

}  // namespace marlaas::cli
