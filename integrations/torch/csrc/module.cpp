// module.cpp - the Python module zcoll_torch._C: the process-group creator that zcoll_torch
// registers with torch.distributed as backend "zcoll", and the ZeRO engine of zcoll_torch.zero.
#include <torch/extension.h>
#include <pybind11/chrono.h>

#include <chrono>

#include "process_group.hpp"
#include "zero_engine.hpp"

PYBIND11_MODULE(_C, m) {
  m.doc() = "zcoll as a torch.distributed process-group backend";
  m.def("create_process_group", &zcoll_torch::ProcessGroupZcoll::create, pybind11::arg("store"), pybind11::arg("rank"),
        pybind11::arg("size"), pybind11::arg("timeout"),
        "Creates the zcoll process group (collective over the group; rendezvous through store).");
  m.attr("torch_version_built") = TORCH_VERSION;
  // tools/bench-torch: `iters` all-reduces of `tensor` through the group's C++ interface, each waited
  // for, as DDP's reducer and other C++ callers issue them (no Python per op); returns the seconds.
  m.def(
      "_allreduce_loop",
      [](const c10::intrusive_ptr<zcoll_torch::ProcessGroupBase>& group, at::Tensor tensor, int64_t iters) {
        TORCH_CHECK(group, "zcoll _allreduce_loop: no group");
        TORCH_CHECK(iters >= 0, "zcoll _allreduce_loop: iters = ", iters, ": must be >= 0");
        pybind11::gil_scoped_release noGil;
        std::vector<at::Tensor> tensors{std::move(tensor)};
        const auto t0 = std::chrono::steady_clock::now();
        for (int64_t i = 0; i < iters; ++i) group->allreduce(tensors)->wait();
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      },
      pybind11::arg("group"), pybind11::arg("tensor"), pybind11::arg("iters"));
  zcoll_torch::defineZeroEngine(m);
}
