// The device-neutral autocast lists of one PyTorch release, as registrations for `autocastgen import`.
//
// ATen/autocast_mode.h carries these lists as X-macros (AT_FORALL_LOWER_PRECISION_FP, ...) so that
// every accelerator can register the same ones.  Compiled against a release's own headers
// (-I <release>/include), this file registers each list with its cast policy on
// AutocastPrivateUse1, through the KERNEL_PRIVATEUSEONE helpers of that same header; importing it
// gives the release's list as policy YAML, which check_release.py compares with generic.yaml
// resolved for that release.  The banned binary_cross_entropy is not part of the header's lists
// (each key registers it in autocast_mode.cpp), so it is not registered here.
#include <ATen/autocast_mode.h>
#include <torch/library.h>

// Refuse headers of another release than the one asked for (-DACG_EXPECT_MAJOR=2 -DACG_EXPECT_MINOR=4).
#if __has_include(<torch/headeronly/version.h>)
#include <torch/headeronly/version.h>
#else
#include <torch/version.h>
#endif
#if !defined(ACG_EXPECT_MAJOR) || !defined(ACG_EXPECT_MINOR)
#error "define ACG_EXPECT_MAJOR and ACG_EXPECT_MINOR: the release whose headers this must see"
#elif TORCH_VERSION_MAJOR != ACG_EXPECT_MAJOR || TORCH_VERSION_MINOR != ACG_EXPECT_MINOR
#error "these are the headers of another PyTorch release than ACG_EXPECT_MAJOR.ACG_EXPECT_MINOR"
#endif

namespace at::autocast {
namespace {

#define ACG_LOWER_PRECISION_FP(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define ACG_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
#define ACG_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
#define ACG_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)

void register_lists(torch::Library& m) {
  AT_FORALL_LOWER_PRECISION_FP(ACG_LOWER_PRECISION_FP)
  AT_FORALL_FP32(ACG_FP32)
  AT_FORALL_FP32_SET_OPT_DTYPE(ACG_FP32_SET_OPT_DTYPE)
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)
  AT_FORALL_PROMOTE(ACG_PROMOTE)
}

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
  register_lists(m);
}

} // namespace
} // namespace at::autocast
