// cuda_ipc_transport.cpp - see cuda_ipc_transport.hpp.
#include "transport/cuda_ipc/cuda_ipc_transport.hpp"

#include "transport/shm/shm_transport.hpp"

namespace zcoll::cuda_ipc {

Status create(Bootstrap& boot, const Config& config, const std::atomic<bool>* abort, DeviceRuntime* device,
              std::unique_ptr<Transport>* out) {
  return shm::ShmTransport::create(boot, config, abort, out, device);
}

}  // namespace zcoll::cuda_ipc
