// `autocastgen apply IN.pt2 [--policy P.yaml] --dtype float16|bfloat16 [--device cpu] -o OUT.pt2`: a
// policy baked into a saved float32 torch.export program; `autocastgen precision-map PROGRAM.pt2
// [--by module|op] [--format text|json]`: what each op of a saved program runs in and the casts into
// it (docs/export.md). `--import MODULE` (either verb, repeatable): a Python module imported first, the
// library that registers a custom op the program calls (transformers.integrations.moe). Both need PyTorch to read the program and, for apply, autocastgen's kernels
// to trace it, so they run the package beside the CLI (autocastgen/_export/, its __main__.py), as advise does
// (Note [advise runs the package] in verb_advise.cpp).
#include <memory>
#include <string>
#include <vector>

#include "cli/verbs.h"
#include "host/python.h"

namespace autocastgen::cli {

namespace {

struct ApplyOptions {
  std::string program;
  bool trust_program = false;
  std::string policy;
  std::string dtype;
  std::string device = "cpu";
  std::string output;
  std::vector<std::string> imports;
};

struct MapOptions {
  std::string program;
  bool trust_program = false;
  std::string by = "module";
  std::string format = "text";
  std::vector<std::string> imports;
};

// Note [a program file is data] (python/autocastgen/_export/program_file.py): without this flag a program
// is read as data, and a part only pickle could read is refused.
constexpr const char* kTrustHelp =
    "Read the program with PyTorch's own loader, pickle included: only for a file you trust as code (docs/security.md#program-files)";

constexpr const char* kImportHelp =
    "A Python module to import first: the library that registers a custom op the program calls "
    "(e.g. transformers.integrations.moe); repeatable. Importing it runs its code";

int run_export_cli(std::vector<std::string> args, const std::vector<std::string>& imports) {
  for (const std::string& module : imports) args.insert(args.end(), {"--import", module});
  return run_own_python_module("_export/__main__", "autocastgen._export", args);
}

}  // namespace

VerbRunner add_apply_verb(CLI::App& app) {
  auto options = std::make_shared<ApplyOptions>();
  CLI::App* verb = app.add_subcommand(
      "apply", "Bake a policy into a saved float32 torch.export program (explicit casts; docs/export.md)");
  verb->add_option("PROGRAM", options->program, "The program, saved with torch.export.save")->required();
  verb->add_option("--policy", options->policy,
                   "The policy file (default: what is in force: AUTOCASTGEN_POLICY, else PyTorch's lists)");
  verb->add_option("--dtype", options->dtype, "The lower-precision dtype")
      ->required()
      ->check(CLI::IsMember({"float16", "bfloat16"}));
  verb->add_option("--device", options->device, "The device type autocast runs on (default cpu)");
  verb->add_option("-o,--output", options->output, "The program to write")->required();
  verb->add_flag("--trust-program", options->trust_program, kTrustHelp);
  verb->add_option("--import", options->imports, kImportHelp)->allow_extra_args(false);
  return [options] {
    std::vector<std::string> args = {"apply", options->program, "--dtype", options->dtype, "--device", options->device,
                                     "-o", options->output};
    if (!options->policy.empty()) args.insert(args.end(), {"--policy", options->policy});
    if (options->trust_program) args.push_back("--trust-program");
    return run_export_cli(args, options->imports);
  };
}

VerbRunner add_precision_map_verb(CLI::App& app) {
  auto options = std::make_shared<MapOptions>();
  CLI::App* verb = app.add_subcommand(
      "precision-map", "What each op of a saved torch.export program runs in, and the casts into it (docs/export.md)");
  verb->add_option("PROGRAM", options->program, "The program, saved with torch.export.save")->required();
  verb->add_option("--by", options->by, "One row per module and op (default) or per op")
      ->check(CLI::IsMember({"module", "op"}));
  verb->add_option("--format", options->format, "text (default) or json")->check(CLI::IsMember({"text", "json"}));
  verb->add_flag("--trust-program", options->trust_program, kTrustHelp);
  verb->add_option("--import", options->imports, kImportHelp)->allow_extra_args(false);
  return [options] {
    std::vector<std::string> args = {"precision-map", options->program, "--by", options->by, "--format", options->format};
    if (options->trust_program) args.push_back("--trust-program");
    return run_export_cli(args, options->imports);
  };
}

}  // namespace autocastgen::cli
