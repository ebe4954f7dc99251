// Torch ops that open and close AutocastScopes and install captured states from Python (the
// autocastgen Python package, python/autocastgen; docs/runtime.md "From Python").
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <variant>
#include <vector>

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include "autocastgen/runtime/modules.h"
#include "autocastgen/runtime/state.h"
#include "../device_types.h"
#include "../bookkeeping_op.h"

namespace autocastgen {
namespace {

// Note [Python frames]: a Python `with` block cannot own a C++ object on the stack, so the
// AutocastScopes and AutocastStateGuards that Python opens live on a per-thread stack of frames.
// Every enter returns the depth of that stack after the push; the matching exit passes the depth
// back, and only the innermost frame may be closed. An exit out of order (a generator suspended
// inside a scope and closed after a later one) would restore the wrong previous state, so it is an
// error and nothing changes. Frames a thread still holds when it ends are dropped without running
// their destructors: the state they would restore is thread-local and ends with the thread, and
// the thread-locals those destructors touch (the state, the cast cache) may already be gone.
using Frame = std::variant<std::unique_ptr<AutocastScope>, std::unique_ptr<AutocastStateGuard>>;

struct FrameStack {
  std::vector<Frame> frames;
  FrameStack() = default;
  FrameStack(const FrameStack&) = delete;
  FrameStack& operator=(const FrameStack&) = delete;
  ~FrameStack() {
    for (Frame& frame : frames) std::visit([](auto& owned) { (void)owned.release(); }, frame);
  }
};

FrameStack& frame_stack() {
  thread_local FrameStack stack;
  return stack;
}

int64_t push(Frame frame) {
  FrameStack& stack = frame_stack();
  stack.frames.push_back(std::move(frame));
  return static_cast<int64_t>(stack.frames.size());
}

void pop(int64_t depth) {
  FrameStack& stack = frame_stack();
  const auto open = static_cast<int64_t>(stack.frames.size());
  TORCH_CHECK(open > 0, "autocastgen: no autocast scope or state is open on this thread (exit of frame ", depth, ")");
  TORCH_CHECK(depth == open, "autocastgen: autocast scopes and states must be closed innermost first: closing frame ",
              depth, " while frame ", open, " is open on this thread");
  stack.frames.pop_back();  // runs the scope's or the guard's destructor: the previous state comes back
}

c10::DeviceType device_type(const std::string& device) {
  // c10::Device parses every device type name, the renamed PrivateUse1 backend's included.
  return c10::Device(device).type();
}

// Note [state encoding]: a captured AutocastState crosses into Python as a flat int list, so it
// can be kept, copied and handed to any thread with no handle to free: [kFormat, device types,
// then per device type: enabled, dtype, nesting, cache_enabled]. The Python side treats it as
// opaque (autocastgen.AutocastState).
constexpr int64_t kFormat = 1;
constexpr int64_t kFieldsPerDevice = 4;
constexpr auto kEncodedDevices = static_cast<int64_t>(kDeviceTypes);  // int64, as the list holds it

std::vector<int64_t> encode(const AutocastState& state) {
  std::vector<int64_t> out{kFormat, kEncodedDevices};
  out.reserve(static_cast<size_t>(2 + kEncodedDevices * kFieldsPerDevice));
  for (int64_t i = 0; i < kEncodedDevices; ++i) {
    const DeviceAutocastState& device = state.device(static_cast<c10::DeviceType>(i));
    out.push_back(device.enabled ? 1 : 0);
    out.push_back(static_cast<int64_t>(device.dtype));
    out.push_back(static_cast<int64_t>(device.nesting));
    out.push_back(device.cache_enabled ? 1 : 0);
  }
  return out;
}

AutocastState decode(c10::ArrayRef<int64_t> encoded) {
  TORCH_CHECK(encoded.size() == static_cast<size_t>(2 + kEncodedDevices * kFieldsPerDevice) && encoded[0] == kFormat &&
                  encoded[1] == kEncodedDevices,
              "autocastgen: not an autocast state captured by this build (", encoded.size(),
              " values); pass what capture_autocast_state returned");
  AutocastState state;
  for (int64_t i = 0; i < kEncodedDevices; ++i) {
    const int64_t* fields = encoded.data() + 2 + i * kFieldsPerDevice;
    const auto dtype = static_cast<c10::ScalarType>(fields[1]);
    TORCH_CHECK(fields[1] >= 0 && fields[2] >= 0 && fields[2] <= UINT32_MAX &&
                    (dtype == c10::ScalarType::Undefined || dtype == c10::ScalarType::Half ||
                     dtype == c10::ScalarType::BFloat16),
                "autocastgen: corrupt autocast state for device type ", i);
    DeviceAutocastState& device = state.device(static_cast<c10::DeviceType>(i));
    device.enabled = fields[0] != 0;
    device.dtype = dtype;
    device.nesting = static_cast<uint32_t>(fields[2]);
    device.cache_enabled = fields[3] != 0;
  }
  return state;
}

// fp32, off, a dtype's name (Half, BFloat16) or none.
std::string section_name(const modules::Section& section) {
  switch (section.kind) {
    case modules::SectionKind::fp32: return "fp32";
    case modules::SectionKind::off: return "off";
    case modules::SectionKind::dtype: return std::string(c10::toString(section.dtype));
    case modules::SectionKind::fp8_on: return "fp8: on";
    case modules::SectionKind::fp8_off: return "fp8: off";
    case modules::SectionKind::none: break;
  }
  return "none";
}

}  // namespace
}  // namespace autocastgen

TORCH_LIBRARY_FRAGMENT(autocastgen, m) {
  using autocastgen::detail::bookkeeping;  // Note [bookkeeping ops]
  m.def("autocast_enter(str device_type, ScalarType? dtype=None, bool enabled=True, bool cache_enabled=True) -> int",
        bookkeeping([](const std::string& device, std::optional<c10::ScalarType> dtype, bool enabled, bool cache_enabled) {
          autocastgen::AutocastScope::Options options;
          options.dtype = dtype;
          options.enabled = enabled;
          options.cache_enabled = cache_enabled;
          // Constructed before the push: a refused scope (bad device or dtype) leaves no frame.
          auto scope = std::make_unique<autocastgen::AutocastScope>(autocastgen::device_type(device), options);
          return autocastgen::push(std::move(scope));
        }));
  m.def("autocast_state_capture() -> int[]",
        bookkeeping([] { return autocastgen::encode(autocastgen::capture_autocast_state()); }));
  m.def("autocast_state_enter(int[] state) -> int", bookkeeping([](c10::ArrayRef<int64_t> encoded) {
    auto guard = std::make_unique<autocastgen::AutocastStateGuard>(autocastgen::decode(encoded));
    return autocastgen::push(std::move(guard));
  }));
  m.def("autocast_exit(int depth) -> ()", bookkeeping([](int64_t depth) { autocastgen::pop(depth); }));
  m.def("autocast_depth() -> int",
        bookkeeping([] { return static_cast<int64_t>(autocastgen::frame_stack().frames.size()); }));
  m.def("autocast_is_enabled(str device_type) -> bool",
        bookkeeping([](const std::string& device) { return autocastgen::is_autocast_enabled(autocastgen::device_type(device)); }));
  // A name ("Half", "BFloat16"), not a ScalarType: PyTorch hands a returned ScalarType to Python as
  // a bare int.
  m.def("autocast_dtype(str device_type) -> str", bookkeeping([](const std::string& device) {
    return std::string(c10::toString(autocastgen::autocast_dtype(autocastgen::device_type(device))));
  }));
  m.def("autocast_is_cache_enabled(str device_type) -> bool", bookkeeping([](const std::string& device) {
    return autocastgen::is_autocast_cache_enabled(autocastgen::device_type(device));
  }));
  m.def("autocast_nesting(str device_type) -> int", bookkeeping([](const std::string& device) {
    return static_cast<int64_t>(autocastgen::autocast_nesting(autocastgen::device_type(device)));
  }));
  // Precision by place (autocastgen/runtime/modules.h): attach()'s forward hooks.
  m.def("module_enter(str path) -> int",
        bookkeeping([](const std::string& path) { return static_cast<int64_t>(autocastgen::modules::enter(path)); }));
  m.def("module_exit(int depth) -> ()", bookkeeping([](int64_t depth) { autocastgen::modules::exit(static_cast<size_t>(depth)); }));
  m.def("module_leave() -> ()", bookkeeping([] {
    const size_t depth = autocastgen::modules::depth();
    if (depth > 0) autocastgen::modules::exit(depth - 1);
  }));
  m.def("module_depth() -> int", bookkeeping([] { return static_cast<int64_t>(autocastgen::modules::depth()); }));
  m.def("module_current() -> str?", bookkeeping([]() -> std::optional<std::string> {
    const std::string* path = autocastgen::modules::current_path();
    return path == nullptr ? std::nullopt : std::optional<std::string>(*path);
  }));
  // fp32, off, a dtype's name (Half, BFloat16) or none: the section in force for the device.
  m.def("module_section(str device_type) -> str", bookkeeping([](const std::string& device) {
    return autocastgen::section_name(autocastgen::modules::current_section(autocastgen::device_type(device)));
  }));
  // attach()'s pre-hook in one call: enters the module, then says the section in force for the
  // device of its inputs ("" when it has no tensor input: nothing to cast).
  m.def("module_enter_section(str path, str device_type) -> str", bookkeeping([](const std::string& path, const std::string& device) {
    autocastgen::modules::enter(path);
    if (device.empty()) return std::string();
    return autocastgen::section_name(autocastgen::modules::current_section(autocastgen::device_type(device)));
  }));
  // Every pattern loaded rules hold: three lists of one length (the patterns, their `where`s,
  // "section" or "entry"), never fields joined by a separator: a pattern and the policy's name in
  // `where` may hold any character (load_policy's name=, a quoted pattern).
  m.def("module_patterns() -> (str[], str[], str[])", bookkeeping([] {
    std::vector<std::string> patterns, wheres, kinds;
    for (const autocastgen::modules::RegisteredPattern& p : autocastgen::modules::registered_patterns()) {
      patterns.push_back(p.pattern);
      wheres.push_back(p.where);
      kinds.emplace_back(p.section ? "section" : "entry");
    }
    return std::make_tuple(std::move(patterns), std::move(wheres), std::move(kinds));
  }));
  m.def("module_glob_matches(str pattern, str path) -> bool", bookkeeping([](const std::string& pattern, const std::string& path) {
    return autocastgen::modules::glob_matches(pattern, path);
  }));
}
