// registry.hpp - the table of transports zcoll knows (built or not), and which one a communicator
// uses: from ZCOLL_TRANSPORTS and the bootstrap's host table (the same on every rank, so all ranks
// choose alike). A new transport is its folder (transport/NAME/, with create(const TransportArgs&,
// std::unique_ptr<Transport>*)) and its line in registry.cpp.
#pragma once

#include <atomic>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "bootstrap/bootstrap.hpp"
#include "core/config.hpp"
#include "transport/transport.hpp"

namespace zcoll {

enum class Reach {
  Host,     // the ranks of one host (shm)
  Network,  // any rank (tcp, ib, ucx)
  Device,   // device buffers of one host's ranks, beside the host transport (cuda_ipc)
};

struct TransportEntry {
  std::string_view name;   // as ZCOLL_TRANSPORTS spells it
  Reach reach;
  std::string_view about;  // one line for zcoll-info
  std::string_view off;    // why it may be missing from a build
  Status (*create)(const TransportArgs&, std::unique_ptr<Transport>*);  // null: not in this build
};

// Every transport zcoll knows, built or not, in the default order of ZCOLL_TRANSPORTS.
std::span<const TransportEntry> transportTable();
// The built ones' names, space-separated ("shm ib tcp ucx"), for messages.
std::string builtTransportNames();
// A ZCOLL_TRANSPORTS list names only known transports (built or not); `what` names its source.
Status checkTransportNames(std::string_view list, std::string_view what);

// The transports, in ZCOLL_TRANSPORTS order (default shm, ib, tcp, ucx), are tried in turn:
//  - a Host transport (shm) serves every rank when all are on this host; when ranks are on several
//    hosts and some host holds more than one, it serves each host's ranks beside the Network
//    transport chosen next (a mixed transport: transport/mixed_transport.hpp);
//  - ib serves when every rank has an active RDMA port (when it is the last name left, a rank
//    without one is an error); tcp and ucx always can.
// Device transports are not chosen here (comm/communicator_device.cpp). Collective over the
// bootstrap. *out stays empty when no listed transport can serve.
Status createTransport(Bootstrap& boot, const Config& config, const std::atomic<bool>* abort,
                       std::unique_ptr<Transport>* out);

}  // namespace zcoll
