// SchemaKind classification (torchgen's rules), in-place names, and the autocast eligibility rule.
#include <gtest/gtest.h>

#include "model/schema_set.h"
#include "schema_test_util.h"

namespace autocastgen {
namespace {

using model::SchemaKind;
using testing_support::parse_schema;

SchemaKind kind_of(const std::string& text) {
  const auto parsed = parse_schema(text);
  if (!parsed.schema) {
    ADD_FAILURE() << text << "\n" << parsed.diagnostics;
    return SchemaKind::functional;
  }
  return parsed.schema->kind();
}

TEST(SchemaKind, Table) {
  struct Case { const char* schema; SchemaKind kind; };
  const Case cases[] = {
      {"add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor", SchemaKind::functional},
      {"add_.Tensor(Tensor(a!) self, Tensor other, *, Scalar alpha=1) -> Tensor(a!)", SchemaKind::inplace},
      {"add.out(Tensor self, Tensor other, *, Scalar alpha=1, Tensor(a!) out) -> Tensor(a!)", SchemaKind::out},
      {"max.dim_max(Tensor self, int dim, bool keepdim=False, *, Tensor(a!) max, Tensor(b!) max_values) -> "
       "(Tensor(a!) max, Tensor(b!) max_values)",
       SchemaKind::out},
      // A written positional argument after self: mutable.
      {"_fused_moving_avg_obs_fq_helper(Tensor self, Tensor observer_on, Tensor(a!) running_min) -> (Tensor, Tensor)",
       SchemaKind::mutable_},
      // Without self every positional argument counts.
      {"_amp_foreach_non_finite_check_and_unscale_(Tensor(a!)[] self, Tensor(b!) found_inf, Tensor inv_scale) -> ()",
       SchemaKind::inplace},
      {"_foreach_thing(Tensor(a!)[] grads, Tensor found_inf) -> ()", SchemaKind::mutable_},
      // A written self alone is not mutable (only arguments after self count).
      {"resize_as_sparse(Tensor(a!) self, Tensor src) -> Tensor(a!)", SchemaKind::functional},
      // Scratch: an out argument named _scratch_*.
      {"_foo.out(Tensor self, *, Tensor(a!) out, Tensor(b!) _scratch_buffer) -> Tensor(a!)", SchemaKind::scratch},
      // Out and in-place names win over a written positional argument.
      {"_bar.out(Tensor self, Tensor(c!) state, *, Tensor(a!) out) -> Tensor(a!)", SchemaKind::out},
      {"_bar_(Tensor(a!) self, Tensor(c!) state) -> Tensor(a!)", SchemaKind::inplace},
      // Any written keyword-only argument makes an out overload, whatever its name.
      {"f(Tensor self, *, Tensor(a!) result) -> Tensor(a!)", SchemaKind::out},
      // A keyword-only argument that is not written is no out argument.
      {"f(Tensor self, *, Tensor(a) view) -> Tensor(a)", SchemaKind::functional},
      // Dunders: augmented assignment is in-place, the plain operator is not.
      {"__iand__.Tensor(Tensor(a!) self, Tensor other) -> Tensor(a!)", SchemaKind::inplace},
      {"__and__.Tensor(Tensor self, Tensor other) -> Tensor", SchemaKind::functional},
      {"__ilshift__.Scalar(Tensor(a!) self, Scalar other) -> Tensor(a!)", SchemaKind::inplace},
      {"__irshift__.Scalar(Tensor(a!) self, Scalar other) -> Tensor(a!)", SchemaKind::inplace},
      {"__ior__.Tensor(Tensor(a!) self, Tensor other) -> Tensor(a!)", SchemaKind::inplace},
      {"__ixor__.Tensor(Tensor(a!) self, Tensor other) -> Tensor(a!)", SchemaKind::inplace},
      {"__rshift__.Scalar(Tensor self, Scalar other) -> Tensor", SchemaKind::functional},
      {"__imatmul__(Tensor(a!) self, Tensor other) -> Tensor(a!)", SchemaKind::functional},  // not augmented
      {"ns::__isub__(Tensor(a!) self, Tensor other) -> Tensor(a!)", SchemaKind::inplace},
      // `__foo_bar__` is no dunder (torchgen: `__([^_]+)__`), so its trailing '_' makes it in-place.
      {"__foo_bar__(Tensor(a!) self) -> Tensor(a!)", SchemaKind::inplace},
      {"_____(Tensor(a!) self) -> Tensor(a!)", SchemaKind::inplace},
      {"relu_(Tensor(a!) self) -> Tensor(a!)", SchemaKind::inplace},
      {"_relu(Tensor self) -> Tensor", SchemaKind::functional},
  };
  for (const Case& c : cases) EXPECT_EQ(kind_of(c.schema), c.kind) << c.schema;
}

TEST(SchemaKind, Spellings) {
  EXPECT_EQ(model::spelling(SchemaKind::functional), "functional");
  EXPECT_EQ(model::spelling(SchemaKind::inplace), "inplace");
  EXPECT_EQ(model::spelling(SchemaKind::out), "out");
  EXPECT_EQ(model::spelling(SchemaKind::mutable_), "mutable");
  EXPECT_EQ(model::spelling(SchemaKind::scratch), "scratch");
}

TEST(OperatorName, InplaceByName) {
  auto name = [](std::string n) {
    model::OperatorName op;
    op.name = std::move(n);
    return op;
  };
  EXPECT_TRUE(name("add_").inplace());
  EXPECT_FALSE(name("add").inplace());
  EXPECT_FALSE(name("").inplace());
  EXPECT_TRUE(name("__iadd__").inplace());
  EXPECT_TRUE(name("__ipow__").inplace());
  EXPECT_FALSE(name("__add__").inplace());
  EXPECT_FALSE(name("__i__").inplace());
  EXPECT_TRUE(name("____").inplace());
}

TEST(Eligibility, OnlyFunctionalOverloadsWithTensorInputs) {
  struct Case { const char* schema; bool eligible; const char* reason; };
  const Case cases[] = {
      {"mm(Tensor self, Tensor mat2) -> Tensor", true, ""},
      {"cat(Tensor[] tensors, int dim=0) -> Tensor", true, ""},
      {"index.Tensor(Tensor self, Tensor?[] indices) -> Tensor", true, ""},
      {"f(Tensor? weight) -> Tensor", true, ""},
      // Named-tensor overloads (releases up to 2.12) are wrapped like any other.
      {"softmax.Dimname(Tensor self, Dimname dim, *, ScalarType? dtype=None) -> Tensor", true, ""},
      {"align_to(Tensor(a) self, Dimname[] names) -> Tensor(a)", true, ""},
      {"refine_names(Tensor(a) self, Dimname[]? names) -> Tensor(a)", true, ""},
      {"rename_(Tensor(a!) self, Dimname[]? names) -> Tensor(a!)", false,
       "it is an in-place overload; only functional overloads autocast"},
      {"relu_(Tensor(a!) self) -> Tensor(a!)", false, "it is an in-place overload; only functional overloads autocast"},
      {"mm.out(Tensor self, Tensor mat2, *, Tensor(a!) out) -> Tensor(a!)", false,
       "it is an out= overload; only functional overloads autocast"},
      {"_foo.out(Tensor self, *, Tensor(a!) out, Tensor(b!) _scratch_x) -> Tensor(a!)", false,
       "it is a scratch overload; only functional overloads autocast"},
      {"f(Tensor self, Tensor(a!) state) -> Tensor", false,
       "it is a mutable overload (it writes an argument); only functional overloads autocast"},
      {"arange(Scalar end, *, ScalarType? dtype=None) -> Tensor", false,
       "it has no Tensor-like input that could be floating point"},
      {"f(__torch__.torch.classes.ns.C c) -> Tensor", false, "it has no Tensor-like input that could be floating point"},
      {"f(Dimname[] names, *, ScalarType? dtype=None) -> Tensor", false,
       "it has no Tensor-like input that could be floating point"},
  };
  for (const Case& c : cases) {
    const auto parsed = parse_schema(c.schema);
    ASSERT_TRUE(parsed.schema) << parsed.diagnostics;
    std::string reason;
    EXPECT_EQ(model::is_autocast_eligible(*parsed.schema, &reason), c.eligible) << c.schema;
    EXPECT_EQ(reason, c.reason) << c.schema;
    EXPECT_EQ(model::is_autocast_eligible(*parsed.schema), c.eligible) << c.schema;
  }
}

}  // namespace
}  // namespace autocastgen
