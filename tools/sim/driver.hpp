// driver.hpp - a simulated communicator's ranks as tasks running an op sweep: the real selector and
// algorithms on the sim transport (transport/sim), every element checked when asked. zcoll-sim prints
// what it returns; tests/transport/sim_test.cpp checks it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/types.hpp"
#include "transport/sim/sim_transport.hpp"

namespace zcoll::sim {

struct Options {
  Collective coll = Collective::AllReduce;
  int ranks = 0;
  DataType dtype = DataType::Float32;
  RedOp op = RedOp::Sum;
  bool check = false;   // inputs from the tests' patterns, every output element compared
  bool nodata = false;  // every rank shares one buffer pair, every slot one buffer: sizes only
  int64_t chunk = 256 << 10;  // ZCOLL_CHUNK_SIZE's default
  int slots = 4;
  int iters = 1;  // ops per size, back to back as in zcoll-bench's timed loop (a row: their mean)
  int warmup = 0;  // ops per size before them, untimed (zcoll-bench -w): caches and turns settle
};

// One size of a sweep: simulated time per op (us, from the first rank's start to the last rank's end,
// over Options::iters), wrong elements over all ranks and ops, messages per op over all ranks, the
// algorithm rank 0 ran.
struct Row {
  size_t bytes, count;
  double us;
  size_t wrong;
  uint64_t messages;
  std::string algo;
  double switches = 0;  // ranks taking turns on shared cores: core switches per op, all cores
};

// The sweep of `algo` ("" automatic: the selector with this network's analytic cost model) over
// `sizes` (zcoll-bench's convention) on a network of its own; false with *error if an op failed.
bool sweep(const Options& o, const Topology& topo, const std::vector<size_t>& sizes, const std::string& algo,
           std::vector<Row>* rows, std::string* error);

// What a benchmark that reports the median of `rounds` runs measures, each run one of `runs` drawn at random
// (equally likely, with replacement): that median's expected value. One round: the runs' mean.
double expectedMedian(std::vector<double> runs, int rounds);

// The registered algorithms of `coll` that serve this topology.
std::vector<std::string> algorithmsOf(Collective coll, const Topology& topo);

}  // namespace zcoll::sim
