// The per-translation-unit pass: finds the TORCH_LIBRARY_IMPL blocks of autocast dispatch keys,
// their m.impl calls (also in the helpers a block passes its library to) and the file's module
// sections, and reads them into registrations (Note [what the importer recognises] in
// import/kernel_reader.cpp).
#pragma once

#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "import/clang_support.h"
#include "import/registrations.h"
#include "support/diagnostics.h"

namespace clang {
class FrontendAction;
}  // namespace clang

namespace autocastgen::import::detail {

// What the pass reads, over every file of one import.
struct ImportState {
  LocationMapper& mapper;
  DiagnosticEngine& diags;
  std::set<std::string> autocast_keys;
  std::vector<Registration> registrations;
  std::vector<ImportedSections> sections;
  std::vector<FoundBlock> blocks;
  std::filesystem::path directory;  // of the current compile command
};

// The action to run on one file (a clang::tooling::ToolInvocation's): adds what it registers to `state`.
std::unique_ptr<clang::FrontendAction> import_action(ImportState& state);

}  // namespace autocastgen::import::detail
