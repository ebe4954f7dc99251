// `autocastgen schema`: every schema in canonical form with its kind, one line each, in file order.
#include <iostream>
#include <memory>
#include <string>

#include "cli/inputs.h"
#include "cli/verbs.h"

namespace autocastgen::cli {

VerbRunner add_schema_verb(CLI::App& app) {
  auto files = std::make_shared<std::vector<std::filesystem::path>>();
  CLI::App* verb = app.add_subcommand("schema", "Print every op schema in canonical form with its kind");
  verb->add_option("--schemas", *files,
                   "Op-schema files (native_functions.yaml format); default: the installed PyTorch's")
      ->check(CLI::ExistingFile);
  verb->footer("Output: one line per `func:` entry, `<canonical schema>\\t<functional|inplace|out|mutable|scratch>`.");
  return [files] {
    SourceManager sources;
    DiagnosticEngine diags(sources, std::cerr);
    std::optional<model::SchemaSet> set = load_schemas(*files, sources, diags);
    if (!set) return 1;
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
