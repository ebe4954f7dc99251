// The statistics' JSON form: a table (stats_table.h) as the file AUTOCASTGEN_STATS writes, and
// the dtype names it uses.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <limits>
#include <map>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "autocastgen/runtime/modules.h"
#include "stats_table.h"
#include "support/stats_names.h"
#include "watch_internal.h"

namespace autocastgen::stats::detail {
namespace {

// PyTorch-style dtype names (torch.bfloat16 -> "bfloat16").
std::string dtype_name(size_t slot) {
  if (slot == kNoDtype) return "none";
  return detail::dtype_name(static_cast<c10::ScalarType>(slot));
}

}  // namespace

std::string dtype_name(c10::ScalarType dtype) {
  if (dtype == c10::ScalarType::Undefined) return "none";
  switch (dtype) {
    case c10::ScalarType::Float: return "float32";
    case c10::ScalarType::Double: return "float64";
    case c10::ScalarType::Half: return "float16";
    case c10::ScalarType::BFloat16: return "bfloat16";
    case c10::ScalarType::ComplexHalf: return "complex32";
    case c10::ScalarType::ComplexFloat: return "complex64";
    case c10::ScalarType::ComplexDouble: return "complex128";
    case c10::ScalarType::Byte: return "uint8";
    case c10::ScalarType::Char: return "int8";
    case c10::ScalarType::Short: return "int16";
    case c10::ScalarType::Int: return "int32";
    case c10::ScalarType::Long: return "int64";
    case c10::ScalarType::Bool: return "bool";
    default: break;
  }
  std::string name = c10::toString(dtype);
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
  return name;
}

namespace {

std::string json_string(std::string_view text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", static_cast<unsigned>(c));
      out += escaped;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// A name the readers take (Note [names in statistics files]): a value (an op, a module path)
// whole up to kMaxStatsNameBytes; a member name (a dtype, an fp8 reason) whose text between its
// quotes stays within kMaxStatsKeyBytes; longer ones cut, with their length and hash.
std::string json_name(std::string_view name) { return json_string(stats_file_name(name)); }

std::string json_key(std::string_view name) {
  std::string text = json_string(name);
  if (text.size() - 2 <= kMaxStatsKeyBytes) return text;
  const size_t room = kMaxStatsKeyBytes - stats_name_marker(name).size();
  size_t keep = 0;
  for (size_t written = 0; keep < name.size(); ++keep) {  // escapes count as written
    written += json_string(name.substr(keep, 1)).size() - 2;
    if (written > room) break;
  }
  return json_string(stats_name_cut(name, keep));  // the marker is ASCII: written as it is
}

// The shortest text that reads back as the same double (JSON has no Inf or NaN: none reach here).
std::string json_number(double value) {
  char text[32];
  const auto [end, ec] = std::to_chars(text, text + sizeof text, value);
  return ec == std::errc() ? std::string(text, end) : "null";
}

std::string ranges_json(const Ranges& r) {
  const auto min_abs = [](const ValueRange& v) {
    return v.min_abs == std::numeric_limits<double>::infinity() ? std::string("null") : json_number(v.min_abs);
  };
  const auto max_abs = [](const ValueRange& v) { return v.tensors == 0 ? std::string("null") : json_number(v.max_abs); };
  return "{\"calls\": " + std::to_string(r.calls) + ", \"input_max_abs\": " + max_abs(r.inputs) +
         ", \"input_min_abs\": " + min_abs(r.inputs) + ", \"output_max_abs\": " + max_abs(r.outputs) +
         ", \"output_min_abs\": " + min_abs(r.outputs) + ", \"output_elements\": " + std::to_string(r.output_elements) +
         ", \"float16_overflow\": " + std::to_string(r.float16_overflow) +
         ", \"float16_underflow\": " + std::to_string(r.float16_underflow) +
         ", \"bfloat16_overflow\": " + std::to_string(r.bfloat16_overflow) +
         ", \"bfloat16_underflow\": " + std::to_string(r.bfloat16_underflow) + "}";
}

}  // namespace

std::string to_json(const Table& table) {
  const std::map<Key, OpCounters>& ops = table.ops;
  const std::map<Key, uint64_t>& compiled_calls = table.compiled_calls;
  std::vector<const std::pair<const Key, OpCounters>*> sorted;
  sorted.reserve(ops.size());
  for (const auto& op : ops) sorted.push_back(&op);
  std::map<uint32_t, std::string> paths;  // module ids as paths: ids depend on the order modules ran
  for (const auto& op : ops)
    if (const uint32_t id = std::get<2>(op.first); id != 0) paths.try_emplace(id, modules::path_of(id));
  // Outside every module (no "module") sorts before a module's rows, then by path.
  const auto sort_key = [&](const auto* op) {
    const uint32_t id = std::get<2>(op->first);
    return std::tuple(std::get<0>(op->first), std::get<1>(op->first), id != 0, id != 0 ? paths.at(id) : std::string());
  };
  std::sort(sorted.begin(), sorted.end(), [&](const auto* a, const auto* b) {
    if (a->second.calls != b->second.calls) return a->second.calls > b->second.calls;
    return sort_key(a) < sort_key(b);
  });
  std::string out = "{\"version\": 1, \"ops\": [";
  bool first = true;
  for (const auto* op : sorted) {
    const OpCounters& c = op->second;
    out += first ? "\n  " : ",\n  ";
    first = false;
    out += "{\"op\": " + json_name(std::get<0>(op->first)) + ", \"policy\": \"" + policy_name(std::get<1>(op->first)) + "\"";
    if (const uint32_t module = std::get<2>(op->first); module != 0) out += ", \"module\": " + json_name(paths.at(module));
    out += ", \"calls\": " + std::to_string(c.calls) + ", \"ran_in\": {";
    bool first_dtype = true;
    for (size_t i = 0; i < kDtypeSlots; ++i) {
      if (c.ran_in[i] == 0) continue;
      out += (first_dtype ? "" : ", ") + json_key(dtype_name(i)) + ": " + std::to_string(c.ran_in[i]);
      first_dtype = false;
    }
    out += "}, \"input_dtypes\": [";
    first_dtype = true;
    for (size_t i = 0; i < kDtypeSlots; ++i) {
      if (!c.input_dtypes[i]) continue;
      out += (first_dtype ? "" : ", ") + json_string(dtype_name(i));
      first_dtype = false;
    }
    out += "], \"casts\": " + std::to_string(c.casts) + ", \"cast_bytes\": " + std::to_string(c.cast_bytes) +
           ", \"cache_hits\": " + std::to_string(c.cache_hits) + ", \"cache_misses\": " + std::to_string(c.cache_misses) +
           ", \"cache_evictions\": " + std::to_string(c.cache_evictions) +
           ", \"outputs_checked\": " + std::to_string(c.outputs_checked) + ", \"nonfinite\": " + std::to_string(c.nonfinite) +
           ", \"output_max_abs\": " +
           (c.outputs_checked == c.nonfinite ? std::string("null") : json_number(c.output_max_abs));
    if (c.ranges.calls != 0) out += ", \"ranges\": " + ranges_json(c.ranges);
    if (!c.fp8_skipped.empty()) {
      auto reasons = c.fp8_skipped;
      std::sort(reasons.begin(), reasons.end());
      out += ", \"fp8_skipped\": {";
      for (size_t i = 0; i < reasons.size(); ++i)
        out += (i == 0 ? "" : ", ") + json_key(reasons[i].first) + ": " + std::to_string(reasons[i].second);
      out += "}";
    }
    // Note [compiled calls]: calls a compiled graph made are counted from what their trace saw
    // (traced_calls.cpp); their cast-cache use is not known (AOTAutograd traces without the
    // cache), so the entry says how many calls were compiled and which fields count the eager
    // ones only.
    if (const auto compiled = compiled_calls.find(op->first); compiled != compiled_calls.end() && compiled->second != 0)
      out += ", \"compiled_calls\": " + std::to_string(compiled->second) +
             ", \"eager_only\": [\"cache_hits\", \"cache_misses\", \"cache_evictions\"]";
    if (const auto event = table.events.find(op->first); event != table.events.end())  // Note [events in the file]
      out += ", \"first_nonfinite\": {\"message\": " + json_string(event->second.message) +
             ", \"line\": " + json_string(event->second.line) + "}";
    out += "}";
  }
  out += first ? "]}\n" : "\n]}\n";
  return out;
}

}  // namespace autocastgen::stats::detail
