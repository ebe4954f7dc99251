// `autocastgen stats FILE.json [FILE2.json] [--json]`: the per-op statistics the runtime writes
// (AUTOCASTGEN_STATS, docs/insight.md) as a table, or the difference between two such files;
// `--merge FILE...` sums files (one per rank, docs/distributed.md) into one table.
#include <algorithm>
#include <cmath>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/stats_file.h"
#include "cli/verbs.h"
#include "support/diagnostics.h"
#include "support/paths.h"
#include "support/source_manager.h"
#include "support/strings.h"

namespace autocastgen::cli {

namespace {

namespace fs = std::filesystem;

struct StatsOptions {
  std::vector<fs::path> files;
  bool json = false;
  bool merge = false;
  std::string by = "op";  // op: rows per (op, rule), modules summed; module: per (module, op, rule)
};

// Note [long names in tables]: a file may hold names of up to a MiB (Note [names in statistics
// files] in core/support/stats_names.h), and each row of a table is padded to its column's widest
// cell, so one long name shown whole would widen every row: a file of many rows would print
// its long name's length times its row count. A name over kShownNameBytes (the old bound on names
// in a file, so that no name of such a file shows differently) is shown as its head and its tail,
// where a module path keeps its leaf, around its length; `--json` prints every name whole.
constexpr size_t kShownNameBytes = 1024;
constexpr size_t kShownEndBytes = 480;  // of the head, of the tail

bool inside_sequence(char byte) { return (static_cast<unsigned char>(byte) & 0xC0) == 0x80; }

// A name as tables print it: shortened (Note [long names in tables]), through terminal_text.
std::string shown_name(std::string_view name) {
  if (name.size() <= kShownNameBytes) return terminal_text(name);
  size_t head = kShownEndBytes;
  while (head > 0 && inside_sequence(name[head])) --head;
  size_t tail = name.size() - kShownEndBytes;
  while (tail < name.size() && inside_sequence(name[tail])) ++tail;
  return terminal_text(name.substr(0, head)) + fmt::format("...[{} bytes]...", name.size()) +
         terminal_text(name.substr(tail));
}

// Note [headroom]: how far an op's largest finite output |value| is from float16's largest finite
// value, in bits (binary orders of magnitude): log2(65504 / max |value|). +3 means the outputs
// could grow 8x before overflowing in float16; negative means they already exceed it (in a
// float32 or bfloat16 run: that op would overflow in float16).
constexpr double kFloat16Max = 65504.0;

std::optional<double> headroom(const std::optional<double>& max_abs) {
  if (!max_abs || *max_abs <= 0) return std::nullopt;
  return std::log2(kFloat16Max / *max_abs);
}

// Ops with non-finite outputs first (most first), then least float16 headroom (measured before
// not measured), then most calls, then op and policy: a file without the watch's fields sorts by
// calls as before.
void sort_ops(std::vector<OpStats>& ops) {
  std::sort(ops.begin(), ops.end(), [](const OpStats& x, const OpStats& y) {
    const double hx = x.output_max_abs.value_or(-1);
    const double hy = y.output_max_abs.value_or(-1);
    return std::tie(y.nonfinite, hy, y.calls, x.op, x.policy) < std::tie(x.nonfinite, hx, x.calls, y.op, y.policy);
  });
}

std::string magnitude_text(const std::optional<double>& value) { return value ? fmt::format("{:.6g}", *value) : "-"; }

std::string headroom_text(const std::optional<double>& max_abs) {
  const std::optional<double> bits = headroom(max_abs);
  return bits ? fmt::format("{:+.1f}", *bits) : "-";
}

// Note [compiled calls] in runtime/torch/insight/stats.cpp: the cache fields count eager calls only, so
// calls made by compiled graphs show as unknown ("?"), never as a zero.
std::string cache_text(const OpStats& op) {
  if (op.compiled_calls == 0) return fmt::format("{}/{}/{}", op.cache_hits, op.cache_misses, op.cache_evictions);
  if (op.compiled_calls >= op.calls) return "? (compiled)";
  return fmt::format("{}/{}/{} +? ({} compiled)", op.cache_hits, op.cache_misses, op.cache_evictions,
                     op.compiled_calls);
}

std::string nonfinite_text(const OpStats& op) {
  return op.outputs_checked == 0 ? "-" : std::to_string(op.nonfinite);
}

// A share of the measured output elements, as a percentage ("0" when none).
std::string share_text(uint64_t count, uint64_t elements) {
  if (count == 0 || elements == 0) return "0";
  return fmt::format("{:.3g}%", 100.0 * static_cast<double>(count) / static_cast<double>(elements));
}

nlohmann::ordered_json number_json(const std::optional<double>& value) {
  return value ? nlohmann::ordered_json(*value) : nlohmann::ordered_json(nullptr);
}

std::string ran_in_text(const std::map<std::string, uint64_t>& ran_in) {
  std::vector<std::pair<std::string, uint64_t>> sorted(ran_in.begin(), ran_in.end());
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto& x, const auto& y) { return x.second > y.second; });
  std::string text;
  for (const auto& [dtype, calls] : sorted)
    text += fmt::format("{}{} {}", text.empty() ? "" : ", ", shown_name(dtype), calls);
  return text.empty() ? "-" : text;
}

nlohmann::ordered_json op_json(const OpStats& op) {
  nlohmann::ordered_json out;
  out["op"] = op.op;
  out["policy"] = op.policy;
  if (op.module) out["module"] = *op.module;
  out["calls"] = op.calls;
  out["ran_in"] = nlohmann::ordered_json::object();
  for (const auto& [dtype, calls] : op.ran_in) out["ran_in"][dtype] = calls;
  if (!op.fp8_skipped.empty()) {
    out["fp8_skipped"] = nlohmann::ordered_json::object();
    for (const auto& [reason, calls] : op.fp8_skipped) out["fp8_skipped"][reason] = calls;
  }
  out["casts"] = op.casts;
  out["cast_bytes"] = op.cast_bytes;
  out["cache_hits"] = op.cache_hits;
  out["cache_misses"] = op.cache_misses;
  out["cache_evictions"] = op.cache_evictions;
  if (op.compiled_calls != 0) out["compiled_calls"] = op.compiled_calls;
  out["outputs_checked"] = op.outputs_checked;
  out["nonfinite"] = op.nonfinite;
  out["output_max_abs"] = number_json(op.output_max_abs);
  out["float16_headroom_bits"] = number_json(headroom(op.output_max_abs));
  if (op.ranges) {
    const RangeStats& r = *op.ranges;
    nlohmann::ordered_json ranges;
    ranges["calls"] = r.calls;
    ranges["input_max_abs"] = number_json(r.input_max_abs);
    ranges["input_min_abs"] = number_json(r.input_min_abs);
    ranges["output_max_abs"] = number_json(r.output_max_abs);
    ranges["output_min_abs"] = number_json(r.output_min_abs);
    ranges["output_elements"] = r.output_elements;
    ranges["float16_overflow"] = r.float16_overflow;
    ranges["float16_underflow"] = r.float16_underflow;
    ranges["bfloat16_overflow"] = r.bfloat16_overflow;
    ranges["bfloat16_underflow"] = r.bfloat16_underflow;
    out["ranges"] = ranges;
  }
  return out;
}

OpStats total_of(const std::vector<OpStats>& ops) {
  OpStats total;
  total.op = "total";
  for (const OpStats& op : ops) total.add(op);
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

// Note [merging ranks]: `--merge` sums files entry by entry, matched by (op, rule): counts add,
// largest magnitudes take the max and smallest the min (OpStats::add), as the runtime combines
// two calls. Each rank of a distributed job writes its own file (AUTOCASTGEN_STATS=s.{rank}.json),
// so the merged table is what the whole job did.
std::vector<OpStats> merge_files(const std::vector<std::vector<OpStats>>& files) {
  std::vector<OpStats> out;
  std::map<std::tuple<std::string, std::string, bool, std::string>, size_t> index;
  for (const auto& ops : files) {
    for (const OpStats& op : ops) {
      if (auto [it, inserted] = index.emplace(op.key(), out.size()); inserted) out.push_back(op);
      else out[it->second].add(op);
    }
  }
  return out;
}

// `--by op` (the default): one row per (op, rule), the modules' rows of a file summed, so a
// table reads the same with or without autocastgen.attach.
std::vector<OpStats> modules_summed(const std::vector<OpStats>& ops) {
  std::vector<OpStats> out;
  std::map<std::pair<std::string, std::string>, size_t> index;
  for (const OpStats& op : ops) {
    if (auto [it, inserted] = index.emplace(std::pair(op.op, op.policy), out.size()); inserted) {
      out.push_back(op);
      out.back().module.reset();
    } else {
      out[it->second].add(op);
    }
  }
  return out;
}

// `--by module`: modules in path order (calls outside every module first), then as sort_ops.
void sort_by_module(std::vector<OpStats>& ops) {
  sort_ops(ops);
  std::stable_sort(ops.begin(), ops.end(), [](const OpStats& x, const OpStats& y) {
    return std::pair(x.module.has_value(), x.module.value_or("")) < std::pair(y.module.has_value(), y.module.value_or(""));
  });
}

// Names in tables are printed through terminal_text (Note [text for terminals]): a module or op
// named with ESC [31m must not recolour the screen; and shortened (Note [long names in tables]).
std::string module_text(const OpStats& op) {
  if (!op.module) return "-";
  return op.module->empty() ? "<root>" : shown_name(*op.module);
}

// Under the table: the fp8 list's calls that ran in the lower precision, and why (the runtime's
// fp8_skipped: the place, the support rule or the recipe's select:), most calls first.
void print_fp8_skipped(const std::vector<OpStats>& ops, bool by_module) {
  bool first = true;
  for (const OpStats& op : ops) {
    if (op.fp8_skipped.empty()) continue;
    if (first) std::cout << "fp8 calls run in the lower precision, and why:\n";
    first = false;
    uint64_t skipped = 0;
    for (const auto& [reason, calls] : op.fp8_skipped) skipped += calls;
    std::cout << fmt::format("  {}{}: {} of {} calls\n", shown_name(op.op), by_module ? fmt::format(" in {}", module_text(op)) : "",
                             skipped, op.calls);
    std::vector<std::pair<std::string, uint64_t>> reasons(op.fp8_skipped.begin(), op.fp8_skipped.end());
    std::stable_sort(reasons.begin(), reasons.end(), [](const auto& x, const auto& y) { return x.second > y.second; });
    for (const auto& [reason, calls] : reasons) std::cout << fmt::format("    {:>8}  {}\n", calls, shown_name(reason));
  }
}

int report_one(const std::string& title, std::vector<OpStats> ops, bool as_json, bool by_module) {
  if (by_module) {
    sort_by_module(ops);
  } else {
    ops = modules_summed(ops);
    sort_ops(ops);
  }
  const OpStats total = total_of(ops);
  if (as_json) {
    nlohmann::ordered_json out;
    out["file"] = title;
    out["ops"] = nlohmann::ordered_json::array();
    for (const OpStats& op : ops) out["ops"].push_back(op_json(op));
    nlohmann::ordered_json sum = op_json(total);
    sum.erase("op");
    sum.erase("policy");
    out["total"] = sum;
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  // The range columns only when some op has ranges (a record-only or ranges run).
  const bool with_ranges = std::any_of(ops.begin(), ops.end(), [](const OpStats& op) { return op.ranges.has_value(); });
  std::vector<std::vector<std::string>> rows = {{"op", "policy", "calls", "ran in", "casts", "cast bytes",
                                                 "cache hit/miss/evict", "non-finite", "max |out|", "f16 headroom"}};
  if (with_ranges)
    for (const char* column : {"f16 over", "f16 under", "bf16 over", "bf16 under"}) rows.front().emplace_back(column);
  const auto row_of = [with_ranges](const OpStats& op, std::string name, std::string policy) {
    std::vector<std::string> row = {shown_name(name), shown_name(policy), std::to_string(op.calls), ran_in_text(op.ran_in),
                                    std::to_string(op.casts), std::to_string(op.cast_bytes), cache_text(op),
                                    nonfinite_text(op), magnitude_text(op.output_max_abs), headroom_text(op.output_max_abs)};
    if (with_ranges) {
      const RangeStats r = op.ranges.value_or(RangeStats{});
      for (const uint64_t count : {r.float16_overflow, r.float16_underflow, r.bfloat16_overflow, r.bfloat16_underflow})
        row.push_back(op.ranges ? share_text(count, r.output_elements) : "-");
    }
    return row;
  };
  for (const OpStats& op : ops) rows.push_back(row_of(op, op.op, op.policy.empty() ? "-" : op.policy));
  rows.push_back(row_of(total, "total", ""));
  std::vector<bool> right = {false, false, true, false, true, true, true, true, true, true};
  if (with_ranges) right.insert(right.end(), 4, true);
  if (by_module) {
    rows.front().insert(rows.front().begin(), "module");
    for (size_t i = 1; i < rows.size(); ++i) rows[i].insert(rows[i].begin(), i + 1 == rows.size() ? "" : module_text(ops[i - 1]));
    right.insert(right.begin(), false);
  }
  std::cout << fmt::format("{}: {} {}\n", terminal_text(title), ops.size(),
                           by_module ? (ops.size() == 1 ? "row (module, op)" : "rows (module, op)") : (ops.size() == 1 ? "op" : "ops"));
  print_table(rows, right);
  print_fp8_skipped(ops, by_module);
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
    m.add(op);
  }
  std::vector<OpStats> out;
  for (auto& [name, op] : merged) out.push_back(std::move(op));
  return out;
}

int report_diff(const fs::path& path_a, const std::vector<OpStats>& ops_a, const fs::path& path_b,
                const std::vector<OpStats>& ops_b, bool as_json) {
  const std::vector<OpStats> a = by_op(modules_summed(ops_a));
  const std::vector<OpStats> b = by_op(modules_summed(ops_b));
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
  std::cout << fmt::format("{} -> {}: {} op{} changed, {} unchanged\n", terminal_text(display_path(path_a)),
                           terminal_text(display_path(path_b)),
                           changed.size(), changed.size() == 1 ? "" : "s", joined.size() - changed.size());
  if (changed.empty()) return 0;
  std::vector<std::vector<std::string>> rows = {{"op", "policy", "calls", "ran in", "casts", "cast bytes",
                                                 "cache hit/miss/evict", "non-finite", "max |out|", "f16 headroom"}};
  const auto pair_text = [](const std::string& x, const std::string& y) {
    return x == y ? x : fmt::format("{} -> {}", x, y);
  };
  for (const Row& row : changed) {
    const OpStats& x = row.a ? *row.a : none;
    const OpStats& y = row.b ? *row.b : none;
    const OpStats& key = row.a ? *row.a : *row.b;
    std::string ran_in = ran_in_text(x.ran_in) == ran_in_text(y.ran_in)
                             ? ran_in_text(x.ran_in)
                             : fmt::format("{} -> {}", ran_in_text(x.ran_in), ran_in_text(y.ran_in));
    std::string name = shown_name(key.op) + (row.a ? (row.b ? "" : " (only in A)") : " (only in B)");
    auto policy_text = [](const OpStats* op) {
      return !op ? std::string("-") : op->policy.empty() ? "?" : shown_name(op->policy);
    };
    const std::string policy = policy_text(row.a) == policy_text(row.b)
                                   ? policy_text(row.a)
                                   : fmt::format("{} -> {}", policy_text(row.a), policy_text(row.b));
    rows.push_back({name, policy, change(x.calls, y.calls), ran_in, change(x.casts, y.casts),
                    change(x.cast_bytes, y.cast_bytes), pair_text(cache_text(x), cache_text(y)),
                    pair_text(nonfinite_text(x), nonfinite_text(y)),
                    pair_text(magnitude_text(x.output_max_abs), magnitude_text(y.output_max_abs)),
                    pair_text(headroom_text(x.output_max_abs), headroom_text(y.output_max_abs))});
  }
  print_table(rows, {false, false, true, false, true, true, true, true, true, true});
  return 0;
}

int run_stats(const StatsOptions& options) {
  SourceManager sources;
  DiagnosticEngine diags(sources, std::cerr);
  if (!options.merge && options.files.size() > 2) {
    std::cerr << fmt::format("autocastgen stats: {} files given; one prints it, two compare, more need --merge\n",
                             options.files.size());
    return 2;
  }
  if (options.by == "module" && options.files.size() == 2 && !options.merge) {
    std::cerr << "autocastgen stats: --by module prints one file (or --merge several); a comparison of two files "
                 "is per op\n";
    return 2;
  }
  std::vector<std::vector<OpStats>> read;
  for (const fs::path& path : options.files) {  // every file read, so every error is reported
    if (std::optional<std::vector<OpStats>> ops = read_stats(path, sources, diags)) read.push_back(std::move(*ops));
  }
  if (read.size() != options.files.size() || diags.has_errors()) {
    std::cerr << fmt::format("autocastgen: {}; no report written\n", diags.error_summary());
    return 1;
  }
  if (options.merge) {
    std::string title;
    for (const fs::path& path : options.files) title += (title.empty() ? "" : " + ") + display_path(path);
    if (options.files.size() > 1) title += fmt::format(" (merged, {} files)", options.files.size());
    return report_one(title, merge_files(read), options.json, options.by == "module");
  }
  if (read.size() == 1) return report_one(display_path(options.files[0]), std::move(read[0]), options.json, options.by == "module");
  return report_diff(options.files[0], read[0], options.files[1], read[1], options.json);
}

}  // namespace

VerbRunner add_stats_verb(CLI::App& app) {
  auto options = std::make_shared<StatsOptions>();
  CLI::App* verb = app.add_subcommand(
      "stats", "Per-op autocast statistics (AUTOCASTGEN_STATS files): a table, or the difference of two files");
  verb->add_option("FILE", options->files,
                   "Statistics JSON written by the runtime; a second file: print what changed from the first to it")
      ->required();
  verb->add_flag("--merge", options->merge, "Sum the files (e.g. one per rank) into one table");
  verb->add_flag("--json", options->json, "Machine-readable output");
  verb->add_option("--by", options->by,
                   "Rows per op (the default: an op's rows of several modules summed) or per module and op "
                   "(files written with autocastgen.attach)")
      ->check(CLI::IsMember({"op", "module"}));
  return [options] { return run_stats(*options); };
}

}  // namespace autocastgen::cli
