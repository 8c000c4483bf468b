// transport_choice.cpp - see transport_choice.hpp.
#include "transport/registry.hpp"

#include <algorithm>
#include <vector>

#include <fmt/format.h>

#include "transport/mixed_transport.hpp"
#ifdef ZCOLL_HAVE_SHM
#include "transport/shm/shm_transport.hpp"
#endif
#ifdef ZCOLL_HAVE_TCP
#include "transport/tcp/tcp_transport.hpp"
#endif
#ifdef ZCOLL_HAVE_UCX
#include "transport/ucx/ucx_transport.hpp"
#endif
#ifdef ZCOLL_HAVE_IB
#include "transport/ib/ib_transport.hpp"
#endif

namespace zcoll {

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

  bool mixed = false;  // shm for this host's ranks beside the network transport
  std::string_view order = config.transports.empty() ? std::string_view("shm,ib,tcp,ucx") : config.transports;
  while (!order.empty() && !*out) {
    const std::string_view name = nextListItem(&order);
    Status s = Status::ok();
#ifdef ZCOLL_HAVE_SHM
    if (name == "shm") {
      if (oneHost) s = shm::ShmTransport::create(boot, config, abort, out);
      else mixed = sharedHost;
    }
#endif
#ifdef ZCOLL_HAVE_TCP
    if (name == "tcp") s = tcp::TcpTransport::create(boot, config, abort, out, mixed ? &remotePeers : nullptr);
#endif
#ifdef ZCOLL_HAVE_IB
    if (name == "ib") s = ib::IbTransport::create(boot, config, order.empty(), out, mixed ? &remotePeers : nullptr);
#endif
#ifdef ZCOLL_HAVE_UCX
    if (name == "ucx") s = ucx::UcxTransport::create(boot, config, abort, out, mixed ? &remotePeers : nullptr);
#endif
    if (!s) return std::move(s).withContext(fmt::format("rank {}: {} transport", rank, name));
  }
#ifdef ZCOLL_HAVE_SHM
  if (mixed && *out) {
    std::unique_ptr<Transport> local;
    if (Status s = shm::ShmTransport::create(boot, config, abort, &local, nullptr, &localPeers); !s)
      return std::move(s).withContext(fmt::format("rank {}: shm transport for this host's ranks", rank));
    std::vector<uint8_t> viaLocal(peers.size(), 0);
    for (int r : localPeers) viaLocal[static_cast<size_t>(r)] = 1;
    std::unique_ptr<Transport> remote = std::move(*out);
    if (Status s = MixedTransport::create(std::move(local), std::move(remote), std::move(viaLocal), out); !s) return s;
  }
#endif
  return Status::ok();
}

}  // namespace zcoll
