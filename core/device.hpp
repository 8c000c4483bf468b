// device.hpp - the device runtime: what zcoll needs of CUDA, behind one interface.
//
// Two implementations: CUDA (device/device_cuda.cpp, built with the `cuda` meson feature; it calls the
// CUDA runtime and the reduction kernels of kernels/cuda_reduce.cu) and the host emulation
// (device/device_emulated.*: "device" memory is host memory the runtime allocated, a stream is a worker
// thread running its work in order). Everything above this interface - memory kinds at the API, the
// device executor, stream ordering, the cuda_ipc transport's data plane - is the same code for both,
// so CI runs the device path without a GPU.
//
// Streams and events are opaque handles (cudaStream_t / cudaEvent_t for CUDA). Every call returns a
// Status of code Device with the runtime's message on failure. Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/status.hpp"
#include "core/types.hpp"

namespace zcoll {

enum class MemKind { Host, Device };

using DevStream = void*;
using DevEvent = void*;

class DeviceRuntime {
 public:
  virtual ~DeviceRuntime() = default;
  virtual std::string_view name() const = 0;

  // The kind of the memory at p: Device for memory of a device (or the emulation's), Host otherwise
  // (pageable or pinned host memory). Called once per buffer per operation.
  virtual MemKind kindOf(const void* p) = 0;
  // The calling thread's current device, and making one current (CUDA's per-thread device).
  virtual int currentDevice() = 0;
  virtual Status setDevice(int device) = 0;

  virtual Status alloc(size_t bytes, void** out) = 0;  // device memory
  virtual void free(void* p) = 0;
  // Host memory the device reads and writes (completion flags), and registering host memory the
  // transports own (slots) so that device copies and kernels reach it directly.
  virtual Status allocHostMapped(size_t bytes, void** out) = 0;
  virtual void freeHostMapped(void* p) = 0;
  virtual Status registerHost(void* p, size_t bytes) = 0;
  virtual void unregisterHost(void* p) = 0;

  virtual Status streamCreate(DevStream* out) = 0;
  virtual void streamDestroy(DevStream s) = 0;
  // Whether all work queued on s has finished (an error of earlier work is returned).
  virtual Status streamQuery(DevStream s, bool* done) = 0;
  virtual Status eventCreate(DevEvent* out) = 0;
  virtual void eventDestroy(DevEvent e) = 0;
  virtual Status eventRecord(DevEvent e, DevStream s) = 0;
  virtual Status eventQuery(DevEvent e, bool* done) = 0;
  // Work queued on s after this call waits until *flag >= value; flag is allocHostMapped memory
  // written by the host (cuStreamWaitValue64).
  virtual Status streamWaitFlag(DevStream s, const uint64_t* flag, uint64_t value) = 0;

  // Asynchronous work on s. copy: any pair of device / registered host memory.
  virtual Status copyAsync(void* dst, const void* src, size_t bytes, DevStream s) = 0;
  // dst = a OP b over n elements (also into dst2 when not null); divided by `divisor` afterwards
  // when divisor > 0 (Avg's last step). Same results as the host kernels (host_reduce.hpp).
  virtual Status reduceAsync(void* dst, void* dst2, const void* a, const void* b, size_t n, DataType t, RedOp op,
                             int divisor, DevStream s) = 0;
  // data /= divisor (Avg of a result that needed no reduction step).
  virtual Status divideAsync(void* data, size_t n, DataType t, int divisor, DevStream s) = 0;

  // Device memory another process (or thread) of this host can map: allocShareable returns the
  // mapping and a file descriptor (the caller passes it over a Unix socket, then closes it);
  // importShareable maps such an fd. Both are released by freeShareable with the size they gave.
  virtual Status allocShareable(size_t bytes, void** ptr, int* fd, size_t* mappedBytes) = 0;
  virtual Status importShareable(int fd, size_t mappedBytes, void** ptr) = 0;
  virtual void freeShareable(void* p, size_t mappedBytes) = 0;
};

// The process's runtime, chosen once (ZCOLL_DEVICE: "auto" = CUDA where built and a device is
// present, "emulated", "none"): nullptr when there is none, and every buffer is host memory.
DeviceRuntime* deviceRuntime();
// Why there is none (for zcoll-info and messages).
std::string_view deviceRuntimeAbsence();
// Tests: replaces the process's runtime (nullptr: none). Call before creating communicators.
void setDeviceRuntime(DeviceRuntime* rt);
// The host emulation (one per process; device/device_emulated.hpp has its test-only extras).
DeviceRuntime* emulatedDeviceRuntime();
#ifdef ZCOLL_HAVE_CUDA
// The CUDA runtime, or nullptr with *why when the driver or a device is missing.
DeviceRuntime* cudaDeviceRuntime(std::string* why);
#endif

}  // namespace zcoll
