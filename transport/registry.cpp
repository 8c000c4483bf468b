// registry.cpp - see registry.hpp.
#include "transport/registry.hpp"

#include <algorithm>
#include <vector>

#include <fmt/format.h>

#include "transport/mixed_transport.hpp"
#ifdef ZCOLL_HAVE_SHM
#include "transport/shm/shm_transport.hpp"
#define ZCOLL_SHM_CREATE &shm::ShmTransport::create
#else
#define ZCOLL_SHM_CREATE nullptr
#endif
#ifdef ZCOLL_HAVE_TCP
#include "transport/tcp/tcp_transport.hpp"
#define ZCOLL_TCP_CREATE &tcp::TcpTransport::create
#else
#define ZCOLL_TCP_CREATE nullptr
#endif
#ifdef ZCOLL_HAVE_UCX
#include "transport/ucx/ucx_transport.hpp"
#define ZCOLL_UCX_CREATE &ucx::UcxTransport::create
#else
#define ZCOLL_UCX_CREATE nullptr
#endif
#ifdef ZCOLL_HAVE_IB
#include "transport/ib/ib_transport.hpp"
#define ZCOLL_IB_CREATE &ib::IbTransport::create
#else
#define ZCOLL_IB_CREATE nullptr
#endif
#ifdef ZCOLL_HAVE_CUDA_IPC
#include "transport/cuda_ipc/cuda_ipc_transport.hpp"
#define ZCOLL_CUDA_IPC_CREATE &cuda_ipc::create
#else
#define ZCOLL_CUDA_IPC_CREATE nullptr
#endif

namespace zcoll {
namespace {

const TransportEntry kTransports[] = {
    {"shm", Reach::Host, "same-host peers: memfd slots, futex doorbells, pidfd peer watch",
     "meson -Dshm=disabled", ZCOLL_SHM_CREATE},
    {"ib", Reach::Network,
     "RDMA verbs (InfiniBand, RoCE): one RC queue pair per peer, RDMA write with immediate (ZCOLL_IB_HCA, "
     "ZCOLL_IB_GID_INDEX)",
     "libibverbs-dev not found, or meson -Dib=disabled", ZCOLL_IB_CREATE},
    {"tcp", Reach::Network, "peers on other hosts (or ZCOLL_TRANSPORTS=tcp): one connection per peer, epoll",
     "meson -Dtcp=disabled", ZCOLL_TCP_CREATE},
    {"ucx", Reach::Network,
     "ZCOLL_TRANSPORTS=ucx: a UCP worker per communicator, tagged messages (UCX_TLS, UCX_NET_DEVICES apply)",
     "libucx-dev not found, or meson -Ducx=disabled", ZCOLL_UCX_CREATE},
    {"cuda_ipc", Reach::Device,
     "device buffers of same-host ranks: device-memory slots shared as fds (needs a device runtime)",
     "needs the shm transport", ZCOLL_CUDA_IPC_CREATE},
};

const TransportEntry* find(std::string_view name) {
  for (const TransportEntry& t : kTransports)
    if (t.name == name) return &t;
  return nullptr;
}

}  // namespace

std::span<const TransportEntry> transportTable() { return kTransports; }

std::string builtTransportNames() {
  std::string names;
  for (const TransportEntry& t : kTransports)
    if (t.create) names.append(names.empty() ? "" : " ").append(t.name);
  return names;
}

Status checkTransportNames(std::string_view list, std::string_view what) {
  for (std::string_view rest = list; !rest.empty();) {
    const std::string_view item = nextListItem(&rest);
    if (!find(item)) {
      std::string known;
      for (const TransportEntry& t : kTransports) known.append(known.empty() ? "" : ", ").append(t.name);
      return invalidArgument("{}='{}': unknown transport '{}' (known: {})", what, list, item, known);
    }
  }
  return Status::ok();
}

Status createTransport(Bootstrap& boot, const Config& config, const std::atomic<bool>* abort,
                       std::unique_ptr<Transport>* out) {
  const int rank = boot.rank();
  const std::vector<PeerInfo>& peers = boot.peers();
  const uint64_t here = peers[static_cast<size_t>(rank)].hostHash;
  std::vector<int> localPeers, remotePeers;
  std::vector<uint64_t> hosts;
  for (const PeerInfo& p : peers) {
    hosts.push_back(p.hostHash);
    if (p.rank != rank) (p.hostHash == here ? localPeers : remotePeers).push_back(p.rank);
  }
  std::sort(hosts.begin(), hosts.end());
  const bool oneHost = remotePeers.empty();
  const bool sharedHost = std::adjacent_find(hosts.begin(), hosts.end()) != hosts.end();

  const TransportEntry* local = nullptr;  // serves this host's ranks beside the network transport
  std::string_view order = config.transports.empty() ? std::string_view("shm,ib,tcp,ucx") : config.transports;
  while (!order.empty() && !*out) {
    const std::string_view name = nextListItem(&order);
    const TransportEntry* t = find(name);
    if (!t || !t->create || t->reach == Reach::Device) continue;  // names checked with the Config
    if (t->reach == Reach::Host) {
      if (oneHost) {
        if (Status s = t->create(TransportArgs{.boot = boot, .config = config, .abort = abort}, out); !s)
          return std::move(s).withContext(fmt::format("rank {}: {} transport", rank, name));
      } else if (sharedHost && !local) {
        local = t;
      }
      continue;
    }
    const TransportArgs args{.boot = boot, .config = config, .abort = abort,
                             .members = local ? &remotePeers : nullptr, .lastChoice = order.empty()};
    if (Status s = t->create(args, out); !s) return std::move(s).withContext(fmt::format("rank {}: {} transport", rank, name));
  }
  if (local && *out) {
    std::unique_ptr<Transport> part;
    if (Status s = local->create(TransportArgs{.boot = boot, .config = config, .abort = abort, .members = &localPeers},
                                 &part);
        !s)
      return std::move(s).withContext(fmt::format("rank {}: {} transport for this host's ranks", rank, local->name));
    std::vector<uint8_t> viaLocal(peers.size(), 0);
    for (int r : localPeers) viaLocal[static_cast<size_t>(r)] = 1;
    std::unique_ptr<Transport> remote = std::move(*out);
    if (Status s = MixedTransport::create(std::move(part), std::move(remote), std::move(viaLocal), out); !s) return s;
  }
  return Status::ok();
}

}  // namespace zcoll
