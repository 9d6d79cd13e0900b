// marlaas-verifier: the verifier stage process (procs/verifier/verifier.h). serve starts it.
#include "procs/common/pipeline.h"
#include "procs/verifier/verifier.h"

int main(int argc, char** argv) {
  return marlaas::pipeline::StageMain(argc, argv, "verifier", marlaas::verifier::RunVerifier);
}
