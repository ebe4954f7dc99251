// Located YAML trees from yaml-cpp events; a two-thread fast path for big top-level sequences.
#include "support/yaml.h"

#include <algorithm>
#include <map>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/exceptions.h>
#include <yaml-cpp/parser.h>

namespace autocastgen {

const YamlNode* YamlNode::find(std::string_view key) const {
  for (const Pair& pair : pairs_)
    if (pair.first.is_scalar() && pair.first.scalar() == key) return &pair.second;
  return nullptr;
}

std::optional<SourceLocation> YamlNode::exact_text_location() const {
  if (!text_exact_) return std::nullopt;
  return SourceLocation{location_.file, text_offset_};
}

std::string_view YamlNode::describe() const {
  switch (kind_) {
    case Kind::null: return "an empty value";
    case Kind::scalar: return "a scalar";
    case Kind::sequence: return "a sequence";
    case Kind::mapping: return "a mapping";
  }
  return "a value";
}

namespace {

bool is_yaml_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// A scalar event's mark sits on its properties (`&anchor`, `!tag`) when it has any: the offset
// of the scalar's own first byte.
uint32_t skip_properties(std::string_view buffer, uint32_t offset) {
  while (offset < buffer.size() && (buffer[offset] == '&' || buffer[offset] == '!')) {
    if (buffer.substr(offset, 2) == "!<") {
      const size_t close = buffer.find('>', offset);
      if (close == std::string_view::npos) return offset;
      offset = static_cast<uint32_t>(close + 1);
    } else {
      while (offset < buffer.size() && !is_yaml_space(buffer[offset])) ++offset;
    }
    while (offset < buffer.size() && is_yaml_space(buffer[offset])) ++offset;
  }
  return offset;
}

// Whether the quoted scalar opening at `open` closes before `end`.
bool quote_closes(std::string_view buffer, uint32_t open, uint32_t end) {
  const char quote = buffer[open];
  for (uint32_t i = open + 1; i < end; ++i) {
    if (quote == '"' && buffer[i] == '\\') {
      ++i;
    } else if (buffer[i] == quote) {
      if (quote == '\'' && i + 1 < end && buffer[i + 1] == '\'') ++i;  // '' is an escaped quote
      else return true;
    }
  }
  return false;
}

}  // namespace

// Builds YamlNodes from parser events. Marks are relative to the parsed text, which starts at
// `base_offset` in the buffer when a chunk of a file is parsed on its own.
class YamlTreeBuilder : public YAML::EventHandler {
 public:
  YamlTreeBuilder(std::string_view buffer, uint32_t file, uint32_t base_offset)
      : buffer_(buffer), file_(file), base_offset_(base_offset) {}

  // yaml-cpp accepts a quoted scalar that is still open at the end of its input, taking all the
  // rest as its value. Such a scalar is the last one; this finds it. (Note [unterminated quotes])
  [[nodiscard]] std::optional<YAML::Mark> unterminated_quote(uint32_t end) const {
    if (!last_scalar_) return std::nullopt;
    const uint32_t start = skip_properties(buffer_, base_offset_ + static_cast<uint32_t>(std::max(last_scalar_->pos, 0)));
    if (start >= end || (buffer_[start] != '"' && buffer_[start] != '\'') || quote_closes(buffer_, start, end))
      return std::nullopt;
    return last_scalar_;
  }

  std::optional<YamlNode> take_root() { return std::move(root_); }
  static void append_items(YamlNode& into, YamlNode&& from) {
    for (YamlNode& item : from.items_) into.items_.push_back(std::move(item));
  }

  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    add(YamlNode(YamlNode::Kind::null, implicit_null_location(at(mark))), anchor, 1);
  }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    auto it = anchors_.find(anchor);
    if (it == anchors_.end()) {
      add(YamlNode(YamlNode::Kind::null, at(mark)), 0, 1);
      return;
    }
    alias_nodes_ += it->second.second;
    if (alias_nodes_ > kMaxYamlAliasNodes)
      throw YAML::ParserException(mark, fmt::format("aliases expand to more than {} nodes", kMaxYamlAliasNodes));
    add(YamlNode(it->second.first), 0, it->second.second);
  }
  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor, const std::string& value) override {
    YamlNode node(YamlNode::Kind::scalar, at(mark));
    node.scalar_ = value;
    last_scalar_ = mark;
    // The value's bytes are in the buffer at the mark (plain) or one past it (quoted, no escapes),
    // past any anchor or tag.
    const uint32_t offset = skip_properties(buffer_, node.location_.offset);
    for (uint32_t skip : {0u, 1u}) {
      if (buffer_.substr(std::min<size_t>(offset + skip, buffer_.size()), value.size()) == value) {
        node.text_exact_ = true;
        node.text_offset_ = offset + skip;
        node.source_length_ = static_cast<uint32_t>(value.size() + 2 * skip);
        break;
      }
    }
    add(std::move(node), anchor, 1);
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor, YAML::EmitterStyle::value) override {
    open_.push_back({YamlNode(YamlNode::Kind::sequence, at(mark)), anchor, std::nullopt, 1});
  }
  void OnSequenceEnd() override { close(); }
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor, YAML::EmitterStyle::value) override {
    open_.push_back({YamlNode(YamlNode::Kind::mapping, at(mark)), anchor, std::nullopt, 1});
  }
  void OnMapEnd() override { close(); }

 private:
  struct Open {
    YamlNode node;
    YAML::anchor_t anchor;
    std::optional<YamlNode> pending_key;
    size_t nodes;  // this node and everything under it so far
  };

  // yaml-cpp marks an empty value (`key:` with nothing after it) at the next token, often on a
  // later line; place it right after the last content before that token instead. Written nulls
  // (`~`, `null`) and nulls with an anchor or tag keep their mark.
  SourceLocation implicit_null_location(SourceLocation mark) const {
    const std::string_view rest = buffer_.substr(std::min<size_t>(mark.offset, buffer_.size()));
    for (std::string_view written : {"~", "null", "Null", "NULL", "&", "!"})
      if (rest.starts_with(written)) return mark;
    uint32_t offset = std::min<uint32_t>(mark.offset, static_cast<uint32_t>(buffer_.size()));
    while (offset > 0 && is_yaml_space(buffer_[offset - 1])) --offset;
    return {mark.file, offset};
  }

  SourceLocation at(const YAML::Mark& mark) const {
    return {file_, base_offset_ + static_cast<uint32_t>(std::max(mark.pos, 0))};
  }

  void close() {
    Open done = std::move(open_.back());
    open_.pop_back();
    add(std::move(done.node), done.anchor, done.nodes);
  }

  // `nodes`: how many nodes `node` holds, itself included (what an alias of it would copy).
  void add(YamlNode node, YAML::anchor_t anchor, size_t nodes) {
    if (anchor != 0) anchors_.insert_or_assign(anchor, std::pair{node, nodes});
    if (open_.empty()) {
      root_ = std::move(node);
      return;
    }
    Open& parent = open_.back();
    parent.nodes += nodes;
    if (parent.node.kind_ == YamlNode::Kind::sequence) {
      parent.node.items_.push_back(std::move(node));
    } else if (!parent.pending_key) {
      parent.pending_key = std::move(node);
    } else {
      parent.node.pairs_.emplace_back(std::move(*parent.pending_key), std::move(node));
      parent.pending_key.reset();
    }
  }

  std::string_view buffer_;
  uint32_t file_;
  uint32_t base_offset_;
  std::vector<Open> open_;
  std::map<YAML::anchor_t, std::pair<YamlNode, size_t>> anchors_;
  size_t alias_nodes_ = 0;
  std::optional<YamlNode> root_;
  std::optional<YAML::Mark> last_scalar_;
};

namespace {

struct ChunkResult {
  std::optional<YamlNode> root;
  bool failed = false;
  bool multiple_documents = false;
  SourceLocation second_document;  // where the second document's content starts
  std::optional<YAML::Mark> error_mark;
  std::string error_message;
};

ChunkResult parse_text(std::string_view buffer, uint32_t file, uint32_t begin, uint32_t end) {
  ChunkResult result;
  std::istringstream in{std::string(buffer.substr(begin, end - begin))};
  try {
    YAML::Parser parser(in);
    YamlTreeBuilder builder(buffer, file, begin);
    if (parser.HandleNextDocument(builder)) {
      result.root = builder.take_root();
      YamlTreeBuilder extra(buffer, file, begin);
      if (parser.HandleNextDocument(extra)) {
        result.multiple_documents = true;
        if (std::optional<YamlNode> second = extra.take_root()) result.second_document = second->location();
      }
      std::optional<YAML::Mark> open = builder.unterminated_quote(end);
      if (!open) open = extra.unterminated_quote(end);
      if (open) throw YAML::ParserException(*open, "missing closing quote");
    }
  } catch (const YAML::Exception& e) {
    result.failed = true;
    result.error_mark = e.mark;
    result.error_message = e.msg;
  }
  return result;
}

// Offsets where a line starts with "- " at column 0: each begins a new item of the top-level
// block sequence (deeper content must be indented, so it cannot look like this).
//
// Note [unterminated quotes]
// One exception: yaml-cpp lets a quoted scalar continue on a line that starts with "- " at
// column 0, so a split can land inside one. The first chunk then ends in an open quote, which
// yaml-cpp would accept (the value running to the end of the chunk); parse_text rejects that, as
// PyYAML does for a whole file, so the chunked parse fails and the whole file is parsed instead.
std::vector<uint32_t> chunk_starts(std::string_view text, size_t chunks) {
  std::vector<uint32_t> starts;
  if (!text.starts_with("- ")) return starts;
  // Directives, document markers, flow collections or anchors at top level: use the plain path.
  for (std::string_view marker : {"\n%", "\n---", "\n...", "\n[", "\n{", "\n&", "\n*"})
    if (text.find(marker) != std::string_view::npos) return starts;
  starts.push_back(0);
  for (size_t i = 1; i < chunks; ++i) {
    size_t pos = text.find("\n- ", text.size() * i / chunks);
    if (pos == std::string_view::npos) break;
    if (pos + 1 > starts.back()) starts.push_back(static_cast<uint32_t>(pos + 1));
  }
  return starts;
}

void report_tab_indentation(const SourceManager& sources, uint32_t file, std::string_view text, DiagnosticEngine& diags) {
  size_t line_start = 0;
  while (line_start < text.size()) {
    size_t i = line_start;
    while (i < text.size() && text[i] == ' ') ++i;
    if (i < text.size() && text[i] == '\t') {
      diags.error({file, static_cast<uint32_t>(i)}, "tab character in indentation; YAML allows only spaces");
    }
    const size_t newline = text.find('\n', line_start);
    if (newline == std::string_view::npos) break;
    line_start = newline + 1;
  }
}

}  // namespace

std::optional<YamlNode> parse_yaml(const SourceManager& sources, uint32_t file, DiagnosticEngine& diags,
                                   const YamlParseOptions& options) {
  const std::string_view text = sources.text(file);
  const size_t errors_before = diags.error_count();
  report_tab_indentation(sources, file, text, diags);
  if (diags.error_count() != errors_before) return std::nullopt;
  // yaml-cpp drops a byte-order mark without counting it in its marks: parse from past it.
  const uint32_t begin = text.starts_with("\xEF\xBB\xBF") ? 3 : 0;

  // Big files (native_functions.yaml is ~600 KB) parse in two halves on two threads; any problem
  // in a half falls back to one whole-file parse, so diagnostics are always the whole-file ones.
  const size_t threads = options.threads ? options.threads : std::clamp<size_t>(std::thread::hardware_concurrency(), 1, 2);
  if (text.size() >= options.min_parallel_bytes && threads > 1) {
    const std::vector<uint32_t> starts = chunk_starts(text.substr(begin), threads);
    if (starts.size() > 1) {
      std::vector<ChunkResult> results(starts.size());
      std::vector<std::thread> workers;
      for (size_t i = 1; i < starts.size(); ++i) {
        const uint32_t end = i + 1 < starts.size() ? begin + starts[i + 1] : static_cast<uint32_t>(text.size());
        workers.emplace_back([&, i, end] { results[i] = parse_text(text, file, begin + starts[i], end); });
      }
      results[0] = parse_text(text, file, begin, begin + starts[1]);
      for (std::thread& worker : workers) worker.join();
      const bool all_sequences = std::all_of(results.begin(), results.end(), [](const ChunkResult& r) {
        return !r.failed && !r.multiple_documents && r.root && r.root->is_sequence();
      });
      if (all_sequences) {
        YamlNode merged = std::move(*results[0].root);
        for (size_t i = 1; i < results.size(); ++i) YamlTreeBuilder::append_items(merged, std::move(*results[i].root));
        return merged;
      }
    }
  }

  ChunkResult whole = parse_text(text, file, begin, static_cast<uint32_t>(text.size()));
  if (whole.failed) {
    SourceLocation where{file, begin + static_cast<uint32_t>(std::clamp<int>(whole.error_mark ? whole.error_mark->pos : 0, 0,
                                                                             static_cast<int>(text.size() - begin)))};
    if (whole.error_mark && whole.error_mark->line >= 0) {
      const auto line = static_cast<uint32_t>(whole.error_mark->line);
      where = sources.location_of(file, line + 1, static_cast<uint32_t>(whole.error_mark->column + 1) + (line == 0 ? begin : 0));
    }
    diags.error(where, fmt::format("invalid YAML: {}", whole.error_message));
    return std::nullopt;
  }
  if (whole.multiple_documents) {
    const SourceLocation where = whole.second_document.valid() ? whole.second_document : SourceLocation{file, 0};
    diags.error(where, "expected a single YAML document, found another one here");
    return std::nullopt;
  }
  if (!whole.root) return YamlNode(YamlNode::Kind::null, {file, 0});
  return std::move(whole.root);
}

}  // namespace autocastgen
