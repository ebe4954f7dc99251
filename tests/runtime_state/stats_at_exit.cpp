// A C++ program whose statistics the runtime writes at exit (AUTOCASTGEN_STATS=FILE): run by
// write_faults_runtime.py under a file-size limit and on a full disk, where the exit handler's
// write used to end the process by SIGXFSZ and lose the file (issue 47).
#include <iostream>

#include "autocastgen/runtime/stats.h"

int main() {
  std::cout << "statistics at exit to '" << autocastgen::stats::env_path() << "'\n";  // the runtime is loaded
  return 0;
}
