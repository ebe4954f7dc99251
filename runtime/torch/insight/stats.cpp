// Per-op autocast statistics (stats.h): per-thread tables, the process-wide table they merge
// into (its JSON form: stats_json.cpp), AUTOCASTGEN_STATS, the counted casts of both states,
// and the torch.ops.autocastgen.stats_* ops.
#include "autocastgen/runtime/stats.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
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

#include "autocastgen/runtime/modules.h"
#include "autocastgen/runtime/watch.h"
#include "rank.h"
#include "state/state_internal.h"
#include "stats_table.h"
#include "support/atomic_file.h"
#include "support/strings.h"
#include "watch_internal.h"
#include "bookkeeping_op.h"

namespace autocastgen::stats {

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

void ValueRange::add(const ValueRange& other) {
  max_abs = std::max(max_abs, other.max_abs);
  min_abs = std::min(min_abs, other.min_abs);
  tensors += other.tensors;
}

void Ranges::add(const Ranges& other) {
  calls += other.calls;
  inputs.add(other.inputs);
  outputs.add(other.outputs);
  output_elements += other.output_elements;
  float16_overflow += other.float16_overflow;
  float16_underflow += other.float16_underflow;
  bfloat16_overflow += other.bfloat16_overflow;
  bfloat16_underflow += other.bfloat16_underflow;
}

void OpCounters::add(const OpCounters& other) {
  calls += other.calls;
  casts += other.casts;
  cast_bytes += other.cast_bytes;
  cache_hits += other.cache_hits;
  cache_misses += other.cache_misses;
  cache_evictions += other.cache_evictions;
  outputs_checked += other.outputs_checked;
  nonfinite += other.nonfinite;
  output_max_abs = std::max(output_max_abs, other.output_max_abs);
  ranges.add(other.ranges);
  for (size_t i = 0; i < kDtypeSlots; ++i) {
    ran_in[i] += other.ran_in[i];
    input_dtypes[i] = input_dtypes[i] || other.input_dtypes[i];
  }
  for (const auto& [reason, calls] : other.fp8_skipped) {
    const auto it = std::find_if(fp8_skipped.begin(), fp8_skipped.end(), [&](const auto& r) { return r.first == reason; });
    if (it == fp8_skipped.end()) fp8_skipped.emplace_back(reason, calls);
    else it->second += calls;
  }
}

void count_fp8_skipped(OpCounters& counters, const char* reason) {
  for (auto& [known, calls] : counters.fp8_skipped)
    if (known == reason) {
      ++calls;
      return;
    }
  counters.fp8_skipped.emplace_back(reason, 1);
}

namespace {

using detail::Event;
using detail::Key;
using detail::Table;
using detail::to_json;

// The process-wide table and the switches' enable counts. Leaked: threads and the exit handler
// merge into it during shutdown.
//
// Note [a block's table]: a stats() or record() block opens a window: a table of its own that
// every merge adds to while it is open, beside the process-wide one. Its file and its `table` are
// that window, so a block holds the counts, the extremes and the events of its own time, nested
// or in sequence, never rows counted before it (a difference of two snapshots gave the counts but
// not the maxima, and `record(path)` wrote the process's whole table). A thread merges before a
// window opens and when it closes; another thread's counts land in the windows open when it merges.
struct Global : Table {
  std::mutex mutex;
  std::map<int64_t, Table> windows;
  int64_t next_window = 1;
  int env_enables = 0;       // AUTOCASTGEN_STATS, AUTOCASTGEN_RECORD
  int explicit_enables = 0;  // enable()
  int range_enables = 0;
  int record_enables = 0;    // enable_record_only()
  bool record_env = false;   // AUTOCASTGEN_RECORD
  FiniteMode finite = FiniteMode::off;

  // Note [one switch word] in switches.h: the insight bits, rewritten after every change, under
  // the mutex (kModules is the module rules', modules.cpp).
  void publish() {
    uint32_t word = 0;
    if (env_enables + explicit_enables > 0) word |= detail::kCounting;
    if (finite != FiniteMode::off) word |= detail::kWatch;
    const bool record = record_env || record_enables > 0;
    if (record || range_enables > 0) word |= detail::kRanges;
    if (record) word |= detail::kRecordOnly;
    detail::set_switches(detail::kInsight, word);
  }
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
  uint32_t module = 0;
  OpCounters counters;
  uint64_t compiled_calls = 0;
};

using AddressKey = std::tuple<const char*, Policy, uint32_t>;
struct PointerKeyHash {
  size_t operator()(const AddressKey& key) const {
    return std::hash<const void*>()(std::get<0>(key)) ^ static_cast<size_t>(std::get<1>(key)) ^
           (static_cast<size_t>(std::get<2>(key)) << 8);
  }
};

thread_local bool t_table_gone = false;  // trivially destructible: readable during thread exit
thread_local OpCounters t_sink;          // what a call made after this thread's table ended counts into

struct ThreadTable {
  std::deque<Entry> entries;
  std::unordered_map<AddressKey, Entry*, PointerKeyHash> by_address;
  std::map<Key, Entry*> by_name;
  const char* last_op = nullptr;
  Policy last_policy = Policy::lower_precision_fp;
  uint32_t last_module = 0;
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
    for (Entry& entry : entries) {
      entry.counters = OpCounters{};
      entry.compiled_calls = 0;
    }
  }

  void catch_up_epoch() {
    const uint64_t now = g_epoch.load(std::memory_order_relaxed);
    if (epoch != now) {
      zero();
      epoch = now;
    }
  }

  Entry* find(const char* op, Policy policy, uint32_t module) {
    if (last != nullptr && last_op == op && last_policy == policy && last_module == module && last->op == op) return last;
    Entry* entry = nullptr;
    const auto address = by_address.find({op, policy, module});
    if (address != by_address.end() && address->second->op == op) {
      entry = address->second;
    } else {
      Key key{std::string(op), policy, module};
      const auto named = by_name.find(key);
      if (named != by_name.end()) {
        entry = named->second;
      } else {
        entries.push_back(Entry{std::get<0>(key), policy, module, OpCounters{}});
        entry = &entries.back();
        by_name.emplace(std::move(key), entry);
      }
      by_address[{op, policy, module}] = entry;
    }
    last_op = op;
    last_policy = policy;
    last_module = module;
    last = entry;
    return entry;
  }

  void merge() {
    Global& table = global();
    const std::lock_guard<std::mutex> lock(table.mutex);
    if (epoch == g_epoch.load(std::memory_order_relaxed)) {
      const auto add = [this](Table& into) {
        for (const Entry& entry : entries)
          if (entry.counters.calls != 0) into.ops[{entry.op, entry.policy, entry.module}].add(entry.counters);
        for (const Entry& entry : entries)
          if (entry.compiled_calls != 0) into.compiled_calls[{entry.op, entry.policy, entry.module}] += entry.compiled_calls;
      };
      add(table);
      for (auto& [id, window] : table.windows) add(window);
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

std::string snapshot_locked() {
  Global& table = global();
  const std::lock_guard<std::mutex> lock(table.mutex);
  return to_json(table);
}

// Writes `text` to `path` whole or not at all, synced to disk (a record: support/atomic_file.h; a
// file-size limit gives "File too large", not death by SIGXFSZ); the reason on failure.
std::string write_file(const std::string& path_with_fields, const std::string& text) {
  const std::string path = detail::with_rank(path_with_fields);  // Note [rank from the environment] in rank.h
  std::string error;
  if (!write_file_atomically(path, text, error, {.durable = true, .create_folders = false})) return error;
  return {};
}

std::string& env_path_storage() {
  static std::string* const path = new std::string;
  return *path;
}

std::string& record_path_storage() {
  static std::string* const path = new std::string;
  return *path;
}

// At exit (AUTOCASTGEN_STATS, AUTOCASTGEN_RECORD): the exiting thread's table has merged already
// (thread-local destructors run before exit handlers); other threads still running are not
// counted. Python's warning machinery may be gone, so a failure is printed to stderr.
// An exception leaving an exit handler would end the process by std::terminate (SIGABRT): every
// failure here is a warning.
void write_at_exit() {
  try {
    merge_thread();
    const std::string text = snapshot_locked();
    for (const auto& [path, variable] : {std::pair{&env_path_storage(), "AUTOCASTGEN_STATS"},
                                         std::pair{&record_path_storage(), "AUTOCASTGEN_RECORD"}}) {
      if (path->empty()) continue;
      const std::string error = write_file(*path, text);
      if (!error.empty())
        std::fprintf(stderr, "autocastgen: warning: could not write the statistics to '%s' (%s): %s\n",
                     terminal_text(*path).c_str(), variable, error.c_str());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "autocastgen: warning: could not write the statistics at exit: %s\n", e.what());
  }
}

// The environment, read once when the library loads: AUTOCASTGEN_STATS=FILE.json (statistics on
// until exit, written to FILE.json), AUTOCASTGEN_RECORD=FILE.json (record-only mode until exit,
// written to FILE.json), AUTOCASTGEN_FINITE=off|record|warn|raise (the watch's mode). A value
// that cannot be used warns on stderr and leaves its switch off: a diagnostic must not stop a run.
const bool g_env_read = [] {
  Global& table = global();
  const std::lock_guard<std::mutex> lock(table.mutex);
  bool write = false;
  if (const char* value = std::getenv("AUTOCASTGEN_STATS"); value != nullptr && *value != '\0') {
    env_path_storage() = value;
    ++table.env_enables;
    write = true;
  }
  if (const char* value = std::getenv("AUTOCASTGEN_RECORD"); value != nullptr && *value != '\0') {
    record_path_storage() = value;
    ++table.env_enables;
    table.record_env = true;
    write = true;
  }
  if (const char* value = std::getenv("AUTOCASTGEN_FINITE"); value != nullptr && *value != '\0') {
    if (const std::optional<FiniteMode> mode = parse_finite_mode(value)) {
      table.finite = *mode;
    } else {
      std::fprintf(stderr,
                   "autocastgen: warning: AUTOCASTGEN_FINITE='%s' is not a mode of the non-finite watch (off, "
                   "record, warn or raise); the watch stays off\n",
                   value);
    }
  }
  table.publish();
  if (write) std::atexit(write_at_exit);
  return true;
}();

}  // namespace

OpCounters* thread_counters(const char* op, Policy policy) {
  const uint32_t module = modules::current_path_id();
  // Note [insight in compiled code] in traced_calls.cpp.
  if (C10_UNLIKELY(::autocastgen::detail::compiling_call()))
    if (OpCounters* traced = detail::traced_counters(op, policy, module)) return traced;
  return detail::thread_counters_in(op, policy, module);
}

OpCounters* detail::thread_counters_in(const char* op, Policy policy, uint32_t module) {
  ThreadTable* table = thread_table();
  if (table == nullptr) return &t_sink;
  table->catch_up_epoch();
  return &table->find(op, policy, module)->counters;
}

void detail::count_compiled_call(const char* op, Policy policy, uint32_t module, const OpCounters& traced) {
  ThreadTable* table = thread_table();
  if (table == nullptr) return;
  table->catch_up_epoch();
  Entry* entry = table->find(op, policy, module);
  OpCounters& c = entry->counters;
  c.calls += traced.calls;
  c.casts += traced.casts;
  c.cast_bytes += traced.cast_bytes;
  for (size_t i = 0; i < kDtypeSlots; ++i) {
    c.ran_in[i] += traced.ran_in[i];
    c.input_dtypes[i] = c.input_dtypes[i] || traced.input_dtypes[i];
  }
  for (const auto& [reason, calls] : traced.fp8_skipped)
    for (uint64_t i = 0; i < calls; ++i) count_fp8_skipped(c, reason.c_str());
  entry->compiled_calls += traced.calls;
}

void enable() {
  Global& table = global();
  const std::lock_guard<std::mutex> lock(table.mutex);
  ++table.explicit_enables;
  table.publish();
}

void disable() {
  Global& table = global();
  const std::lock_guard<std::mutex> lock(table.mutex);
  if (table.explicit_enables == 0) return;
  --table.explicit_enables;
  table.publish();
}

const char* finite_mode_name(FiniteMode mode) {
  switch (mode) {
    case FiniteMode::off: return "off";
    case FiniteMode::record: return "record";
    case FiniteMode::warn: return "warn";
    case FiniteMode::raise: return "raise";
  }
  return "?";
}

std::optional<FiniteMode> parse_finite_mode(std::string_view text) {
  for (const FiniteMode mode : {FiniteMode::off, FiniteMode::record, FiniteMode::warn, FiniteMode::raise})
    if (text == finite_mode_name(mode)) return mode;
  return std::nullopt;
}

FiniteMode set_finite_mode(FiniteMode mode) {
  Global& table = global();
  const std::lock_guard<std::mutex> lock(table.mutex);
  const FiniteMode previous = table.finite;
  table.finite = mode;
  table.publish();
  return previous;
}

FiniteMode finite_mode() {
  Global& table = global();
  const std::lock_guard<std::mutex> lock(table.mutex);
  return table.finite;
}

void enable_ranges() {
  Global& table = global();
  const std::lock_guard<std::mutex> lock(table.mutex);
  ++table.range_enables;
  table.publish();
}

void disable_ranges() {
  Global& table = global();
  const std::lock_guard<std::mutex> lock(table.mutex);
  if (table.range_enables == 0) return;
  --table.range_enables;
  table.publish();
}

// Record-only counts as a statistics enable too: its calls are counted.
void enable_record_only() {
  Global& table = global();
  const std::lock_guard<std::mutex> lock(table.mutex);
  ++table.record_enables;
  ++table.explicit_enables;
  table.publish();
}

void disable_record_only() {
  Global& table = global();
  const std::lock_guard<std::mutex> lock(table.mutex);
  if (table.record_enables == 0) return;
  --table.record_enables;
  if (table.explicit_enables > 0) --table.explicit_enables;
  table.publish();
}

const std::string& record_path() { return record_path_storage(); }

FiniteWatch::FiniteWatch(FiniteMode mode) : previous_(set_finite_mode(mode)) {}
FiniteWatch::~FiniteWatch() { (void)set_finite_mode(previous_); }

RangeScope::RangeScope() { enable_ranges(); }
RangeScope::~RangeScope() { disable_ranges(); }

RecordScope::RecordScope() { enable_record_only(); }
RecordScope::~RecordScope() {
  merge_thread();
  disable_record_only();
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
    table.clear();
    for (auto& [id, window] : table.windows) window.clear();
    g_epoch.fetch_add(1, std::memory_order_relaxed);
  }
  detail::reset_watch_events();
  if (ThreadTable* table = thread_table()) table->catch_up_epoch();
}

const std::string& env_path() { return env_path_storage(); }

bool flush(const std::string& path) {
  const std::string& target =
      !path.empty() ? path : !env_path_storage().empty() ? env_path_storage() : record_path_storage();
  if (target.empty()) {
    TORCH_WARN("autocastgen: no statistics file to flush to (no path given, AUTOCASTGEN_STATS and AUTOCASTGEN_RECORD "
               "unset)");
    return false;
  }
  const std::string error = write_file(target, snapshot_json());
  if (!error.empty()) {
    TORCH_WARN("autocastgen: could not write the statistics to '", target, "': ", error);
    return false;
  }
  return true;
}

bool detail::wants_event(const char* op, Policy policy, uint32_t module) {
  Global& table = global();
  const std::lock_guard<std::mutex> lock(table.mutex);
  const Key key{op, policy, module};
  if (!table.events.contains(key)) return true;
  for (const auto& [id, window] : table.windows)
    if (!window.events.contains(key)) return true;
  return false;
}

void detail::record_event(const char* op, Policy policy, uint32_t module, const std::string& message,
                          const std::string& line) {
  Global& table = global();
  const std::lock_guard<std::mutex> lock(table.mutex);
  const Key key{op, policy, module};
  table.events.try_emplace(key, Event{message, line});
  for (auto& [id, window] : table.windows) window.events.try_emplace(key, Event{message, line});
}

namespace {

// Note [a block's table]: the calling thread's earlier counts go to the process's table only.
int64_t open_window() {
  merge_thread();
  Global& table = global();
  const std::lock_guard<std::mutex> lock(table.mutex);
  const int64_t id = table.next_window++;
  table.windows.emplace(id, Table{});
  return id;
}

// The window's table as JSON, closed; written to `path` too when one is given (a failure warns).
std::string close_window(int64_t id, const std::string& path) {
  merge_thread();
  std::string text;
  {
    Global& table = global();
    const std::lock_guard<std::mutex> lock(table.mutex);
    const auto window = table.windows.find(id);
    TORCH_CHECK_VALUE(window != table.windows.end(), "autocastgen: no open statistics block ", id);
    text = to_json(window->second);
    table.windows.erase(window);
  }
  if (!path.empty())
    if (const std::string error = write_file(path, text); !error.empty())
      TORCH_WARN("autocastgen: could not write the statistics to '", path, "': ", error);
  return text;
}

}  // namespace

StatsScope::StatsScope() { enable(); }

StatsScope::~StatsScope() {
  merge_thread();
  disable();
}

}  // namespace autocastgen::stats

namespace autocastgen::stats {

// Note [telling a hit from a cast]: PyTorch's cached_cast does not say whether it converted or
// returned its cached copy, and its cache is not exported. Its cacheable case is known (a float32
// leaf that requires grad and is not a view, cast to the device's autocast dtype, cache on, not a
// CUDA-graph cached tensor), and on a miss it stores a weak reference to the source in its cache:
// the source's weak count grows by one. So a cacheable source whose weak count did not change got
// a cache hit; every other result that is not the source itself is a new tensor. A weak reference
// taken or dropped at that moment by another thread (a weight shared by threads, and PyTorch's
// cache is process-wide) can make one such call count wrongly; single-threaded counts are exact.
at::Tensor torch_cast_counted(at::ScalarType to, const at::Tensor& tensor, c10::DeviceType device,
                              OpCounters& counters) {
  const bool cacheable = tensor.defined() && tensor.scalar_type() == at::kFloat &&
                         to == at::autocast::get_autocast_dtype(device) && tensor.requires_grad() &&
                         tensor.is_leaf() && !tensor.is_view() && at::autocast::is_autocast_cache_enabled() &&
                         !at::caching::is_cached_tensor(tensor);
  const size_t weak_before = cacheable ? tensor.getIntrusivePtr().weak_use_count() : 0;
  at::Tensor out = at::autocast::cached_cast(to, tensor, device);
  if (out.is_same(tensor)) return out;
  const bool stored = cacheable && tensor.getIntrusivePtr().weak_use_count() != weak_before;
  if (cacheable && !stored) {
    ++counters.cache_hits;
  } else {
    counters.cache_misses += stored ? 1 : 0;
    ++counters.casts;
    counters.cast_bytes += static_cast<uint64_t>(out.numel()) * out.element_size();
  }
  return out;
}

// autocastgen's cast cache says what it did (state_internal.h).
at::Tensor own_cast_counted(at::ScalarType to, const at::Tensor& tensor, c10::DeviceType device,
                            OpCounters& counters) {
  using ::autocastgen::detail::CastOutcome;
  using ::autocastgen::detail::cached_cast_with_outcome;
  CastOutcome outcome{};
  at::Tensor out = cached_cast_with_outcome(to, tensor, device, outcome, counters.cache_evictions);
  if (outcome == CastOutcome::hit) {
    ++counters.cache_hits;
  } else if (outcome == CastOutcome::cast || outcome == CastOutcome::miss) {
    counters.cache_misses += outcome == CastOutcome::miss ? 1 : 0;
    ++counters.casts;
    counters.cast_bytes += static_cast<uint64_t>(out.numel()) * out.element_size();
  }
  return out;
}

}  // namespace autocastgen::stats

namespace {

TORCH_LIBRARY_FRAGMENT(autocastgen, m) {
  using autocastgen::detail::bookkeeping;  // Note [bookkeeping ops]
  m.def("stats_enable() -> ()", bookkeeping([] { autocastgen::stats::enable(); }));
  m.def("stats_disable() -> ()", bookkeeping([] {
    autocastgen::stats::merge_thread();
    autocastgen::stats::disable();
  }));
  m.def("stats_enabled() -> bool", bookkeeping([] { return autocastgen::stats::enabled(); }));
  m.def("stats_merge() -> ()", bookkeeping([] { autocastgen::stats::merge_thread(); }));
  m.def("stats_snapshot() -> str", bookkeeping([] { return autocastgen::stats::snapshot_json(); }));
  m.def("stats_reset() -> ()", bookkeeping([] { autocastgen::stats::reset(); }));
  m.def("stats_flush(str path=\"\") -> bool", bookkeeping([](const std::string& path) { return autocastgen::stats::flush(path); }));
  m.def("stats_path() -> str", bookkeeping([] { return autocastgen::stats::env_path(); }));
  // Note [a block's table]: stats() and record() blocks.
  m.def("stats_window_open() -> int", bookkeeping([] { return autocastgen::stats::open_window(); }));
  m.def("stats_window_close(int id, str path=\"\") -> str",
        bookkeeping([](int64_t id, const std::string& path) { return autocastgen::stats::close_window(id, path); }));
  // The non-finite watch, the range record and record-only mode (watch.h).
  m.def("finite_set_mode(str mode) -> str", bookkeeping([](const std::string& mode) {
    const std::optional<autocastgen::stats::FiniteMode> parsed = autocastgen::stats::parse_finite_mode(mode);
    TORCH_CHECK_VALUE(parsed.has_value(), "autocastgen: '", mode,
                      "' is not a mode of the non-finite watch (expected off, record, warn or raise)");
    return std::string(autocastgen::stats::finite_mode_name(autocastgen::stats::set_finite_mode(*parsed)));
  }));
  m.def("finite_mode() -> str", bookkeeping([] { return std::string(autocastgen::stats::finite_mode_name(autocastgen::stats::finite_mode())); }));
  m.def("finite_first() -> str", bookkeeping([] { return autocastgen::stats::first_nonfinite(); }));
  m.def("ranges_enable() -> ()", bookkeeping([] { autocastgen::stats::enable_ranges(); }));
  m.def("ranges_disable() -> ()", bookkeeping([] { autocastgen::stats::disable_ranges(); }));
  m.def("record_enable() -> ()", bookkeeping([] { autocastgen::stats::enable_record_only(); }));
  m.def("record_disable() -> ()", bookkeeping([] {
    autocastgen::stats::merge_thread();
    autocastgen::stats::disable_record_only();
  }));
  m.def("record_enabled() -> bool", bookkeeping([] {
          return (autocastgen::stats::detail::active() & autocastgen::stats::detail::kRecordOnly) != 0;
        }));
  m.def("record_path() -> str", bookkeeping([] { return autocastgen::stats::record_path(); }));
}

}  // namespace
