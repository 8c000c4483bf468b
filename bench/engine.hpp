// engine.hpp - the benchmark engine behind zcoll-bench (a library, so perf checks reuse it).
//
// Flags, timing method and table are those of ../shared/anchors/README.md ("Output format v1", the
// nccl-tests columns), so zcoll's rows pair with Open MPI's, MPICH's and Gloo's in compare.py.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "core/types.hpp"
#include "zcoll/zcoll.h"

namespace zcoll::bench {

struct Args {
  Collective coll = Collective::AllReduce;
  size_t minBytes = 8;
  size_t maxBytes = size_t{256} << 20;
  double stepFactor = 2.0;
  size_t stepBytes = 0;
  int iters = 20;
  int warmup = 5;
  int check = 1;
  int inplace = 0;
  int root = 0;
  size_t budget = size_t{1} << 30;
  int minIters = 3;
  int trials = 3;
  double sizeSec = 10.0;
  double totalSec = 0.0;
  int nranks = 0;    // -p: spawn this many local ranks; 0 = join a launcher's job
  std::string algo;  // -a: forced algorithm for this collective; "all" sweeps every one and auto
  size_t offset = 0;       // -O: buffer offset from a page start, in bytes
  bool calibrate = false;  // --calibrate: measure the cost model afresh, cache it, print the choices
  std::string jsonPath;    // -J FILE: also write the results as JSON
  bool csv = false;        // --csv: CSV rows instead of the table
  int progress = -1;       // --progress / --no-progress: a progress line on stderr (-1: if a terminal)
  bool device = false;     // --device: buffers in device memory, each rank's ops on its own stream
  bool memAlloc = false;   // --mem-alloc: host buffers from zcollMemAlloc (zero copy between local ranks)
  bool fresh = false;      // --fresh: before each op, a store to every cache line of the rank's input
  std::string bind = "auto";  // --bind (with -p): none, auto (a core each unless oversubscribed), core, numa, package
  // -d / -o (nccl-tests' names, or "all"): every type x op is swept in turn (ops only for the
  // collectives that reduce); dtype/redop are the pair being measured.
  std::vector<zcollDataType_t> dtypes{zcollFloat};
  std::vector<zcollRedOp_t> redops{zcollSum};
  zcollDataType_t dtype = zcollFloat;
  zcollRedOp_t redop = zcollSum;
};

inline constexpr int kMaxTrials = 15;

// Parses argv (the collective may be the first positional argument or -C). On error returns false
// with a message in *error; "-h" returns false with an empty error (usage requested).
bool parseArgs(int argc, char** argv, Args* out, std::string* error);
void printUsage(FILE* f, const char* prog);
// The tables' names (core/types.hpp): "float", "half", "bfloat16", ...; "sum", "prod", "max", "min", "avg".
const char* typeName(zcollDataType_t t);
const char* opName(zcollRedOp_t op);

// Runs the sweep on this rank of comm; rank 0 prints to out. Returns the total of wrong elements
// over all ranks and sizes (0 = all correct), or -1 if a zcoll call failed (message on stderr).
long long run(zcollComm_t comm, const Args& args, FILE* out);

// -a all: every algorithm of the collective and the automatic choice (`control`), each on a
// communicator of its own, measured in turn within each trial of one sweep; prints each one's table,
// then a summary with the automatic choice and its ratio to the fastest forced algorithm.
// Returns as run() does.
long long runAll(zcollComm_t control, const Args& args, FILE* out);

// --calibrate: the automatic choice for each size of the sweep (rank 0 prints).
void printChoices(zcollComm_t comm, const Args& args, FILE* out);

// The ZCOLL_ALGO rule that forces `algo` for args.coll ("" for automatic).
std::string algoRule(const Args& args, const std::string& algo);

}  // namespace zcoll::bench
