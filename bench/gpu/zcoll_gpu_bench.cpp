// zcoll_gpu_bench.cpp - zcoll's GPU figures, for tools/gpu-check (built with the `cuda` feature).
//
//   zcoll-gpu-bench kernels [-e maxbytes]
//       the reduction kernels (float and bf16 sum, c = a + b) beside cudaMemcpy device-to-device in the
//       same run; bandwidth counts bytes read + written (3 per element-byte for a reduction, 2 for a
//       copy), so the ratio is the kernels' share of what the memory gives a copy.
//   zcoll-gpu-bench coll COLL [-b minbytes] [-e maxbytes] [-n iters] [-w warmup]
//       under zcoll-run (or any launcher: zcollCommInitFromEnv): every process on GPU LOCAL_RANK %
//       device count, cudaMalloc'd buffers, ordered on the process's stream; nccl-tests' columns
//       (size, count, type, time, algbw, busbw, #wrong). COLL: allreduce, allgather, reducescatter.
//   zcoll-gpu-bench nccl COLL --id FILE [...]
//       the same loop through NCCL (libnccl.so.2, opened at run time), one process per GPU; rank 0
//       hands NCCL's unique id to the others through FILE (absent before the run).
// Ranks, world size and local rank come from the launcher's variables as zcoll reads them
// (readLaunchEnv: zcoll-run, torchrun, Open MPI, PMI, Slurm).
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/config.hpp"
#include "kernels/cuda_reduce.hpp"
#include "zcoll/zcoll.h"

namespace {

#define CHECK_CUDA(call)                                                                           \
  do {                                                                                             \
    cudaError_t e_ = (call);                                                                       \
    if (e_ != cudaSuccess) {                                                                       \
      std::fprintf(stderr, "zcoll-gpu-bench: %s: %s\n", #call, cudaGetErrorString(e_));           \
      std::exit(2);                                                                                \
    }                                                                                              \
  } while (0)

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

struct Args {
  std::string mode, coll = "allreduce";
  std::string idFile;  // nccl: where rank 0 leaves the unique id
  size_t minBytes = 8, maxBytes = size_t{256} << 20;
  int iters = 20, warmup = 5;
};

bool parseSize(const char* s, size_t* out) {
  char* end = nullptr;
  double v = std::strtod(s, &end);
  if (end == s || v < 0) return false;
  switch (*end) {
    case 'K': case 'k': v *= 1024; break;
    case 'M': case 'm': v *= 1024 * 1024; break;
    case 'G': case 'g': v *= 1024.0 * 1024 * 1024; break;
    case '\0': break;
    default: return false;
  }
  *out = static_cast<size_t>(v);
  return true;
}

int usage() {
  std::fprintf(stderr,
               "usage: zcoll-gpu-bench kernels [-e maxbytes]\n"
               "       zcoll-gpu-bench coll|nccl allreduce|allgather|reducescatter [-b min] [-e max] [-n iters] "
               "[-w warmup] [--id FILE (nccl)]\n");
  return 2;
}

// ---- kernels ---------------------------------------------------------------------------------

double timeLoop(int iters, cudaStream_t s, const std::function<void()>& body) {
  cudaEvent_t a, b;
  CHECK_CUDA(cudaEventCreate(&a));
  CHECK_CUDA(cudaEventCreate(&b));
  body();  // warm-up
  CHECK_CUDA(cudaEventRecord(a, s));
  for (int i = 0; i < iters; ++i) body();
  CHECK_CUDA(cudaEventRecord(b, s));
  CHECK_CUDA(cudaEventSynchronize(b));
  float ms = 0;
  CHECK_CUDA(cudaEventElapsedTime(&ms, a, b));
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms * 1e-3 / iters;
}

int kernels(const Args& a) {
  int dev = 0, sms = 0;
  CHECK_CUDA(cudaGetDevice(&dev));
  CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  cudaStream_t s;
  CHECK_CUDA(cudaStreamCreate(&s));
  void *x, *y, *z;
  CHECK_CUDA(cudaMalloc(&x, a.maxBytes));
  CHECK_CUDA(cudaMalloc(&y, a.maxBytes));
  CHECK_CUDA(cudaMalloc(&z, a.maxBytes));
  CHECK_CUDA(cudaMemset(x, 0, a.maxBytes));
  CHECK_CUDA(cudaMemset(y, 0, a.maxBytes));
  std::printf("# kernels: GB/s of bytes read + written; ratio = kernel / cudaMemcpy D2D at the same size\n");
  std::printf("%12s %14s %14s %8s %14s %8s\n", "size(B)", "memcpy GB/s", "f32 sum GB/s", "ratio", "bf16 sum GB/s",
              "ratio");
  for (size_t bytes = size_t{1} << 20; bytes <= a.maxBytes; bytes *= 4) {
    const int iters = static_cast<int>(std::clamp<size_t>((size_t{8} << 30) / bytes, 5, 200));
    const double tc = timeLoop(iters, s, [&] { CHECK_CUDA(cudaMemcpyAsync(z, x, bytes, cudaMemcpyDeviceToDevice, s)); });
    const double tf = timeLoop(iters, s, [&] {
      (void)zcoll::cuda::launchReduce(z, nullptr, x, y, bytes / 4, zcoll::DataType::Float32, zcoll::RedOp::Sum, 0, s,
                                      sms * 4);
    });
    const double tb = timeLoop(iters, s, [&] {
      (void)zcoll::cuda::launchReduce(z, nullptr, x, y, bytes / 2, zcoll::DataType::Bfloat16, zcoll::RedOp::Sum, 0, s,
                                      sms * 4);
    });
    const double copy = 2.0 * bytes / tc / 1e9, f32 = 3.0 * bytes / tf / 1e9, bf16 = 3.0 * bytes / tb / 1e9;
    std::printf("%12zu %14.1f %14.1f %8.3f %14.1f %8.3f\n", bytes, copy, f32, f32 / copy, bf16, bf16 / copy);
  }
  CHECK_CUDA(cudaGetLastError());
  return 0;
}

// ---- collectives -------------------------------------------------------------------------------

enum class Coll { AllReduce, AllGather, ReduceScatter };

bool parseColl(const std::string& s, Coll* c) {
  if (s == "allreduce") *c = Coll::AllReduce;
  else if (s == "allgather") *c = Coll::AllGather;
  else if (s == "reducescatter") *c = Coll::ReduceScatter;
  else return false;
  return true;
}

double busFactor(Coll c, int n) {
  return c == Coll::AllReduce ? 2.0 * (n - 1) / n : static_cast<double>(n - 1) / n;
}

// The library under test: zcoll, or NCCL through dlopen (its ABI is zcoll's with nccl names).
struct Lib {
  using Comm = void*;
  int (*allReduce)(const void*, void*, size_t, int, int, Comm, cudaStream_t) = nullptr;
  int (*allGather)(const void*, void*, size_t, int, Comm, cudaStream_t) = nullptr;
  int (*reduceScatter)(const void*, void*, size_t, int, int, Comm, cudaStream_t) = nullptr;
  Comm comm = nullptr;
  int rank = 0, nranks = 1;
  std::string name;
};

bool openZcoll(Lib* lib) {
  zcollComm_t comm = nullptr;
  if (zcollCommInitFromEnv(&comm, nullptr) != zcollSuccess) {
    std::fprintf(stderr, "zcoll-gpu-bench: %s\n", zcollGetLastError(nullptr));
    return false;
  }
  lib->comm = comm;
  zcollCommUserRank(comm, &lib->rank);
  zcollCommCount(comm, &lib->nranks);
  lib->allReduce = [](const void* s, void* r, size_t n, int t, int op, Lib::Comm c, cudaStream_t st) {
    return static_cast<int>(zcollAllReduce(s, r, n, static_cast<zcollDataType_t>(t), static_cast<zcollRedOp_t>(op),
                                           static_cast<zcollComm_t>(c), st));
  };
  lib->allGather = [](const void* s, void* r, size_t n, int t, Lib::Comm c, cudaStream_t st) {
    return static_cast<int>(zcollAllGather(s, r, n, static_cast<zcollDataType_t>(t), static_cast<zcollComm_t>(c), st));
  };
  lib->reduceScatter = [](const void* s, void* r, size_t n, int t, int op, Lib::Comm c, cudaStream_t st) {
    return static_cast<int>(zcollReduceScatter(s, r, n, static_cast<zcollDataType_t>(t),
                                               static_cast<zcollRedOp_t>(op), static_cast<zcollComm_t>(c), st));
  };
  lib->name = "zcoll";
  return true;
}

// NCCL: the unique id goes from rank 0 to the others through the file `path`.
bool openNccl(Lib* lib, const zcoll::LaunchEnv& env, const std::string& idFile) {
  void* h = dlopen("libnccl.so.2", RTLD_NOW);
  if (!h) {
    std::fprintf(stderr, "zcoll-gpu-bench: NCCL: %s\n", dlerror());
    return false;
  }
  struct Id {
    char internal[128];
  };
  auto getId = reinterpret_cast<int (*)(Id*)>(dlsym(h, "ncclGetUniqueId"));
  auto init = reinterpret_cast<int (*)(void**, int, Id, int)>(dlsym(h, "ncclCommInitRank"));
  lib->allReduce = reinterpret_cast<decltype(lib->allReduce)>(dlsym(h, "ncclAllReduce"));
  lib->allGather = reinterpret_cast<decltype(lib->allGather)>(dlsym(h, "ncclAllGather"));
  lib->reduceScatter = reinterpret_cast<decltype(lib->reduceScatter)>(dlsym(h, "ncclReduceScatter"));
  if (!getId || !init || !lib->allReduce || !lib->allGather || !lib->reduceScatter || idFile.empty()) {
    std::fprintf(stderr, "zcoll-gpu-bench: NCCL symbols missing, or no --id FILE\n");
    return false;
  }
  const char* path = idFile.c_str();
  lib->rank = std::max(env.rank, 0);
  lib->nranks = std::max(env.size, 1);
  Id id{};
  const std::string tmp = std::string(path) + ".tmp";
  if (lib->rank == 0) {
    if (getId(&id) != 0) return false;
    FILE* f = std::fopen(tmp.c_str(), "wb");
    if (!f || std::fwrite(&id, sizeof id, 1, f) != 1) return false;
    std::fclose(f);
    std::rename(tmp.c_str(), path);
  } else {
    const double t0 = now();
    for (;;) {
      FILE* f = std::fopen(path, "rb");
      if (f && std::fread(&id, sizeof id, 1, f) == 1) {
        std::fclose(f);
        break;
      }
      if (f) std::fclose(f);
      if (now() - t0 > 60) return false;
      usleep(10000);
    }
  }
  if (init(&lib->comm, lib->nranks, id, lib->rank) != 0) {
    std::fprintf(stderr, "zcoll-gpu-bench: ncclCommInitRank failed\n");
    return false;
  }
  lib->name = "nccl";
  return true;
}

float val(int rank, size_t i) { return static_cast<float>((rank + 1) * (i % 13 + 1)); }

int collectives(const Args& a, bool nccl) {
  Coll coll;
  if (!parseColl(a.coll, &coll)) return usage();
  int devices = 0;
  CHECK_CUDA(cudaGetDeviceCount(&devices));
  zcoll::LaunchEnv env;
  if (zcoll::Status s = zcoll::readLaunchEnv(&env); !s) {
    std::fprintf(stderr, "zcoll-gpu-bench: %s\n", s.message().c_str());
    return 1;
  }
  CHECK_CUDA(cudaSetDevice(std::max(env.localRank, 0) % devices));  // before init: the communicator serves it
  Lib lib;
  if (!(nccl ? openNccl(&lib, env, a.idFile) : openZcoll(&lib))) return 1;
  const int n = lib.nranks;
  cudaStream_t s;
  CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const size_t maxElems = a.maxBytes / sizeof(float);
  float *send, *recv;
  CHECK_CUDA(cudaMalloc(&send, a.maxBytes));
  CHECK_CUDA(cudaMalloc(&recv, a.maxBytes));
  std::vector<float> host(maxElems);
  if (lib.rank == 0) {
    std::printf("# %s %s: %d processes on %d GPU(s), float sum, out of place\n", lib.name.c_str(), a.coll.c_str(), n,
                devices);
    std::printf("%12s %12s %6s %10s %10s %10s %8s\n", "size(B)", "count", "type", "time(us)", "algbw", "busbw",
                "#wrong");
  }
  for (size_t bytes = std::max<size_t>(a.minBytes, 4 * static_cast<size_t>(n)); bytes <= a.maxBytes; bytes *= 2) {
    const size_t count = bytes / sizeof(float);                    // elements of the whole buffer
    const size_t block = coll == Coll::AllReduce ? count : count / static_cast<size_t>(n);
    auto op = [&] {
      int r = 0;
      switch (coll) {
        case Coll::AllReduce: r = lib.allReduce(send, recv, count, zcollFloat, zcollSum, lib.comm, s); break;
        case Coll::AllGather: r = lib.allGather(send, recv, block, zcollFloat, lib.comm, s); break;
        case Coll::ReduceScatter: r = lib.reduceScatter(send, recv, block, zcollFloat, zcollSum, lib.comm, s); break;
      }
      if (r != 0) {
        std::fprintf(stderr, "zcoll-gpu-bench: rank %d: %s failed (%d): %s\n", lib.rank, a.coll.c_str(), r,
                     nccl ? "" : zcollGetLastError(nullptr));
        std::exit(1);
      }
    };
    // Input, checked once after the timing.
    const size_t inElems = coll == Coll::AllGather ? block : count;
    for (size_t i = 0; i < inElems; ++i) host[i] = val(lib.rank, i);
    CHECK_CUDA(cudaMemcpy(send, host.data(), inElems * sizeof(float), cudaMemcpyHostToDevice));
    for (int w = 0; w < a.warmup; ++w) op();
    CHECK_CUDA(cudaStreamSynchronize(s));
    const int iters = static_cast<int>(std::clamp<size_t>((size_t{4} << 30) / bytes, 3, static_cast<size_t>(a.iters)));
    const double t0 = now();
    for (int i = 0; i < iters; ++i) op();
    CHECK_CUDA(cudaStreamSynchronize(s));
    const double sec = (now() - t0) / iters;
    const size_t outElems = coll == Coll::AllGather ? count : block;
    CHECK_CUDA(cudaMemcpy(host.data(), recv, outElems * sizeof(float), cudaMemcpyDeviceToHost));
    long long wrong = 0;
    for (size_t i = 0; i < outElems; ++i) {
      float want = 0;
      if (coll == Coll::AllGather) {
        want = val(static_cast<int>(i / block), i % block);
      } else {
        const size_t at = coll == Coll::AllReduce ? i : static_cast<size_t>(lib.rank) * block + i;
        for (int q = 0; q < n; ++q) want += val(q, at);
      }
      wrong += host[i] != want;
    }
    if (!nccl) {
      zcollResult_t async = zcollSuccess;
      zcollCommGetAsyncError(static_cast<zcollComm_t>(lib.comm), &async);
      if (async != zcollSuccess) {
        std::fprintf(stderr, "zcoll-gpu-bench: rank %d: %s\n", lib.rank, zcollGetLastError(nullptr));
        return 1;
      }
    }
    if (lib.rank == 0) {
      const double algbw = static_cast<double>(bytes) / sec / 1e9;
      std::printf("%12zu %12zu %6s %10.1f %10.2f %10.2f %8lld\n", bytes, count, "float", sec * 1e6, algbw,
                  algbw * busFactor(coll, n), wrong);
      std::fflush(stdout);
    }
    if (wrong) {
      std::fprintf(stderr, "zcoll-gpu-bench: rank %d: %lld wrong elements at %zu bytes\n", lib.rank, wrong, bytes);
      return 1;
    }
  }
  cudaFree(send);
  cudaFree(recv);
  if (!nccl) zcollCommDestroy(static_cast<zcollComm_t>(lib.comm));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage();
  Args a;
  a.mode = argv[1];
  int i = 2;
  if (a.mode == "coll" || a.mode == "nccl") {
    if (argc < 3) return usage();
    a.coll = argv[2];
    i = 3;
  }
  for (; i < argc; ++i) {
    const std::string f = argv[i];
    if (i + 1 >= argc) return usage();
    const char* v = argv[++i];
    if (f == "-b" && parseSize(v, &a.minBytes)) continue;
    if (f == "-e" && parseSize(v, &a.maxBytes)) continue;
    if (f == "-n") { a.iters = std::max(1, std::atoi(v)); continue; }
    if (f == "-w") { a.warmup = std::max(0, std::atoi(v)); continue; }
    if (f == "--id") { a.idFile = v; continue; }
    return usage();
  }
  if (a.mode == "kernels") return kernels(a);
  if (a.mode == "coll") return collectives(a, false);
  if (a.mode == "nccl") return collectives(a, true);
  return usage();
}
