// communicator_device.cpp - a communicator's device state: made at creation when the process has a
// device runtime (comm/device.hpp), ended at destroy. See communicator.hpp.
#include <algorithm>
#include <atomic>

#include "comm/communicator.hpp"
#include "comm/log.hpp"
#ifdef ZCOLL_HAVE_CUDA_IPC
#include "transport/cuda_ipc/cuda_ipc_transport.hpp"
#endif

namespace zcoll {
namespace {

// Whether ZCOLL_TRANSPORTS (empty: automatic) lets device operations use cuda_ipc.
bool cudaIpcAllowed(const std::string& transports) {
  if (transports.empty()) return true;
  for (size_t at = 0; at <= transports.size();) {
    const size_t comma = std::min(transports.find(',', at), transports.size());
    if (transports.compare(at, comma - at, "cuda_ipc") == 0) return true;
    at = comma + 1;
  }
  return false;
}

}  // namespace

Status Communicator::setupDevice(bool oneHost) {
  DeviceRuntime* rt = deviceRuntime();
  bool everyRank = true;
  for (const PeerInfo& p : bootstrap_->peers()) everyRank = everyRank && p.device;
  if (!rt) return Status::ok();
  device_ = rt;
  deviceId_ = rt->currentDevice();
  deviceScratch_.bind(rt);
  if (Status s = rt->streamCreate(&deviceStream_); !s) return std::move(s).withContext("creating its device stream");
  void* flag = nullptr;
  if (Status s = rt->allocHostMapped(64, &flag); !s) return std::move(s).withContext("allocating its completion counter");
  deviceDone_ = static_cast<uint64_t*>(flag);
  // The host transport's slots, registered so that device copies and kernels reach them in place
  // (device buffers over tcp, ucx, or shm when there is no cuda_ipc).
  Status registration;
  transport_->forEachSlotRegion([&](void* base, size_t bytes) {
    if (!registration) return;
    registration = rt->registerHost(base, bytes);
    if (registration) registered_.push_back(base);
  });
  hostSlotsForDevice_ = registration.isOk();
  if (!registration) {
    ZCOLL_WARN(Init, rank_, "device buffers cannot use the {} transport: registering its slots failed: {}",
               transport_->name(), registration.message());
    for (void* p : registered_) rt->unregisterHost(p);
    registered_.clear();
  }
#ifdef ZCOLL_HAVE_CUDA_IPC
  // Decided alike on every rank: the peer table says who has a device runtime.
  if (oneHost && everyRank && nranks_ > 1 && cudaIpcAllowed(config_.transports)) {
    if (Status s = cuda_ipc::create(*bootstrap_, config_, &abort_, rt, &deviceTransport_); !s)
      return std::move(s).withContext("cuda_ipc transport");
  }
#else
  (void)oneHost;
  (void)everyRank;
#endif
  ZCOLL_INFO(Init, rank_, "device buffers: {} runtime, device {}, transport {}", rt->name(), deviceId_,
             deviceTransportName());
  return Status::ok();
}

std::string_view Communicator::deviceTransportName() const {
  if (!device_) return "none";
  if (deviceTransport_) return deviceTransport_->name();
  return hostSlotsForDevice_ ? transport_->name() : "none";
}

void Communicator::teardownDevice() {
  if (!device_) return;
  for (void* p : registered_) device_->unregisterHost(p);
  registered_.clear();
  hostSlotsForDevice_ = false;
  deviceTransport_.reset();
  for (auto& r : requests_)
    if (r->ready) device_->eventDestroy(r->ready);
  if (deviceDone_) {
    // Callers' streams may not have reached their waits on the counter yet: release them all, and
    // free the counter only once each stream is past its last wait (bounded by the timeout).
    std::atomic_ref<uint64_t>(*deviceDone_).store(UINT64_MAX, std::memory_order_release);
    const Deadline deadline = Deadline::afterMs(config_.timeoutMs);
    bool passed = true;
    for (auto& [stream, mark] : streamMarks_) {
      (void)stream;
      std::atomic<bool> never{false};
      Waiter w(nullptr, WaitPolicy{config_.spinNs, config_.yieldNs}, deadline, &never);
      const WaitResult r = w.until(
          [&] {
            bool done = false;
            return !device_->eventQuery(mark, &done) || done;
          },
          [] { return -1; });
      passed = passed && r == WaitResult::Ready;
    }
    if (passed) {
      device_->freeHostMapped(deviceDone_);
    } else {
      ZCOLL_WARN(Coll, rank_, "destroy: a stream that waited on this communicator has not moved within the timeout; "
                              "its 64-byte completion counter is left allocated");
    }
    deviceDone_ = nullptr;
  }
  for (auto& [stream, mark] : streamMarks_) device_->eventDestroy(mark);
  streamMarks_.clear();
  if (deviceStream_) device_->streamDestroy(deviceStream_);
  deviceStream_ = nullptr;
}

}  // namespace zcoll
