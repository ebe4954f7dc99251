// Entry point of the `autocastgen` command line: dispatches to the verbs.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <iostream>
#include <map>
#include <new>
#include <string>

#include "cli/verbs.h"
#include "support/strings.h"

namespace {

int run(int argc, char** argv) {
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

// Note [the CLI never aborts]: whatever a verb meets (an input past a limit that was missed, memory
// running out under `ulimit -v`, a library's exception), the process ends with one line
// `autocastgen: error: ...` and exit status 1, never std::terminate's SIGABRT and core dump. The
// message for std::bad_alloc is a literal: there may be no memory to format one.
int report_exception(const char* what) {
  std::fflush(stdout);
  std::fprintf(stderr, "autocastgen: error: %s\n", what);
  return 1;
}

// Output to a full disk or a closed pipe must not end in status 0 (`autocastgen stats --json >
// out.json` with no room left would leave a cut file and report success).
int checked_stdout(int status) {
  std::cout.flush();
  if (std::cout.good() && std::fflush(stdout) == 0 && !std::ferror(stdout)) return status;
  std::fprintf(stderr, "autocastgen: error: cannot write the output: %s\n", std::strerror(errno != 0 ? errno : EIO));
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return checked_stdout(run(argc, argv));
  } catch (const std::bad_alloc&) {
    return report_exception("out of memory (the input is too large for the memory this process may use)");
  } catch (const std::exception& e) {
    return report_exception(autocastgen::terminal_text(e.what()).c_str());
  } catch (...) {
    return report_exception("an unknown exception (a bug in autocastgen)");
  }
}
