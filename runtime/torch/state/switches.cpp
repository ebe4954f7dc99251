// The drivers' switch word (autocastgen/runtime/switches.h; Note [one switch word]).
#include "autocastgen/runtime/switches.h"

namespace autocastgen::stats::detail {

std::atomic<uint32_t> g_active{0};

void set_switches(uint32_t mask, uint32_t bits) {
  uint32_t word = g_active.load(std::memory_order_relaxed);
  while (!g_active.compare_exchange_weak(word, (word & ~mask) | (bits & mask), std::memory_order_relaxed)) {
  }
}

}  // namespace autocastgen::stats::detail
