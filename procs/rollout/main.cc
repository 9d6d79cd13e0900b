// marlaas-rollout: the rollout stage process (procs/rollout/rollout.h). serve starts it.
#include "procs/common/pipeline.h"
#include "procs/rollout/rollout.h"

int main(int argc, char** argv) {
  return marlaas::pipeline::StageMain(argc, argv, "rollout", marlaas::rollout::RunRollout);
}
