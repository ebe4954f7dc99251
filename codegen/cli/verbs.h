// The CLI verbs: each registers its options on the app and returns its runner.
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

namespace autocastgen::cli {

// Registers a subcommand on `app`; the returned function runs it and gives the exit status.
using VerbRunner = std::function<int()>;
VerbRunner add_schema_verb(CLI::App& app);
VerbRunner add_check_verb(CLI::App& app);
VerbRunner add_generate_verb(CLI::App& app);
VerbRunner add_audit_verb(CLI::App& app);   // audit coverage | audit diff
VerbRunner add_import_verb(CLI::App& app);
VerbRunner add_advise_verb(CLI::App& app);  // the policy advisor's range proposal (docs/advise.md)
VerbRunner add_report_verb(CLI::App& app);  // the precision report, one HTML page (docs/report.md)
VerbRunner add_apply_verb(CLI::App& app);          // a policy baked into a saved program (docs/export.md)
VerbRunner add_precision_map_verb(CLI::App& app);  // a saved program's casts per op and module
VerbRunner add_stats_verb(CLI::App& app);   // per-op autocast statistics files (docs/insight.md)  // needs the optional importer; says so when it is absent

}  // namespace autocastgen::cli
