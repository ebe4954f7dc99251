// `autocastgen stats FILE.json [FILE2.json] [--json]`: the per-op statistics the runtime writes
// (AUTOCASTGEN_STATS, docs/insight.md) as a table, or the difference between two such files.
#include <algorithm>
#include <charconv>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/inputs.h"
#include "cli/verbs.h"
#include "support/diagnostics.h"
#include "support/paths.h"
#include "support/source_manager.h"
#include "support/yaml.h"

namespace autocastgen::cli {

namespace {

namespace fs = std::filesystem;

struct StatsOptions {
  fs::path a;
  fs::path b;
  bool json = false;
};


// One op overload under one rule, as the runtime wrote it (runtime/include/autocastgen/runtime/stats.h).
struct OpStats {
  std::string op;
  std::string policy;  // empty in files that do not say
  uint64_t calls = 0;
  std::map<std::string, uint64_t> ran_in;
  uint64_t casts = 0;
  uint64_t cast_bytes = 0;
  uint64_t cache_hits = 0;

  [[nodiscard]] std::pair<std::string, std::string> key() const { return {op, policy}; }
  bool operator==(const OpStats&) const = default;
};

// Note [reading a statistics file]: JSON is read with the YAML reader the other verbs use for
// manifests, so every problem has a file:line:col. A file is refused as a whole when any entry is
// wrong: a report over part of a file would look complete.
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
                                                   version.is_scalar() ? version.scalar() : version.describe_json()));
      return std::nullopt;
    }
    const YamlNode& ops = *root.find("ops");
    std::vector<OpStats> out;
    if (!ops.is_sequence()) {
      diags_.error(ops.location(), fmt::format("'ops' must be an array of objects, found {}", ops.describe_json()));
      return std::nullopt;
    }
    std::map<std::pair<std::string, std::string>, SourceLocation> seen;
    for (const YamlNode& item : ops.items()) {
      std::optional<OpStats> op = read_op(item);
      if (!op) continue;
      if (auto [it, inserted] = seen.emplace(op->key(), item.location()); !inserted) {
        diags_.error(item.location(), fmt::format("'{}'{} is listed twice", op->op, op->policy.empty() ? "" : " (" + op->policy + ")"));
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
      op.op = name->scalar();
    } else {
      if (name) diags_.error(name->location(), fmt::format("'op' must be an op name such as \"aten::linear\", found {}", name->describe_json()));
      ok = false;
    }
    if (const YamlNode* policy = item.find("policy")) {
      if (policy->is_scalar()) op.policy = policy->scalar();
      else ok = error(*policy, "'policy' must be a string");
    }
    ok = count(item, "calls", op.calls, true) && ok;
    if (const YamlNode* ran_in = required(item, "ran_in")) {
      if (!ran_in->is_mapping()) {
        ok = error(*ran_in, fmt::format("'ran_in' must be an object of dtype name to calls, found {}", ran_in->describe_json()));
      } else {
        for (const auto& [dtype, calls] : ran_in->pairs()) {
          uint64_t value = 0;
          if (!integer(calls, fmt::format("'ran_in' of '{}'", dtype.scalar()), value)) ok = false;
          else op.ran_in[dtype.scalar()] += value;
        }
      }
    } else {
      ok = false;
    }
    ok = count(item, "casts", op.casts, true) && ok;
    ok = count(item, "cast_bytes", op.cast_bytes, true) && ok;
    ok = count(item, "cache_hits", op.cache_hits, true) && ok;
    if (!ok) return std::nullopt;
    return op;
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
                                     node.is_scalar() ? "'" + text + "'" : node.describe_json()));
    return true;
  }

  bool count(const YamlNode& object, std::string_view key, uint64_t& value, bool needed) {
    const YamlNode* node = needed ? required(object, key) : object.find(key);
    if (!node) return !needed;
    return integer(*node, fmt::format("'{}'", key), value);
  }

  DiagnosticEngine& diags_;
};

std::optional<std::vector<OpStats>> read_stats(const fs::path& path, SourceManager& sources, DiagnosticEngine& diags) {
  const std::optional<uint32_t> file = read_input(path, sources, diags);
  if (!file) return std::nullopt;
  const std::optional<YamlNode> root = parse_yaml(sources, *file, diags, "JSON");
  if (!root) return std::nullopt;
  return StatsReader(diags).run(*root);
}

// Calls desc, then op, then policy: the ops that matter first, ties in a fixed order.
void sort_ops(std::vector<OpStats>& ops) {
  std::sort(ops.begin(), ops.end(), [](const OpStats& x, const OpStats& y) {
    return std::tie(y.calls, x.op, x.policy) < std::tie(x.calls, y.op, y.policy);
  });
}

std::string ran_in_text(const std::map<std::string, uint64_t>& ran_in) {
  std::vector<std::pair<std::string, uint64_t>> sorted(ran_in.begin(), ran_in.end());
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto& x, const auto& y) { return x.second > y.second; });
  std::string text;
  for (const auto& [dtype, calls] : sorted) text += fmt::format("{}{} {}", text.empty() ? "" : ", ", dtype, calls);
  return text.empty() ? "-" : text;
}

nlohmann::ordered_json op_json(const OpStats& op) {
  nlohmann::ordered_json out;
  out["op"] = op.op;
  out["policy"] = op.policy;
  out["calls"] = op.calls;
  out["ran_in"] = nlohmann::ordered_json::object();
  for (const auto& [dtype, calls] : op.ran_in) out["ran_in"][dtype] = calls;
  out["casts"] = op.casts;
  out["cast_bytes"] = op.cast_bytes;
  out["cache_hits"] = op.cache_hits;
  return out;
}

OpStats total_of(const std::vector<OpStats>& ops) {
  OpStats total;
  total.op = "total";
  for (const OpStats& op : ops) {
    total.calls += op.calls;
    total.casts += op.casts;
    total.cast_bytes += op.cast_bytes;
    total.cache_hits += op.cache_hits;
    for (const auto& [dtype, calls] : op.ran_in) total.ran_in[dtype] += calls;
  }
  return total;
}

// A plain-text table: the first column left-aligned, numbers right-aligned.
void print_table(const std::vector<std::vector<std::string>>& rows, const std::vector<bool>& right) {
  std::vector<size_t> width(rows.front().size(), 0);
  for (const auto& row : rows)
    for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      if (i != 0) line += "  ";
      line += right[i] ? fmt::format("{:>{}}", row[i], width[i]) : fmt::format("{:<{}}", row[i], width[i]);
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    std::cout << line << "\n";
  }
}

int report_one(const fs::path& path, std::vector<OpStats> ops, bool as_json) {
  sort_ops(ops);
  const OpStats total = total_of(ops);
  if (as_json) {
    nlohmann::ordered_json out;
    out["file"] = display_path(path);
    out["ops"] = nlohmann::ordered_json::array();
    for (const OpStats& op : ops) out["ops"].push_back(op_json(op));
    nlohmann::ordered_json sum = op_json(total);
    sum.erase("op");
    sum.erase("policy");
    out["total"] = sum;
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  std::vector<std::vector<std::string>> rows = {{"op", "policy", "calls", "ran in", "casts", "cast bytes", "cache hits"}};
  for (const OpStats& op : ops)
    rows.push_back({op.op, op.policy.empty() ? "-" : op.policy, std::to_string(op.calls), ran_in_text(op.ran_in),
                    std::to_string(op.casts), std::to_string(op.cast_bytes), std::to_string(op.cache_hits)});
  rows.push_back({"total", "", std::to_string(total.calls), ran_in_text(total.ran_in), std::to_string(total.casts),
                  std::to_string(total.cast_bytes), std::to_string(total.cache_hits)});
  std::cout << fmt::format("{}: {} op{}\n", display_path(path), ops.size(), ops.size() == 1 ? "" : "s");
  print_table(rows, {false, false, true, false, true, true, true});
  return 0;
}

std::string change(uint64_t a, uint64_t b) {
  if (a == b) return std::to_string(a);
  const auto delta = static_cast<int64_t>(b - a);
  return fmt::format("{} -> {} ({:+})", a, b, delta);
}

// One entry per op: a diff matches ops by name, so a policy change shows as a change of its
// `policy` ("lower_precision_fp -> fp32"); an op counted under several rules in one file is summed,
// its rules joined with '+'.
std::vector<OpStats> by_op(const std::vector<OpStats>& ops) {
  std::map<std::string, OpStats> merged;
  for (const OpStats& op : ops) {
    auto [it, inserted] = merged.emplace(op.op, op);
    if (inserted) continue;
    OpStats& m = it->second;
    m.policy += "+" + op.policy;
    m.calls += op.calls;
    m.casts += op.casts;
    m.cast_bytes += op.cast_bytes;
    m.cache_hits += op.cache_hits;
    for (const auto& [dtype, calls] : op.ran_in) m.ran_in[dtype] += calls;
  }
  std::vector<OpStats> out;
  for (auto& [name, op] : merged) out.push_back(std::move(op));
  return out;
}

int report_diff(const fs::path& path_a, const std::vector<OpStats>& ops_a, const fs::path& path_b,
                const std::vector<OpStats>& ops_b, bool as_json) {
  const std::vector<OpStats> a = by_op(ops_a);
  const std::vector<OpStats> b = by_op(ops_b);
  std::map<std::string, std::pair<const OpStats*, const OpStats*>> joined;
  for (const OpStats& op : a) joined[op.op].first = &op;
  for (const OpStats& op : b) joined[op.op].second = &op;
  const OpStats none;
  struct Row {
    const OpStats* a;
    const OpStats* b;
  };
  std::vector<Row> changed;
  for (const auto& [key, sides] : joined) {
    const OpStats& x = sides.first ? *sides.first : none;
    const OpStats& y = sides.second ? *sides.second : none;
    if (!sides.first || !sides.second || !(x == y)) changed.push_back({sides.first, sides.second});
  }
  // Most calls on either side first, then op.
  std::sort(changed.begin(), changed.end(), [](const Row& x, const Row& y) {
    const uint64_t cx = std::max(x.a ? x.a->calls : 0, x.b ? x.b->calls : 0);
    const uint64_t cy = std::max(y.a ? y.a->calls : 0, y.b ? y.b->calls : 0);
    const OpStats& kx = x.a ? *x.a : *x.b;
    const OpStats& ky = y.a ? *y.a : *y.b;
    return std::tie(cy, kx.op) < std::tie(cx, ky.op);
  });
  if (as_json) {
    nlohmann::ordered_json out;
    out["a"] = display_path(path_a);
    out["b"] = display_path(path_b);
    out["changed"] = nlohmann::ordered_json::array();
    for (const Row& row : changed) {
      const OpStats& key = row.a ? *row.a : *row.b;
      nlohmann::ordered_json entry;
      entry["op"] = key.op;
      entry["a"] = row.a ? op_json(*row.a) : nlohmann::ordered_json(nullptr);
      entry["b"] = row.b ? op_json(*row.b) : nlohmann::ordered_json(nullptr);
      for (const char* side : {"a", "b"})
        if (!entry[side].is_null()) entry[side].erase("op");
      out["changed"].push_back(entry);
    }
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  std::cout << fmt::format("{} -> {}: {} op{} changed, {} unchanged\n", display_path(path_a), display_path(path_b),
                           changed.size(), changed.size() == 1 ? "" : "s", joined.size() - changed.size());
  if (changed.empty()) return 0;
  std::vector<std::vector<std::string>> rows = {{"op", "policy", "calls", "ran in", "casts", "cast bytes", "cache hits"}};
  for (const Row& row : changed) {
    const OpStats& x = row.a ? *row.a : none;
    const OpStats& y = row.b ? *row.b : none;
    const OpStats& key = row.a ? *row.a : *row.b;
    std::string ran_in = ran_in_text(x.ran_in) == ran_in_text(y.ran_in)
                             ? ran_in_text(x.ran_in)
                             : fmt::format("{} -> {}", ran_in_text(x.ran_in), ran_in_text(y.ran_in));
    std::string name = key.op + (row.a ? (row.b ? "" : " (only in A)") : " (only in B)");
    auto policy_text = [](const OpStats* op) { return !op ? std::string("-") : op->policy.empty() ? "?" : op->policy; };
    const std::string policy = policy_text(row.a) == policy_text(row.b)
                                   ? policy_text(row.a)
                                   : fmt::format("{} -> {}", policy_text(row.a), policy_text(row.b));
    rows.push_back({name, policy, change(x.calls, y.calls), ran_in, change(x.casts, y.casts),
                    change(x.cast_bytes, y.cast_bytes), change(x.cache_hits, y.cache_hits)});
  }
  print_table(rows, {false, false, true, false, true, true, true});
  return 0;
}

int run_stats(const StatsOptions& options) {
  SourceManager sources;
  DiagnosticEngine diags(sources, std::cerr);
  std::optional<std::vector<OpStats>> a = read_stats(options.a, sources, diags);
  std::optional<std::vector<OpStats>> b;
  if (!options.b.empty()) b = read_stats(options.b, sources, diags);
  if (!a || (!options.b.empty() && !b) || diags.has_errors()) {
    std::cerr << fmt::format("autocastgen: {} error{}; no report written\n", diags.error_count(),
                             diags.error_count() == 1 ? "" : "s");
    return 1;
  }
  if (!b) return report_one(options.a, std::move(*a), options.json);
  return report_diff(options.a, *a, options.b, *b, options.json);
}

}  // namespace

VerbRunner add_stats_verb(CLI::App& app) {
  auto options = std::make_shared<StatsOptions>();
  CLI::App* verb = app.add_subcommand(
      "stats", "Per-op autocast statistics (AUTOCASTGEN_STATS files): a table, or the difference of two files");
  verb->add_option("FILE", options->a, "Statistics JSON written by the runtime")->required();
  verb->add_option("FILE2", options->b, "A second file: print what changed from FILE to FILE2");
  verb->add_flag("--json", options->json, "Machine-readable output");
  return [options] { return run_stats(*options); };
}

}  // namespace autocastgen::cli
