// device_rank.cpp - one rank of a multi-process device run (zcoll-run -n N device_rank), on the
// host-emulated device (ZCOLL_DEVICE=emulated): the cuda_ipc transport between processes (device
// memory handed over as file descriptors), stream-ordered all-reduce, all-gather and reduce-scatter
// of several sizes, checked element by element. Exits 0 when every result is right.
#include <cstdio>
#include <cstring>
#include <vector>

#include "device/device_emulated.hpp"
#include "zcoll/zcoll.h"

using namespace zcoll;

int main() {
  EmulatedDeviceRuntime* dev = emulatedDevice();
  if (deviceRuntime() != dev) {
    std::fprintf(stderr, "device_rank: run with ZCOLL_DEVICE=emulated\n");
    return 2;
  }
  zcollComm_t comm = nullptr;
  if (zcollCommInitFromEnv(&comm, nullptr) != zcollSuccess) {
    std::fprintf(stderr, "device_rank: init: %s\n", zcollGetLastError(nullptr));
    return 1;
  }
  int rank = 0, n = 1;
  zcollCommUserRank(comm, &rank);
  zcollCommCount(comm, &n);
  DevStream stream = nullptr;
  if (!dev->streamCreate(&stream).isOk()) return 1;
  long long wrong = 0;
  for (size_t count : {size_t{1}, size_t{1000}, size_t{300'001}}) {
    void *a = nullptr, *b = nullptr;
    if (!dev->alloc(count * n * sizeof(float), &a).isOk() || !dev->alloc(count * n * sizeof(float), &b).isOk()) return 1;
    auto* x = static_cast<float*>(a);
    auto* y = static_cast<float*>(b);
    for (size_t i = 0; i < count * n; ++i) x[i] = static_cast<float>(rank + 1) * static_cast<float>(i % 17);
    const float ranks = static_cast<float>(n * (n + 1) / 2);
    if (zcollAllReduce(a, b, count, zcollFloat, zcollSum, comm, stream) != zcollSuccess ||
        !dev->synchronize(stream).isOk())
      break;
    for (size_t i = 0; i < count; ++i) wrong += y[i] != ranks * static_cast<float>(i % 17);
    if (zcollAllGather(a, b, count, zcollFloat, comm, stream) != zcollSuccess || !dev->synchronize(stream).isOk()) break;
    for (size_t i = 0; i < count * n; ++i)
      wrong += y[i] != static_cast<float>(i / count + 1) * static_cast<float>((i % count) % 17);
    if (zcollReduceScatter(a, b, count, zcollFloat, zcollSum, comm, stream) != zcollSuccess ||
        !dev->synchronize(stream).isOk())
      break;
    for (size_t i = 0; i < count; ++i) wrong += y[i] != ranks * static_cast<float>((rank * count + i) % 17);
    dev->free(a);
    dev->free(b);
  }
  zcollResult_t async = zcollSuccess;
  zcollCommGetAsyncError(comm, &async);
  if (async != zcollSuccess) {
    std::fprintf(stderr, "device_rank %d: %s\n", rank, zcollGetLastError(nullptr));
    return 1;
  }
  dev->streamDestroy(stream);
  if (zcollCommDestroy(comm) != zcollSuccess) return 1;
  if (wrong) std::fprintf(stderr, "device_rank %d: %lld wrong elements\n", rank, wrong);
  else if (rank == 0) std::printf("device_rank: %d processes, all results right\n", n);
  return wrong ? 1 : 0;
}
