// `autocastgen generate`: policy + schemas + templates -> wrappers and manifest, written if changed.
#include <algorithm>
#include <iostream>
#include <map>
#include <memory>

#include <fmt/format.h>

#include "cli/inputs.h"
#include "cli/verbs.h"
#include "emit/cpp_text.h"
#include "emit/output_writer.h"
#include "emit/torch_target.h"
#include "policy/resolver.h"
#include "host/hash.h"
#include "support/atomic_file.h"
#include "support/paths.h"

namespace autocastgen::cli {

namespace {

namespace fs = std::filesystem;

struct GenerateOptions {
  fs::path policy;
  std::vector<fs::path> schemas;
  std::string torch_version;
  std::string target = "torch";
  fs::path out;
  fs::path templates;
  emit::WrapperState state = emit::WrapperState::torch;
  std::string name;
  int shards = 1;
  std::string dispatch_key;
  bool no_fallthrough = false;
  bool check = false;
  fs::path depfile;
  fs::path input_list;
};

// Note [shards] (emit/torch_target.h): shard files in `out` that a run with `shards` does not
// write, left by an earlier run with more; generate removes them (a build that globbed them would
// otherwise register their wrappers twice), --check reports them.
std::vector<fs::path> leftover_shards(const fs::path& out, const std::string& name, int shards) {
  std::vector<fs::path> found;
  std::error_code ec;
  for (fs::directory_iterator it(out, ec), end; !ec && it != end; it.increment(ec)) {
    const std::optional<int> shard = emit::shard_of_file_name(name, it->path().filename().string());
    if (shard && *shard > shards && it->is_regular_file(ec)) found.push_back(it->path());
  }
  std::sort(found.begin(), found.end());
  return found;
}

int run(const GenerateOptions& options) {
  SourceManager sources;
  DiagnosticEngine diags(sources, std::cerr);
  std::optional<SchemaInputs> inputs = load_schema_inputs(options.schemas, options.torch_version, sources, diags);
  if (!inputs) return 1;
  const model::SchemaSet* schemas = &inputs->schemas;
  const std::vector<uint32_t>& schema_files = inputs->files;
  policy::ResolveTarget target = inputs->target();
  if (!options.dispatch_key.empty()) target.dispatch_key = options.dispatch_key;
  std::optional<policy::ResolvedPolicy> resolved = policy::load_policy(options.policy, *schemas, sources, diags, target);
  if (!resolved || diags.has_errors()) return 1;

  std::optional<emit::TemplateSet> templates = options.templates.empty()
                                                   ? emit::TemplateSet::builtin(options.target, sources, diags)
                                                   : emit::TemplateSet::load(options.templates, sources, diags);
  if (!templates) return 1;

  emit::TorchTargetOptions target_options;
  target_options.name = options.name.empty() ? options.policy.stem().string() : options.name;
  target_options.state = options.state;
  target_options.shards = options.shards;
  target_options.fallthrough = !options.no_fallthrough;
  target_options.torch_version = inputs->torch_version;
  target_options.sources = &sources;
  resolved->name = display_path(options.policy);  // as reports name it (the module section's owner)
  std::vector<fs::path> dependencies;
  auto add_input = [&](uint32_t file, bool on_disk) {
    target_options.inputs.push_back({on_disk ? display_path(sources.name(file)) : sources.name(file), sha256_hex(sources.text(file))});
    if (on_disk) dependencies.emplace_back(sources.name(file));
  };
  for (uint32_t file : resolved->files) add_input(file, true);
  for (uint32_t file : schema_files) add_input(file, true);
  for (const auto& [name, file] : templates->files()) add_input(file, !options.templates.empty());

  std::optional<std::vector<emit::GeneratedFile>> files = emit::emit_torch_target(*schemas, *resolved, target_options, *templates, diags);
  if (!files) return 1;
  emit::OutputWriter writer(options.out);
  for (emit::GeneratedFile& file : *files) writer.add(file.path, std::move(file.content), diags);
  if (diags.has_errors()) return 1;
  const std::vector<fs::path> leftover = leftover_shards(options.out, target_options.name, options.shards);

  if (options.check) {
    const std::vector<std::string> stale = writer.stale();
    for (const std::string& path : stale) std::cerr << fmt::format("autocastgen: error: '{}' is out of date\n", path);
    for (const fs::path& path : leftover)
      std::cerr << fmt::format("autocastgen: error: '{}' is a shard of an earlier, larger --shards and would be removed\n", path.string());
    if (!stale.empty() || !leftover.empty()) {
      std::cerr << fmt::format("autocastgen: regenerate with: autocastgen generate --policy {} --target {} --out {}\n",
                               options.policy.string(), options.target, options.out.string());
      return 1;
    }
    return 0;
  }
  for (const std::string& path : writer.write(diags)) std::cout << "wrote " << path << "\n";
  // Note [shards]: only after every output was written, so a failed run leaves the old set whole.
  if (!diags.has_errors()) {
    for (const fs::path& path : leftover) {
      std::error_code ec;
      if (fs::remove(path, ec)) std::cout << "removed " << path.string() << "\n";
      else if (ec) diags.error({}, fmt::format("cannot remove '{}', a shard of an earlier, larger --shards: {}", path.string(), ec.message()));
    }
  }
  if (!options.depfile.empty()) {
    bool changed = false;
    std::string error, unwritable;
    const std::optional<std::string> depfile = writer.depfile(dependencies, unwritable);
    if (!depfile)
      diags.error({}, fmt::format("cannot write depfile '{}': the path {} holds a line break, which Make's syntax cannot express",
                                  options.depfile.string(), emit::cpp_string_literal(unwritable)));
    else if (!write_if_changed(options.depfile, *depfile, changed, error))
      diags.error({}, fmt::format("cannot write depfile '{}': {}", options.depfile.string(), error));
  }
  if (!options.input_list.empty()) {
    bool changed = false;
    std::string error;
    if (!write_if_changed(options.input_list, emit::OutputWriter::input_list(dependencies), changed, error))
      diags.error({}, fmt::format("cannot write the input list '{}': {}", options.input_list.string(), error));
  }
  return diags.has_errors() ? 1 : 0;
}

}  // namespace

VerbRunner add_generate_verb(CLI::App& app) {
  auto options = std::make_shared<GenerateOptions>();
  CLI::App* verb = app.add_subcommand("generate", "Generate autocast wrappers and a manifest from a policy");
  verb->add_option("--policy", options->policy, "Policy YAML file")->required();
  add_schema_options(*verb, options->schemas, options->torch_version);
  verb->add_option("--target", options->target, "Code generation target")->check(CLI::IsMember({"torch"}))->default_val("torch");
  verb->add_option("--out", options->out, "Output directory")->required();
  verb->add_option("--templates", options->templates, "Directory of *.mustache templates replacing the built-in ones")
      ->check(CLI::ExistingDirectory);
  std::map<std::string, emit::WrapperState> states;
  for (const emit::WrapperState state : {emit::WrapperState::torch, emit::WrapperState::autocastgen})
    states.emplace(emit::spelling(state), state);
  verb->add_option("--state", options->state, "Whose autocast state drives the wrappers: torch (torch.autocast) or "
                                              "autocastgen (AutocastScope)")
      ->transform(CLI::CheckedTransformer(states))
      ->default_str("torch");
  verb->add_option("--shards", options->shards,
                   fmt::format("Split the wrappers into this many translation units, compiled in parallel: autocast_<name>.cpp, "
                               "then autocast_<name>.shard2.cpp ... (1 to {})",
                               emit::kMaxShards))
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            const bool digits = !text.empty() && text.size() <= 2 &&
                                std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
            if (digits && std::stoi(text) >= 1 && std::stoi(text) <= emit::kMaxShards) return "";
            return fmt::format("expected a whole number from 1 to {}, not '{}'", emit::kMaxShards, text);
          },
          "N"))
      ->default_val(1);
  verb->add_option("--name", options->name, "Names the outputs (autocast_<name>.cpp) and the C++ namespace; default: the policy file's stem");
  std::vector<std::string> keys;
  for (const policy::DeviceInfo& info : policy::autocast_devices()) keys.emplace_back(info.dispatch_key);
  verb->add_option("--dispatch-key", options->dispatch_key, "Register under this autocast dispatch key instead of the policy's")
      ->check(CLI::IsMember(keys));
  verb->add_flag("--no-fallthrough", options->no_fallthrough, "Leave out the fallthrough fallback (another library owns it)");
  verb->add_flag("--check", options->check, "Write nothing; exit 1 when the outputs in --out are stale");
  verb->add_option("--depfile", options->depfile, "Also write a Makefile-style depfile of every input");
  verb->add_option("--input-list", options->input_list,
                   "Also write every input's absolute path, each followed by a NUL byte (any file name)");
  return [options] { return run(*options); };
}

}  // namespace autocastgen::cli
