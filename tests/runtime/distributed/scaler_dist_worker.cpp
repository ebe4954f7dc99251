// One rank of the distributed GradScaler test: gloo over 127.0.0.1, writes its trajectory to a file.
//
// Usage: scaler_dist_worker RANK WORLD_SIZE STORE_PORT OUTPUT_FILE
// The TCPStore server is hosted by the test process; this rank joins it as a client.
#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/optim/sgd.h>
#include <torch/version.h>

#include <chrono>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <iostream>
#include <limits>
#include <string>
#include <vector>

#include "autocastgen/scaler/grad_scaler.h"

namespace {

constexpr std::chrono::seconds kTimeout{60};

c10::intrusive_ptr<c10d::ProcessGroup> make_gloo_group(int rank, int world, std::uint16_t port) {
  c10d::TCPStoreOptions store_options;
  store_options.port = port;
  store_options.isServer = false;
  store_options.timeout = kTimeout;
  auto store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", store_options);

  auto options = c10d::ProcessGroupGloo::Options::create(kTimeout);
  options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));  // loopback only
  auto backend = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world, options);
#if TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR < 6
  // Before 2.6 the default backend comes from the group's options (setDefaultBackend is 2.6's).
  auto group = c10::make_intrusive<c10d::ProcessGroup>(
      store, rank, world, c10::make_intrusive<c10d::ProcessGroup::Options>("gloo", kTimeout));
  group->setBackend(c10::DeviceType::CPU, c10d::ProcessGroup::BackendType::GLOO, backend);
#else
  auto group = c10::make_intrusive<c10d::ProcessGroup>(store, rank, world);
  group->setBackend(c10::DeviceType::CPU, c10d::ProcessGroup::BackendType::GLOO, backend);
  group->setDefaultBackend(c10d::ProcessGroup::BackendType::GLOO);
#endif
  return group;
}

// One iteration: gradients 1..4 times the scale, with an inf (rank `inf_rank`) or a NaN.
struct Plan {
  int inf_rank;  // -1: no rank sees a non-finite gradient
  bool nan;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::cerr << "usage: scaler_dist_worker RANK WORLD_SIZE STORE_PORT OUTPUT_FILE\n";
    return 2;
  }
  try {
    const int rank = std::atoi(argv[1]);
    const int world = std::atoi(argv[2]);
    const auto port = static_cast<std::uint16_t>(std::atoi(argv[3]));
    std::ofstream out(argv[4]);
    auto group = make_gloo_group(rank, world, port);

    // The same parameters and optimizer on each rank; one scaler reduces over the group, a
    // second one (the control) only sees its own rank's gradients.
    at::Tensor p = at::zeros({4}).set_requires_grad(true);
    at::Tensor q = at::zeros({4}).set_requires_grad(true);
    torch::optim::SGD opt({p}, torch::optim::SGDOptions(0.5));
    torch::optim::SGD control_opt({q}, torch::optim::SGDOptions(0.5));
    const auto base = autocastgen::GradScalerOptions().device(c10::DeviceType::CPU).init_scale(1024.0).growth_interval(2);
    autocastgen::GradScaler scaler(autocastgen::GradScalerOptions(base).process_group(group));
    autocastgen::GradScaler control(base);

    const std::vector<Plan> plan{{1, false}, {-1, false}, {0, true}, {-1, false}, {-1, false}, {1, true}};
    for (size_t it = 0; it < plan.size(); ++it) {
      for (auto* s : {&scaler, &control}) (void)s->scale(at::ones({}));
      at::Tensor grad = at::arange(1, 5, at::kFloat);
      if (plan[it].inf_rank == rank) {
        grad[2] = plan[it].nan ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
      }
      p.mutable_grad() = grad * static_cast<float>(scaler.get_scale());
      q.mutable_grad() = grad * static_cast<float>(control.get_scale());
      const bool stepped = scaler.step(opt).has_value();
      const bool control_stepped = control.step(control_opt).has_value();
      scaler.update();
      control.update();
      out << "iteration " << it << " stepped " << stepped << " scale " << scaler.get_scale() << " tracker "
          << scaler.get_growth_tracker() << " param";
      for (int64_t i = 0; i < 4; ++i) out << ' ' << p[i].item<float>();
      out << " control_stepped " << control_stepped << " control_scale " << control.get_scale() << "\n";
    }
    out.flush();
    // Keep the group alive until every rank has finished its collectives.
    group->barrier()->wait();
    return out ? 0 : 3;
  } catch (const std::exception& e) {
    std::cerr << "rank " << argv[1] << ": " << e.what() << "\n";
    return 1;
  }
}
