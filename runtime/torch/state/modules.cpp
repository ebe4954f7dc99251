// Precision by place: module frames per thread and the module rules of loaded policies
// (autocastgen/runtime/modules.h; Note [module frames]).
#include "autocastgen/runtime/modules.h"

#include <array>
#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>

#include "autocastgen/runtime/switches.h"
#include "../device_types.h"

namespace autocastgen::modules {
namespace {


struct PatternEntry {
  std::string pattern;
  std::string where;
  bool section = false;
  int live = 0;  // Patterns/Sections objects holding it
};

struct SectionTable {
  std::string owner;
  std::vector<SectionRule> rules;
  std::vector<uint32_t> ids;  // the rules' patterns
  int holders = 0;
};

// The process's module rules. Pattern ids are stable for the life of the process (generated
// files hold them); `generation` changes with every registration, so frames recompute.
struct Rules {
  std::mutex mutex;
  std::deque<PatternEntry> patterns;  // by id
  std::map<std::pair<std::string, bool>, uint32_t> ids;
  std::array<std::optional<SectionTable>, kDeviceTypes> sections;
  std::atomic<uint64_t> generation{1};

  uint32_t intern(std::string_view pattern, std::string_view where, bool section) {
    const auto [it, added] = ids.try_emplace({std::string(pattern), section}, static_cast<uint32_t>(patterns.size()));
    if (added) patterns.push_back(PatternEntry{std::string(pattern), std::string(where), section, 0});
    // A pattern no loaded rule held any more is where its new holder writes it.
    if (patterns[it->second].live == 0) patterns[it->second].where = std::string(where);
    ++patterns[it->second].live;
    return it->second;
  }
  void changed() { generation.fetch_add(1, std::memory_order_relaxed); }
};

Rules& rules() {
  static Rules* const table = new Rules;  // leaked: generated libraries unregister during exit
  return *table;
}

// Note [module frames]: one frame per running module; `matched[id]` says whether pattern `id`
// matches this frame's path or an enclosing one, `section[device]` is the section in force
// (computed lazily, per generation of the rules).
struct Frame {
  std::string path;
  uint32_t path_id = 0;  // current_path_id(); 0 until asked
  uint64_t generation = 0;
  std::vector<bool> matched;
  std::array<Section, kDeviceTypes> section{};
  std::array<Fp8Place, kDeviceTypes> fp8{};  // Note [fp8 by place]
};

thread_local std::deque<Frame> t_frames;

// Fills `frame`'s caches from its parent's (already current) and the rules. Under the mutex.
void compute(Frame& frame, const Frame* parent, Rules& table, uint64_t generation) {
  frame.matched.assign(table.patterns.size(), false);
  for (size_t id = 0; id < table.patterns.size(); ++id) {
    const bool inherited = parent != nullptr && id < parent->matched.size() && parent->matched[id];
    frame.matched[id] = inherited || glob_matches(table.patterns[id].pattern, frame.path);
  }
  for (size_t device = 0; device < kDeviceTypes; ++device) {
    Section section = parent != nullptr ? parent->section[device] : Section{};
    Fp8Place fp8 = parent != nullptr ? parent->fp8[device] : Fp8Place{};
    if (const std::optional<SectionTable>& sections = table.sections[device]) {
      bool section_found = false;
      bool fp8_found = false;
      for (size_t i = 0; i < sections->rules.size() && !(section_found && fp8_found); ++i) {
        const SectionRule& rule = sections->rules[i];
        const bool is_fp8 = rule.kind == SectionKind::fp8_on || rule.kind == SectionKind::fp8_off;
        if ((is_fp8 ? fp8_found : section_found) || !glob_matches(rule.pattern, frame.path)) continue;
        // The first listed among those matching this frame, per dimension (Note [fp8 by place]).
        if (is_fp8) {
          fp8 = Fp8Place{rule.kind == SectionKind::fp8_on, rule.pattern.c_str()};
          fp8_found = true;
        } else {
          section = Section{rule.kind, rule.dtype};
          section_found = true;
        }
      }
    }
    frame.section[device] = section;
    frame.fp8[device] = fp8;
  }
  frame.generation = generation;
}

// The innermost frame with current caches; nullptr outside every module.
Frame* current_frame() {
  if (t_frames.empty()) return nullptr;
  Rules& table = rules();
  const uint64_t generation = table.generation.load(std::memory_order_acquire);
  Frame& innermost = t_frames.back();
  if (C10_LIKELY(innermost.generation == generation)) return &innermost;
  const std::lock_guard<std::mutex> lock(table.mutex);
  const uint64_t now = table.generation.load(std::memory_order_relaxed);
  const Frame* parent = nullptr;
  for (Frame& frame : t_frames) {  // outermost first: each frame inherits from the one before
    if (frame.generation != now) compute(frame, parent, table, now);
    parent = &frame;
  }
  return &innermost;
}

// Whether any device has a section is the switch word's kModules bit (switches.h): what the drivers
// read. Under the table's mutex, so the bit follows the table's changes in order.
void publish_sections(Rules& table) {
  bool any = false;
  for (const auto& sections : table.sections) any = any || sections.has_value();
  stats::detail::set_switches(stats::detail::kModules, any ? stats::detail::kModules : 0U);
}

bool same_rules(const std::vector<SectionRule>& a, const std::vector<SectionRule>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].pattern != b[i].pattern || a[i].kind != b[i].kind || a[i].dtype != b[i].dtype) return false;
  return true;
}

}  // namespace

bool glob_matches(std::string_view pattern, std::string_view path) {
  // Iterative glob with one backtrack point: `*` is the only metacharacter.
  size_t p = 0, s = 0, star = std::string_view::npos, resume = 0;
  while (s < path.size()) {
    if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      resume = s;
    } else if (p < pattern.size() && pattern[p] == path[s]) {
      ++p;
      ++s;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      s = ++resume;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

size_t enter(std::string path) {
  const size_t below = t_frames.size();
  t_frames.emplace_back().path = std::move(path);
  return below;
}

void exit(size_t depth) {
  while (t_frames.size() > depth) t_frames.pop_back();
}

size_t depth() { return t_frames.size(); }

const std::string* current_path() { return t_frames.empty() ? nullptr : &t_frames.back().path; }

namespace {
struct PathTable {
  std::mutex mutex;
  std::deque<std::string> paths{""};  // id 0: outside every module
  std::map<std::string, uint32_t, std::less<>> ids;
};
PathTable& path_table() {
  static PathTable* const table = new PathTable;
  return *table;
}
}  // namespace

uint32_t current_path_id() {
  if (t_frames.empty()) return 0;
  Frame& frame = t_frames.back();
  if (frame.path_id != 0) return frame.path_id;
  PathTable& table = path_table();
  const std::lock_guard<std::mutex> lock(table.mutex);
  const auto [it, added] = table.ids.try_emplace(frame.path, static_cast<uint32_t>(table.paths.size()));
  if (added) table.paths.push_back(frame.path);
  frame.path_id = it->second;
  return frame.path_id;
}

std::string path_of(uint32_t id) {
  PathTable& table = path_table();
  const std::lock_guard<std::mutex> lock(table.mutex);
  return id < table.paths.size() ? table.paths[id] : std::string();
}

Patterns::Patterns(std::initializer_list<PatternSource> patterns)
    : Patterns(std::vector<PatternSource>(patterns.begin(), patterns.end())) {}

Patterns::Patterns(const std::vector<PatternSource>& patterns) {
  Rules& table = rules();
  const std::lock_guard<std::mutex> lock(table.mutex);
  for (const PatternSource& source : patterns) ids_.push_back(table.intern(source.pattern, source.where, false));
  table.changed();
}

Patterns::~Patterns() {
  Rules& table = rules();
  const std::lock_guard<std::mutex> lock(table.mutex);
  for (const uint32_t id : ids_) --table.patterns[id].live;
  table.changed();
}

bool Patterns::match() const {
  Frame* frame = current_frame();
  if (frame == nullptr) return false;
  for (const uint32_t id : ids_)
    if (id < frame->matched.size() && frame->matched[id]) return true;
  return false;
}

Sections::Sections(c10::DeviceType device, std::string owner, std::vector<SectionRule> section_rules,
                   OnConflict on_conflict)
    : device_(device) {
  Rules& table = rules();
  const std::lock_guard<std::mutex> lock(table.mutex);
  std::optional<SectionTable>& slot = table.sections.at(static_cast<size_t>(device));
  if (slot.has_value()) {
    if (!same_rules(slot->rules, section_rules)) {
      const std::string message = c10::str(
          "autocastgen: ", owner, " gives device ", c10::DeviceTypeName(device, /*lower_case=*/true),
          " a modules: section, but ", slot->owner,
          " gave it a different one, which is still loaded (one section per device: give both policies the same "
          "section, or unload one)");
      TORCH_CHECK(on_conflict == OnConflict::warn, message);
      TORCH_WARN(message, "; ", owner, "'s section is not applied");
      refused_ = true;
      return;
    }
    ++slot->holders;
    return;
  }
  SectionTable sections{std::move(owner), std::move(section_rules), {}, 1};
  for (const SectionRule& rule : sections.rules) sections.ids.push_back(table.intern(rule.pattern, rule.where, true));
  slot = std::move(sections);
  table.changed();
  publish_sections(table);
}

Sections::~Sections() {
  if (refused_) return;
  Rules& table = rules();
  const std::lock_guard<std::mutex> lock(table.mutex);
  std::optional<SectionTable>& slot = table.sections.at(static_cast<size_t>(device_));
  if (!slot.has_value() || --slot->holders > 0) return;
  for (const uint32_t id : slot->ids) --table.patterns[id].live;
  slot.reset();
  table.changed();
  publish_sections(table);
}

Section current_section(c10::DeviceType device) {
  if (t_frames.empty() || (stats::detail::active() & stats::detail::kModules) == 0) return Section{};
  return current_frame()->section[static_cast<size_t>(device)];
}

Fp8Place fp8_place(c10::DeviceType device) {
  if (t_frames.empty() || (stats::detail::active() & stats::detail::kModules) == 0) return Fp8Place{};
  return current_frame()->fp8[static_cast<size_t>(device)];
}

std::vector<RegisteredPattern> registered_patterns() {
  Rules& table = rules();
  const std::lock_guard<std::mutex> lock(table.mutex);
  std::vector<RegisteredPattern> out;
  for (const PatternEntry& entry : table.patterns)
    if (entry.live > 0) out.push_back(RegisteredPattern{entry.pattern, entry.where, entry.section});
  return out;
}

uint64_t rules_generation() { return rules().generation.load(std::memory_order_relaxed); }

}  // namespace autocastgen::modules

namespace autocastgen {

ModuleScope::ModuleScope(std::string path) : depth_(modules::enter(std::move(path))) {}
ModuleScope::~ModuleScope() { modules::exit(depth_); }

}  // namespace autocastgen
