// Runtime policies on real ops: a custom op defined with TORCH_LIBRARY in this test, and aten ops.
#include <dlfcn.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>
#include <gtest/gtest.h>
#include <torch/library.h>

#include <autocastgen/runtime/runtime_policy.h>
#include <autocastgen/runtime/state.h>
#include <autocastgen/torch/policy_call.h>

namespace {

// What the custom ops' CPU kernels saw last.
std::vector<at::ScalarType>& seen_dtypes() {
  static std::vector<at::ScalarType> seen;
  return seen;
}

at::Tensor probe(const at::Tensor& a, const at::Tensor& b) {
  seen_dtypes() = {a.scalar_type(), b.scalar_type()};
  return a.to(at::kFloat) + b.to(at::kFloat);
}

at::Tensor probe_list(at::TensorList tensors, const std::optional<at::Tensor>& extra) {
  seen_dtypes().clear();
  for (const at::Tensor& t : tensors) seen_dtypes().push_back(t.scalar_type());
  if (extra) seen_dtypes().push_back(extra->scalar_type());
  return tensors[0];
}

}  // namespace

TORCH_LIBRARY(acg_cpp_test, m) {
  m.def("probe(Tensor a, Tensor b) -> Tensor");
  m.def("probe_list(Tensor[] tensors, Tensor? extra=None) -> Tensor");
  m.def("probe_inplace_(Tensor(a!) self) -> Tensor(a!)");
}

TORCH_LIBRARY_IMPL(acg_cpp_test, CPU, m) {
  m.impl("probe", probe);
  m.impl("probe_list", probe_list);
}

namespace {

using autocastgen::AutocastScope;
using autocastgen::register_runtime_policy;

std::vector<at::ScalarType> call_probe(const at::Tensor& a, const at::Tensor& b) {
  static const auto op =
      c10::Dispatcher::singleton().findSchemaOrThrow("acg_cpp_test::probe", "").typed<at::Tensor(const at::Tensor&, const at::Tensor&)>();
  (void)op.call(a, b);
  return seen_dtypes();
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  }
  return "";
}

bool has_kernel(const char* name, const char* overload, c10::DispatchKey key) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, overload).hasKernelForDispatchKey(key);
}

class RuntimePolicy : public ::testing::Test {
 protected:
  void TearDown() override { autocastgen::clear_runtime_policies(); }
  const at::Tensor x = at::randn({2, 2});
  const at::Tensor y = at::randn({2, 2});
};

TEST_F(RuntimePolicy, CastsACustomOpOnlyInsideAnEnabledScope) {
  register_runtime_policy("acg_cpp_test::probe", "lower_precision_fp", "cpu");
  EXPECT_EQ(call_probe(x, y), (std::vector{at::kFloat, at::kFloat})) << "no scope: untouched";
  {
    const AutocastScope scope(at::kCPU, at::kHalf);
    auto& trace = autocastgen::torch::wrapper_trace();
    const uint64_t before = trace.calls;
    EXPECT_EQ(call_probe(x, y), (std::vector{at::kHalf, at::kHalf}));
    EXPECT_EQ(trace.calls, before + 1);
    EXPECT_STREQ(trace.last_op, "acg_cpp_test::probe");
    const AutocastScope off(at::kCPU, AutocastScope::Options().disabled());
    EXPECT_EQ(call_probe(x, y), (std::vector{at::kFloat, at::kFloat})) << "disabled scope: untouched";
  }
}

TEST_F(RuntimePolicy, ReadsPyTorchsStateWhenNoScopeIsOpen) {
  register_runtime_policy("acg_cpp_test::probe", "lower_precision_fp", "cpu");
  at::autocast::set_autocast_enabled(at::kCPU, true);
  at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
  const std::vector<at::ScalarType> seen = call_probe(x, y);
  at::autocast::set_autocast_enabled(at::kCPU, false);
  at::autocast::clear_cache();
  EXPECT_EQ(seen, (std::vector{at::kBFloat16, at::kBFloat16}));
}

TEST_F(RuntimePolicy, Fp32AndPromote) {
  const at::Tensor low = x.to(at::kBFloat16);
  const AutocastScope scope(at::kCPU);
  register_runtime_policy("acg_cpp_test::probe", "fp32", "cpu");
  EXPECT_EQ(call_probe(low, low), (std::vector{at::kFloat, at::kFloat}));
  register_runtime_policy("acg_cpp_test::probe", "promote", "cpu");
  EXPECT_EQ(call_probe(low, low), (std::vector{at::kBFloat16, at::kBFloat16}));
  EXPECT_EQ(call_probe(low, x), (std::vector{at::kFloat, at::kFloat}));
  EXPECT_EQ(call_probe(low, x.to(at::kDouble)), (std::vector{at::kBFloat16, at::kDouble})) << "float64 takes no part";
}

TEST_F(RuntimePolicy, CastsTensorListsAndOptionalTensors) {
  register_runtime_policy("acg_cpp_test::probe_list", "lower_precision_fp", "cpu");
  const AutocastScope scope(at::kCPU);
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("acg_cpp_test::probe_list", "")
                             .typed<at::Tensor(at::TensorList, const std::optional<at::Tensor>&)>();
  (void)op.call({x, y, at::arange(3)}, x);
  EXPECT_EQ(seen_dtypes(), (std::vector{at::kBFloat16, at::kBFloat16, at::kLong, at::kBFloat16}));
}

TEST_F(RuntimePolicy, SetOptDtypeAndAppendDtypeOnAtenOps) {
  const at::Tensor low = x.to(at::kBFloat16);
  const AutocastScope scope(at::kCPU);
  register_runtime_policy("aten::sum", "fp32_set_opt_dtype", "cpu");
  EXPECT_EQ(at::sum(low).scalar_type(), at::kFloat);
  EXPECT_EQ(at::sum(low, at::kDouble).scalar_type(), at::kDouble) << "a dtype the caller set stays";
  register_runtime_policy("aten::norm.Scalar", "fp32_append_dtype", "cpu");
  const at::Tensor n = at::norm(low, 2);
  EXPECT_EQ(n.scalar_type(), at::kFloat);
  EXPECT_TRUE(n.equal(at::norm(low, 2, at::kFloat)));
}

TEST_F(RuntimePolicy, BannedRaisesTheMessageAsWritten) {
  register_runtime_policy("acg_cpp_test::probe", "banned", "cpu", "probe is unsafe to autocast; use probe_list");
  EXPECT_EQ(call_probe(x, y), (std::vector{at::kFloat, at::kFloat})) << "banned only under autocast";
  const AutocastScope scope(at::kCPU);
  const std::string error = error_of([&] { call_probe(x, y); });
  EXPECT_EQ(error.rfind("probe is unsafe to autocast; use probe_list", 0), 0u) << error;
}

// Issue 19, finding 5: one rule for banned, the policy files' (with their wording).
TEST_F(RuntimePolicy, BannedNeedsAMessageAndOnlyBannedTakesOne) {
  std::string error = error_of([&] { register_runtime_policy("acg_cpp_test::probe", "banned", "cpu"); });
  EXPECT_NE(error.find("error: banned op 'acg_cpp_test::probe' needs a message for its users"), std::string::npos) << error;
  EXPECT_NE(error.find("note: pass the message as the fourth argument"), std::string::npos) << error;
  error = error_of([&] { register_runtime_policy("acg_cpp_test::probe", "fp32", "cpu", "why"); });
  EXPECT_NE(error.find("error: 'message:' is only meaningful in banned, not in fp32"), std::string::npos) << error;
  EXPECT_FALSE(has_kernel("acg_cpp_test::probe", "", c10::DispatchKey::AutocastCPU));
}

// Issue 19, finding 4: a message is raised exactly as given; control characters are refused.
TEST_F(RuntimePolicy, BannedMessagesAreTextAsWritten) {
  const std::string message = "quotes \" ' \\ */ R\"( {} %s\nsecond line\tand a tab";
  register_runtime_policy("acg_cpp_test::probe", "banned", "cpu", message);
  {
    const AutocastScope scope(at::kCPU);
    const std::string error = error_of([&] { call_probe(x, y); });
    EXPECT_EQ(error.rfind(message, 0), 0u) << error;
  }
  autocastgen::clear_runtime_policies();
  for (const auto& [bad, wording] : {std::pair{std::string("cut\0here", 8), "holds a NUL byte"},
                                     std::pair{std::string("bell\a"), "holds control character U+0007"},
                                     std::pair{std::string("cr\r"), "holds control character U+000D"}}) {
    const std::string error = error_of([&] { register_runtime_policy("acg_cpp_test::probe", "banned", "cpu", bad); });
    EXPECT_NE(error.find(std::string("error: 'message:' ") + wording), std::string::npos) << error;
  }
  EXPECT_FALSE(has_kernel("acg_cpp_test::probe", "", c10::DispatchKey::AutocastCPU));
  const std::string error = error_of([&] { register_runtime_policy("acg_cpp_test::probe", "banned", "cpu", std::string("\xff\xfe")); });
  EXPECT_NE(error.find("error: an argument is not UTF-8 text"), std::string::npos) << error;
}

TEST_F(RuntimePolicy, ReplacesPyTorchsKernelAndClearingRestoresIt) {
  const AutocastScope scope(at::kCPU);
  EXPECT_EQ(at::mm(x, y).scalar_type(), at::kBFloat16) << "PyTorch's own AutocastCPU kernel for mm";
  register_runtime_policy("aten::mm", "fp32", "cpu");
  EXPECT_EQ(at::mm(x.to(at::kBFloat16), y).scalar_type(), at::kFloat);
  autocastgen::clear_runtime_policies();
  EXPECT_EQ(at::mm(x, y).scalar_type(), at::kBFloat16);
}

TEST_F(RuntimePolicy, ErrorsAreTheCLIsAndRegisterNothing) {
  const struct {
    const char* op;
    const char* policy;
    const char* device;
    const char* message;
  } cases[] = {
      {"aten::mmm", "fp32", "cpu", "error: unknown op 'aten::mmm'; did you mean 'aten::"},
      {"acg_cpp_test::prob", "fp32", "cpu", "error: unknown op 'acg_cpp_test::prob'; did you mean 'acg_cpp_test::probe'?"},
      {"acg_cpp_test::probe_inplace_", "fp32", "cpu", "error: 'acg_cpp_test::probe_inplace_' cannot autocast"},
      {"aten::add_.Tensor", "fp32", "cpu", "error: 'aten::add_.Tensor' cannot autocast"},
      {"aten::add.Tensorr", "fp32", "cpu", "error: unknown overload 'aten::add.Tensorr'"},
      {"acg_cpp_test::probe", "fp33", "cpu", "fp33"},
      {"acg_cpp_test::probe", "fp32", "cpux", "error: unknown device 'cpux'"},
      {"aten::mm", "fp32_set_opt_dtype", "cpu", "error: fp32_set_opt_dtype needs an argument 'ScalarType? dtype'"},
      {"acg_cpp_test::probe", "fp32\"\n  banned: [x]", "cpu", "error:"},
  };
  for (const auto& c : cases) {
    const std::string error = error_of([&] { register_runtime_policy(c.op, c.policy, c.device); });
    EXPECT_NE(error.find(c.message), std::string::npos) << c.op << " / " << c.policy << " / " << c.device << ":\n" << error;
  }
  EXPECT_FALSE(has_kernel("acg_cpp_test::probe", "", c10::DispatchKey::AutocastCPU));
  const AutocastScope scope(at::kCPU);
  EXPECT_EQ(call_probe(x, y), (std::vector{at::kFloat, at::kFloat}));
}

TEST_F(RuntimePolicy, LoadsAPolicyFile) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "autocastgen_runtime_policy_test";
  std::filesystem::create_directories(dir);
  const std::filesystem::path good = dir / "good.yaml";
  std::ofstream(good) << "autocast:\n  device: cpu\nlists:\n  lower_precision_fp: [acg_cpp_test::probe]\n"
                         "  fp32: [acg_cpp_test::probe_list]\n";
  EXPECT_EQ(autocastgen::load_runtime_policy_file(good.string()), 2u);
  {
    const AutocastScope scope(at::kCPU);
    EXPECT_EQ(call_probe(x, y), (std::vector{at::kBFloat16, at::kBFloat16}));
  }
  autocastgen::clear_runtime_policies();

  const std::filesystem::path bad = dir / "bad.yaml";
  std::ofstream(bad) << "autocast:\n  device: cpu\nlists:\n  lower_precision_fp: [acg_cpp_test::probe]\n"
                        "  fp32: [acg_cpp_test::nope]\n";
  const std::string error = error_of([&] { (void)autocastgen::load_runtime_policy_file(bad.string()); });
  EXPECT_NE(error.find(bad.string() + ":5:10: error: unknown op 'acg_cpp_test::nope'"), std::string::npos) << error;
  EXPECT_FALSE(has_kernel("acg_cpp_test::probe", "", c10::DispatchKey::AutocastCPU)) << "a bad file registers nothing";
  std::filesystem::remove_all(dir);
}

// Policy text: named as given, its own relative `extends:` read from the folder given with it.
TEST_F(RuntimePolicy, LoadsPolicyTextWithItsBaseFolder) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "autocastgen_runtime_policy_text_test";
  std::filesystem::create_directories(dir / "bases");
  std::ofstream(dir / "bases" / "base.yaml") << "autocast:\n  device: cpu\nlists:\n  fp32: [acg_cpp_test::probe_list]\n";
  std::ofstream(dir / "bases" / "bad.yaml") << "autocast:\n  device: cpu\nlists:\n  fp32: [acg_cpp_test::nope]\n";
  const std::string text = "extends: base.yaml\nlists:\n  lower_precision_fp: [acg_cpp_test::probe]\n";
  EXPECT_EQ(autocastgen::load_runtime_policy_text(text, "my policy", (dir / "bases").string()), 2u);
  {
    const AutocastScope scope(at::kCPU);
    EXPECT_EQ(call_probe(x, y), (std::vector{at::kBFloat16, at::kBFloat16}));
  }
  autocastgen::clear_runtime_policies();
  // An error in the text is located in it by its name; one in a base, in the base's file.
  std::string error = error_of([&] {
    (void)autocastgen::load_runtime_policy_text("extends: base.yaml\nlists:\n  fp32: [acg_cpp_test::nope]\n", "my policy",
                                                (dir / "bases").string());
  });
  EXPECT_NE(error.find("\nmy policy:3:10: error: unknown op 'acg_cpp_test::nope'"), std::string::npos) << error;
  error = error_of([&] { (void)autocastgen::load_runtime_policy_text("extends: bad.yaml\n", "my policy", (dir / "bases").string()); });
  EXPECT_NE(error.find("\n" + (dir / "bases" / "bad.yaml").string() + ":4:10: error: unknown op 'acg_cpp_test::nope'"),
            std::string::npos) << error;
  error = error_of([&] { (void)autocastgen::load_runtime_policy_text("extends: base.yaml\n", "two\nlines", dir.string()); });
  EXPECT_NE(error.find("the name must be one line"), std::string::npos) << error;
  EXPECT_FALSE(has_kernel("acg_cpp_test::probe", "", c10::DispatchKey::AutocastCPU)) << "bad text registers nothing";
  std::filesystem::remove_all(dir);
}

// Warnings raised while it lives (TORCH_WARN), instead of printing them.
class CapturedWarnings : public c10::WarningHandler {
 public:
  CapturedWarnings() : guard_(this) {}
  void process(const c10::Warning& warning) override { messages.push_back(warning.msg()); }
  std::vector<std::string> messages;

 private:
  c10::WarningUtils::WarningHandlerGuard guard_;
};

// The shipped cpu policy's generated library is loaded; a runtime policy replaces its wrapper for
// one op (quietly: Note [quiet by default] in insight/log.h), and clearing the runtime policy brings
// the wrapper back.
TEST_F(RuntimePolicy, ReplacesAGeneratedWrapperQuietly) {
#ifndef AUTOCASTGEN_CPU_LIBRARY
  GTEST_SKIP() << "this build has no generated cpu library (sanitizer presets build the runtime only)";
#else
  ASSERT_NE(dlopen(AUTOCASTGEN_CPU_LIBRARY, RTLD_NOW | RTLD_GLOBAL), nullptr) << dlerror();
  at::autocast::set_autocast_enabled(at::kCPU, true);
  auto& trace = autocastgen::torch::wrapper_trace();
  EXPECT_EQ(at::mm(x, y).scalar_type(), at::kBFloat16);
  EXPECT_STREQ(trace.last_op, "aten::mm") << "the generated wrapper ran";
  trace.last_op = nullptr;
  {
    CapturedWarnings warnings;
    register_runtime_policy("aten::mm", "fp32", "cpu");
    register_runtime_policy("aten::mm", "lower_precision_fp", "cpu");
    register_runtime_policy("aten::mm", "fp32", "cpu");
    size_t ours = 0;
    for (const std::string& message : warnings.messages)
      if (message.find("autocastgen") != std::string::npos) ++ours;
    EXPECT_EQ(ours, 0u) << "replacing a kernel is what loading a policy is for: no warning";
  }
  EXPECT_EQ(at::mm(x.to(at::kBFloat16), y).scalar_type(), at::kFloat);
  EXPECT_STREQ(trace.last_op, "aten::mm") << "the runtime-policy kernel ran";
  autocastgen::clear_runtime_policies();
  EXPECT_EQ(at::mm(x, y).scalar_type(), at::kBFloat16) << "the generated wrapper is back";
  at::autocast::set_autocast_enabled(at::kCPU, false);
  at::autocast::clear_cache();
#endif
}

}  // namespace
