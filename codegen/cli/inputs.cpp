// Finding the installed torch's schema file and loading inputs for the verbs.
#include "cli/inputs.h"

#include <array>
#include <cstdio>
#include <cstdlib>

#include <fmt/format.h>

#include "schema/schema_file.h"

namespace autocastgen::cli {

namespace {
constexpr const char* kRelativeToTorchgen = "packaged/ATen/native/native_functions.yaml";

std::optional<std::filesystem::path> ask_python(std::string& why_not) {
  const std::string command = fmt::format(
      "{} -c \"import importlib.util as u; s = u.find_spec('torchgen'); print(s.submodule_search_locations[0] if s else '')\" 2>/dev/null",
      AUTOCASTGEN_PYTHON);
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) {
    why_not = "could not run the Python interpreter";
    return std::nullopt;
  }
  std::array<char, 4096> buffer{};
  std::string out;
  while (fgets(buffer.data(), buffer.size(), pipe)) out += buffer.data();
  pclose(pipe);
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  if (out.empty()) {
    why_not = fmt::format("{} cannot import torchgen (is PyTorch installed? run scripts/setup)", AUTOCASTGEN_PYTHON);
    return std::nullopt;
  }
  return std::filesystem::path(out) / kRelativeToTorchgen;
}
}  // namespace

std::optional<std::filesystem::path> installed_native_functions(std::string& why_not) {
  std::error_code ec;
  if (const char* env = std::getenv("AUTOCASTGEN_NATIVE_FUNCTIONS"); env && *env) return std::filesystem::path(env);
  if (const std::filesystem::path built = AUTOCASTGEN_DEFAULT_NATIVE_FUNCTIONS; !built.empty() && std::filesystem::exists(built, ec))
    return built;
  auto found = ask_python(why_not);
  if (found && !std::filesystem::exists(*found, ec)) {
    why_not = fmt::format("the installed torchgen has no {}", found->string());
    return std::nullopt;
  }
  return found;
}

std::optional<uint32_t> read_input(const std::filesystem::path& path, SourceManager& sources, DiagnosticEngine& diags) {
  std::string error;
  std::optional<uint32_t> file = sources.add_file(path, error);
  if (!file) diags.error({}, fmt::format("cannot read '{}': {}", path.string(), error));
  return file;
}

std::optional<model::SchemaSet> load_schemas(const std::vector<std::filesystem::path>& paths, SourceManager& sources,
                                             DiagnosticEngine& diags, std::vector<uint32_t>* loaded) {
  std::vector<std::filesystem::path> inputs = paths;
  if (inputs.empty()) {
    std::string why_not;
    std::optional<std::filesystem::path> installed = installed_native_functions(why_not);
    if (!installed) {
      diags.error({}, fmt::format("no --schemas given and the installed PyTorch's native_functions.yaml was not found: {}", why_not));
      return std::nullopt;
    }
    inputs.push_back(*installed);
  }
  std::vector<uint32_t> files;
  for (const auto& path : inputs)
    if (auto file = read_input(path, sources, diags)) files.push_back(*file);
  if (diags.has_errors()) return std::nullopt;
  if (loaded) *loaded = files;
  return schema::load_schema_files(files, sources, diags);
}

}  // namespace autocastgen::cli
