// What stats.cpp and watch.cpp share beyond the public headers. Not installed.
#pragma once

#include <string>

#include <c10/core/ScalarType.h>

namespace autocastgen::stats::detail {

// PyTorch-style dtype name (torch.bfloat16 -> "bfloat16"); "none" for Undefined.
std::string dtype_name(c10::ScalarType dtype);

// Forgets the first non-finite event and which ops have warned (reset()).
void reset_watch_events();

}  // namespace autocastgen::stats::detail
