// The arguments of a boxed call as one argument of the per-policy drivers (policy_call.h): the
// runtime-policy kernel runs the same drivers as generated wrappers, on the dispatcher's stack.
// Not installed.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>
#include <vector>

#include <ATen/core/stack.h>

#include "autocastgen/torch/policy_call.h"

namespace autocastgen::torch {

// How an argument of a schema takes part in casting.
enum class ArgKind { other, tensor, tensor_list, optional_tensor, optional_tensor_list };

// What an entry's `args:` makes of one argument (Note [precision rules] in
// core/policy/policy.h): follow the entry's list, or keep / fp32 / lower precision.
enum class ArgOverride : uint8_t { follow, keep, fp32, lower_precision };

// The op's arguments on the stack: stack[base + i] is argument i, of kind kinds[i].
struct BoxedArgs {
  c10::Stack* stack;
  size_t base;
  const std::vector<ArgKind>* kinds;
  std::optional<size_t> dtype_index;                    // fp32_set_opt_dtype: the `ScalarType? dtype` argument
  const std::vector<ArgOverride>* overrides = nullptr;  // one per argument; null: every one follows

  [[nodiscard]] c10::IValue& at(size_t i) const { return (*stack)[base + i]; }
  [[nodiscard]] size_t size() const { return kinds->size(); }
  [[nodiscard]] ArgOverride override_of(size_t i) const { return overrides ? (*overrides)[i] : ArgOverride::follow; }
};

// Casts every tensor argument on the stack, in place: to `to`, or as its override says.
template <typename S>
const BoxedArgs& cast_arg(const Call<S>& call, const BoxedArgs& args, at::ScalarType list_to) {
  for (size_t i = 0; i < args.size(); ++i) {
    c10::IValue& value = args.at(i);
    at::ScalarType to = list_to;
    switch (args.override_of(i)) {
      case ArgOverride::follow: break;
      case ArgOverride::keep: continue;
      case ArgOverride::fp32: to = at::kFloat; break;
      case ArgOverride::lower_precision: to = call.lower_precision(); break;
    }
    switch ((*args.kinds)[i]) {
      case ArgKind::other: break;
      case ArgKind::tensor:
      case ArgKind::optional_tensor:
        if (value.isTensor()) value = cast_arg(call, value.toTensor(), to);
        break;
      case ArgKind::tensor_list: {
        c10::List<at::Tensor> cast;
        for (const at::Tensor& t : value.toTensorList()) cast.push_back(cast_arg(call, t, to));
        value = std::move(cast);
        break;
      }
      case ArgKind::optional_tensor_list:
        value = cast_arg(call, value.toOptionalTensorList(), to);
        break;
    }
  }
  return args;
}

// Note [promote semantics]: Tensor and Tensor[] arguments take part.
template <typename S>
at::ScalarType promote_arg(const Call<S>& call, at::ScalarType current, const BoxedArgs& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    const c10::IValue& value = args.at(i);
    if (args.override_of(i) != ArgOverride::follow) continue;  // it has its own target
    if ((*args.kinds)[i] == ArgKind::tensor) current = call.promote(current, value.toTensor());
    if ((*args.kinds)[i] == ArgKind::tensor_list)
      for (const at::Tensor& t : value.toTensorList()) current = call.promote(current, t);
  }
  return current;
}

template <typename S>
bool first_eligible(const Call<S>& call, const BoxedArgs& args) {
  return args.size() != 0 && args.at(0).isTensor() && first_eligible(call, args.at(0).toTensor());
}

template <typename S>
const BoxedArgs& fill_dtype_arg(const Call<S>& call, const BoxedArgs& args, bool first_is_eligible) {
  c10::IValue& dtype = args.at(*args.dtype_index);
  const std::optional<at::ScalarType> unset;
  if (dtype.isNone()) {
    const std::optional<at::ScalarType> filled = fill_dtype_arg(call, opt_dtype(unset), first_is_eligible);
    if (filled) dtype = static_cast<int64_t>(*filled);
  } else {
    call.ran_in(dtype.toScalarType());  // as the typed step notes a dtype given by the caller
  }
  return args;
}

template <typename S>
at::ScalarType appended_dtype(const Call<S>& call, const BoxedArgs& args) {
  if (args.size() == 0 || !args.at(0).isTensor()) return at::kFloat;
  return appended_dtype(call, args.at(0).toTensor());
}

// fp8: the boxed arguments of linear, mm or addmm, the ops the fp8 list takes (policy.h, kFp8Ops).
inline std::optional<at::Tensor> fp8_gemm(const Fp8Call& call, const BoxedArgs& args) {
  const std::string_view op = call.site.op;
  if (op == "aten::linear")
    return fp8_gemm(call, args.at(0).toTensor(), args.at(1).toTensor(), args.at(2).toOptional<at::Tensor>());
  if (op == "aten::mm") return fp8_gemm(call, args.at(0).toTensor(), args.at(1).toTensor());
  if (op == "aten::addmm")
    return fp8_gemm(call, args.at(0).toTensor(), args.at(1).toTensor(), args.at(2).toTensor(), args.at(3).toScalar(),
                    args.at(4).toScalar());
  return std::nullopt;
}

// The fp8 GEMM's output replaces the op's arguments on the stack, as the op's own kernel would.
inline void fp8_result(at::Tensor out, const BoxedArgs& args) {
  args.stack->erase(args.stack->begin() + static_cast<std::ptrdiff_t>(args.base), args.stack->end());
  args.stack->emplace_back(std::move(out));
}

// What the watch and the range record see (add_observed in policy_call.h): the arguments, still
// on the stack before the call, and the results, what the call left on the stack from the
// arguments' base.
inline void add_observed(stats::Tensors& tensors, const BoxedArgs& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    const c10::IValue& value = args.at(i);
    if (value.isTensor()) tensors.add(value.toTensor());
    else if (value.isTensorList()) tensors.add(value.toTensorVector());
    else if ((*args.kinds)[i] == ArgKind::optional_tensor_list) tensors.add(value.toOptionalTensorList());
  }
}

inline void add_observed_results(stats::Tensors& tensors, const BoxedArgs& args) {
  const auto add_value = [&tensors](const c10::IValue& value, const auto& self) -> void {
    if (value.isTensor()) tensors.add(value.toTensor());
    else if (value.isTensorList()) tensors.add(value.toTensorVector());
    else if (value.isTuple())
      for (const c10::IValue& element : value.toTupleRef().elements()) self(element, self);
  };
  for (size_t i = args.base; i < args.stack->size(); ++i) add_value((*args.stack)[i], add_value);
}

}  // namespace autocastgen::torch
