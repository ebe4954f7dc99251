// `autocastgen schema`: every schema in canonical form with its kind, one line each, in file order.
#include <iostream>
#include <memory>
#include <string>

#include "cli/inputs.h"
#include "cli/verbs.h"

namespace autocastgen::cli {

VerbRunner add_schema_verb(CLI::App& app) {
  struct Options {
    std::vector<std::filesystem::path> schemas;
    std::string torch_version;
  };
  auto options = std::make_shared<Options>();
  CLI::App* verb = app.add_subcommand("schema", "Print every op schema in canonical form with its kind");
  add_schema_options(*verb, options->schemas, options->torch_version);
  verb->footer("Output: one line per `func:` entry, `<canonical schema>\\t<functional|inplace|out|mutable|scratch>`.");
  return [options] {
    SourceManager sources;
    DiagnosticEngine diags(sources, std::cerr);
    std::optional<SchemaInputs> inputs = load_schema_inputs(options->schemas, options->torch_version, sources, diags);
    if (!inputs) return 1;
    const model::SchemaSet* set = &inputs->schemas;
    std::string out;
    out.reserve(set->schemas().size() * 96);
    for (const model::FunctionSchema& schema : set->schemas()) {
      out += schema.str();
      out += '\t';
      out += model::spelling(schema.kind());
      out += '\n';
    }
    std::cout << out;
    return 0;
  };
}

}  // namespace autocastgen::cli
