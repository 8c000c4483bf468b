// communicator_device.cpp - a communicator's device state (when the process has a device runtime,
// core/device.hpp): planned at creation, made at the first device op, ended at destroy. See
// communicator.hpp.
#include <algorithm>
#include <atomic>

#include "comm/communicator.hpp"
#include "core/log.hpp"
#ifdef ZCOLL_HAVE_CUDA_IPC
#include "transport/cuda_ipc/cuda_ipc_transport.hpp"
#endif

namespace zcoll {
namespace {

// Whether ZCOLL_TRANSPORTS (empty: automatic) lets device operations use cuda_ipc.
bool cudaIpcAllowed(std::string_view transports) {
  if (transports.empty()) return true;
  while (!transports.empty())
    if (nextListItem(&transports) == "cuda_ipc") return true;
  return false;
}

}  // namespace

void Communicator::planDevice(bool oneHost) {
  device_ = deviceRuntime();
  if (!device_) return;
  deviceId_ = device_->currentDevice();
  deviceScratch_.bind(device_);
  // Decided alike on every rank: the peer table says who has a device runtime.
  bool everyRank = true;
  for (const PeerInfo& p : bootstrap_->peers()) everyRank = everyRank && p.device;
#ifdef ZCOLL_HAVE_CUDA_IPC
  cudaIpcPlanned_ = oneHost && everyRank && nranks_ > 1 && cudaIpcAllowed(config_.transports);
#else
  (void)oneHost;
  (void)everyRank;
#endif
}

Status Communicator::prepareDeviceLocked() {
  if (deviceLocalReady_) return Status::ok();
  if (!device_) return invalidUsage("device buffers on a communicator whose process had no device runtime at creation");
  DeviceRuntime* rt = device_;
  if (!deviceStream_) {
    // On the communicator's device, whatever the calling thread's current one is (left as it was).
    const int current = rt->currentDevice();
    Status s = rt->setDevice(deviceId_);
    if (s) s = rt->streamCreate(&deviceStream_);
    if (current != deviceId_) (void)rt->setDevice(current);
    if (!s) return std::move(s).withContext("creating its device stream");
  }
  if (!deviceDone_) {
    void* flag = nullptr;
    if (Status s = rt->allocHostMapped(64, &flag); !s) return std::move(s).withContext("allocating its completion counter");
    deviceDone_ = static_cast<uint64_t*>(flag);
  }
  // The host transport's slots, registered so that device copies and kernels reach them in place
  // (device buffers over tcp, ucx, or shm when there is no cuda_ipc).
  if (!cudaIpcPlanned_) {
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
  }
  deviceLocalReady_ = true;
  ZCOLL_INFO(Init, rank_, "device buffers: {} runtime, device {}, transport {}", rt->name(), deviceId_,
             deviceTransportName());
  return Status::ok();
}

Status Communicator::prepareDeviceWorker() {
  if (workerOnDevice_) return Status::ok();
  workerOnDevice_ = true;
  // Here, not when the thread starts: cudaSetDevice creates the device's context, which a
  // communicator used only with host buffers must not.
  if (Status s = device_->setDevice(deviceId_); !s) return std::move(s).withContext("progress thread");
  if (!cudaIpcPlanned_) return Status::ok();
#ifdef ZCOLL_HAVE_CUDA_IPC
  const TransportArgs args{.boot = *bootstrap_, .config = config_, .abort = &abort_, .device = device_};
  if (Status s = cuda_ipc::create(args, &deviceTransport_); !s)
    return std::move(s).withContext(fmt::format("rank {}: creating the cuda_ipc transport", rank_));
  deviceTransportLive_.store(deviceTransport_.get());
#endif
  return Status::ok();
}

std::string_view Communicator::deviceTransportName() const {
  if (!device_) return "none";
  if (cudaIpcPlanned_) return "cuda_ipc";
  return hostSlotsForDevice_ || !deviceLocalReady_ ? transport_->name() : "none";
}

void Communicator::teardownDevice() {
  if (!device_) return;
  for (void* p : registered_) device_->unregisterHost(p);
  registered_.clear();
  hostSlotsForDevice_ = false;
  deviceTransportLive_.store(nullptr);
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
