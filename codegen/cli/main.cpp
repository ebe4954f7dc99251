// Entry point of the `autocastgen` command line: dispatches to the verbs.
#include <iostream>
#include <map>

#include "cli/verbs.h"

int main(int argc, char** argv) {
  CLI::App app{"autocastgen: autocast wrappers and policies from op schemas"};
  app.set_version_flag("--version", std::string("autocastgen ") + AUTOCASTGEN_VERSION);
  app.require_subcommand(1);
  std::map<std::string, autocastgen::cli::VerbRunner> verbs;
  verbs["schema"] = autocastgen::cli::add_schema_verb(app);
  verbs["check"] = autocastgen::cli::add_check_verb(app);
  verbs["generate"] = autocastgen::cli::add_generate_verb(app);
  verbs["audit"] = autocastgen::cli::add_audit_verb(app);
  verbs["import"] = autocastgen::cli::add_import_verb(app);
  verbs["stats"] = autocastgen::cli::add_stats_verb(app);
  verbs["advise"] = autocastgen::cli::add_advise_verb(app);
  verbs["report"] = autocastgen::cli::add_report_verb(app);
  verbs["apply"] = autocastgen::cli::add_apply_verb(app);
  verbs["precision-map"] = autocastgen::cli::add_precision_map_verb(app);
  CLI11_PARSE(app, argc, argv);
  for (const CLI::App* sub : app.get_subcommands()) return verbs.at(sub->get_name())();
  return 2;
}
