// `autocastgen advise RECORD.json --policy BASE.yaml --dtype float16|bfloat16 [--margin-bits N] -o OUT.yaml`:
// the policy advisor's range proposal from a record file (docs/advise.md). The proposal, the
// search and the policy writer exist once, in the Python package (autocastgen/advisor/); this
// verb runs `python -m autocastgen.advisor` (its __main__.py) from the package beside the
// CLI (Note [advise runs the package] below).
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cli/verbs.h"
#include "host/python.h"

namespace autocastgen::cli {

namespace {

// Note [advise runs the package]: `autocastgen.advise(model, ...)` needs Python and PyTorch to run
// the model, so its proposal and writer are Python; the CLI's range proposal is the same code run
// on a record file, not a C++ copy of it. The interpreter is the one the CLI asks for torchgen
// (codegen/host/python.h: $AUTOCASTGEN_PYTHON, which `python -m autocastgen` sets, else the build's),
// and the package is the one beside the CLI, so a build tree and a pip install each run their own.
struct AdviseOptions {
  std::string record;
  std::string policy;
  std::string dtype;
  double margin_bits = 1.0;
  std::string device;
  std::string output;
  std::string fp8;  // a script defining `model` and `inputs` (Note [fp8 places] in python/autocastgen/advisor/_fp8.py)
};

int run_advise(const AdviseOptions& options) {
  std::vector<std::string> args = {"--policy", options.policy, "--margin-bits", fmt::format("{}", options.margin_bits),
                                   "-o", options.output};
  if (!options.record.empty()) args.insert(args.begin(), options.record);
  if (!options.dtype.empty()) args.insert(args.end(), {"--dtype", options.dtype});
  if (!options.fp8.empty()) args.insert(args.end(), {"--fp8", options.fp8});
  if (!options.device.empty()) args.insert(args.end(), {"--device", options.device});
  return run_own_python_module("advisor/__main__", "autocastgen.advisor", args);
}

}  // namespace

VerbRunner add_advise_verb(CLI::App& app) {
  auto options = std::make_shared<AdviseOptions>();
  CLI::App* verb = app.add_subcommand(
      "advise", "Write a policy that extends BASE and moves to float32 the places (an op in a module) whose "
                "recorded ranges leave the dtype's range (docs/advise.md)");
  verb->add_option("RECORD", options->record,
                   "A record taken in record-only mode with the model attached (autocastgen.record with "
                   "autocastgen.attach); or --fp8");
  verb->add_option("--policy", options->policy, "The base policy the record was taken with")->required();
  verb->add_option("--dtype", options->dtype, "The lower-precision dtype to advise for (required with RECORD; "
                                              "bfloat16 by default with --fp8)")
      ->check(CLI::IsMember({"float16", "bfloat16"}));
  verb->add_option("--margin-bits", options->margin_bits,
                   "Move a place whose largest |value| comes within this many bits of the dtype's largest "
                   "finite value (default 1)");
  verb->add_option("--device", options->device,
                   "The device the record was taken on (a record does not say): checked against the base policy's");
  verb->add_option("--fp8", options->fp8,
                   "Propose fp8 places instead: run the model of SCRIPT.py (its globals `model` and `inputs`), keep "
                   "fp8 where a module's measured time improves and validation against float32 holds (docs/advise.md)");
  verb->add_option("-o,--output", options->output, "The policy file to write")->required();
  return [options] { return run_advise(*options); };
}

}  // namespace autocastgen::cli
