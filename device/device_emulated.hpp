// device_emulated.hpp - the host emulation of the device runtime (see device.hpp).
//
// "Device" memory is host memory this runtime mapped (and remembers, so kindOf() tells it apart);
// a stream is a worker thread that runs its queued work in order; events and flag waits are work
// items like the rest; kernels are the host reduction kernels. Shareable memory is a memfd, so the
// cuda_ipc transport's fd exchange runs for real. Tests reach the extras below.
#pragma once

#include <functional>

#include "core/device.hpp"

namespace zcoll {

class EmulatedDeviceRuntime : public DeviceRuntime {
 public:
  // Queues fn on stream s (cudaLaunchHostFunc): the tests' "kernels" before and after an operation.
  virtual Status launchHost(DevStream s, std::function<void()> fn) = 0;
  // Waits until all work on s has run (cudaStreamSynchronize); returns the stream's first error.
  virtual Status synchronize(DevStream s) = 0;
  // Bytes of emulated device memory allocated now (leak checks).
  virtual size_t allocatedBytes() const = 0;
};

EmulatedDeviceRuntime* emulatedDevice();

}  // namespace zcoll
