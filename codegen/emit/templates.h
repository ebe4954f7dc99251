// Mustache templates for the emitters: built-in ones embedded at build time, or a user's directory.
// Rendering is strict: a variable, section or partial the data does not provide is an error that
// names the template file and line, never an empty string.
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>

#include <kainjow/mustache.hpp>

#include "support/diagnostics.h"

namespace autocastgen::emit {

using TemplateData = kainjow::mustache::data;

class TemplateSet {
 public:
  // The templates shipped with autocastgen for `target` (e.g. "torch"), registered in `sources`
  // under the name `<builtin>/<target>/<file>` so diagnostics can point into them.
  [[nodiscard]] static std::optional<TemplateSet> builtin(const std::string& target, SourceManager& sources,
                                                          DiagnosticEngine& diags);
  // Every `*.mustache` file of `dir`; a file named `x.mustache` is template (and partial) `x`.
  [[nodiscard]] static std::optional<TemplateSet> load(const std::filesystem::path& dir, SourceManager& sources,
                                                       DiagnosticEngine& diags);

  // Renders template `name`; partials `{{> p}}` come from this set. Reports problems to `diags`.
  [[nodiscard]] std::optional<std::string> render(const std::string& name, const TemplateData& data,
                                                  DiagnosticEngine& diags) const;

  // Template name -> source buffer id (for hashing inputs and for depfiles).
  [[nodiscard]] const std::map<std::string, uint32_t>& files() const { return files_; }

 private:
  explicit TemplateSet(const SourceManager& sources) : sources_(&sources) {}
  const SourceManager* sources_;
  std::map<std::string, uint32_t> files_;
};

// Built-in templates, compiled into the binary (see cmake/EmbedTemplates.cmake).
struct EmbeddedTemplate {
  const char* path;  // `<target>/<file>.mustache`
  const char* text;
};
extern const EmbeddedTemplate kEmbeddedTemplates[];
extern const size_t kEmbeddedTemplateCount;

}  // namespace autocastgen::emit
