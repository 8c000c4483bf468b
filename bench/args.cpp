// args.cpp - zcoll-bench's command line (engine.hpp): nccl-tests' flags parsed into Args, and the
// names of collectives, types and ops as the tables print them.
#include <strings.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "bench/engine.hpp"
#include "tests/common/typed.hpp"

namespace zcoll::bench {
namespace {

bool parseSize(const char* s, size_t* out) {
  char* end = nullptr;
  double v = std::strtod(s, &end);
  if (end == s || v < 0) return false;
  double mul = 1;
  if (*end) {
    switch (*end) {
      case 'k': case 'K': mul = 1024.0; break;
      case 'm': case 'M': mul = 1024.0 * 1024; break;
      case 'g': case 'G': mul = 1024.0 * 1024 * 1024; break;
      default: return false;
    }
    if (end[1]) return false;
  }
  *out = static_cast<size_t>(v * mul);
  return true;
}

// Every collective of core/types.hpp but send/recv, which is no collective to sweep.
bool parseColl(const char* s, Collective* out) {
  return parseCollective(s, out) && *out != Collective::SendRecv;
}

// -d / -o: one name (parsed by `parse` into the core's enum E) or "all" (every value of `all`).
template <typename E, typename C, size_t N>
bool parseOneOrAll(const char* s, bool (*parse)(std::string_view, E*), const C (&all)[N], std::vector<C>* out) {
  E one;
  if (!strcasecmp(s, "all")) out->assign(std::begin(all), std::end(all));
  else if (parse(s, &one)) out->assign(1, static_cast<C>(one));
  else return false;
  return true;
}

}  // namespace

const char* typeName(zcollDataType_t t) { return dataTypeName(static_cast<DataType>(t)).data(); }

const char* opName(zcollRedOp_t op) { return redOpName(static_cast<RedOp>(op)).data(); }

void printUsage(FILE* f, const char* prog) {
  std::fprintf(f,
               "usage: %s COLL [-b minbytes] [-e maxbytes] [-f stepfactor] [-i stepbytes] [-n iters] [-w warmup]\n"
               "          [-c check0/1] [-I inplace0/1] [-r root] [-B budgetbytes] [-m miniters] [-R trials]\n"
               "          [-S sec_per_size] [-T total_sec] [-p nranks] [-a algo] [-d type|all] [-o op|all]\n"
               "  COLL: allreduce (default) | allgather | reducescatter | broadcast (bcast) | reduce | gather |\n"
               "        scatter | alltoall | barrier (one row, size 0)  (or -C COLL)\n"
               "  defaults: -b 8 -e 256M -f 2 -n 20 -w 5 -c 1 -I 0 -r 0 -B 1G -m 3 -R 3 -S 10 -T 0 -d float -o sum\n"
               "  -d: int8 uint8 int32 uint32 int64 uint64 half float double bfloat16 | all;  -o: sum prod max min\n"
               "        avg | all (each type x op swept in turn, a table each; -o only for reducing collectives)\n"
               "  -a NAME: force an algorithm (ring, rhd, rd, direct, ps, tree, ...); -a all: sweep each one and the\n"
               "        automatic choice, then print them side by side with auto's ratio to the fastest\n"
               "  -O BYTES: place the buffers BYTES past a page start (multiple of 4; default 0)\n"
               "  --calibrate: measure the cost model afresh (ZCOLL_CALIBRATE=2), cache it, print the choices\n"
               "  -J FILE: also write the results as JSON;  --csv: CSV rows instead of the table\n"
               "  --progress / --no-progress: a progress line on stderr (default: when it is a terminal)\n"
               "  --device: buffers in device memory (CUDA; ZCOLL_DEVICE=emulated without a GPU), each rank's\n"
               "        ops on its own stream, timed to the stream's completion\n"
               "  --mem-alloc: host buffers from zcollMemAlloc, which the local ranks map: all-reduce,\n"
               "        reduce-scatter, all-gather and broadcast run zero-copy from ZCOLL_ZERO_COPY bytes up\n"
               "        (default: aligned_alloc, like the anchors)\n"
               "  --fresh: before each op, every rank stores to each cache line of its input (broadcast: the\n"
               "        root's buffer), as an application whose data changes between calls: a peer that reads\n"
               "        that buffer then cannot find it in its own cache from the op before (host buffers)\n"
               "  -p N: start N local ranks here; without -p, join a job started by zcoll-run, torchrun,\n"
               "        mpirun or srun (zcollCommInitFromEnv)\n"
               "  --bind KIND: with -p, pin the ranks as mpirun does: auto (default: a core each unless there are\n"
               "        more ranks than cores), none, core, numa, package\n",
               prog);
}

bool parseArgs(int argc, char** argv, Args* a, std::string* error) {
  int i = 1;
  if (argc > 1 && argv[1][0] != '-') {
    if (!parseColl(argv[1], &a->coll)) {
      *error = std::string("unknown collective '") + argv[1] + "'";
      return false;
    }
    i = 2;
  }
  for (; i < argc; ++i) {
    const char* o = argv[i];
    const std::string_view flag(o);
    if (flag == "--bind") {
      if (i + 1 >= argc) {
        *error = "option --bind needs a value";
        return false;
      }
      a->bind = argv[++i];
      if (a->bind != "none" && a->bind != "auto" && a->bind != "core" && a->bind != "numa" && a->bind != "package") {
        *error = "bad value '" + a->bind + "' for --bind (none, auto, core, numa, package)";
        return false;
      }
      continue;
    }
    if (flag == "--calibrate" || flag == "--csv" || flag == "--progress" || flag == "--no-progress" ||
        flag == "--device" || flag == "--mem-alloc" || flag == "--fresh") {
      if (flag == "--calibrate") a->calibrate = true;
      if (flag == "--fresh") a->fresh = true;
      if (flag == "--mem-alloc") a->memAlloc = true;
      if (flag == "--device") a->device = true;
      if (flag == "--csv") a->csv = true;
      if (flag == "--progress" || flag == "--no-progress") a->progress = flag == "--progress" ? 1 : 0;
      continue;
    }
    if (o[0] != '-' || !o[1] || o[2]) {
      *error = std::string("unexpected argument '") + o + "'";
      return false;
    }
    if (o[1] == 'h') {
      error->clear();
      return false;
    }
    if (i + 1 >= argc) {
      *error = std::string("option ") + o + " needs a value";
      return false;
    }
    const char* v = argv[++i];
    // nccl-tests' integer and byte-size flags.
    static constexpr std::pair<char, int Args::*> kInts[] = {
        {'n', &Args::iters}, {'w', &Args::warmup},   {'c', &Args::check}, {'I', &Args::inplace},
        {'r', &Args::root},  {'m', &Args::minIters}, {'R', &Args::trials}};
    static constexpr std::pair<char, size_t Args::*> kSizes[] = {
        {'b', &Args::minBytes}, {'e', &Args::maxBytes}, {'i', &Args::stepBytes}, {'B', &Args::budget}};
    bool ok = true, known = false;
    for (auto [f, field] : kInts)
      if (o[1] == f) a->*field = std::atoi(v), known = true;
    for (auto [f, field] : kSizes)
      if (o[1] == f) ok = parseSize(v, &(a->*field)), known = true;
    switch (known ? 0 : o[1]) {
      case 0: break;
      case 'f': a->stepFactor = std::atof(v); break;
      case 'S': a->sizeSec = std::atof(v); break;
      case 'T': a->totalSec = std::atof(v); break;
      case 'p': a->nranks = std::atoi(v); ok = a->nranks >= 1; break;
      case 'a': a->algo = v; break;
      case 'O': ok = parseSize(v, &a->offset) && a->offset % sizeof(float) == 0 && a->offset < 4096; break;
      case 'C': ok = parseColl(v, &a->coll); break;
      case 'J': a->jsonPath = v; ok = !a->jsonPath.empty(); break;
      case 'd': ok = parseOneOrAll(v, parseDataType, test::kAllTypes, &a->dtypes); break;
      case 'o': ok = parseOneOrAll(v, parseRedOp, test::kAllOps, &a->redops); break;
      default: *error = std::string("unknown option ") + o; return false;
    }
    if (!ok) {
      *error = std::string("bad value '") + v + "' for " + o;
      return false;
    }
  }
  // Without a collective, all-reduce (the anchors' drivers default to it too).
  if (a->minBytes > a->maxBytes) {
    *error = "-b is larger than -e";
    return false;
  }
  if (a->fresh && a->device) {
    *error = "--fresh takes host buffers: it cannot be combined with --device";
    return false;
  }
  if (a->stepFactor <= 1.0 && a->stepBytes == 0) a->stepFactor = 2.0;
  a->iters = std::max(a->iters, 1);
  a->warmup = std::max(a->warmup, 0);
  a->minIters = std::max(a->minIters, 1);
  a->trials = std::clamp(a->trials, 1, kMaxTrials);
  return true;
}

}  // namespace zcoll::bench
