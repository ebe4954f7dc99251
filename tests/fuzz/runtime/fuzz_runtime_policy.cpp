// libFuzzer entry point for the runtime-policy API (runtime_policy.h): register_runtime_policy's
// op, policy, device and message, and a policy text through load_runtime_policy_file; then a
// clear. Only c10::Error may escape them, with the API's message; nothing may crash.
//
// Input: fields separated by the byte 0x1F: op, policy, device, message, policy text (missing
// fields are empty). Links libtorch, so it lives outside tests/fuzz/fuzz_*.cpp (the torch-free
// fuzz targets): its replay and bounded run are ctest cases of tests/stress (torch builds and the
// tsan and asan-torch presets).
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include <c10/util/Exception.h>

#include "autocastgen/runtime/runtime_policy.h"
#include "fuzz_check.h"

namespace {

std::vector<std::string> fields(std::string_view data, size_t count) {
  std::vector<std::string> out;
  for (size_t i = 0; i + 1 < count; ++i) {
    const size_t end = data.find('\x1f');
    out.emplace_back(data.substr(0, end));
    data = end == std::string_view::npos ? std::string_view() : data.substr(end + 1);
  }
  out.emplace_back(data);
  return out;
}

bool starts_with(const std::string& text, std::string_view prefix) { return text.rfind(prefix, 0) == 0; }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<std::string> f = fields(std::string_view(reinterpret_cast<const char*>(data), size), 5);
  const std::string &op = f[0], &policy = f[1], &device = f[2], &message = f[3], &text = f[4];
  try {
    autocastgen::register_runtime_policy(op, policy, device, message);
    FUZZ_CHECK(policy != "banned" || !message.empty(), "banned registered without a message: " + op);
  } catch (const c10::Error& e) {
    const std::string what = e.what_without_backtrace();
    FUZZ_CHECK(starts_with(what, "autocastgen: register_runtime_policy("), what);
    FUZZ_CHECK(what.find("\nerror: ") != std::string::npos, what);
  } catch (const std::exception& e) {
    FUZZ_CHECK(false, std::string("register_runtime_policy threw a non-c10::Error: ") + e.what());
  }
  if (!text.empty()) {
    const std::filesystem::path path =
        std::filesystem::temp_directory_path() / ("autocastgen_fuzz_runtime_policy_" + std::to_string(::getpid()) + ".yaml");
    std::ofstream(path, std::ios::binary) << text;
    try {
      (void)autocastgen::load_runtime_policy_file(path.string());
    } catch (const c10::Error& e) {
      const std::string what = e.what_without_backtrace();
      FUZZ_CHECK(starts_with(what, "autocastgen: the runtime policy "), what);
    } catch (const std::exception& e) {
      FUZZ_CHECK(false, std::string("load_runtime_policy_file threw a non-c10::Error: ") + e.what());
    }
    std::filesystem::remove(path);
  }
  autocastgen::clear_runtime_policies();
  return 0;
}
