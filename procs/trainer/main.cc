// marlaas-trainer: the trainer stage process (procs/trainer/trainer.h). serve starts it.
#include "procs/common/pipeline.h"
#include "procs/trainer/trainer.h"

int main(int argc, char** argv) {
  return marlaas::pipeline::StageMain(argc, argv, "trainer", marlaas::trainer::RunTrainer);
}
