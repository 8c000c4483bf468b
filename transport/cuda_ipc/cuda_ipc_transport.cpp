// cuda_ipc_transport.cpp - see cuda_ipc_transport.hpp.
#include "transport/cuda_ipc/cuda_ipc_transport.hpp"

#include "transport/shm/shm_transport.hpp"

namespace zcoll::cuda_ipc {

Status create(const TransportArgs& args, std::unique_ptr<Transport>* out) {
  if (!args.device) return invalidUsage("cuda_ipc transport: no device runtime");
  return shm::ShmTransport::create(args, out);
}

}  // namespace zcoll::cuda_ipc
