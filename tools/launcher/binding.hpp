// binding.hpp - zcoll-run's --bind: each local rank on its own core, NUMA node or package (hwloc),
// as mpirun's --bind-to: rank r gets the (r mod count)-th such object of the CPUs this launcher may
// use, so ranks fill cores in order and share them only when there are more ranks than cores.
#pragma once

#include <string>
#include <vector>

namespace zcoll::launcher {

struct Binding {
  std::string object;              // "core 3", "numa 1", "package 0"
  std::string cpus;                // the PUs as a list, e.g. "6-7"
  std::vector<unsigned> cpuList;   // the same, for sched_setaffinity
};

// kind: "none", "core", "numa", "package", or "auto" (mpirun's default: "core" when every rank gets
// a core of its own, else none - oversubscribed ranks must float). False and *error when kind is
// unknown or hwloc fails; an empty *out for "none" (and "auto" when oversubscribed).
bool planBinding(const std::string& kind, int nranks, std::vector<Binding>* out, std::string* error);

// Binds the calling process (in the child, before exec); false with errno on failure.
bool applyBinding(const Binding& b);

}  // namespace zcoll::launcher
