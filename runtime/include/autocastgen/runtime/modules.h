// Precision by place (docs/policy-language.md, "Precision by place"): which module is running on
// this thread, and the module rules policies register: entries' `modules:` patterns and the
// `modules:` section.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>
#include <c10/macros/Export.h>

namespace autocastgen {

// Note [module frames]: the running modules form a stack per thread, innermost last. A frame is
// a module's path in the attached model as `named_modules()` spells it ("layers.0.attn"; the root
// is ""). A pattern matches a call when it matches the innermost frame's path or any enclosing
// frame's. What a frame matches is computed once per frame and pattern table (the table only
// grows while rules are loaded; a frame recomputes when it changed), so a call inside a module
// pays a thread-local read and a vector lookup, and a call outside every module one branch.

// Enters the module at `path` on this thread until the scope ends (libtorch modules; Python's
// autocastgen.attach(model) enters and leaves the same frames from forward hooks). Scopes nest;
// end them on the thread that made them, innermost first.
class TORCH_API ModuleScope {
 public:
  explicit ModuleScope(std::string path);
  ~ModuleScope();
  ModuleScope(const ModuleScope&) = delete;
  ModuleScope& operator=(const ModuleScope&) = delete;

 private:
  size_t depth_;  // frames below this one
};

namespace modules {

// Frames as Python manages them: enter returns the depth below the new frame; exit(depth) pops
// every frame above `depth` (a forward that raised leaves none behind).
TORCH_API size_t enter(std::string path);
TORCH_API void exit(size_t depth);
// This thread's frames, innermost last.
[[nodiscard]] TORCH_API size_t depth();
// The innermost frame's path; nullptr outside every module. Valid until the frame ends.
[[nodiscard]] TORCH_API const std::string* current_path();

// The innermost frame's path as a number for the statistics' keys: 0 outside every module, else
// the path's id in a process-wide table (paths are interned once per frame, when first asked).
[[nodiscard]] TORCH_API uint32_t current_path_id();
[[nodiscard]] TORCH_API std::string path_of(uint32_t id);

// One glob of a policy: `*` matches any run of characters (dots included), everything else
// itself; the whole path must match. `where` is the policy's `file:line:col` of the pattern.
struct PatternSource {
  std::string_view pattern;
  std::string_view where;
};
[[nodiscard]] TORCH_API bool glob_matches(std::string_view pattern, std::string_view path);

// An entry's `modules:` list, interned into the process's pattern table when constructed (the
// table keeps every pattern for the life of the process: generated files hold these statically).
class TORCH_API Patterns {
 public:
  Patterns(std::initializer_list<PatternSource> patterns);
  explicit Patterns(const std::vector<PatternSource>& patterns);
  ~Patterns();
  Patterns(const Patterns&) = delete;
  Patterns& operator=(const Patterns&) = delete;
  // Whether one of the patterns matches the innermost frame or an enclosing one.
  [[nodiscard]] bool match() const;

 private:
  std::vector<uint32_t> ids_;
};

// What a `modules:` section entry does inside its modules.
enum class SectionKind : uint8_t {
  none,   // no section applies: the lists as everywhere else
  fp32,   // autocast off inside; attach() casts the module's floating inputs to float32
  off,    // autocast off inside; inputs untouched
  dtype,  // the lower-precision dtype inside is `dtype`
  // Note [fp8 by place] (core/policy/policy.h): `{fp8: on}` / `{fp8: off}`, a dimension of its own:
  // current_section() never returns these; fp8_place() says which is in force.
  fp8_on,
  fp8_off,
};
struct Section {
  SectionKind kind = SectionKind::none;
  c10::ScalarType dtype = c10::ScalarType::Undefined;  // kind == dtype
};
struct SectionRule {
  std::string pattern;
  SectionKind kind = SectionKind::fp32;
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  std::string where;  // file:line:col
};

// A policy's section for one device, in force while the object lives. The innermost frame a
// rule matches decides; among rules matching the same frame, the first listed. A device has one
// section table at a time; an equal second one shares it. A second, different one (another
// policy's) is refused with a message naming both owners: raised as c10::Error (runtime
// policies), or, for a generated library registering it while it loads, where nothing can be
// raised, warned, the first table staying in force.
class TORCH_API Sections {
 public:
  enum class OnConflict : uint8_t { warn, raise };
  Sections(c10::DeviceType device, std::string owner, std::vector<SectionRule> rules,
           OnConflict on_conflict = OnConflict::warn);
  ~Sections();
  Sections(const Sections&) = delete;
  Sections& operator=(const Sections&) = delete;

 private:
  c10::DeviceType device_;
  bool refused_ = false;  // a conflicting table that was warned about and not registered
};

// The section in force on this thread for `device` (none outside every module or with no table).
[[nodiscard]] TORCH_API Section current_section(c10::DeviceType device);

// Note [fp8 by place]: whether the fp8 list's GEMMs may run in fp8 on this thread for `device`:
// the innermost frame that a `{fp8: on|off}` rule matches decides (the first listed among those
// matching that frame); allowed outside every module, with no such rule, or under `{fp8: on}`.
// `pattern` is the deciding rule's pattern when one decides (valid while its table is loaded).
struct Fp8Place {
  bool allowed = true;
  const char* pattern = nullptr;
};
[[nodiscard]] TORCH_API Fp8Place fp8_place(c10::DeviceType device);

// Every pattern registered while its rules are loaded, with its `where` and whether it is a
// section's: what attach() checks against the model's modules.
struct RegisteredPattern {
  std::string pattern;
  std::string where;
  bool section = false;
};
[[nodiscard]] TORCH_API std::vector<RegisteredPattern> registered_patterns();

// Changes whenever module rules are registered or dropped: part of the key compiled graphs are
// guarded on (Note [guards on the own state] in python/autocastgen/_core/traced.py).
[[nodiscard]] TORCH_API uint64_t rules_generation();

}  // namespace modules
}  // namespace autocastgen
