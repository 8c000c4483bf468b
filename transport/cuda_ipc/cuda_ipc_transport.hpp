// cuda_ipc_transport.hpp - device-to-device FIFOs between the ranks of one host.
//
// The shared-memory transport's FIFOs with their data in device memory: each rank allocates its
// inbound slots as shareable device memory (CUDA VMM allocations exported as POSIX file descriptors,
// cuMemExportToShareableHandle), the fds travel over the shm transport's abstract Unix sockets, and
// every peer maps them (cuMemImportFromShareableHandle). A sender's copy or reduction kernel writes
// straight into the receiver's slot; head/tail stay in host shared memory, so waiting, doorbells and
// dead-peer detection are the shm transport's. Several processes on one GPU work alike (NCCL refuses
// two ranks per GPU). It serves device-buffer operations only; host ones keep their transport.
#pragma once

#include <atomic>
#include <memory>

#include "bootstrap/bootstrap.hpp"
#include "core/config.hpp"
#include "core/device.hpp"
#include "transport/transport.hpp"

namespace zcoll::cuda_ipc {

// Collective over the bootstrap: every rank calls it (all on this host, all with a device runtime:
// args.device).
Status create(const TransportArgs& args, std::unique_ptr<Transport>* out);

}  // namespace zcoll::cuda_ipc
