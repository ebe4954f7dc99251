// A C++ program whose statistics the runtime writes at exit (AUTOCASTGEN_STATS=FILE): run by
// write_faults_runtime.py under a file-size limit and on a full disk, where the exit handler's
// write used to end the process by SIGXFSZ and lose the file (issue 47). With `--flush-forever
// FILE` it writes FILE over and over instead, for the test of writers killed mid-write.
#include <cstring>
#include <iostream>

#include "autocastgen/runtime/stats.h"

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "--flush-forever") == 0) {
    for (;;) (void)autocastgen::stats::flush(argv[2]);
  }
  std::cout << "statistics at exit to '" << autocastgen::stats::env_path() << "'\n";  // the runtime is loaded
  return 0;
}
