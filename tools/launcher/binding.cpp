// binding.cpp - see binding.hpp.
#include "tools/launcher/binding.hpp"

#include <hwloc.h>
#include <sched.h>

#include <cstdlib>

namespace zcoll::launcher {

bool planBinding(const std::string& kind, int nranks, std::vector<Binding>* out, std::string* error) {
  out->clear();
  if (kind == "none") return true;
  if (kind == "auto") {  // mpirun's default: a core each while there are enough, else unbound
    if (!planBinding("core", nranks, out, error)) return false;
    for (size_t r = 1; r < out->size(); ++r)
      if ((*out)[r].cpus == (*out)[0].cpus) {
        out->clear();
        break;
      }
    return true;
  }
  hwloc_obj_type_t type;
  if (kind == "core") type = HWLOC_OBJ_CORE;
  else if (kind == "numa") type = HWLOC_OBJ_NUMANODE;
  else if (kind == "package") type = HWLOC_OBJ_PACKAGE;
  else {
    *error = "--bind " + kind + ": expected none, auto, core, numa or package";
    return false;
  }
  hwloc_topology_t topo;
  if (hwloc_topology_init(&topo) != 0 || hwloc_topology_load(topo) != 0) {
    *error = "hwloc cannot read this host's topology";
    return false;
  }
  // Only the CPUs this process may use (a cgroup or taskset may restrict them).
  hwloc_bitmap_t allowed = hwloc_bitmap_alloc();
  hwloc_get_cpubind(topo, allowed, HWLOC_CPUBIND_PROCESS);
  std::vector<hwloc_obj_t> objs;
  for (hwloc_obj_t o = hwloc_get_next_obj_by_type(topo, type, nullptr); o; o = hwloc_get_next_obj_by_type(topo, type, o))
    if (o->cpuset && hwloc_bitmap_intersects(o->cpuset, allowed)) objs.push_back(o);
  if (objs.empty()) {
    *error = "--bind " + kind + ": hwloc finds no " + kind + " with a CPU this process may use";
    hwloc_bitmap_free(allowed);
    hwloc_topology_destroy(topo);
    return false;
  }
  for (int r = 0; r < nranks; ++r) {
    hwloc_obj_t o = objs[static_cast<size_t>(r) % objs.size()];
    hwloc_bitmap_t set = hwloc_bitmap_dup(o->cpuset);
    hwloc_bitmap_and(set, set, allowed);
    Binding b;
    b.object = kind + " " + std::to_string(o->logical_index);
    char* list = nullptr;
    hwloc_bitmap_list_asprintf(&list, set);
    b.cpus = list ? list : "";
    std::free(list);
    for (int cpu = hwloc_bitmap_first(set); cpu >= 0; cpu = hwloc_bitmap_next(set, cpu)) b.cpuList.push_back(static_cast<unsigned>(cpu));
    hwloc_bitmap_free(set);
    out->push_back(std::move(b));
  }
  hwloc_bitmap_free(allowed);
  hwloc_topology_destroy(topo);
  return true;
}

bool applyBinding(const Binding& b) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (unsigned cpu : b.cpuList)
    if (cpu < CPU_SETSIZE) CPU_SET(cpu, &set);
  return sched_setaffinity(0, sizeof set, &set) == 0;
}

}  // namespace zcoll::launcher
