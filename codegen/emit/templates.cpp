// Strict mustache rendering on kainjow: unknown names are collected and reported with locations.
#include "emit/templates.h"

#include <optional>
#include <set>
#include <string_view>
#include <utility>

#include <fmt/format.h>

namespace autocastgen::emit {

namespace {

namespace mustache = kainjow::mustache;

// A context that remembers every name the template asked for and the data did not have, and
// that finds partials among the templates only (never in the data, where a key could shadow one).
class StrictContext : public mustache::context<std::string> {
 public:
  StrictContext(const mustache::data* data, const std::map<std::string, mustache::data>& partials)
      : mustache::context<std::string>(data), partials_(partials) {}

  const mustache::data* get(const std::string& name) const override {
    const mustache::data* found = mustache::context<std::string>::get(name);
    if (!found) missing_.insert(name);
    return found;
  }
  const mustache::data* get_partial(const std::string& name) const override {
    auto it = partials_.find(name);
    if (it != partials_.end()) return &it->second;
    missing_partials_.insert(name);
    return nullptr;
  }

  mutable std::set<std::string> missing_;
  mutable std::set<std::string> missing_partials_;

 private:
  const std::map<std::string, mustache::data>& partials_;
};

// The mustache spec's standalone rule: a line holding only a section, inverted-section, closing,
// comment or partial tag (and whitespace) leaves no line behind. kainjow applies it only to
// sections it renders (and then also drops a blank line that follows), so the rule is applied here
// instead: such lines get a marker before rendering, and lines left holding nothing but markers
// are removed afterwards. The marker keeps kainjow's own rule from firing.
constexpr char kStandaloneMarker = '\x01';

// The length of the standalone tag line at `at` (spaces or tabs, a tag opening with one of
// {{# {{^ {{/ {{! {{> and running to the first }, spaces or tabs, a newline), with its tag in
// `tag`; 0 when the line is not one. The tag may span lines.
size_t standalone_line(std::string_view text, size_t at, std::string_view& tag) {
  const size_t open = text.find_first_not_of(" \t", at);
  if (open == std::string_view::npos || text.substr(open, 2) != "{{" || open + 2 >= text.size() ||
      std::string_view("#^/!>").find(text[open + 2]) == std::string_view::npos)
    return 0;
  const size_t close = text.find('}', open + 3);
  if (close == std::string_view::npos || text.substr(close, 2) != "}}") return 0;
  const size_t newline = text.find_first_not_of(" \t", close + 2);
  if (newline == std::string_view::npos || text[newline] != '\n') return 0;
  tag = text.substr(open, close + 2 - open);
  return newline + 1 - at;
}

std::string mark_standalone_lines(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t at = 0;
  while (at < text.size()) {
    std::string_view tag;
    if (const size_t length = standalone_line(text, at, tag)) {
      (out += tag) += kStandaloneMarker;
      out += '\n';
      at += length;
      continue;
    }
    const size_t newline = text.find('\n', at);
    const size_t end = newline == std::string_view::npos ? text.size() : newline + 1;
    out += text.substr(at, end - at);
    at = end;
  }
  return out;
}

// The offset and length of the first tag in `text` that names `name`: {{name}}, {{#name}},
// {{^name}}, {{&name}}, {{{name}}}, or for a partial {{>name}}; whitespace may surround the name.
std::optional<std::pair<size_t, size_t>> find_tag(std::string_view text, std::string_view name, bool partial) {
  constexpr std::string_view kSpace = " \t\n\r\f\v";
  for (size_t open = text.find("{{"); open != std::string_view::npos; open = text.find("{{", open + 1)) {
    size_t at = open + 2;
    if (partial) {
      if (at >= text.size() || text[at] != '>') continue;
      ++at;
    } else if (at < text.size() && std::string_view("#^&{").find(text[at]) != std::string_view::npos) {
      ++at;
    }
    at = text.find_first_not_of(kSpace, at);
    if (at == std::string_view::npos || text.substr(at, name.size()) != name) continue;
    at = text.find_first_not_of(kSpace, at + name.size());
    if (at == std::string_view::npos) continue;
    if (!partial && text.substr(at, 3) == "}}}") return std::pair(open, at + 3 - open);
    if (text.substr(at, 2) == "}}") return std::pair(open, at + 2 - open);
  }
  return std::nullopt;
}

std::string remove_standalone_lines(const std::string& rendered) {
  std::string out;
  out.reserve(rendered.size());
  size_t start = 0;
  while (start < rendered.size()) {
    size_t end = rendered.find('\n', start);
    end = end == std::string::npos ? rendered.size() : end + 1;
    const std::string_view line(rendered.data() + start, end - start);
    const bool marked = line.find(kStandaloneMarker) != std::string_view::npos;
    const bool only_markers = line.find_first_not_of(std::string(" \t\n") + kStandaloneMarker) == std::string_view::npos;
    if (!(marked && only_markers))
      for (char c : line)
        if (c != kStandaloneMarker) out += c;
    start = end;
  }
  return out;
}

std::string template_name(const std::string& file_name) {
  constexpr std::string_view kSuffix = ".mustache";
  return file_name.ends_with(kSuffix) ? file_name.substr(0, file_name.size() - kSuffix.size()) : file_name;
}

}  // namespace

std::optional<TemplateSet> TemplateSet::builtin(const std::string& target, SourceManager& sources, DiagnosticEngine& diags) {
  TemplateSet set(sources);
  const std::string prefix = target + "/";
  for (size_t i = 0; i < kEmbeddedTemplateCount; ++i) {
    const std::string path = kEmbeddedTemplates[i].path;
    if (!path.starts_with(prefix)) continue;
    set.files_[template_name(path.substr(prefix.size()))] = sources.add_buffer("<builtin>/" + path, kEmbeddedTemplates[i].text);
  }
  if (set.files_.empty()) {
    diags.error({}, fmt::format("no built-in templates for target '{}'", target));
    return std::nullopt;
  }
  return set;
}

std::optional<TemplateSet> TemplateSet::load(const std::filesystem::path& dir, SourceManager& sources, DiagnosticEngine& diags) {
  TemplateSet set(sources);
  std::error_code ec;
  std::vector<std::filesystem::path> paths;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec))
    if (entry.is_regular_file() && entry.path().extension() == ".mustache") paths.push_back(entry.path());
  if (ec) {
    diags.error({}, fmt::format("cannot read template directory '{}': {}", dir.string(), ec.message()));
    return std::nullopt;
  }
  std::sort(paths.begin(), paths.end());
  for (const auto& path : paths) {
    std::string error;
    std::optional<uint32_t> file = sources.add_file(path, error);
    if (!file) {
      diags.error({}, fmt::format("cannot read template '{}': {}", path.string(), error));
      return std::nullopt;
    }
    set.files_[template_name(path.filename().string())] = *file;
  }
  if (set.files_.empty()) {
    diags.error({}, fmt::format("template directory '{}' has no *.mustache files", dir.string()));
    return std::nullopt;
  }
  return set;
}

std::optional<std::string> TemplateSet::render(const std::string& name, const TemplateData& data,
                                               DiagnosticEngine& diags) const {
  auto it = files_.find(name);
  if (it == files_.end()) {
    std::vector<std::string> names;
    for (const auto& [n, file] : files_) names.push_back(n);
    diags.error({}, fmt::format("template '{}' is missing (have: {})", name, fmt::join(names, ", ")));
    return std::nullopt;
  }
  // Partials are the other templates of the set.
  std::map<std::string, mustache::data> partials;
  for (const auto& [partial_name, file] : files_) {
    if (partial_name != name)
      partials.emplace(partial_name,
                       mustache::partial([stripped = mark_standalone_lines(sources_->text(file))] { return stripped; }));
  }
  mustache::mustache tmpl{mark_standalone_lines(sources_->text(it->second))};
  if (!tmpl.is_valid()) {
    diags.error({it->second, 0}, fmt::format("invalid template: {}", tmpl.error_message()));
    return std::nullopt;
  }
  tmpl.set_custom_escape([](const std::string& s) { return s; });  // C++, not HTML
  StrictContext context(&data, partials);
  std::string out = tmpl.render(context);
  if (!tmpl.error_message().empty()) {
    diags.error({it->second, 0}, fmt::format("template error: {}", tmpl.error_message()));
    return std::nullopt;
  }
  if (context.missing_.empty() && context.missing_partials_.empty()) return remove_standalone_lines(out);

  // Point at the first use of each missing name in any template of the set.
  auto report = [&](const std::string& missing, bool partial) {
    for (const auto& [n, file] : files_) {
      if (const auto tag = find_tag(sources_->text(file), missing, partial)) {
        diags.error({file, static_cast<uint32_t>(tag->first)},
                    fmt::format("template {} '{}' is not provided by the {} emitter", partial ? "partial" : "variable",
                                missing, name),
                    static_cast<uint32_t>(tag->second));
        return;
      }
    }
    diags.error({it->second, 0}, fmt::format("template {} '{}' is not provided", partial ? "partial" : "variable", missing));
  };
  for (const std::string& missing : context.missing_) report(missing, false);
  for (const std::string& missing : context.missing_partials_) report(missing, true);
  return std::nullopt;
}

}  // namespace autocastgen::emit
