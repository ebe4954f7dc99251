// The recipe's `select:`: which GEMMs of the fp8 list run in fp8 (docs/fp8.md, "Where fp8 pays").
#include "autocastgen/fp8/select.h"

#include <algorithm>
#include <cctype>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/DispatchKeySet.h>
#include <c10/core/GradMode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <c10/util/Exception.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>
#include <torch/library.h>

#include "autocastgen/torch/compat.h"
#include "fp8/decisions_file.h"
#include "state/state_internal.h"
#include "bookkeeping_op.h"

namespace autocastgen::fp8 {

// Note [fp8 selection]
// fp8 pays where the GEMM's saving outweighs the quantisation around it: an amax pass and a cast
// pass over each operand (the weight's once per scope), about 2 x (M·K + K·N + M·N) bytes moved
// for 2·M·K·N flops saved at twice the rate. Below some size the passes cost more than the GEMM
// saves; bench/gpu/fp8_gemm_grid.py measures where, one GEMM's forward + backward at a time.
// - all: every GEMM the support rule takes (Note [fp8 shapes]).
// - auto: a rule per device class, from that grid (docs/fp8.md has the table): on an H100, the
//   tensorwise GEMMs that were faster than bfloat16 by 5 % or more all had M, K and N >= 4096, and
//   every GEMM with one of them below 4096 was at most 1.02x (most 0.5-0.9x); rowwise scaling in
//   PyTorch ops was slower than bfloat16 at every shape (0.19-0.60x); on the CPU fp8 was 0.41-0.62x
//   of bfloat16 (PyTorch's CPU _scaled_mm; no fp8 units). So: CUDA tensorwise with M, K, N >=
//   4096; nothing else.
// - measured: the first GEMM of each shape class on a device is timed both ways, forward and
//   backward (real tensors of the class's shape with values from a private generator: never the
//   call's data, never the user's random stream), and the faster kept. A class is the device
//   (name and capability), the granularity, the lower-precision dtype, M rounded up to a power of
//   two (token counts vary), K, N and whether a backward runs. Decisions are kept for the process
//   and in a file per device and PyTorch release (measured_cache_file), read on first use. When a
//   process group is up (the Python package registers autocastgen::fp8_select_agree), the times are
//   summed over its ranks before comparing, so every rank takes the same decision -- also when one
//   rank read it from its file and another measured it: each process agrees once per class it
//   meets, in the order the GEMMs run, which is the same on every rank of an SPMD program.
// Every decision reads metadata only (shapes, dtypes, device), so it is the same eager, traced
// (FakeTensors: the measurement runs on real tensors outside the trace's modes) and per DTensor
// shard's global shape. A GEMM not selected runs exactly as lower_precision_fp.

namespace {

// (Not yes()/no() as in gemm.cpp: the release-matrix header check compiles every source as one unit.)
constexpr Support chosen() { return {true, ""}; }
constexpr Support skipped(const char* reason) { return {false, reason}; }

constexpr std::int64_t kCudaThreshold = 4096;

std::atomic<detail::DeviceNamer> g_cuda_namer{nullptr};

std::string device_class(c10::Device device) {
  if (device.type() == c10::DeviceType::CUDA) {
    const detail::DeviceNamer namer = g_cuda_namer.load();
    return namer != nullptr ? "cuda " + namer(device.has_index() ? device.index() : 0) : "cuda";
  }
  return c10::DeviceTypeName(device.type(), /*lower_case=*/true);
}

std::string file_safe(std::string text) {
  for (char& c : text)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_') c = '_';
  return text;
}

std::int64_t power_of_two_at_least(std::int64_t m) {
  std::int64_t p = 16;
  while (p < m) p *= 2;
  return p;
}

std::string class_key(c10::Device device, Granularity granularity, c10::ScalarType lower, const GemmShape& shape) {
  std::ostringstream key;
  key << device_class(device) << '|' << granularity_name(granularity) << '|' << c10::toString(lower) << "|M"
      << power_of_two_at_least(shape.m) << "|K" << shape.k << "|N" << shape.n << '|'
      << (shape.backward ? "backward" : "forward");
  return key.str();
}

// --- The table and its file --------------------------------------------------------------------

struct Table {
  std::mutex mutex;                                // guards everything below
  std::map<std::string, MeasuredChoice> decided;   // classes this process met (agreed)
  std::vector<std::string> order;                  // decided's keys in the order they were made
  std::map<std::string, DecisionRows> files;       // file -> key -> times
  std::mutex measuring;                            // one measurement at a time (they time the device)
};

Table& table() {
  static Table* t = new Table();  // never destroyed: threads may select while the process exits
  return *t;
}

std::filesystem::path cache_folder() {
  if (const char* dir = std::getenv("AUTOCASTGEN_FP8_SELECT_CACHE"); dir != nullptr && *dir != '\0') return dir;
  const char* home = std::getenv("HOME");
  return std::filesystem::path(home != nullptr ? home : ".") / ".cache" / "autocastgen" / "fp8-select";
}

// --- Measuring ---------------------------------------------------------------------------------

// Real tensors and real kernels while it lives, whatever the caller traces: the dispatch key sets
// at their defaults (no Python key, no functionalization, no autocast) and no dispatch mode on the
// stack. Both, since autograd's engine restores the mode stack captured with the forward when it
// runs a backward, and a non-empty stack puts the Python key back.
class PlainDispatch {
 public:
  PlainDispatch()
      : modes_(c10::impl::TorchDispatchModeTLS::get_state()),
        keys_(c10::default_included_set, c10::default_excluded_set | c10::autocast_dispatch_keyset) {
    c10::impl::TorchDispatchModeTLS::set_state(c10::impl::TorchDispatchModeTLS());
  }
  ~PlainDispatch() { c10::impl::TorchDispatchModeTLS::set_state(modes_); }
  PlainDispatch(const PlainDispatch&) = delete;
  PlainDispatch& operator=(const PlainDispatch&) = delete;

 private:
  c10::impl::TorchDispatchModeTLS modes_;
  c10::impl::ForceDispatchKeyGuard keys_;
};

at::Tensor values(std::int64_t rows, std::int64_t cols, c10::ScalarType dtype, c10::Device device,
                  at::Generator& generator) {
  return at::randn({rows, cols}, generator, at::TensorOptions().dtype(at::kFloat)).to(device, dtype);
}

void wait_for(c10::Device device) {
  if (device.type() != c10::DeviceType::CPU) (void)at::ones({1}, at::TensorOptions().device(device)).cpu();
}

// The backward of `y` by calling its graph's nodes directly, without autograd's engine: a trace
// calls the fp8 list's ops from Python holding the GIL, and the engine refuses to run under it (and
// would start its threads, which take the GIL). The graphs timed here are trees of a few nodes over
// leaf tensors, whose gradients are dropped instead of accumulated.
void run_backward(const at::Tensor& y, const at::Tensor& grad) {
  const c10::AutoGradMode no_graph(false);
  using NodePtr = std::decay_t<decltype(y.grad_fn())>;  // shared_ptr before 2.15, intrusive_ptr since
  std::vector<std::pair<NodePtr, ::torch::autograd::variable_list>> pending;
  pending.emplace_back(y.grad_fn(), ::torch::autograd::variable_list{grad});
  while (!pending.empty()) {
    auto [node, inputs] = std::move(pending.back());
    pending.pop_back();
    const ::torch::autograd::variable_list outputs = (*node)(std::move(inputs));
    for (std::size_t i = 0; i < outputs.size() && i < node->num_outputs(); ++i) {
      const ::torch::autograd::Edge& edge = node->next_edge(i);
      if (!edge.is_valid() || !outputs[i].defined() ||
          dynamic_cast<::torch::autograd::AccumulateGrad*>(edge.function.get()) != nullptr)
        continue;
      ::torch::autograd::variable_list next(edge.function->num_inputs());
      next.at(edge.input_nr) = outputs[i];
      pending.emplace_back(edge.function, std::move(next));
    }
  }
}

template <typename Step>
double median_ms(const Step& step, c10::Device device, int calls) {
  std::vector<double> samples;
  for (int rep = 0; rep < 3; ++rep) {
    wait_for(device);
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) step();
    wait_for(device);
    samples.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() /
                      calls);
  }
  std::sort(samples.begin(), samples.end());
  return samples[1];
}

// Times a linear's forward (+ backward) in fp8 with `recipe` (current scaling: a fresh weight must
// not enter the delayed-scaling state; no weight cache: each call quantises as a training step
// does) and in `lower`. Runs under PlainDispatch, so the same from an eager call and from a trace.
std::pair<double, double> measure(const Recipe& recipe, c10::Device device, c10::ScalarType lower,
                                  const GemmShape& shape) {
  if (const char* forced = std::getenv("AUTOCASTGEN_FP8_SELECT_TIMES"); forced != nullptr && *forced != '\0') {
    // Tests and users who know better: "FP8_MS,LOWER_MS" instead of timing (docs/fp8.md).
    double fp8_ms = 0, lower_ms = 0;
    TORCH_CHECK(std::sscanf(forced, "%lf,%lf", &fp8_ms, &lower_ms) == 2 && fp8_ms > 0 && lower_ms > 0,
                "AUTOCASTGEN_FP8_SELECT_TIMES=", forced, ": expected two positive numbers, 'FP8_MS,LOWER_MS'");
    return {fp8_ms, lower_ms};
  }
  const PlainDispatch plain;
  const c10::AutoGradMode grad(shape.backward);
  at::Generator generator = at::detail::createCPUGenerator(0x5eed);
  const at::Tensor x = values(shape.m, shape.k, lower, device, generator).requires_grad_(shape.backward);
  const at::Tensor w = values(shape.n, shape.k, at::kFloat, device, generator).requires_grad_(shape.backward);
  const at::Tensor grad_out = values(shape.m, shape.n, lower, device, generator);
  Recipe plain_recipe = recipe;
  plain_recipe.scaling = Scaling::Current;
  plain_recipe.select = Select::All;
  CallOptions options;
  options.cache_weights = false;
  const auto fp8_step = [&] {
    const at::Tensor y = fp8_linear(x, w, std::nullopt, plain_recipe, lower, options);
    if (shape.backward) run_backward(y, grad_out);
  };
  const auto lower_step = [&] {
    const at::Tensor y = at::linear(x, w.to(lower));
    if (shape.backward) run_backward(y, grad_out);
  };
  for (int i = 0; i < 2; ++i) {  // warm up: kernels chosen, allocator filled
    fp8_step();
    lower_step();
  }
  // Enough calls that a timed block is not all launch overhead: about 2e9 flops a block.
  const double flops = 2.0 * static_cast<double>(shape.m) * static_cast<double>(shape.k) * static_cast<double>(shape.n);
  const int calls = static_cast<int>(std::clamp(2e9 / std::max(flops, 1.0), 2.0, 20.0));
  const double lower_ms = median_ms(lower_step, device, calls);
  const double fp8_ms = median_ms(fp8_step, device, calls);
  return {fp8_ms, lower_ms};
}

// Sums both times over the default process group's ranks (Note [fp8 selection]) when the Python
// package defined the op (python/autocastgen/policy/_fp8.py); otherwise returns them as they are.
std::pair<double, double> agree(std::pair<double, double> times, c10::Device device) {
  // Looked up at every new class: the Python package may define it after the first.
  const auto op = c10::Dispatcher::singleton().findOp({"autocastgen::fp8_select_agree", ""});
  if (!op || !op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd)) return times;
  const PlainDispatch plain;
  const at::Tensor local = at::tensor({times.first, times.second}, at::TensorOptions().dtype(at::kDouble)).to(device);
  const at::Tensor all =
      op->typed<at::Tensor(const at::Tensor&)>().call(local).to(c10::Device(c10::DeviceType::CPU), at::kDouble);
  return {all[0].item<double>(), all[1].item<double>()};
}

Support measured(const Recipe& recipe, c10::Device device, c10::ScalarType lower, const GemmShape& shape) {
  Table& t = table();
  const std::string key = class_key(device, recipe.granularity, lower, shape);
  {
    const std::lock_guard<std::mutex> lock(t.mutex);
    if (const auto it = t.decided.find(key); it != t.decided.end())
      return it->second.fp8 ? chosen() : skipped("measured: the lower precision was faster");
  }
  const std::lock_guard<std::mutex> measuring(t.measuring);
  const std::string file = measured_cache_file(device);
  std::optional<std::pair<double, double>> known;
  {
    const std::lock_guard<std::mutex> lock(t.mutex);
    if (const auto it = t.decided.find(key); it != t.decided.end())  // another thread measured it meanwhile
      return it->second.fp8 ? chosen() : skipped("measured: the lower precision was faster");
    auto [rows, inserted] = t.files.try_emplace(file);
    if (inserted) rows->second = read_decisions_file(file);
    if (const auto row = rows->second.find(key); row != rows->second.end()) known = row->second;
  }
  const std::pair<double, double> local = known ? *known : measure(recipe, device, lower, shape);
  const std::pair<double, double> agreed = agree(local, device);
  MeasuredChoice choice{key, agreed.first, agreed.second, agreed.first < agreed.second, known ? "file" : "measured"};
  const std::lock_guard<std::mutex> lock(t.mutex);
  t.decided[key] = choice;
  t.order.push_back(key);
  if (!known) {
    auto& rows = t.files[file];
    for (const auto& [k, times] : read_decisions_file(file)) rows.try_emplace(k, times);  // another process's new rows
    rows[key] = agreed;
    write_decisions_file(file, rows);
  }
  return choice.fp8 ? chosen() : skipped("measured: the lower precision was faster");
}

}  // namespace

Support auto_rule(c10::DeviceType device, Granularity granularity, const GemmShape& shape) {
  if (device == c10::DeviceType::CPU) return skipped("auto: fp8 is slower than the lower precision on CPUs");
  if (device != c10::DeviceType::CUDA) return skipped("auto: no rule for this device (select: measured times it)");
  if (granularity != Granularity::Tensorwise) return skipped("auto: rowwise scaling is slower than bfloat16 on CUDA");
  if (shape.m < kCudaThreshold || shape.k < kCudaThreshold || shape.n < kCudaThreshold)
    return skipped("auto: M, K or N below 4096 (fp8 does not pay on CUDA there)");
  return chosen();
}

Support select_gemm(const Recipe& recipe, c10::Device device, c10::ScalarType lower, const GemmShape& shape) {
  switch (recipe.select) {
    case Select::All: return chosen();
    case Select::Auto: return auto_rule(device.type(), recipe.granularity, shape);
    case Select::Measured: return measured(recipe, device, lower, shape);
  }
  return chosen();
}

std::vector<MeasuredChoice> measured_choices() {
  Table& t = table();
  const std::lock_guard<std::mutex> lock(t.mutex);
  std::vector<MeasuredChoice> out;
  out.reserve(t.order.size());
  for (const std::string& key : t.order) out.push_back(t.decided.at(key));
  return out;
}

void forget_measured_choices(bool file) {
  {
    Table& t = table();
    const std::lock_guard<std::mutex> lock(t.mutex);
    if (file) {
      std::error_code error;
      for (const auto& [path, rows] : t.files) std::filesystem::remove(path, error);
    }
    t.decided.clear();
    t.order.clear();
    t.files.clear();
  }
  ::autocastgen::detail::drop_compiled_graphs();  // compiled graphs hold the decisions they were traced with
}

std::string measured_cache_file(c10::Device device) {
  const std::string name = file_safe(device_class(device)) + "-torch" + std::to_string(TORCH_VERSION_MAJOR) + "." +
                           std::to_string(TORCH_VERSION_MINOR) + "." + std::to_string(TORCH_VERSION_PATCH) + ".tsv";
  return (cache_folder() / name).string();
}

void detail::set_cuda_device_namer(DeviceNamer namer) { g_cuda_namer.store(namer); }

}  // namespace autocastgen::fp8

namespace {

// The measured decisions as rows `key<TAB>fp8_ms<TAB>lower_ms<TAB>fp8|lower<TAB>source` (the Python
// package's autocastgen.fp8_selections()), forgetting them, the cache file, the auto rule.
std::string selection_table() {
  std::ostringstream out;
  for (const autocastgen::fp8::MeasuredChoice& c : autocastgen::fp8::measured_choices())
    out << c.key << '\t' << c.fp8_ms << '\t' << c.lower_ms << '\t' << (c.fp8 ? "fp8" : "lower") << '\t' << c.source
        << '\n';
  return out.str();
}

void forget_selections(bool file) { autocastgen::fp8::forget_measured_choices(file); }

std::string selection_file(c10::Device device) { return autocastgen::fp8::measured_cache_file(device); }

std::tuple<bool, std::string> auto_decision(c10::Device device, std::string granularity, int64_t m, int64_t k,
                                            int64_t n, bool backward) {
  const auto g = autocastgen::fp8::parse_granularity(granularity);
  TORCH_CHECK(g.has_value(), "fp8_auto_rule: unknown granularity '", granularity, "'");
  const autocastgen::fp8::Support s = autocastgen::fp8::auto_rule(device.type(), *g, {m, k, n, backward});
  return {s.ok, s.reason};
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(autocastgen, m) {
  using autocastgen::detail::bookkeeping;  // Note [bookkeeping ops]
  m.def("fp8_selection_table() -> str", bookkeeping(&selection_table));
  m.def("fp8_forget_selections(bool file=False) -> ()", bookkeeping(&forget_selections));
  m.def("fp8_selection_file(Device device) -> str", bookkeeping(&selection_file));
  m.def("fp8_auto_rule(Device device, str granularity, int m, int k, int n, bool backward=True) -> (bool, str)",
        bookkeeping(&auto_decision));
}
