// The torch target's type mapping, one schema type per row, against the dispatcher's C++ types.
#include <gtest/gtest.h>

#include <sstream>

#include "emit/torch_signature.h"
#include "schema/parser.h"

namespace autocastgen::emit {
namespace {

// Parses `f(<type> x) -> <ret>` and maps the argument and return types.
struct Mapped {
  std::optional<std::string> argument;
  std::optional<std::string> returns;
};

Mapped map(const std::string& type, const std::string& ret = "Tensor", bool structured = false) {
  SourceManager sources;
  std::ostringstream out;
  DiagnosticEngine diags(sources, out);
  const std::string text = "f(" + type + " x) -> " + ret;
  const uint32_t file = sources.add_buffer("t", text);
  auto schema = schema::parse_function_schema(text, {{file, 0}, true}, diags);
  EXPECT_TRUE(schema) << out.str();
  const model::Argument& arg = schema->arguments()[0];
  return {torch_argument_type(arg.type, arg.is_write(), structured), torch_return_type(schema->returns())};
}

TEST(TypeMapping, Arguments) {
  const std::pair<const char*, const char*> rows[] = {
      {"Tensor", "const at::Tensor&"},
      {"Tensor(a!)", "at::Tensor&"},
      {"Tensor?", "const ::std::optional<at::Tensor>&"},
      {"Tensor[]", "at::TensorList"},
      {"Tensor?[]", "const c10::List<::std::optional<at::Tensor>>&"},
      {"int", "int64_t"},
      {"int?", "::std::optional<int64_t>"},
      {"int[]", "at::IntArrayRef"},
      {"int[2]", "at::IntArrayRef"},
      {"int[1]?", "at::OptionalIntArrayRef"},
      {"SymInt", "c10::SymInt"},
      {"SymInt?", "::std::optional<c10::SymInt>"},
      {"SymInt[]", "c10::SymIntArrayRef"},
      {"SymInt[]?", "at::OptionalSymIntArrayRef"},
      {"float", "double"},
      {"float?", "::std::optional<double>"},
      {"float[]", "at::ArrayRef<double>"},
      {"float[]?", "::std::optional<at::ArrayRef<double>>"},
      {"bool", "bool"},
      {"bool?", "::std::optional<bool>"},
      {"bool[3]", "::std::array<bool,3>"},
      {"str", "c10::string_view"},
      {"str?", "::std::optional<c10::string_view>"},
      {"Scalar", "const at::Scalar&"},
      {"Scalar?", "const ::std::optional<at::Scalar>&"},
      {"Scalar[]", "at::ArrayRef<at::Scalar>"},
      {"ScalarType", "at::ScalarType"},
      {"ScalarType?", "::std::optional<at::ScalarType>"},
      {"Layout?", "::std::optional<at::Layout>"},
      {"Device?", "::std::optional<at::Device>"},
      {"MemoryFormat?", "::std::optional<at::MemoryFormat>"},
      {"Generator?", "::std::optional<at::Generator>"},
      {"Storage", "at::Storage"},
      {"Stream", "at::Stream"},
      {"DeviceIndex", "at::DeviceIndex"},
      {"SymBool", "c10::SymBool"},
      {"Dimname", "at::Dimname"},
      {"Dimname[]", "at::DimnameList"},
      {"Dimname?", "::std::optional<at::Dimname>"},
      {"Dimname[]?", "::std::optional<at::DimnameList>"},
  };
  for (const auto& [type, cpp] : rows) EXPECT_EQ(map(type).argument, std::optional<std::string>(cpp)) << type;
  EXPECT_EQ(map("Tensor[]", "Tensor", /*structured=*/true).argument, "const at::ITensorListRef&");
  EXPECT_EQ(map("GraphModule").argument, std::nullopt);
  EXPECT_EQ(map("__torch__.torch.classes.ns.Cls").argument, std::nullopt);
}

TEST(TypeMapping, Returns) {
  EXPECT_EQ(map("Tensor", "Tensor").returns, "at::Tensor");
  EXPECT_EQ(map("Tensor", "()").returns, "void");
  EXPECT_EQ(map("Tensor", "(Tensor, Tensor)").returns, "::std::tuple<at::Tensor,at::Tensor>");
  EXPECT_EQ(map("Tensor", "(Tensor values, Tensor indices)").returns, "::std::tuple<at::Tensor,at::Tensor>");
  EXPECT_EQ(map("Tensor", "Tensor[]").returns, "::std::vector<at::Tensor>");
  EXPECT_EQ(map("Tensor", "Tensor(a)").returns, "at::Tensor");
  EXPECT_EQ(map("Tensor", "Scalar").returns, "at::Scalar");
  EXPECT_EQ(map("Tensor", "int[]").returns, "::std::vector<int64_t>");
  EXPECT_EQ(map("Tensor", "SymInt").returns, "c10::SymInt");
  EXPECT_EQ(map("Tensor", "(Tensor, Tensor, float, int)").returns, "::std::tuple<at::Tensor,at::Tensor,double,int64_t>");
  EXPECT_EQ(map("Tensor", "int[2]").returns, std::nullopt);
}

TEST(TypeMapping, Names) {
  auto name = [](std::string n, std::string overload = "") { return model::OperatorName{"", n, overload, {}, {}}; };
  EXPECT_EQ(torch_unambiguous_name(name("conv_transpose2d", "input")), "conv_transpose2d_input");
  EXPECT_EQ(torch_unambiguous_name(name("mm")), "mm");
  EXPECT_EQ(torch_unambiguous_name(name("__and__", "Tensor")), "__and___Tensor");
  EXPECT_EQ(torch_ops_header(name("mm")), "ATen/ops/mm_ops.h");
  EXPECT_EQ(torch_ops_header(name("add_", "Tensor")), "ATen/ops/add_ops.h");
  EXPECT_EQ(torch_ops_header(name("__and__", "Tensor")), "ATen/ops/and_ops.h");
  EXPECT_EQ(torch_ops_header(name("__iand__", "Tensor")), "ATen/ops/and_ops.h");
  EXPECT_EQ(torch_ops_header(name("_native_batch_norm_legit_functional")), "ATen/ops/_native_batch_norm_legit_ops.h");
  EXPECT_EQ(torch_device_type("privateuseone"), "PrivateUse1");
  EXPECT_EQ(torch_device_type("cuda"), "CUDA");
}

}  // namespace
}  // namespace autocastgen::emit
