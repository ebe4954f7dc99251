// An autocast block that registers nothing yet, its key from the command line
// (-- -DBACKEND_AUTOCAST_KEY=AutocastXPU): an empty policy, with a note naming the block.
#include <torch/library.h>

#ifndef BACKEND_AUTOCAST_KEY
#error "compile with -DBACKEND_AUTOCAST_KEY=<an autocast dispatch key>"
#endif

TORCH_LIBRARY_IMPL(aten, BACKEND_AUTOCAST_KEY, m) {
  // The list comes later.
}
