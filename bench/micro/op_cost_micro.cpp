// op_cost_micro.cpp - Google Benchmark of what one small collective costs through the C API: on a
// 1-rank communicator (the call's own path: validation, handle check, selection, primitives), and
// on 2 ranks of this process over shared memory (a second thread is the peer rank and runs the
// same ops: the handoff between two cores added).
//
//   build/bench/micro/zcoll-micro --benchmark_filter=OpCost
//
// Time per iteration is one op of 8 bytes (two floats). Compare with an anchor's small-message
// latency from tools/bench-anchors in the same minute: this host's speed drifts.
#include <benchmark/benchmark.h>

#include <atomic>
#include <thread>
#include <vector>

#include "core/types.hpp"
#include "zcoll/zcoll.h"

namespace {

using zcoll::Collective;

constexpr size_t kCount = 2;  // 8 bytes of float

// One op of `coll` on `comm`; `value` goes into every element sent (the peer stops on a non-zero sum).
zcollResult_t runOp(Collective coll, zcollComm_t comm, float value, float* out) {
  float in[2 * kCount] = {value, value, value, value};
  switch (coll) {
    case Collective::AllReduce: return zcollAllReduce(in, out, kCount, zcollFloat, zcollSum, comm, nullptr);
    case Collective::Broadcast: return zcollBroadcast(in, out, kCount, zcollFloat, 0, comm, nullptr);
    case Collective::AllGather: return zcollAllGather(in, out, kCount / 2, zcollFloat, comm, nullptr);
    case Collective::ReduceScatter: return zcollReduceScatter(in, out, kCount / 2, zcollFloat, zcollSum, comm, nullptr);
    default: return zcollInvalidArgument;
  }
}

// The ranks of one communicator in this process: rank 0 for the benchmark loop, the others on
// threads that repeat its ops until one carries the stop value.
class Ranks {
 public:
  Ranks(int nranks, Collective coll) : coll_(coll) {
    zcollUniqueId id;
    if (zcollGetUniqueId(&id) != zcollSuccess) return;
    std::atomic<int> ready{0};
    std::atomic<bool> failed{false};
    for (int r = 1; r < nranks; ++r)
      peers_.emplace_back([this, r, nranks, id, &ready, &failed] {
        zcollComm_t c = nullptr;
        if (zcollCommInitRank(&c, nranks, id, r) != zcollSuccess) {
          failed = true;
          ready++;
          return;
        }
        ready++;
        float out[2 * kCount] = {};
        // Broadcast carries rank 0's value; the reductions and the gather carry it too.
        while (runOp(coll_, c, 0.0f, out) == zcollSuccess && out[0] == 0.0f) {
        }
        zcollCommDestroy(c);
      });
    if (zcollCommInitRank(&comm_, nranks, id, 0) != zcollSuccess) comm_ = nullptr;
    while (ready.load() < nranks - 1) std::this_thread::yield();
    if (failed) comm_ = nullptr;
  }
  ~Ranks() {
    if (comm_) {
      float out[2 * kCount] = {};
      (void)runOp(coll_, comm_, 1.0f, out);  // the peers' last op
    }
    for (std::thread& t : peers_) t.join();
    if (comm_) zcollCommDestroy(comm_);
  }
  zcollComm_t comm() const { return comm_; }

 private:
  Collective coll_;
  zcollComm_t comm_ = nullptr;
  std::vector<std::thread> peers_;
};

void OpCost(benchmark::State& state, Collective coll) {
  const int nranks = static_cast<int>(state.range(0));
  Ranks ranks(nranks, coll);
  if (!ranks.comm()) {
    state.SkipWithError("communicator creation failed");
    return;
  }
  float out[2 * kCount] = {};
  for (auto _ : state) {
    if (runOp(coll, ranks.comm(), 0.0f, out) != zcollSuccess) {
      state.SkipWithError(zcollGetLastError(ranks.comm()));
      break;
    }
    benchmark::DoNotOptimize(out);
  }
}

BENCHMARK_CAPTURE(OpCost, allreduce, Collective::AllReduce)->ArgName("ranks")->Arg(1)->Arg(2);
BENCHMARK_CAPTURE(OpCost, broadcast, Collective::Broadcast)->ArgName("ranks")->Arg(1)->Arg(2);
BENCHMARK_CAPTURE(OpCost, allgather, Collective::AllGather)->ArgName("ranks")->Arg(1)->Arg(2);
BENCHMARK_CAPTURE(OpCost, reducescatter, Collective::ReduceScatter)->ArgName("ranks")->Arg(1)->Arg(2);

}  // namespace
