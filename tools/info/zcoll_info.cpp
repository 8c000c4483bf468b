// zcoll-info - what this zcoll is and what it sees, without a communicator: version and build, the
// transports and why any is off, the algorithms, the host's topology (hwloc) and network interfaces,
// and the effective configuration with where each value came from.
//
//   zcoll-info            all of it
//   zcoll-info --config   only the configuration table
#include <hwloc.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#ifdef ZCOLL_HAVE_IB
#include "transport/ib/ib_transport.hpp"
#endif
#include "algorithms/registry.hpp"
#include "core/config.hpp"
#include "core/device.hpp"
#include "core/socket.hpp"
#include "transport/registry.hpp"
#include "zcoll/zcoll.h"

namespace {

using zcoll::Status;

std::string bytesText(uint64_t b) {
  const char* unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  double v = static_cast<double>(b);
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  return fmt::format("{:.{}f} {}", v, u == 0 ? 0 : 1, unit[u]);
}

void printBuild() {
  int version = 0;
  zcollGetVersion(&version);
  std::printf("zcoll %d.%d.%d (version code %d)\n", version / 10000, version / 100 % 100, version % 100, version);
  std::printf("build: %s, %s, C ABI zcoll.h\n",
#ifdef NDEBUG
              "release",
#else
              "debug",
#endif
              "compiler " __VERSION__);
}

void printTransports() {
  std::printf("\ntransports:\n");
  for (const zcoll::TransportEntry& t : zcoll::transportTable()) {
    const int w = static_cast<int>(t.name.size());
    if (!t.create) {
      std::printf("  %-9.*s OFF   not built (%.*s)\n", w, t.name.data(), static_cast<int>(t.off.size()), t.off.data());
      continue;
    }
    if (t.name == "shm") {  // memfd_create is what it cannot do without
      const int fd = memfd_create("zcoll-info", MFD_CLOEXEC);
      if (fd < 0) {
        std::printf("  %-9s OFF   memfd_create failed: %s\n", "shm", std::strerror(errno));
        continue;
      }
      ::close(fd);
    }
    std::printf("  %-9.*s on    %.*s\n", w, t.name.data(), static_cast<int>(t.about.size()), t.about.data());
#ifdef ZCOLL_HAVE_IB
    if (t.name == "ib")
      for (const std::string& line : zcoll::ib::describeDevices()) std::printf("  %-9s       %s\n", "", line.c_str());
#endif
  }
  // The device runtime: CUDA when built and a GPU is present, the emulation when asked, else none.
  if (zcoll::DeviceRuntime* rt = zcoll::deviceRuntime()) {
    std::printf("  %-9s on    %.*s runtime: device buffers accepted (stream-ordered)\n", "device",
                static_cast<int>(rt->name().size()), rt->name().data());
  } else {
    const std::string_view why = zcoll::deviceRuntimeAbsence();
    std::printf("  %-9s OFF   %.*s\n", "device", static_cast<int>(why.size()), why.data());
  }
#ifdef ZCOLL_HAVE_CUDA
  std::printf("  %-9s built GPU kernels for sm_90 + PTX, CUDA runtime linked statically\n", "cuda");
#else
  std::printf("  %-9s OFF   not built (nvcc not found, or meson -Dcuda=disabled)\n", "cuda");
#endif
  std::printf("  bootstrap over TCP: on (rendezvous, ring, out-of-band all-gather)\n");
}

void printAlgorithms() {
  std::printf("\nalgorithms (ZCOLL_ALGO, zcoll-bench -a):\n");
  std::map<std::string, std::string> byColl;
  for (const zcoll::Algorithm* a : zcoll::allAlgorithms()) {
    std::string& names = byColl[std::string(zcoll::collectiveName(a->collective()))];
    if (!names.empty()) names += " ";
    names += std::string(a->name());
  }
  for (const auto& [coll, names] : byColl) std::printf("  %-14s %s\n", coll.c_str(), names.c_str());
}

void printTopology() {
  std::printf("\nhost topology (hwloc %s):\n", HWLOC_VERSION);
  hwloc_topology_t topo;
  if (hwloc_topology_init(&topo) != 0) {
    std::printf("  unavailable: hwloc_topology_init failed\n");
    return;
  }
  hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  if (hwloc_topology_load(topo) != 0) {
    std::printf("  unavailable: hwloc_topology_load failed\n");
    hwloc_topology_destroy(topo);
    return;
  }
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  const hwloc_obj_t root = hwloc_get_root_obj(topo);
  std::printf("  host %s: %d package(s), %d NUMA node(s), %d core(s), %d hardware thread(s), %s memory\n", host,
              hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PACKAGE), hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE),
              hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE), hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU),
              bytesText(root->total_memory).c_str());
  std::string caches;
  for (hwloc_obj_type_t t : {HWLOC_OBJ_L1CACHE, HWLOC_OBJ_L2CACHE, HWLOC_OBJ_L3CACHE}) {
    const int n = hwloc_get_nbobjs_by_type(topo, t);
    if (n == 0) continue;
    hwloc_obj_t c = hwloc_get_obj_by_type(topo, t, 0);
    caches += fmt::format("{}L{} {} x{}", caches.empty() ? "" : ", ", c->attr->cache.depth,
                          bytesText(c->attr->cache.size), n);
  }
  if (!caches.empty()) std::printf("  caches: %s (as the machine reports them; a VM's may be wrong)\n", caches.c_str());
  std::vector<std::string> gpus, nics, fabrics;
  for (hwloc_obj_t o = hwloc_get_next_osdev(topo, nullptr); o; o = hwloc_get_next_osdev(topo, o)) {
    switch (o->attr->osdev.type) {
      case HWLOC_OBJ_OSDEV_GPU: case HWLOC_OBJ_OSDEV_COPROC: gpus.push_back(o->name); break;
      case HWLOC_OBJ_OSDEV_NETWORK: nics.push_back(o->name); break;
      case HWLOC_OBJ_OSDEV_OPENFABRICS: fabrics.push_back(o->name); break;
      default: break;
    }
  }
  auto list = [](const std::vector<std::string>& v) {
    std::string s;
    for (const std::string& x : v) s += (s.empty() ? "" : ", ") + x;
    return s.empty() ? std::string("none found") : s;
  };
  std::printf("  GPUs: %s\n  NICs (PCI): %s\n  RDMA devices: %s\n", list(gpus).c_str(), list(nics).c_str(),
              list(fabrics).c_str());
  hwloc_topology_destroy(topo);

  // The interfaces the bootstrap can use (ZCOLL_SOCKET_IFNAME).
  ifaddrs* ifs = nullptr;
  if (getifaddrs(&ifs) == 0) {
    std::map<std::string, std::string> addrs;
    for (ifaddrs* i = ifs; i; i = i->ifa_next) {
      if (!i->ifa_addr || (i->ifa_addr->sa_family != AF_INET && i->ifa_addr->sa_family != AF_INET6)) continue;
      zcoll::SockAddr a;
      a.len = i->ifa_addr->sa_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
      std::memcpy(&a.storage, i->ifa_addr, a.len);
      std::string text = a.toString();
      text = text.substr(0, text.rfind(':'));  // no port
      std::string& s = addrs[i->ifa_name];
      s += (s.empty() ? "" : " ") + text + ((i->ifa_flags & IFF_UP) ? "" : " (down)");
    }
    freeifaddrs(ifs);
    std::printf("  network interfaces:\n");
    for (const auto& [name, a] : addrs) std::printf("    %-12s %s\n", name.c_str(), a.c_str());
  }
}

bool printConfig() {
  std::vector<zcoll::ConfigValue> rows;
  if (Status s = zcoll::describeConfig(nullptr, &rows); !s) {
    std::fprintf(stderr, "zcoll-info: %s\n", s.message().c_str());
    return false;
  }
  std::printf("\nconfiguration (docs/configuration.md; zcollConfig_t fields count as API):\n");
  for (const zcoll::ConfigValue& r : rows)
    std::printf("  %-24s %-32s %s\n", std::string(r.name).c_str(), r.value.c_str(), std::string(r.source).c_str());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  bool configOnly = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--config")) {
      configOnly = true;
    } else {
      std::fprintf(stderr, "usage: zcoll-info [--config]\n");
      return std::strcmp(argv[i], "-h") && std::strcmp(argv[i], "--help") ? 2 : 0;
    }
  }
  if (!configOnly) {
    printBuild();
    printTransports();
    printAlgorithms();
    printTopology();
  }
  return printConfig() ? 0 : 1;
}
