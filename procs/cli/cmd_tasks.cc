// `marlaas tasks`: the built-in tasks as JSONL, and JSONL files checked for import.
//   marlaas tasks --task T [--n N] [--seed S] [--difficulty D] [--held-out]
//     prints N examples ({"id","prompt","reference","metadata"} per line) of the stream a tenant
//     with that dataset seed trains on, or of its held-out stream (procs/common/task_source.h);
//     the output is a dataset a "custom" job can use.
//   marlaas tasks --check FILE
//     reads a JSONL dataset the way a custom tenant's does and names the first bad line.
#include <cstdio>
#include <fstream>

#include "procs/cli/cli.h"
#include "procs/common/task_source.h"
#include "proto/job_spec.h"
#include "tasks/task.h"

namespace marlaas::cli {

int RunTasks(const std::vector<std::string>& argv) {
  std::vector<std::string> args = argv;
  std::string task, check;
  long long n = 10, seed = 0, difficulty = 1;
  // The options that make examples, which --check (a file's) does not take.
  std::string making;
  for (const std::string& a : args) {
    for (const char* flag : {"--task", "--n", "--seed", "--difficulty", "--held-out"}) {
      if (making.empty() && (a == flag || a.rfind(std::string(flag) + "=", 0) == 0)) making = flag;
    }
  }
  TakeFlag(&args, "--task", &task);
  TakeFlag(&args, "--check", &check);
  if (!TakeInteger(&args, "tasks", "--n", 1, 10000000, &n) ||
      !TakeInteger(&args, "tasks", "--seed", 0, (1ll << 62), &seed) ||
      !TakeInteger(&args, "tasks", "--difficulty", 1, 5, &difficulty)) {
    return 2;
  }
  const bool held_out = TakeSwitch(&args, "--held-out");
  if (int rc = RejectRest("tasks", args)) return rc;
  if (!check.empty()) {
    if (!making.empty()) {
      std::fprintf(stderr,
                   "marlaas tasks: --check reads a file; %s is for making examples: give one or "
                   "the other\n",
                   making.c_str());
      return 2;
    }
    auto rows = pipeline::ReadDataset(check);
    if (!rows.ok()) {
      std::fprintf(stderr, "marlaas tasks: %s\n", rows.status().message().c_str());
      return 1;
    }
    const size_t examples = rows->size();
    std::printf("%s: %zu examples\n", check.c_str(), examples);
    // A custom tenant holds out its first dataset.eval_prompts rows (default 64, at least 1) and
    // needs more.
    if (examples < 2) {
      std::fprintf(stderr,
                   "marlaas tasks: %s: a custom job needs at least 2 rows (dataset.eval_prompts, "
                   "at least 1, are held out for evaluation; it trains on the rest)\n",
                   check.c_str());
      return 1;
    }
    if (examples <= 64) {
      std::printf(
          "note: a custom job needs more rows than its dataset.eval_prompts (default 64, "
          "the rows held out for evaluation): set it below %zu\n",
          examples);
    }
    return 0;
  }
  pb::JobSpec j;
  j.set_tenant("tasks");
  j.set_task(task);
  j.mutable_dataset()->set_seed(uint64_t(seed));
  j.mutable_dataset()->set_difficulty(uint32_t(difficulty));
  j.mutable_dataset()->set_eval_prompts(uint32_t(std::min<long long>(n, 100000)));
  ApplyJobSpecDefaults(&j);
  if (task.empty() || task == "custom" || !ValidateJobSpec(j).ok()) {
    std::fprintf(stderr,
                 "usage: marlaas tasks --task T [--n N] [--seed S] [--difficulty D] "
                 "[--held-out] | --check FILE\n  T: one of");
    for (const auto& t : tasks::BuiltinTaskNames()) std::fprintf(stderr, " %s", t.c_str());
    std::fprintf(stderr, "\n");
    return 2;
  }
  auto source = pipeline::TaskSource::ForJob(j);
  if (!source.ok()) {
    std::fprintf(stderr, "marlaas tasks: %s\n", source.status().message().c_str());
    return 1;
  }
  // The held-out stream is as long as its dataset.eval_prompts: no more to print (100000 lines
  // were printed for --n 100005, without a word).
  if (held_out && uint64_t(n) > (*source)->eval_count()) {
    std::fprintf(stderr, "marlaas tasks: --held-out has %llu examples at most; --n %lld is more\n",
                 (unsigned long long)(*source)->eval_count(), n);
    return 2;
  }
  for (long long i = 0; i < n; ++i) {
    const tasks::TaskExample e =
        held_out ? (*source)->Eval(uint64_t(i)) : (*source)->Train(uint64_t(i));
    std::printf("%s\n", tasks::ToJsonl(e).c_str());
  }
  return 0;
}

}  // namespace marlaas::cli
