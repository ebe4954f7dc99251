// Registrations the importer rejects: an unknown op, the same op twice, an op of another namespace.
// The CPU (not autocast) block is ignored, unknown op and all.
#include <torch/library.h>

namespace {

at::Tensor banned(const at::Tensor&) { TORCH_CHECK(false, "not under autocast"); }

}  // namespace

TORCH_LIBRARY_IMPL(aten, AutocastCPU, m) {
  m.impl("relux", TORCH_FN(banned));
  m.impl("relu", TORCH_FN(banned));
  m.impl("aten::relu", &banned);
  m.impl("prims::relu", &banned);
}

TORCH_LIBRARY_IMPL(aten, CPU, m) {
  m.impl("not_an_op", TORCH_FN(banned));
}
