// Policies given while the program runs: a boxed kernel on the device's autocast key implements
// all six policies for any op, including ops defined at run time (docs/runtime.md).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <c10/macros/Export.h>

namespace autocastgen {

// Gives `op` (`ns::name` or `ns::name.overload`; a bare name means aten) the policy `policy`
// (lower_precision_fp, fp32, fp32_set_opt_dtype, fp32_append_dtype, promote, banned) on
// `device` (cpu, cuda, ...), with `message` for banned (and only for banned: the rule of policy
// files, with their wording; printable text, newlines and tabs allowed). Replaces what the op had on that autocast key (a generated wrapper,
// PyTorch's kernel or an earlier runtime policy; a replaced kernel is logged once). Throws
// c10::Error with the CLI's message for an unknown op, an ineligible overload or an unknown
// policy or device; nothing is registered then. The kernel reads autocastgen's state when an
// AutocastScope is on for the device, else PyTorch's at::autocast state (torch.autocast).
// Safe at any time from any thread, as is clear_runtime_policies: a call of the op in flight
// finishes with the policy it started with, a new call sees the old or the new one.
// `rule`, when given, is the entry's precision rule as a YAML flow mapping, as a list entry holds
// it beside `op:` (docs/policy-language.md): `{dtypes: [float16], unless: {reduction: none}}`.
TORCH_API void register_runtime_policy(std::string_view op, std::string_view policy, std::string_view device,
                                       std::string_view message = {}, std::string_view rule = {});

// Loads a policy file (the policy language of docs/policy-language.md, resolved against the ops
// registered now) and registers every entry as above. Throws c10::Error whose message holds the
// `file:line:col: error:` diagnostics; nothing is registered then. Returns the entries registered.
// `name`, when given, is what the locations kept for later messages (module patterns) call the
// file (the Python package loads a file in a folder whose name is not UTF-8 through a link).
TORCH_API size_t load_runtime_policy_file(const std::string& path, const std::string& name = {});

// The same for policy text (load_policy's YAML text): diagnostics and the places kept call it
// `name` (one line); its own relative `extends:` is read from the folder `base` (relative to the
// working directory; empty: the working directory itself).
TORCH_API size_t load_runtime_policy_text(const std::string& text, const std::string& name, const std::string& base);

// Drops every runtime policy this process registered (the kernels they replaced come back).
TORCH_API void clear_runtime_policies();

// Saves the runtime policies in force (each op's policy, the `modules:` sections, who loaded
// them); pop puts back the last saved set exactly, dropping what was registered since. Pushes
// nest. autocastgen.export(..., policy=P) loads P between the two (Note [a policy for one export]).
TORCH_API void push_runtime_policies();
TORCH_API void pop_runtime_policies();

// Who registered the runtime policies in force, in order: a file's path (or load_policy's name),
// or "register_runtime_policy".
TORCH_API std::vector<std::string> runtime_policy_owners();

}  // namespace autocastgen
