// `autocastgen report FILE.json [FILE2.json] -o report.html`: one self-contained HTML page from a
// statistics file, or what changed between two (docs/report.md). The page is made once, by the
// Python package (autocastgen/reporter/), which this verb runs as `python -m autocastgen.reporter`
// with the interpreter and the package beside the CLI, as `advise` does (Note [advise runs the
// package] in verb_advise.cpp): `autocastgen.report(...)` and this verb write the same page and
// refuse the same files with the same located errors: the verb first checks each file with the
// stats verb's reader (Note [reading a statistics file] in stats_file.cpp), so a bad file gets
// `file:line:col: error:` from the CLI, never a traceback from Python.
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cli/stats_file.h"
#include "cli/verbs.h"
#include "host/python.h"
#include "support/diagnostics.h"
#include "support/source_manager.h"

namespace autocastgen::cli {

namespace {

struct ReportOptions {
  std::vector<std::string> files;
  std::string output;
  std::string title;
};

int run_report(const ReportOptions& options) {
  {
    SourceManager sources;
    DiagnosticEngine diags(sources, std::cerr);
    for (const std::string& file : options.files) (void)read_stats(file, sources, diags);  // every file's errors
    if (diags.has_errors()) {
      std::cerr << fmt::format("autocastgen: {}; no report written\n", diags.error_summary());
      return 1;
    }
  }
  std::vector<std::string> args = options.files;
  args.insert(args.end(), {"-o", options.output});
  if (!options.title.empty()) args.insert(args.end(), {"--title", options.title});
  return run_own_python_module("reporter/__main__", "autocastgen.reporter", args);
}

}  // namespace

VerbRunner add_report_verb(CLI::App& app) {
  auto options = std::make_shared<ReportOptions>();
  CLI::App* verb = app.add_subcommand(
      "report", "One self-contained HTML page from a statistics file (module tree by dtype, sortable tables, "
                "float16 headroom, non-finite events), or what changed between two (docs/report.md)");
  verb->add_option("FILES", options->files, "One or two statistics files (AUTOCASTGEN_STATS, autocastgen.stats(path), "
                                             "autocastgen.record(path))")
      ->required()
      ->expected(1, 2);
  verb->add_option("-o,--output", options->output, "The HTML file to write")->required();
  verb->add_option("--title", options->title, "The page's title (default: the files' names)");
  return [options] { return run_report(*options); };
}

}  // namespace autocastgen::cli
