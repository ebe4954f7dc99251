// Finding the installed torch's schema file and loading inputs for the verbs.
#include "cli/build_config.h"
#include "cli/inputs.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "schema/schema_file.h"
#include "host/python.h"

namespace autocastgen::cli {

namespace {
constexpr const char* kRelativeToTorchgen = "packaged/ATen/native/native_functions.yaml";

}  // namespace

std::optional<std::filesystem::path> installed_native_functions(std::string& why_not) {
  std::error_code ec;
  if (const char* env = std::getenv("AUTOCASTGEN_NATIVE_FUNCTIONS"); env && *env) return std::filesystem::path(env);
  if (const std::filesystem::path built = kDefaultNativeFunctions; !built.empty() && std::filesystem::exists(built, ec))
    return built;
  std::optional<std::filesystem::path> found = python_package_dir("torchgen", why_not);
  if (found) *found /= kRelativeToTorchgen;
  if (found && !std::filesystem::exists(*found, ec)) {
    why_not = fmt::format("the installed torchgen has no {}", found->string());
    return std::nullopt;
  }
  return found;
}

std::optional<uint32_t> read_input(const std::filesystem::path& path, SourceManager& sources, DiagnosticEngine& diags,
                                   size_t max_bytes, std::string_view files) {
  std::string error;
  std::optional<uint32_t> file = sources.add_file(path, error, max_bytes, files);
  if (!file) diags.error({}, fmt::format("cannot read '{}': {}", path.string(), error));
  return file;
}

std::optional<DetectedRelease> release_of_schema_file(const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path dir = fs::weakly_canonical(path, ec).parent_path();
  for (; !dir.empty() && dir != dir.root_path(); dir = dir.parent_path()) {
    if (dir.filename() != "torchgen") continue;
    // An installed torch keeps torch/version.py beside torchgen/; the release cache a version.txt.
    for (const fs::path& evidence : {dir.parent_path() / "torch" / "version.py", dir.parent_path() / "version.txt"}) {
      std::ifstream in(evidence);
      std::string line;
      while (in && std::getline(in, line)) {
        std::string_view text = line;
        if (evidence.filename() == "version.py") {
          if (!text.starts_with("__version__")) continue;
          text.remove_prefix(text.find('=') == std::string_view::npos ? text.size() : text.find('=') + 1);
        }
        if (auto version = model::TorchVersion::parse_reported(text)) return DetectedRelease{*version, evidence};
      }
    }
    break;
  }
  return std::nullopt;
}

std::filesystem::path release_cache_root() {
  namespace fs = std::filesystem;
  if (const char* env = std::getenv("AUTOCASTGEN_TORCH_CACHE"); env && *env) return env;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return fs::path(xdg) / "autocastgen" / "torch";
  const char* home = std::getenv("HOME");
  return fs::path(home ? home : "") / ".cache" / "autocastgen" / "torch";
}

std::optional<std::filesystem::path> cached_release(const model::TorchVersion& version, std::string& why_not) {
  namespace fs = std::filesystem;
  const fs::path root = release_cache_root();
  std::optional<fs::path> best;
  std::optional<model::TorchVersion> best_version;
  std::error_code ec;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    const std::optional<model::TorchVersion> v = model::TorchVersion::parse(it->path().filename().string());
    if (!v || !(*v == version) || (version.patch() && v->patch() != version.patch())) continue;
    if (!fs::exists(it->path() / "torchgen", ec) || !fs::exists(it->path() / "include", ec)) continue;  // being fetched
    if (!best_version || best_version->patch().value_or(0) < v->patch().value_or(0)) {
      best = it->path();
      best_version = v;
    }
  }
  if (!best)
    why_not = fmt::format("PyTorch {} is not in the release cache ({}): fetch it once with 'scripts/torch-releases fetch {}' "
                          "(in autocastgen's source tree)",
                          version.str(), root.string(), version.str());
  return best;
}

void add_extra_schemas_option(CLI::App& verb, std::vector<std::filesystem::path>& extra) {
  verb.add_option("--extra-schemas", extra,
                  "Op-schema file read after the others, on every side (a backend's own ops; repeatable)")
      ->check(CLI::ExistingFile)
      ->allow_extra_args(false);
}

void add_schema_options(CLI::App& verb, std::vector<std::filesystem::path>& schemas, std::string& torch_version) {
  // One file per --schemas, so that options may come before positional arguments.
  verb.add_option("--schemas", schemas, "Op-schema file (native_functions.yaml format; repeatable); default: the installed PyTorch's")
      ->check(CLI::ExistingFile)
      ->allow_extra_args(false);
  verb.add_option("--torch-version", torch_version,
                  "The PyTorch release the schemas belong to (X.Y or X.Y.Z); default: found beside the schema file, else "
                  "the installed torch's");
}

std::optional<SchemaInputs> load_schema_inputs(const std::vector<std::filesystem::path>& paths, const std::string& torch_version,
                                               SourceManager& sources, DiagnosticEngine& diags,
                                               const std::vector<std::filesystem::path>& extra) {
  std::optional<model::TorchVersion> requested;
  if (!torch_version.empty()) {
    requested = model::TorchVersion::parse(torch_version);
    if (!requested) {
      diags.error({}, fmt::format("--torch-version '{}' is not a release number; write X.Y or X.Y.Z, e.g. 2.11", torch_version));
      return std::nullopt;
    }
    if (!model::is_supported_release(*requested)) {
      diags.error({}, fmt::format("--torch-version {}: not a release autocastgen supports ({} and 2.0 to {})", torch_version,
                                  model::kOldestCodegenRelease.str(), model::kNewestRelease.str()));
      return std::nullopt;
    }
  }
  std::vector<std::filesystem::path> inputs = paths;
  std::filesystem::path release_dir;
  if (inputs.empty()) {
    std::string why_not;
    std::optional<std::filesystem::path> installed = installed_native_functions(why_not);
    // Another release than the installed one: the release cache's files.
    const std::optional<DetectedRelease> installed_release = installed ? release_of_schema_file(*installed) : std::nullopt;
    if (requested && !(installed_release && installed_release->version == *requested)) {
      std::optional<std::filesystem::path> cached = cached_release(*requested, why_not);
      if (!cached) {
        diags.error({}, fmt::format("--torch-version {}: {}; or give that release's native_functions.yaml with --schemas",
                                    torch_version, why_not));
        return std::nullopt;
      }
      release_dir = *cached;
      installed = release_dir / "torchgen" / kRelativeToTorchgen;
    }
    if (!installed) {
      diags.error({}, fmt::format("no --schemas given and the installed PyTorch's native_functions.yaml was not found: {}", why_not));
      return std::nullopt;
    }
    inputs.push_back(*installed);
  }
  // The release the files themselves belong to, when they lie in a torch package or the cache.
  std::optional<DetectedRelease> detected;
  std::filesystem::path detected_from;
  for (const auto& path : inputs) {
    std::optional<DetectedRelease> found = release_of_schema_file(path);
    if (!found) continue;
    if (detected && !(detected->version == found->version)) {
      diags.error({}, fmt::format("the schema files belong to different PyTorch releases: '{}' to {} (read from '{}'), '{}' to {} "
                                  "(read from '{}')",
                                  detected_from.string(), detected->version.str(), detected->evidence.string(), path.string(),
                                  found->version.str(), found->evidence.string()));
      return std::nullopt;
    }
    detected = found;
    detected_from = path;
  }
  if (requested && detected && !(*requested == detected->version)) {
    diags.error({}, fmt::format("--torch-version {} does not match the schemas: '{}' belongs to PyTorch {} (read from '{}')",
                                torch_version, detected_from.string(), detected->version.str(), detected->evidence.string()));
    return std::nullopt;
  }

  SchemaInputs result;
  result.torch_version = requested ? requested : detected ? std::optional(detected->version) : std::nullopt;
  if (!result.torch_version) {
    // Schema files outside any torch package (a backend's own ops): the installed torch's release.
    std::string why_not;
    if (std::optional<std::filesystem::path> installed = installed_native_functions(why_not))
      if (std::optional<DetectedRelease> found = release_of_schema_file(*installed)) result.torch_version = found->version;
  }
  result.release_dir = release_dir;
  inputs.insert(inputs.end(), extra.begin(), extra.end());
  for (const auto& path : inputs)
    if (auto file = read_input(path, sources, diags, kMaxSchemaFileBytes, "schema files")) result.files.push_back(*file);
  if (diags.has_errors()) return std::nullopt;
  std::optional<model::SchemaSet> schemas = schema::load_schema_files(result.files, sources, diags);
  if (!schemas) return std::nullopt;
  result.schemas = std::move(*schemas);
  return result;
}

}  // namespace autocastgen::cli
