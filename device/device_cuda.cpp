// device_cuda.cpp - the device runtime over CUDA (see device.hpp). Built with the `cuda` feature.
//
// The CUDA runtime is linked statically (libcudart_static), so libzcoll needs nothing of CUDA on a
// machine without it: there cudaGetDeviceCount fails and the process has no device runtime. The few
// driver calls (stream memory operations, VMM allocations exported as file descriptors) come from
// cudaGetDriverEntryPointByVersion, so libcuda is not linked either.
#include <cuda.h>
#include <cuda_runtime.h>
#include <unistd.h>

#include <cstring>
#include <mutex>
#include <string>

#include "core/device.hpp"
#include "kernels/cuda_reduce.hpp"

namespace zcoll {
namespace {

using PfnWaitValue64 = CUresult (*)(CUstream, CUdeviceptr, cuuint64_t, unsigned int);
using PfnGranularity = CUresult (*)(size_t*, const CUmemAllocationProp*, CUmemAllocationGranularity_flags);
using PfnCreate = CUresult (*)(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*, unsigned long long);
using PfnRelease = CUresult (*)(CUmemGenericAllocationHandle);
using PfnExport = CUresult (*)(void*, CUmemGenericAllocationHandle, CUmemAllocationHandleType, unsigned long long);
using PfnImport = CUresult (*)(CUmemGenericAllocationHandle*, void*, CUmemAllocationHandleType);
using PfnReserve = CUresult (*)(CUdeviceptr*, size_t, size_t, CUdeviceptr, unsigned long long);
using PfnAddressFree = CUresult (*)(CUdeviceptr, size_t);
using PfnMap = CUresult (*)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
using PfnUnmap = CUresult (*)(CUdeviceptr, size_t);
using PfnSetAccess = CUresult (*)(CUdeviceptr, size_t, const CUmemAccessDesc*, size_t);

struct Driver {
  PfnWaitValue64 waitValue64 = nullptr;
  PfnGranularity granularity = nullptr;
  PfnCreate create = nullptr;
  PfnRelease release = nullptr;
  PfnExport exportFd = nullptr;
  PfnImport importFd = nullptr;
  PfnReserve reserve = nullptr;
  PfnAddressFree addressFree = nullptr;
  PfnMap map = nullptr;
  PfnUnmap unmap = nullptr;
  PfnSetAccess setAccess = nullptr;
};

template <typename Fn>
bool entryPoint(const char* name, Fn* out) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult q{};
  if (cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &q) != cudaSuccess ||
      q != cudaDriverEntryPointSuccess || !p)
    return false;
  *out = reinterpret_cast<Fn>(p);
  return true;
}

Status check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::ok();
  return deviceError("{}: {} ({})", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

Status checkDriver(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return Status::ok();
  return deviceError("{}: CUDA driver error {}", what, static_cast<int>(r));
}

class Cuda final : public DeviceRuntime {
 public:
  Status init() {
    int count = 0;
    if (Status s = check(cudaGetDeviceCount(&count), "cudaGetDeviceCount"); !s) return s;
    if (count == 0) return deviceError("no CUDA device");
    const bool ok = entryPoint("cuStreamWaitValue64", &d_.waitValue64) &&
                    entryPoint("cuMemGetAllocationGranularity", &d_.granularity) &&
                    entryPoint("cuMemCreate", &d_.create) && entryPoint("cuMemRelease", &d_.release) &&
                    entryPoint("cuMemExportToShareableHandle", &d_.exportFd) &&
                    entryPoint("cuMemImportFromShareableHandle", &d_.importFd) &&
                    entryPoint("cuMemAddressReserve", &d_.reserve) && entryPoint("cuMemAddressFree", &d_.addressFree) &&
                    entryPoint("cuMemMap", &d_.map) && entryPoint("cuMemUnmap", &d_.unmap) &&
                    entryPoint("cuMemSetAccess", &d_.setAccess);
    if (!ok) return deviceError("the CUDA driver lacks stream memory operations or VMM (driver too old?)");
    for (int dev = 0; dev < count && dev < kMaxDevices; ++dev) {
      int sms = 0, hostPtr = 0;
      if (Status s = check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), "SM count"); !s) return s;
      if (Status s = check(cudaDeviceGetAttribute(&hostPtr, cudaDevAttrCanUseHostPointerForRegisteredMem, dev),
                           "host pointer attribute");
          !s)
        return s;
      maxBlocks_[dev] = sms * 4;
      hostPointers_[dev] = hostPtr != 0;
    }
    return Status::ok();
  }

  std::string_view name() const override { return "cuda"; }

  MemKind kindOf(const void* p) override {
    cudaPointerAttributes a{};
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
      (void)cudaGetLastError();
      return MemKind::Host;
    }
    return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged ? MemKind::Device : MemKind::Host;
  }
  int currentDevice() override {
    int dev = 0;
    return cudaGetDevice(&dev) == cudaSuccess ? dev : 0;
  }
  Status setDevice(int device) override { return check(cudaSetDevice(device), "cudaSetDevice"); }

  Status alloc(size_t bytes, void** out) override { return check(cudaMalloc(out, bytes), "cudaMalloc"); }
  void free(void* p) override { (void)cudaFree(p); }
  Status allocHostMapped(size_t bytes, void** out) override {
    if (Status s = check(cudaHostAlloc(out, bytes, cudaHostAllocMapped | cudaHostAllocPortable), "cudaHostAlloc"); !s)
      return s;
    std::memset(*out, 0, bytes);
    return Status::ok();
  }
  void freeHostMapped(void* p) override { (void)cudaFreeHost(p); }
  Status registerHost(void* p, size_t bytes) override {
    if (!hostPointers_[clampDevice(currentDevice())])
      return deviceError("this device cannot use registered host memory at its host address");
    return check(cudaHostRegister(p, bytes, cudaHostRegisterMapped | cudaHostRegisterPortable), "cudaHostRegister");
  }
  void unregisterHost(void* p) override { (void)cudaHostUnregister(p); }

  Status streamCreate(DevStream* out) override {
    cudaStream_t s = nullptr;
    if (Status st = check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate"); !st) return st;
    *out = s;
    return Status::ok();
  }
  void streamDestroy(DevStream s) override { (void)cudaStreamDestroy(static_cast<cudaStream_t>(s)); }
  Status streamQuery(DevStream s, bool* done) override { return ready(cudaStreamQuery(stream(s)), done, "cudaStreamQuery"); }
  Status eventCreate(DevEvent* out) override {
    cudaEvent_t e = nullptr;
    if (Status s = check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate"); !s) return s;
    *out = e;
    return Status::ok();
  }
  void eventDestroy(DevEvent e) override { (void)cudaEventDestroy(static_cast<cudaEvent_t>(e)); }
  Status eventRecord(DevEvent e, DevStream s) override {
    return check(cudaEventRecord(static_cast<cudaEvent_t>(e), stream(s)), "cudaEventRecord");
  }
  Status eventQuery(DevEvent e, bool* done) override {
    return ready(cudaEventQuery(static_cast<cudaEvent_t>(e)), done, "cudaEventQuery");
  }
  Status streamWaitFlag(DevStream s, const uint64_t* flag, uint64_t value) override {
    void* dptr = nullptr;
    if (Status st = check(cudaHostGetDevicePointer(&dptr, const_cast<uint64_t*>(flag), 0), "cudaHostGetDevicePointer");
        !st)
      return st;
    return checkDriver(d_.waitValue64(reinterpret_cast<CUstream>(stream(s)), reinterpret_cast<CUdeviceptr>(dptr), value,
                                      CU_STREAM_WAIT_VALUE_GEQ),
                       "cuStreamWaitValue64");
  }

  Status copyAsync(void* dst, const void* src, size_t bytes, DevStream s) override {
    return check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream(s)), "cudaMemcpyAsync");
  }
  Status reduceAsync(void* dst, void* dst2, const void* a, const void* b, size_t n, DataType t, RedOp op, int divisor,
                     DevStream s) override {
    return check(static_cast<cudaError_t>(cuda::launchReduce(dst, dst2, a, b, n, t, op, divisor, stream(s), blocks())),
                 "reduction kernel launch");
  }
  Status divideAsync(void* data, size_t n, DataType t, int divisor, DevStream s) override {
    return check(static_cast<cudaError_t>(cuda::launchDivide(data, n, t, divisor, stream(s), blocks())),
                 "division kernel launch");
  }

  Status allocShareable(size_t bytes, void** ptr, int* fd, size_t* mappedBytes) override {
    const int dev = currentDevice();
    CUmemAllocationProp prop = properties(dev);
    size_t gran = 0;
    if (Status s = granularity(prop, &gran); !s) return s;
    const size_t size = (bytes + gran - 1) / gran * gran;
    CUmemGenericAllocationHandle h{};
    if (Status s = checkDriver(d_.create(&h, size, &prop, 0), "cuMemCreate"); !s) return s;
    int exported = -1;
    Status s = checkDriver(d_.exportFd(&exported, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
                           "cuMemExportToShareableHandle");
    if (s) s = mapHandle(h, size, gran, dev, ptr);
    (void)d_.release(h);  // the mapping keeps the memory
    if (!s) {
      if (exported >= 0) ::close(exported);
      return s;
    }
    *fd = exported;
    *mappedBytes = size;
    return Status::ok();
  }
  Status importShareable(int fd, size_t mappedBytes, void** ptr) override {
    const int dev = currentDevice();
    size_t gran = 0;
    if (Status s = granularity(properties(dev), &gran); !s) return s;
    CUmemGenericAllocationHandle h{};
    if (Status s = checkDriver(d_.importFd(&h, reinterpret_cast<void*>(static_cast<uintptr_t>(fd)),
                                           CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
                               "cuMemImportFromShareableHandle");
        !s)
      return s;
    Status s = mapHandle(h, mappedBytes, gran, dev, ptr);
    (void)d_.release(h);
    return s;
  }
  void freeShareable(void* p, size_t mappedBytes) override {
    const auto at = reinterpret_cast<CUdeviceptr>(p);
    (void)d_.unmap(at, mappedBytes);
    (void)d_.addressFree(at, mappedBytes);
  }

 private:
  static constexpr int kMaxDevices = 64;
  static int clampDevice(int d) { return d >= 0 && d < kMaxDevices ? d : 0; }
  static cudaStream_t stream(DevStream s) { return static_cast<cudaStream_t>(s); }
  int blocks() { return maxBlocks_[clampDevice(currentDevice())]; }
  static Status ready(cudaError_t e, bool* done, const char* what) {
    *done = e == cudaSuccess;
    if (e == cudaSuccess || e == cudaErrorNotReady) return Status::ok();
    return check(e, what);
  }
  static CUmemAllocationProp properties(int dev) {
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    return prop;
  }
  Status granularity(const CUmemAllocationProp& prop, size_t* out) {
    return checkDriver(d_.granularity(out, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM), "cuMemGetAllocationGranularity");
  }
  Status mapHandle(CUmemGenericAllocationHandle h, size_t size, size_t gran, int dev, void** ptr) {
    CUdeviceptr at = 0;
    if (Status s = checkDriver(d_.reserve(&at, size, gran, 0, 0), "cuMemAddressReserve"); !s) return s;
    Status s = checkDriver(d_.map(at, size, 0, h, 0), "cuMemMap");
    if (s) {
      CUmemAccessDesc access{};
      access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
      access.location.id = dev;
      access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
      s = checkDriver(d_.setAccess(at, size, &access, 1), "cuMemSetAccess");
      if (!s) (void)d_.unmap(at, size);
    }
    if (!s) {
      (void)d_.addressFree(at, size);
      return s;
    }
    *ptr = reinterpret_cast<void*>(at);
    return Status::ok();
  }

  Driver d_;
  int maxBlocks_[kMaxDevices] = {};
  bool hostPointers_[kMaxDevices] = {};
};

}  // namespace

DeviceRuntime* cudaDeviceRuntime(std::string* why) {
  static Cuda* rt = nullptr;
  static std::string failure;
  static std::once_flag once;
  std::call_once(once, [] {
    auto* c = new Cuda();
    if (Status s = c->init(); !s) {
      failure = s.message();
      delete c;
      return;
    }
    rt = c;
  });
  if (!rt && why) *why = failure;
  return rt;
}

}  // namespace zcoll
