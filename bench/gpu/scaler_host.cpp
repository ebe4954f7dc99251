// The CUDA unscale of many small gradients timed from C++ (issue 14's row, without Python's
// argument conversion): ours through the dispatcher (autocastgen::ops, what autocastgen::GradScaler
// calls) against PyTorch's at::_amp_foreach_non_finite_check_and_unscale_, host wall time per call
// (calls back to back, one synchronize at the end) and GPU time per call from CUDA events; and the
// same with empty gradients (no kernel: the per-call host work alone). One JSON line per row.
// Run by scripts/gpu-check; usage: bench_scaler_cuda_host [COUNT NUMEL]
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/cuda.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "autocastgen/scaler/ops.h"

namespace {

using Call = std::function<void(const at::Tensor& inv_scale)>;

// Median over 5 repeats of the wall time per call, in microseconds. Each sample unscales by 1/2
// then by 2, so every element is read and written and the values come back exactly.
double wall_us(const Call& call, const at::Tensor& half, const at::Tensor& two, int pairs) {
  for (int i = 0; i < 20; ++i) call(i % 2 == 0 ? half : two);
  torch::cuda::synchronize();
  std::vector<double> samples;
  for (int r = 0; r < 5; ++r) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < pairs; ++i) {
      call(half);
      call(two);
    }
    torch::cuda::synchronize();
    const std::chrono::duration<double, std::micro> took = std::chrono::steady_clock::now() - start;
    samples.push_back(took.count() / (2.0 * pairs));
  }
  std::sort(samples.begin(), samples.end());
  return samples[samples.size() / 2];
}

// GPU time per call from CUDA events around 2 * pairs calls.
double gpu_us(const Call& call, const at::Tensor& half, const at::Tensor& two, int pairs) {
  at::cuda::CUDAEvent start(cudaEventDefault), end(cudaEventDefault);
  const auto stream = c10::cuda::getCurrentCUDAStream();
  start.record(stream);
  for (int i = 0; i < pairs; ++i) {
    call(half);
    call(two);
  }
  end.record(stream);
  end.synchronize();
  return static_cast<double>(start.elapsed_time(end)) * 1e3 / (2.0 * pairs);
}

void row(const char* name, int count, int64_t numel, std::vector<at::Tensor>& grads) {
  const auto cuda = at::TensorOptions().device(at::kCUDA);
  at::Tensor found = at::zeros({1}, cuda);
  const at::Tensor half = at::full({1}, 0.5, cuda), two = at::full({1}, 2.0, cuda);
  const Call ours = [&](const at::Tensor& inv) { autocastgen::ops::non_finite_check_and_unscale_(grads, found, inv); };
  const Call theirs = [&](const at::Tensor& inv) { at::_amp_foreach_non_finite_check_and_unscale_(grads, found, inv); };
  const double ow = wall_us(ours, half, two, 200), tw = wall_us(theirs, half, two, 200);
  const double og = gpu_us(ours, half, two, 200), tg = gpu_us(theirs, half, two, 200);
  std::printf(
      "{\"row\": \"%s %d x %lld float32 (C++)\", \"ours_wall_us\": %.2f, \"pytorch_wall_us\": %.2f, \"wall_ratio\": %.3f, "
      "\"ours_gpu_us\": %.2f, \"pytorch_gpu_us\": %.2f, \"gpu_ratio\": %.3f}\n",
      name, count, static_cast<long long>(numel), ow, tw, ow / tw, og, tg, og / tg);
}

}  // namespace

int main(int argc, char** argv) {
  if (!torch::cuda::is_available()) {
    std::fprintf(stderr, "bench_scaler_cuda_host: no CUDA device\n");
    return 2;
  }
  const int count = argc > 1 ? std::atoi(argv[1]) : 1000;
  const int64_t numel = argc > 2 ? std::atoll(argv[2]) : 4099;
  const auto cuda = at::TensorOptions().device(at::kCUDA);
  std::vector<at::Tensor> grads, empty;
  for (int i = 0; i < count; ++i) {
    grads.push_back(at::randn({numel}, cuda));
    empty.push_back(at::empty({0}, cuda));
  }
  row("unscale", count, numel, grads);
  row("unscale (empty: host work alone)", count, 0, empty);
  return 0;
}
