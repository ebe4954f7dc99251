// Reading statistics files: the checks behind `autocastgen stats` and `autocastgen report`.
#include "cli/stats_file.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "cli/inputs.h"
#include "support/strings.h"
#include "support/yaml.h"

namespace autocastgen::cli {

namespace fs = std::filesystem;

namespace {

std::optional<double> max_of(std::optional<double> a, std::optional<double> b) {
  if (!a || !b) return a ? a : b;
  return std::max(*a, *b);
}

std::optional<double> min_of(std::optional<double> a, std::optional<double> b) {
  if (!a || !b) return a ? a : b;
  return std::min(*a, *b);
}

}  // namespace

void RangeStats::add(const RangeStats& other) {
  calls += other.calls;
  input_max_abs = max_of(input_max_abs, other.input_max_abs);
  input_min_abs = min_of(input_min_abs, other.input_min_abs);
  output_max_abs = max_of(output_max_abs, other.output_max_abs);
  output_min_abs = min_of(output_min_abs, other.output_min_abs);
  output_elements += other.output_elements;
  float16_overflow += other.float16_overflow;
  float16_underflow += other.float16_underflow;
  bfloat16_overflow += other.bfloat16_overflow;
  bfloat16_underflow += other.bfloat16_underflow;
}

void OpStats::add(const OpStats& other) {
  calls += other.calls;
  casts += other.casts;
  cast_bytes += other.cast_bytes;
  cache_hits += other.cache_hits;
  cache_misses += other.cache_misses;
  cache_evictions += other.cache_evictions;
  compiled_calls += other.compiled_calls;
  outputs_checked += other.outputs_checked;
  nonfinite += other.nonfinite;
  output_max_abs = max_of(output_max_abs, other.output_max_abs);
  if (other.ranges) {
    if (!ranges) ranges = RangeStats{};
    ranges->add(*other.ranges);
  }
  for (const auto& [dtype, n] : other.ran_in) ran_in[dtype] += n;
  for (const auto& [reason, n] : other.fp8_skipped) fp8_skipped[reason] += n;
}

namespace {

// Note [reading a statistics file]: JSON is read with the YAML reader the other verbs use for
// manifests, so every problem has a file:line:col, and the limits of Note [yaml limits] hold
// (size, nodes, nesting; nothing recurses past kMaxYamlDepth). A file is refused as a whole when
// any entry is wrong: a report over part of a file would look complete. `autocastgen report`
// checks its files here before the Python reporter reads them, so the two verbs refuse the same
// files with the same errors. Numbers too large for their type (a 5000-digit count) are errors,
// quoted shortened; a name longer than kMaxStatsNameBytes (1 MiB), or a member name longer than
// kMaxStatsKeyBytes, is an error, one the runtime never writes (Note [names in statistics files]
// in core/support/stats_names.h); names are kept as written, and the verbs print them shortened
// and through terminal_text (Note [text for terminals]).
class StatsReader {
 public:
  explicit StatsReader(DiagnosticEngine& diags) : diags_(diags) {}

  std::optional<std::vector<OpStats>> run(const YamlNode& root) {
    const size_t errors_before = diags_.error_count();
    if (!root.is_mapping() || !root.find("version") || !root.find("ops")) {
      diags_.error(root.location(),
                   fmt::format("not an autocastgen statistics file: expected an object with 'version' and 'ops' (as "
                               "AUTOCASTGEN_STATS writes), found {}",
                               root.is_mapping() ? "an object without them" : root.describe_json()));
      return std::nullopt;
    }
    const YamlNode& version = *root.find("version");
    if (!version.is_scalar() || version.scalar() != "1") {
      diags_.error(version.location(), fmt::format("unsupported statistics file version '{}' (this autocastgen reads version 1)",
                                                   version.is_scalar() ? shortened(version.scalar()) : version.describe_json()));
      return std::nullopt;
    }
    const YamlNode& ops = *root.find("ops");
    std::vector<OpStats> out;
    if (!ops.is_sequence()) {
      diags_.error(ops.location(), fmt::format("'ops' must be an array of objects, found {}", ops.describe_json()));
      return std::nullopt;
    }
    std::map<std::tuple<std::string, std::string, bool, std::string>, SourceLocation> seen;
    for (const YamlNode& item : ops.items()) {
      std::optional<OpStats> op = read_op(item);
      if (!op) continue;
      if (auto [it, inserted] = seen.emplace(op->key(), item.location()); !inserted) {
        diags_.error(item.location(), fmt::format("'{}'{}{} is listed twice", shortened(op->op),
                                                  op->policy.empty() ? "" : " (" + shortened(op->policy) + ")",
                                                  op->module ? fmt::format(" in module '{}'", shortened(*op->module)) : ""));
        diags_.note(it->second, "first listed here");
        continue;
      }
      out.push_back(std::move(*op));
    }
    if (diags_.error_count() != errors_before) return std::nullopt;
    return out;
  }

 private:
  std::optional<OpStats> read_op(const YamlNode& item) {
    if (!item.is_mapping()) {
      diags_.error(item.location(), fmt::format("each entry of 'ops' must be an object with 'op' and 'calls', found {}", item.describe_json()));
      return std::nullopt;
    }
    OpStats op;
    bool ok = true;
    if (const YamlNode* name = required(item, "op"); name && name->is_scalar() && !name->scalar().empty()) {
      ok = short_enough(*name, "'op'") && ok;
      op.op = name->scalar();
    } else {
      if (name) diags_.error(name->location(), fmt::format("'op' must be an op name such as \"aten::linear\", found {}", name->describe_json()));
      ok = false;
    }
    if (const YamlNode* policy = item.find("policy")) {
      if (!policy->is_scalar()) ok = error(*policy, "'policy' must be a string");
      else if (short_enough(*policy, "'policy'")) op.policy = policy->scalar();
      else ok = false;
    }
    if (const YamlNode* module = item.find("module")) {
      if (!module->is_scalar()) ok = error(*module, fmt::format("'module' must be a module path string, found {}", module->describe_json()));
      else if (short_enough(*module, "'module'")) op.module = module->scalar();
      else ok = false;
    }
    ok = count(item, "calls", op.calls, true) && ok;
    if (const YamlNode* ran_in = required(item, "ran_in")) ok = calls_by_name(*ran_in, "ran_in", "dtype name", op.ran_in) && ok;
    else ok = false;
    if (const YamlNode* skipped = item.find("fp8_skipped"))
      ok = calls_by_name(*skipped, "fp8_skipped", "reason", op.fp8_skipped) && ok;
    ok = count(item, "casts", op.casts, true) && ok;
    ok = count(item, "cast_bytes", op.cast_bytes, true) && ok;
    ok = count(item, "cache_hits", op.cache_hits, true) && ok;
    ok = count(item, "cache_misses", op.cache_misses, false) && ok;
    ok = count(item, "cache_evictions", op.cache_evictions, false) && ok;
    ok = count(item, "compiled_calls", op.compiled_calls, false) && ok;
    ok = count(item, "outputs_checked", op.outputs_checked, false) && ok;
    ok = count(item, "nonfinite", op.nonfinite, false) && ok;
    ok = magnitude(item, "output_max_abs", op.output_max_abs) && ok;
    if (const YamlNode* ranges = item.find("ranges")) {
      if (!ranges->is_mapping()) {
        ok = error(*ranges, fmt::format("'ranges' must be an object, found {}", ranges->describe_json()));
      } else {
        RangeStats r;
        ok = count(*ranges, "calls", r.calls, true) && ok;
        ok = magnitude(*ranges, "input_max_abs", r.input_max_abs) && ok;
        ok = magnitude(*ranges, "input_min_abs", r.input_min_abs) && ok;
        ok = magnitude(*ranges, "output_max_abs", r.output_max_abs) && ok;
        ok = magnitude(*ranges, "output_min_abs", r.output_min_abs) && ok;
        ok = count(*ranges, "output_elements", r.output_elements, true) && ok;
        ok = count(*ranges, "float16_overflow", r.float16_overflow, true) && ok;
        ok = count(*ranges, "float16_underflow", r.float16_underflow, true) && ok;
        ok = count(*ranges, "bfloat16_overflow", r.bfloat16_overflow, true) && ok;
        ok = count(*ranges, "bfloat16_underflow", r.bfloat16_underflow, true) && ok;
        op.ranges = r;
      }
    }
    if (!ok) return std::nullopt;
    return op;
  }

  // An object of name (a dtype, a reason) to a call count, added into `out`: `ran_in`, `fp8_skipped`.
  bool calls_by_name(const YamlNode& node, std::string_view key, std::string_view what,
                     std::map<std::string, uint64_t>& out) {
    if (!node.is_mapping())
      return error(node, fmt::format("'{}' must be an object of {} to calls, found {}", key, what, node.describe_json()));
    bool ok = true;
    for (const auto& [name, calls] : node.pairs()) {
      uint64_t value = 0;
      if (!name.is_scalar()) ok = error(name, fmt::format("the keys of '{}' must be {}s, found {}", key, what, name.describe_json()));
      else if (!short_enough(name, fmt::format("a {} in '{}'", what, key), kMaxStatsKeyBytes)) ok = false;
      else if (!integer(calls, fmt::format("'{}' of '{}'", key, shortened(name.scalar())), value)) ok = false;
      else out[name.scalar()] += value;
    }
    return ok;
  }

  // A name of at most `bound` bytes (`what` says which, in the error). A member name over
  // kMaxStatsKeyBytes never gets here: yaml-cpp refuses it (Note [names in statistics files]).
  bool short_enough(const YamlNode& name, std::string_view what, size_t bound = kMaxStatsNameBytes) {
    if (name.scalar().size() <= bound) return true;
    return error(name, fmt::format("{} is {} bytes long; {} in statistics files hold at most {} bytes", what,
                                   name.scalar().size(), bound == kMaxStatsNameBytes ? "names" : "member names", bound));
  }

  // An optional member holding a finite number >= 0, or null (not measured).
  bool magnitude(const YamlNode& object, std::string_view key, std::optional<double>& value) {
    const YamlNode* node = object.find(key);
    if (!node || node->is_null() || (node->is_scalar() && node->scalar() == "null")) return true;
    const std::string& text = node->is_scalar() ? node->scalar() : std::string();
    double parsed = 0;
    const char* end = text.data() + text.size();
    const auto [ptr, ec] = std::from_chars(text.data(), end, parsed);
    if (!node->is_scalar() || text.empty() || ec != std::errc() || ptr != end || !std::isfinite(parsed) || parsed < 0)
      return error(*node, fmt::format("'{}' must be a non-negative number or null, found {}", key,
                                      node->is_scalar() ? "'" + shortened(text) + "'" : node->describe_json()));
    value = parsed;
    return true;
  }

  bool error(const YamlNode& node, std::string message) {
    diags_.error(node.location(), std::move(message), std::max<uint32_t>(1, node.source_length()));
    return false;
  }

  const YamlNode* required(const YamlNode& object, std::string_view key) {
    const YamlNode* value = object.find(key);
    if (!value) diags_.error(object.location(), fmt::format("missing member '{}'", key));
    return value;
  }

  bool integer(const YamlNode& node, const std::string& what, uint64_t& value) {
    const std::string& text = node.is_scalar() ? node.scalar() : std::string();
    const char* end = text.data() + text.size();
    const auto [ptr, ec] = std::from_chars(text.data(), end, value);
    if (!node.is_scalar() || text.empty() || ec != std::errc() || ptr != end)
      return error(node, fmt::format("{} must be a non-negative integer, found {}", what,
                                     node.is_scalar() ? "'" + shortened(text) + "'" : node.describe_json()));
    return true;
  }

  bool count(const YamlNode& object, std::string_view key, uint64_t& value, bool needed) {
    const YamlNode* node = needed ? required(object, key) : object.find(key);
    if (!node) return !needed;
    return integer(*node, fmt::format("'{}'", key), value);
  }

  DiagnosticEngine& diags_;
};

}  // namespace

std::optional<std::vector<OpStats>> read_stats(const fs::path& path, SourceManager& sources, DiagnosticEngine& diags) {
  const std::optional<uint32_t> file = read_input(path, sources, diags, kMaxRecordFileBytes, "statistics files");
  if (!file) return std::nullopt;
  const std::optional<YamlNode> root = parse_yaml(sources, *file, diags, "JSON", "statistics files", kMaxRecordFileBytes);
  if (!root) return std::nullopt;
  return StatsReader(diags).run(*root);
}


}  // namespace autocastgen::cli
