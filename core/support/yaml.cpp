// Located YAML trees from yaml-cpp events.
#include "support/yaml.h"

#include <algorithm>
#include <map>
#include <istream>
#include <streambuf>

#include <fmt/format.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/exceptions.h>
#include <yaml-cpp/parser.h>

#include "support/strings.h"
#include "support/yaml_text.h"

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

std::string_view YamlNode::describe_json() const {
  switch (kind_) {
    case Kind::null: return "null";
    case Kind::scalar: return "a scalar";
    case Kind::sequence: return "an array";
    case Kind::mapping: return "an object";
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

// Offset of the quote closing the quoted scalar that opens at `open`, if it closes before `end`.
std::optional<uint32_t> closing_quote(std::string_view buffer, uint32_t open, uint32_t end) {
  const char quote = buffer[open];
  for (uint32_t i = open + 1; i < end; ++i) {
    if (quote == '"' && buffer[i] == '\\') {
      ++i;
    } else if (buffer[i] == quote) {
      if (quote == '\'' && i + 1 < end && buffer[i + 1] == '\'') ++i;  // '' is an escaped quote
      else return i;
    }
  }
  return std::nullopt;
}

}  // namespace

// Builds YamlNodes from parser events. Marks are relative to the parsed text, which starts at
// `base_offset` in the buffer (past a byte-order mark).
class YamlTreeBuilder : public YAML::EventHandler {
 public:
  // `prefix`: bytes yaml-cpp reads before the text (Note [a flow collection at the top]).
  YamlTreeBuilder(std::string_view buffer, uint32_t file, uint32_t base_offset, int prefix)
      : buffer_(buffer), file_(file), base_offset_(base_offset), prefix_(prefix) {}

  // Whether a scalar starting at `offset` is about to become a key of an implicit (`key: value`)
  // entry of a block mapping.
  [[nodiscard]] bool is_block_mapping_key(uint32_t offset) const {
    if (open_.empty() || open_.back().flow || open_.back().node.kind_ != YamlNode::Kind::mapping ||
        open_.back().pending_key)
      return false;
    uint32_t before = std::min<uint32_t>(offset, static_cast<uint32_t>(buffer_.size()));
    while (before > 0 && (buffer_[before - 1] == ' ' || buffer_[before - 1] == '\t')) --before;
    return before == 0 || buffer_[before - 1] != '?';  // `? key` may have its ':' lines later
  }

  // Whether the key scalar `node`, whose text starts at `offset`, is on one line and followed by
  // ':' on it, as an implicit key must be.
  [[nodiscard]] bool followed_by_colon(const YamlNode& node, uint32_t offset) const {
    uint32_t end = 0;
    if (offset < buffer_.size() && (buffer_[offset] == '"' || buffer_[offset] == '\'')) {
      const std::optional<uint32_t> close = closing_quote(buffer_, offset, static_cast<uint32_t>(buffer_.size()));
      if (!close || buffer_.substr(offset, *close - offset).find('\n') != std::string_view::npos) return false;
      end = *close + 1;
    } else if (node.text_exact_) {
      end = node.text_offset_ + static_cast<uint32_t>(node.scalar_.size());
    } else {
      return false;  // a plain scalar folded from several lines
    }
    while (end < buffer_.size() && (buffer_[end] == ' ' || buffer_[end] == '\t')) ++end;
    return end < buffer_.size() && buffer_[end] == ':';
  }

  // The innermost `[` or `{` still open (after a parse error: the one yaml-cpp found unclosed).
  [[nodiscard]] std::optional<SourceLocation> innermost_open_flow() const {
    for (auto it = open_.rbegin(); it != open_.rend(); ++it)
      if (it->flow) return it->node.location();
    return std::nullopt;
  }

  // yaml-cpp accepts a quoted scalar that is still open at the end of its input, taking all the
  // rest as its value. Such a scalar is the last one; this finds it. (Note [unterminated quotes])
  [[nodiscard]] std::optional<YAML::Mark> unterminated_quote(uint32_t end) const {
    if (!last_scalar_) return std::nullopt;
    const uint32_t start = skip_properties(buffer_, offset_of(*last_scalar_));
    if (start >= end || (buffer_[start] != '"' && buffer_[start] != '\'') || closing_quote(buffer_, start, end))
      return std::nullopt;
    return last_scalar_;
  }

  std::optional<YamlNode> take_root() { return std::move(root_); }

  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    count_node(mark);
    add(YamlNode(YamlNode::Kind::null, implicit_null_location(at(mark))), anchor, mark, {1, kNodeBytes});
  }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    auto it = anchors_.find(anchor);
    if (it == anchors_.end()) {
      count_node(mark);
      add(YamlNode(YamlNode::Kind::null, at(mark)), 0, mark, {1, kNodeBytes});
      return;
    }
    const Size size = it->second.second;
    count_copy(mark, size);
    nodes_ += size.nodes;
    check_nodes(mark);
    add(YamlNode(it->second.first), 0, mark, size);
  }
  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor, const std::string& value) override {
    count_node(mark);
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
    if (is_block_mapping_key(offset) && !followed_by_colon(node, offset)) {
      // yaml-cpp takes lone scalar lines in a block mapping as a key without a value, or reports
      // them at some later ':'. PyYAML rejects them, and so do we (Note [checking a split]).
      const std::string_view shown = std::string_view(value).substr(0, value.find('\n'));
      throw YAML::ParserException(mark, fmt::format("expected ':' after the mapping key '{}{}'", shown.substr(0, 40),
                                                    shown.size() > 40 ? "..." : ""));
    }
    add(std::move(node), anchor, mark, {1, kNodeBytes + value.size()});
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value style) override {
    check_depth(mark);
    count_node(mark);
    open_.push_back({YamlNode(YamlNode::Kind::sequence, at(mark)), anchor, mark, std::nullopt, {1, kNodeBytes},
                     style == YAML::EmitterStyle::Flow});
  }
  void OnSequenceEnd() override { close(); }
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value style) override {
    check_depth(mark);
    count_node(mark);
    open_.push_back({YamlNode(YamlNode::Kind::mapping, at(mark)), anchor, mark, std::nullopt, {1, kNodeBytes},
                     style == YAML::EmitterStyle::Flow});
  }
  void OnMapEnd() override { close(); }

 private:
  // What a node holds, itself included: what an anchor or an alias of it copies.
  struct Size {
    size_t nodes;
    size_t bytes;  // kNodeBytes a node, plus its scalar's bytes
  };
  static constexpr size_t kNodeBytes = sizeof(YamlNode);

  struct Open {
    YamlNode node;
    YAML::anchor_t anchor;
    YAML::Mark mark;
    std::optional<YamlNode> pending_key;
    Size size;  // this node and everything under it so far
    bool flow;  // `[...]` or `{...}`
  };

  // Note [yaml limits] in yaml.h: every node, and every byte that anchors and aliases copy.
  void count_node(const YAML::Mark& mark) {
    ++nodes_;
    check_nodes(mark);
  }
  void check_nodes(const YAML::Mark& mark) const {
    if (nodes_ > kMaxYamlNodes)
      throw YAML::ParserException(mark, fmt::format("more than {} nodes in one document", kMaxYamlNodes));
  }
  void count_copy(const YAML::Mark& mark, Size size) {
    copied_bytes_ += size.bytes;
    if (copied_bytes_ > kMaxYamlCopiedBytes)
      throw YAML::ParserException(mark, fmt::format("anchors and aliases copy more than {} MiB", kMaxYamlCopiedBytes >> 20));
  }

  // A collection opening at `mark` one level past kMaxYamlDepth ends the parse there.
  void check_depth(const YAML::Mark& mark) const {
    if (open_.size() >= kMaxYamlDepth)
      throw YAML::ParserException(mark, fmt::format("nesting deeper than {} levels", kMaxYamlDepth));
  }

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
    return {file_, offset_of(mark)};
  }

  uint32_t offset_of(const YAML::Mark& mark) const {
    return base_offset_ + static_cast<uint32_t>(std::max(mark.pos - prefix_, 0));
  }

  void close() {
    Open done = std::move(open_.back());
    open_.pop_back();
    add(std::move(done.node), done.anchor, done.mark, done.size);
  }

  // `size`: what `node` holds, itself included. An anchor keeps a copy of its node (`mark`: where
  // the node starts, for the error when that copy is one too many).
  void add(YamlNode node, YAML::anchor_t anchor, const YAML::Mark& mark, Size size) {
    if (anchor != 0) {
      count_copy(mark, size);
      anchors_.insert_or_assign(anchor, std::pair{node, size});
    }
    if (open_.empty()) {
      root_ = std::move(node);
      return;
    }
    Open& parent = open_.back();
    parent.size.nodes += size.nodes;
    parent.size.bytes += size.bytes;
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
  int prefix_;
  std::vector<Open> open_;
  std::map<YAML::anchor_t, std::pair<YamlNode, Size>> anchors_;
  size_t nodes_ = 0;
  size_t copied_bytes_ = 0;
  std::optional<YamlNode> root_;
  std::optional<YAML::Mark> last_scalar_;
};

namespace {

struct ParseResult {
  std::optional<YamlNode> root;
  bool failed = false;
  bool multiple_documents = false;
  SourceLocation second_document;  // where the second document's content starts
  std::optional<YAML::Mark> error_mark;
  std::string error_message;
  std::optional<SourceLocation> open_flow;  // with a failure: an unclosed `[` or `{`
};

// `prefix` then `text` as one stream for yaml-cpp, without a copy of the text.
class PrefixedStreamBuffer : public std::streambuf {
 public:
  PrefixedStreamBuffer(std::string_view prefix, std::string_view text) : text_(text) {
    if (prefix.empty()) {
      serve(text_);
      text_ = {};
    } else {
      serve(prefix);
    }
  }

 protected:
  int_type underflow() override {
    if (gptr() < egptr()) return traits_type::to_int_type(*gptr());
    if (text_.empty()) return traits_type::eof();
    serve(text_);
    text_ = {};
    return traits_type::to_int_type(*gptr());
  }

 private:
  void serve(std::string_view piece) {
    char* data = const_cast<char*>(piece.data());  // only read: a get area is non-const by type
    setg(data, data, data + piece.size());
  }
  std::string_view text_;  // still to serve
};

// Note [a flow collection at the top]
// A flow collection can be an implicit key (`[a, b]: c`), so yaml-cpp keeps every token of one
// that opens the document until it knows: a JSON file, one flow collection, is tokenized whole
// before the first event, ~160 bytes a token (668 MB for a 4 MB array, whatever the node limit).
// After `---` a key cannot start on the line, so a document whose first token is `[` or `{` is
// read as `--- ` and the text: yaml-cpp then keeps at most one entry's tokens. Marks count the
// prefix; the builder and the error location take it off.
constexpr std::string_view kFlowPrefix = "--- ";

bool starts_with_flow_collection(std::string_view text) {
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '#') {
      i = text.find('\n', i);
      if (i == std::string_view::npos) return false;
    } else if (!is_yaml_space(text[i])) {
      return text[i] == '[' || text[i] == '{';
    }
  }
  return false;
}

ParseResult parse_text(std::string_view buffer, uint32_t file, uint32_t begin, uint32_t end) {
  ParseResult result;
  const std::string_view text = buffer.substr(begin, end - begin);
  const std::string_view prefix = starts_with_flow_collection(text) ? kFlowPrefix : std::string_view();
  const int shift = static_cast<int>(prefix.size());
  PrefixedStreamBuffer stream(prefix, text);
  std::istream in(&stream);
  YamlTreeBuilder builder(buffer, file, begin, shift);
  YamlTreeBuilder extra(buffer, file, begin, shift);
  try {
    YAML::Parser parser(in);
    if (parser.HandleNextDocument(builder)) {
      result.root = builder.take_root();
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
    YAML::Mark mark = e.mark;
    if (mark.pos >= 0) mark.pos = std::max(mark.pos - shift, 0);
    if (mark.line == 0) mark.column = std::max(mark.column - shift, 0);
    result.error_mark = mark;
    result.error_message = e.msg;
    result.open_flow = extra.innermost_open_flow();
    if (!result.open_flow) result.open_flow = builder.innermost_open_flow();
  }
  return result;
}

}  // namespace

std::optional<YamlNode> parse_yaml(const SourceManager& sources, uint32_t file, DiagnosticEngine& diags,
                                   std::string_view language, std::string_view files, size_t max_bytes) {
  const std::string_view text = sources.text(file);
  if (text.size() > max_bytes) {
    diags.error({file, 0}, "file is " + input_too_large(max_bytes, files));
    return std::nullopt;
  }
  const size_t errors_before = diags.error_count();
  if (!check_bytes(file, text, diags, language, files)) return std::nullopt;
  report_tab_indentation(file, text, diags);
  if (diags.error_count() != errors_before) return std::nullopt;
  // yaml-cpp drops a byte-order mark without counting it in its marks: parse from past it.
  const uint32_t begin = text.starts_with("\xEF\xBB\xBF") ? 3 : 0;

  ParseResult whole = parse_text(text, file, begin, static_cast<uint32_t>(text.size()));
  if (whole.failed) {
    SourceLocation where{file, begin + static_cast<uint32_t>(std::clamp<int>(whole.error_mark ? whole.error_mark->pos : 0, 0,
                                                                             static_cast<int>(text.size() - begin)))};
    if (whole.error_mark && whole.error_mark->line >= 0) {
      const auto line = static_cast<uint32_t>(whole.error_mark->line);
      where = sources.location_of(file, line + 1, static_cast<uint32_t>(whole.error_mark->column + 1) + (line == 0 ? begin : 0));
    }
    diags.error(where, fmt::format("invalid {}: {}", language, whole.error_message));
    if (whole.open_flow && (whole.error_message.ends_with("flow not found") || whole.error_message == "illegal flow end"))
      diags.note(*whole.open_flow, fmt::format("the '{}' that is not closed", text[whole.open_flow->offset]));
    return std::nullopt;
  }
  if (whole.multiple_documents) {
    const SourceLocation where = whole.second_document.valid() ? whole.second_document : SourceLocation{file, 0};
    diags.error(where, fmt::format("expected a single {} document, found another one here", language));
    return std::nullopt;
  }
  if (!whole.root) return YamlNode(YamlNode::Kind::null, {file, 0});
  return std::move(whole.root);
}

}  // namespace autocastgen
