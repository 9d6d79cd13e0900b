// `marlaas validate JOB.json`: the same parsing and checks that `submit` applies.
#include <cstdio>

#include "procs/cli/cli.h"
#include "proto/job_spec.h"

namespace marlaas::cli {

int RunValidate(const std::vector<std::string>& args) {
  if (int rc = RejectOptions("validate", args)) return rc;
  if (args.size() != 1) {
    std::fprintf(stderr, "usage: marlaas validate JOB.json\n");
    return 2;
  }
  auto spec = LoadUserJobSpec(args[0]);
  if (!spec.ok()) {
    std::fprintf(stderr, "marlaas validate: %s\n", spec.status().message().c_str());
    return 1;
  }
  std::printf("%s", JobSpecToJson(*spec).c_str());
  return 0;
}

}  // namespace marlaas::cli
