// transport_choice.hpp - which transport serves which peer, from ZCOLL_TRANSPORTS and the bootstrap's
// host table (the same on every rank, so all ranks choose alike).
#pragma once

#include <atomic>
#include <memory>

#include "bootstrap/bootstrap.hpp"
#include "core/config.hpp"
#include "transport/transport.hpp"

namespace zcoll {

// The transports, in ZCOLL_TRANSPORTS order (default shm, ib, tcp, ucx), are tried in turn:
//  - shm serves every rank when all are on this host; when ranks are on several hosts and some host
//    holds more than one, it serves each host's ranks beside the network transport chosen next
//    (a mixed transport: transport/mixed_transport.hpp);
//  - ib serves when every rank has an active RDMA port (when it is the last name left, a rank
//    without one is an error); tcp and ucx always can.
// Collective over the bootstrap. *out stays empty when no listed transport can serve.
Status createTransport(Bootstrap& boot, const Config& config, const std::atomic<bool>* abort,
                       std::unique_ptr<Transport>* out);

}  // namespace zcoll
