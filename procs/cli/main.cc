// The `marlaas` command: wiring only; commands live in the marlaas_cli library.
#include "procs/cli/cli.h"

int main(int argc, char** argv) { return marlaas::cli::Main(argc, argv); }
