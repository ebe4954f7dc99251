// Per-op autocast statistics (stats.h): per-thread tables, the process-wide table they merge
// into, its JSON form, AUTOCASTGEN_STATS, the counted cast of PyTorch's state, and the
// torch.ops.autocastgen.stats_* ops.
#include "autocastgen/runtime/stats.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include <ATen/CachedTensorUtils.h>
#include <ATen/autocast_mode.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include "autocastgen/torch/policy_call.h"

namespace autocastgen::stats {

namespace detail {
std::atomic<int> g_enabled{0};
}  // namespace detail

const char* policy_name(Policy policy) {
  switch (policy) {
    case Policy::lower_precision_fp: return "lower_precision_fp";
    case Policy::fp32: return "fp32";
    case Policy::promote: return "promote";
    case Policy::fp32_set_opt_dtype: return "fp32_set_opt_dtype";
    case Policy::fp32_append_dtype: return "fp32_append_dtype";
    case Policy::banned: return "banned";
    case Policy::fp8: return "fp8";
  }
  return "?";
}

void OpCounters::add(const OpCounters& other) {
  calls += other.calls;
  casts += other.casts;
  cast_bytes += other.cast_bytes;
  cache_hits += other.cache_hits;
  for (size_t i = 0; i < kDtypeSlots; ++i) {
    ran_in[i] += other.ran_in[i];
    input_dtypes[i] = input_dtypes[i] || other.input_dtypes[i];
  }
}

namespace {

using Key = std::pair<std::string, Policy>;

// The process-wide table. Leaked: threads and the exit handler merge into it during shutdown.
struct Global {
  std::mutex mutex;
  std::map<Key, OpCounters> ops;
  int explicit_enables = 0;
};

Global& global() {
  static Global* const table = new Global;
  return *table;
}

// Bumped (under Global::mutex) by reset(): a thread whose table is of an older epoch drops its
// counts instead of merging them.
std::atomic<uint64_t> g_epoch{0};

// Note [per-thread tables]: each thread counts into its own table, which only it touches, so the
// drivers take no lock and share no cache line. Entries never move (a deque), so the counters a
// Call holds stay valid. The lookup is keyed by the op string's address (cheap), and confirmed
// by the op's text: a runtime policy's op string may be freed and its address reused for another.
struct Entry {
  std::string op;
  Policy policy;
  OpCounters counters;
};

struct PointerKeyHash {
  size_t operator()(const std::pair<const char*, Policy>& key) const {
    return std::hash<const void*>()(key.first) ^ static_cast<size_t>(key.second);
  }
};

thread_local bool t_table_gone = false;  // trivially destructible: readable during thread exit
thread_local OpCounters t_sink;          // what a call made after this thread's table ended counts into

struct ThreadTable {
  std::deque<Entry> entries;
  std::unordered_map<std::pair<const char*, Policy>, Entry*, PointerKeyHash> by_address;
  std::map<Key, Entry*> by_name;
  const char* last_op = nullptr;
  Policy last_policy = Policy::lower_precision_fp;
  Entry* last = nullptr;
  uint64_t epoch = g_epoch.load(std::memory_order_relaxed);

  ThreadTable() = default;
  ThreadTable(const ThreadTable&) = delete;
  ThreadTable& operator=(const ThreadTable&) = delete;
  ~ThreadTable() {
    merge();
    t_table_gone = true;
  }

  void zero() {
    for (Entry& entry : entries) entry.counters = OpCounters{};
  }

  void catch_up_epoch() {
    const uint64_t now = g_epoch.load(std::memory_order_relaxed);
    if (epoch != now) {
      zero();
      epoch = now;
    }
  }

  Entry* find(const char* op, Policy policy) {
    if (last != nullptr && last_op == op && last_policy == policy && last->op == op) return last;
    Entry* entry = nullptr;
    const auto address = by_address.find({op, policy});
    if (address != by_address.end() && address->second->op == op) {
      entry = address->second;
    } else {
      Key key{std::string(op), policy};
      const auto named = by_name.find(key);
      if (named != by_name.end()) {
        entry = named->second;
      } else {
        entries.push_back(Entry{key.first, policy, OpCounters{}});
        entry = &entries.back();
        by_name.emplace(std::move(key), entry);
      }
      by_address[{op, policy}] = entry;
    }
    last_op = op;
    last_policy = policy;
    last = entry;
    return entry;
  }

  void merge() {
    Global& table = global();
    const std::lock_guard<std::mutex> lock(table.mutex);
    if (epoch == g_epoch.load(std::memory_order_relaxed)) {
      for (const Entry& entry : entries)
        if (entry.counters.calls != 0) table.ops[{entry.op, entry.policy}].add(entry.counters);
    }
    zero();
    epoch = g_epoch.load(std::memory_order_relaxed);
  }
};

ThreadTable* thread_table() {
  if (t_table_gone) return nullptr;
  thread_local ThreadTable table;
  return &table;
}

// PyTorch-style dtype names (torch.bfloat16 -> "bfloat16").
std::string dtype_name(size_t slot) {
  if (slot == kNoDtype) return "none";
  switch (static_cast<c10::ScalarType>(slot)) {
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
  std::string name = c10::toString(static_cast<c10::ScalarType>(slot));
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
  return name;
}

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

std::string to_json(const std::map<Key, OpCounters>& ops) {
  std::vector<const std::pair<const Key, OpCounters>*> sorted;
  sorted.reserve(ops.size());
  for (const auto& op : ops) sorted.push_back(&op);
  std::sort(sorted.begin(), sorted.end(), [](const auto* a, const auto* b) {
    if (a->second.calls != b->second.calls) return a->second.calls > b->second.calls;
    return a->first < b->first;
  });
  std::string out = "{\"version\": 1, \"ops\": [";
  bool first = true;
  for (const auto* op : sorted) {
    const OpCounters& c = op->second;
    out += first ? "\n  " : ",\n  ";
    first = false;
    out += "{\"op\": " + json_string(op->first.first) + ", \"policy\": \"" + policy_name(op->first.second) +
           "\", \"calls\": " + std::to_string(c.calls) + ", \"ran_in\": {";
    bool first_dtype = true;
    for (size_t i = 0; i < kDtypeSlots; ++i) {
      if (c.ran_in[i] == 0) continue;
      out += (first_dtype ? "" : ", ") + json_string(dtype_name(i)) + ": " + std::to_string(c.ran_in[i]);
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
           ", \"cache_hits\": " + std::to_string(c.cache_hits) + "}";
  }
  out += first ? "]}\n" : "\n]}\n";
  return out;
}

std::string snapshot_locked() {
  Global& table = global();
  const std::lock_guard<std::mutex> lock(table.mutex);
  return to_json(table.ops);
}

// Writes `text` to `path` through a temporary file renamed into place; the reason on failure.
std::string write_file(const std::string& path, const std::string& text) {
  const std::string temporary = path + ".tmp." + std::to_string(::getpid());
  std::FILE* file = std::fopen(temporary.c_str(), "w");
  if (file == nullptr) return std::strerror(errno);
  const bool written = std::fwrite(text.data(), 1, text.size(), file) == text.size();
  const int write_errno = errno;
  const bool closed = std::fclose(file) == 0;
  if (!written || !closed) {
    std::remove(temporary.c_str());
    return std::strerror(written ? errno : write_errno);
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    const int rename_errno = errno;
    std::remove(temporary.c_str());
    return std::strerror(rename_errno);
  }
  return {};
}

std::string& env_path_storage() {
  static std::string* const path = new std::string;
  return *path;
}

// At exit (AUTOCASTGEN_STATS): the exiting thread's table has merged already (thread-local
// destructors run before exit handlers); other threads still running are not counted. Python's
// warning machinery may be gone, so a failure is printed to stderr.
void write_at_exit() {
  merge_thread();
  const std::string& path = env_path_storage();
  const std::string error = write_file(path, snapshot_locked());
  if (!error.empty())
    std::fprintf(stderr, "autocastgen: warning: could not write the statistics to '%s' (AUTOCASTGEN_STATS): %s\n",
                 path.c_str(), error.c_str());
}

// AUTOCASTGEN_STATS=FILE.json: statistics on from the library's load to the process's exit.
const bool g_env_read = [] {
  const char* value = std::getenv("AUTOCASTGEN_STATS");
  if (value == nullptr || *value == '\0') return false;
  env_path_storage() = value;
  detail::g_enabled.fetch_add(1, std::memory_order_relaxed);
  std::atexit(write_at_exit);
  return true;
}();

}  // namespace

OpCounters* thread_counters(const char* op, Policy policy) {
  ThreadTable* table = thread_table();
  if (table == nullptr) return &t_sink;
  table->catch_up_epoch();
  return &table->find(op, policy)->counters;
}

void enable() {
  Global& table = global();
  const std::lock_guard<std::mutex> lock(table.mutex);
  ++table.explicit_enables;
  detail::g_enabled.fetch_add(1, std::memory_order_relaxed);
}

void disable() {
  Global& table = global();
  const std::lock_guard<std::mutex> lock(table.mutex);
  if (table.explicit_enables == 0) return;
  --table.explicit_enables;
  detail::g_enabled.fetch_sub(1, std::memory_order_relaxed);
}

void merge_thread() {
  if (ThreadTable* table = thread_table()) table->merge();
}

std::string snapshot_json() {
  merge_thread();
  return snapshot_locked();
}

void reset() {
  {
    Global& table = global();
    const std::lock_guard<std::mutex> lock(table.mutex);
    table.ops.clear();
    g_epoch.fetch_add(1, std::memory_order_relaxed);
  }
  if (ThreadTable* table = thread_table()) table->catch_up_epoch();
}

const std::string& env_path() { return env_path_storage(); }

bool flush(const std::string& path) {
  const std::string& target = path.empty() ? env_path_storage() : path;
  if (target.empty()) {
    TORCH_WARN("autocastgen: no statistics file to flush to (no path given and AUTOCASTGEN_STATS is unset)");
    return false;
  }
  const std::string error = write_file(target, snapshot_json());
  if (!error.empty()) {
    TORCH_WARN("autocastgen: could not write the statistics to '", target, "': ", error);
    return false;
  }
  return true;
}

StatsScope::StatsScope() { enable(); }

StatsScope::~StatsScope() {
  merge_thread();
  disable();
}

}  // namespace autocastgen::stats

namespace autocastgen::torch {

// Note [telling a hit from a cast]: PyTorch's cached_cast does not say whether it converted or
// returned its cached copy, and its cache is not exported. Its cacheable case is known (a float32
// leaf that requires grad and is not a view, cast to the device's autocast dtype, cache on, not a
// CUDA-graph cached tensor), and on a miss it stores a weak reference to the source in its cache:
// the source's weak count grows by one. So a cacheable source whose weak count did not change got
// a cache hit; every other result that is not the source itself is a new tensor. A weak reference
// taken or dropped at that moment by another thread (a weight shared by threads, and PyTorch's
// cache is process-wide) can make one such call count wrongly; single-threaded counts are exact.
at::Tensor torch_cast_counted(at::ScalarType to, const at::Tensor& tensor, c10::DeviceType device,
                              stats::OpCounters& counters) {
  const bool cacheable = tensor.defined() && tensor.scalar_type() == at::kFloat &&
                         to == at::autocast::get_autocast_dtype(device) && tensor.requires_grad() &&
                         tensor.is_leaf() && !tensor.is_view() && at::autocast::is_autocast_cache_enabled() &&
                         !at::caching::is_cached_tensor(tensor);
  const size_t weak_before = cacheable ? tensor.getIntrusivePtr().weak_use_count() : 0;
  at::Tensor out = at::autocast::cached_cast(to, tensor, device);
  if (out.is_same(tensor)) return out;
  if (cacheable && tensor.getIntrusivePtr().weak_use_count() == weak_before) {
    ++counters.cache_hits;
  } else {
    ++counters.casts;
    counters.cast_bytes += static_cast<uint64_t>(out.numel()) * out.element_size();
  }
  return out;
}

}  // namespace autocastgen::torch

namespace {

TORCH_LIBRARY_FRAGMENT(autocastgen, m) {
  m.def("stats_enable() -> ()", [] { autocastgen::stats::enable(); });
  m.def("stats_disable() -> ()", [] {
    autocastgen::stats::merge_thread();
    autocastgen::stats::disable();
  });
  m.def("stats_enabled() -> bool", [] { return autocastgen::stats::enabled(); });
  m.def("stats_merge() -> ()", [] { autocastgen::stats::merge_thread(); });
  m.def("stats_snapshot() -> str", [] { return autocastgen::stats::snapshot_json(); });
  m.def("stats_reset() -> ()", [] { autocastgen::stats::reset(); });
  m.def("stats_flush(str path=\"\") -> bool", [](const std::string& path) { return autocastgen::stats::flush(path); });
  m.def("stats_path() -> str", [] { return autocastgen::stats::env_path(); });
}

}  // namespace
