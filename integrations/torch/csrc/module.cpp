// module.cpp - the Python module zcoll_torch._C: the process-group creator that zcoll_torch
// registers with torch.distributed as backend "zcoll", and the ZeRO engine of zcoll_torch.zero.
#include <torch/extension.h>
#include <pybind11/chrono.h>

#include "process_group.hpp"
#include "zero_engine.hpp"

PYBIND11_MODULE(_C, m) {
  m.doc() = "zcoll as a torch.distributed process-group backend";
  m.def("create_process_group", &zcoll_torch::ProcessGroupZcoll::create, pybind11::arg("store"), pybind11::arg("rank"),
        pybind11::arg("size"), pybind11::arg("timeout"),
        "Creates the zcoll process group (collective over the group; rendezvous through store).");
  m.attr("torch_version_built") = TORCH_VERSION;
  zcoll_torch::defineZeroEngine(m);
}
