// zcoll_sim.cpp - zcoll-sim: zcoll's real algorithms and selector on thousands of simulated ranks.
//
//   zcoll-sim COLL -n RANKS [--topo 1host|hosts:G|fattree:G:R] [-b MIN] [-e MAX] [-f FACTOR]
//             [-a ALGO[,ALGO...]|all] [--check] [--nodata] [-d TYPE] [-o OP] [--chunk BYTES] [--slots K]
//
// Every rank is a cooperative task (transport/sim/scheduler.hpp) running the algorithm unchanged on the
// sim transport, whose network model gives each chunk its arrival time; the table is zcoll-bench's, in
// simulated time.
// --check fills every rank's input with the tests' patterns and checks every element of every output
// (correctness at thousands of ranks); --nodata lets all ranks share one buffer pair and every slot one
// buffer, and the algorithms copy and reduce nothing (AlgoContext::sizesOnly), so that only sizes move
// (large sizes at many ranks, in the same simulated times; results are not checked).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/config.hpp"
#include "tools/sim/driver.hpp"

namespace zcoll::sim {
namespace {

struct Args : Options {
  std::string topo = "1host";
  // The model's figures (Topology's defaults when < 0), e.g. fitted to this machine by tools/sim-validate.
  double alphaUs = -1, linkGBps = -1, nicAlphaUs = -1, nicGBps = -1, copyGBps = -1, reduceGBps = -1, overheadUs = -1;
  double recvOverheadUs = -1, opOverheadUs = -1, handoffUs = -1, spinUs = -1, cachedGBps = -1, dramGBps = -1;
  double privateMissGBps = -1;
  int64_t cacheBytes = 0, llcBytes = 0, privateBytes = 0;
  int64_t nicBufferBytes = 0, nicSegmentBytes = 0, nicWindowBytes = 0, inlineBytes = 0;
  int headers = 64;
  int llcWays = 0;  // 0: fully associative
  double nicBufferedGBps = -1, nicSegmentedUs = -1, nicAckUs = -1;
  int cores = 0;  // 0: a core per rank
  int starts = 1;
  int rounds = 1;  // with --starts: each row the expected median of this many of the starts' runs
  bool receiverReads = false, nicReceiverCopies = false;
  int64_t minBytes = 8, maxBytes = 1 << 20;
  double factor = 2;
  std::string algo;  // "" automatic, "all", or a name
};

const char* kUsage =
    "usage: zcoll-sim COLL -n RANKS [--topo 1host|hosts:G|fattree:G:RATIO] [-b MIN] [-e MAX] [-f FACTOR]\n"
    "                 [-a ALGO[,ALGO...]|all] [--check] [--nodata] [-d TYPE] [-o OP] [--chunk BYTES]\n"
    "                 [--slots K] [--iters N] [--warmup W]\n"
    "                 [--alpha-us A] [--link-gbps B] [--nic-alpha-us A] [--nic-gbps B] [--copy-gbps C]\n"
    "                 [--reduce-gbps R] [--overhead-us O] [--recv-overhead-us O] [--op-overhead-us O]\n"
    "                 [--cache-bytes S --cached-gbps B] [--receiver-reads [--inline-bytes I [--headers K]]]\n"
    "                 [--llc-bytes L --dram-gbps D [--private-bytes P --private-miss-gbps M]\n"
    "                  [--llc-ways W]]\n"
    "                 [--nic-buffer-bytes M --nic-buffered-gbps B [--nic-window-bytes W]]\n"
    "                 [--nic-segment-bytes G --nic-segmented-us U]\n"
    "                 [--nic-ack-us K] [--nic-receiver-copies]\n"
    "                 [--cores C [--handoff-us H] [--spin-us S] [--starts K [--rounds R]]]\n"
    "                 (--iters: N ops per size back to back, each row their mean (default 1), after W\n"
    "                 untimed ones (default 0);\n"
    "                 the network model's figures; --op-overhead-us: a call's own cost per rank;\n"
    "                 ops of at most S bytes move within a host at B GB/s (a CPU's private cache);\n"
    "                 a host's last-level cache of L bytes holds its slots and the ranks' buffers, and\n"
    "                 what it does not hold moves over the host's memory at D GB/s beside the compute\n"
    "                 (with --cores, one for all hosts, and the messages between them go through it);\n"
    "                 each core's own cache of P bytes holds the ranks' buffers before it, and what it\n"
    "                 does not hold costs M GB/s more; --llc-ways: the host's cache in sets of W blocks\n"
    "                 (a block's set drawn at its first touch; default: fully associative);\n"
    "                 --receiver-reads: a chunk moves within a host as its receiver reads it, on its own\n"
    "                 time (CPUs sharing memory), and one of at most I bytes in its header, which takes\n"
    "                 no data slot (K headers per pair, default 64); messages between hosts of at most M\n"
    "                 bytes move at B GB/s (they fit a socket buffer; to a rank on the sender's core only\n"
    "                 their first W bytes, with ranks taking turns), those of more than G take U us more\n"
    "                 (tcp segments); one whose receiver sent nothing back since the pair's previous\n"
    "                 message costs the receiver K us more (its ACK alone);\n"
    "                 --nic-receiver-copies: one also takes its receiver its bytes at its rate (the kernel's copy);\n"
    "                 --cores: all ranks share C cores, as on one machine: fewer than ranks, they take\n"
    "                 turns, a rank that waits over S us yields to the next, each turn costing H;\n"
    "                 the table's last column: core switches per op; --starts: each row the mean of K\n"
    "                 runs that start from different orders of the ranks on their cores, or with\n"
    "                 --rounds, the expected median of R of them drawn at random: what a benchmark that\n"
    "                 reports the median of R process runs measures)\n"
    "COLL: allreduce, allgather, reducescatter, broadcast, reduce, gather, scatter, alltoall\n";

bool parseArgs(int argc, char** argv, Args* a, std::string* error) {
  if (argc < 2 || !parseCollective(argv[1], &a->coll) || a->coll == Collective::SendRecv ||
      a->coll == Collective::Barrier) {
    *error = argc < 2 ? "no collective" : std::string("unknown collective '") + argv[1] + "'";
    return false;
  }
  for (int i = 2; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--check") { a->check = true; continue; }
    if (flag == "--nodata") { a->nodata = true; continue; }
    if (flag == "--receiver-reads") { a->receiverReads = true; continue; }
    if (flag == "--nic-receiver-copies") { a->nicReceiverCopies = true; continue; }
    if (i + 1 >= argc) { *error = "option " + flag + " needs a value"; return false; }
    const std::string v = argv[++i];
    bool ok = true;
    if (flag == "-n") ok = (a->ranks = std::atoi(v.c_str())) >= 1;
    else if (flag == "--topo") a->topo = v;
    else if (flag == "-b") ok = parseByteSize(v, &a->minBytes);
    else if (flag == "-e") ok = parseByteSize(v, &a->maxBytes);
    else if (flag == "-f") ok = (a->factor = std::atof(v.c_str())) > 1;
    else if (flag == "-a") a->algo = v == "auto" ? "" : v;
    else if (flag == "-d") ok = parseDataType(v, &a->dtype);
    else if (flag == "-o") ok = parseRedOp(v, &a->op);
    else if (flag == "--chunk") ok = parseByteSize(v, &a->chunk) && a->chunk >= 64;
    else if (flag == "--slots") ok = (a->slots = std::atoi(v.c_str())) >= 2;
    else if (flag == "--iters") ok = (a->iters = std::atoi(v.c_str())) >= 1;
    else if (flag == "--warmup") ok = (a->warmup = std::atoi(v.c_str())) >= 0;
    else if (flag == "--cores") ok = (a->cores = std::atoi(v.c_str())) >= 1;
    else if (flag == "--inline-bytes") ok = parseByteSize(v, &a->inlineBytes);
    else if (flag == "--headers") ok = (a->headers = std::atoi(v.c_str())) >= 1;
    else if (flag == "--starts") ok = (a->starts = std::atoi(v.c_str())) >= 1;
    else if (flag == "--rounds") ok = (a->rounds = std::atoi(v.c_str())) >= 1 && a->rounds <= 99;
    else if (flag == "--cache-bytes") ok = parseByteSize(v, &a->cacheBytes);
    else if (flag == "--llc-bytes") ok = parseByteSize(v, &a->llcBytes);
    else if (flag == "--private-bytes") ok = parseByteSize(v, &a->privateBytes);
    else if (flag == "--llc-ways") ok = (a->llcWays = std::atoi(v.c_str())) >= 1;
    else if (flag == "--nic-buffer-bytes") ok = parseByteSize(v, &a->nicBufferBytes);
    else if (flag == "--nic-window-bytes") ok = parseByteSize(v, &a->nicWindowBytes);
    else if (flag == "--nic-segment-bytes") ok = parseByteSize(v, &a->nicSegmentBytes);
    else if (double* figure = flag == "--alpha-us"       ? &a->alphaUs
                              : flag == "--link-gbps"    ? &a->linkGBps
                              : flag == "--nic-alpha-us" ? &a->nicAlphaUs
                              : flag == "--nic-gbps"     ? &a->nicGBps
                              : flag == "--copy-gbps"    ? &a->copyGBps
                              : flag == "--reduce-gbps"  ? &a->reduceGBps
                              : flag == "--overhead-us"  ? &a->overheadUs
                              : flag == "--recv-overhead-us" ? &a->recvOverheadUs
                              : flag == "--op-overhead-us" ? &a->opOverheadUs
                              : flag == "--handoff-us" ? &a->handoffUs
                              : flag == "--spin-us" ? &a->spinUs
                              : flag == "--cached-gbps" ? &a->cachedGBps
                              : flag == "--dram-gbps" ? &a->dramGBps
                              : flag == "--private-miss-gbps" ? &a->privateMissGBps
                              : flag == "--nic-buffered-gbps" ? &a->nicBufferedGBps
                              : flag == "--nic-segmented-us" ? &a->nicSegmentedUs
                              : flag == "--nic-ack-us" ? &a->nicAckUs
                                                         : nullptr)
      ok = (*figure = std::atof(v.c_str())) >= 0 && (flag.find("gbps") == std::string::npos || *figure > 0);
    else { *error = "unknown option " + flag; return false; }
    if (!ok) { *error = "bad value '" + v + "' for " + flag; return false; }
  }
  if (a->ranks < 1) { *error = "-n RANKS is required"; return false; }
  if (a->check && a->nodata) { *error = "--check needs the data that --nodata leaves out"; return false; }
  return true;
}

// With ranks taking turns on shared cores, a last column: the cores' switches per op (all cores).
void printTable(const Args& a, const std::vector<Row>& rows, const char* label, bool turns) {
  std::printf("# %s\n#   %10s %12s %6s %6s %12s %12s %12s %8s %10s  %s\n", label, "size(B)", "count", "type", "redop",
              "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong", "msgs/rank", turns ? "algo     switches/op" : "algo");
  for (const Row& r : rows) {
    const double algbw = r.us > 0 ? static_cast<double>(r.bytes) / (r.us * 1e3) : 0;
    std::printf("    %10zu %12zu %6s %6s %12.2f %12.3f %12.3f %8s %10.1f  ", r.bytes, r.count,
                dataTypeName(a.dtype).data(), traits(a.coll).reduces ? redOpName(a.op).data() : "none", r.us, algbw,
                algbw * busFactor(a.coll, a.ranks), a.check ? std::to_string(r.wrong).c_str() : "-",
                static_cast<double>(r.messages) / a.ranks);
    if (turns) std::printf("%-8s %11.2f\n", r.algo.c_str(), r.switches);
    else std::printf("%s\n", r.algo.c_str());
  }
}

int run(int argc, char** argv) {
  Args a;
  std::string error;
  if (!parseArgs(argc, argv, &a, &error)) {
    std::fprintf(stderr, "zcoll-sim: %s\n%s", error.c_str(), kUsage);
    return 2;
  }
  Topology topo;
  if (!Topology::parse(a.topo, a.ranks, &topo, &error)) {
    std::fprintf(stderr, "zcoll-sim: %s\n", error.c_str());
    return 2;
  }
  for (auto [figure, field] : {std::pair{a.alphaUs, &Topology::intraAlphaUs}, {a.linkGBps, &Topology::intraGBps},
                               {a.nicAlphaUs, &Topology::nicAlphaUs}, {a.nicGBps, &Topology::nicGBps},
                               {a.copyGBps, &Topology::copyGBps}, {a.reduceGBps, &Topology::reduceGBps},
                               {a.overheadUs, &Topology::sendOverheadUs},
                               {a.recvOverheadUs, &Topology::recvOverheadUs},
                               {a.opOverheadUs, &Topology::opOverheadUs},
                               {a.handoffUs, &Topology::handoffUs}, {a.spinUs, &Topology::spinUs},
                               {a.cachedGBps, &Topology::cachedGBps}, {a.dramGBps, &Topology::dramGBps},
                               {a.privateMissGBps, &Topology::privateMissGBps},
                               {a.nicBufferedGBps, &Topology::nicBufferedGBps},
                               {a.nicSegmentedUs, &Topology::nicSegmentedUs}, {a.nicAckUs, &Topology::nicAckUs}})
    if (figure >= 0) topo.*field = figure;
  topo.cores = a.cores;
  topo.cacheBytes = static_cast<size_t>(a.cacheBytes);
  topo.llcBytes = static_cast<size_t>(a.llcBytes);
  topo.privateBytes = static_cast<size_t>(a.privateBytes);
  topo.llcWays = static_cast<size_t>(a.llcWays);
  topo.nicBufferBytes = static_cast<size_t>(a.nicBufferBytes);
  topo.nicWindowBytes = static_cast<size_t>(a.nicWindowBytes);
  topo.nicSegmentBytes = static_cast<size_t>(a.nicSegmentBytes);
  topo.receiverReads = a.receiverReads;
  topo.inlineBytes = static_cast<size_t>(a.inlineBytes);
  topo.headers = a.headers;
  topo.nicReceiverCopies = a.nicReceiverCopies;
  std::vector<size_t> sizes;
  const size_t unit = dataTypeSize(a.dtype) * (traits(a.coll).perRankBlocks ? static_cast<size_t>(a.ranks) : 1);
  for (double b = static_cast<double>(a.minBytes); b <= static_cast<double>(a.maxBytes); b *= a.factor) {
    const size_t bytes = static_cast<size_t>(b) / unit * unit;
    if (bytes > 0 && (sizes.empty() || bytes != sizes.back())) sizes.push_back(bytes);
  }
  if (sizes.empty()) {
    std::fprintf(stderr, "zcoll-sim: no size from -b to -e holds an element per rank (%zu bytes)\n", unit);
    return 2;
  }
  std::vector<std::string> algos;  // "all", or the names of -a in turn ("auto": "")
  if (a.algo == "all") {
    algos = algorithmsOf(a.coll, topo);
    algos.insert(algos.begin(), "");
  } else {
    for (std::string_view rest = a.algo;;) {
      const std::string_view name = nextListItem(&rest);
      algos.emplace_back(name == "auto" ? std::string_view() : name);
      if (rest.empty()) break;
    }
  }
  const std::string loop = a.iters > 1 ? ", " + std::to_string(a.iters) + "-op loops" : std::string();
  std::printf("# zcoll-sim: %s, %d ranks, %s; chunk %lld B x %d slots%s%s%s\n", collectiveName(a.coll).data(),
              a.ranks, topo.describe().c_str(), static_cast<long long>(a.chunk), a.slots, loop.c_str(),
              a.check ? ", every element checked" : "", a.nodata ? ", sizes only (--nodata)" : "");
  long long wrongTotal = 0;
  for (const std::string& algo : algos) {
    std::vector<Row> rows;
    std::vector<std::vector<double>> runs;  // each row's time from each start
    const auto t0 = std::chrono::steady_clock::now();
    // --starts: runs that start from different orders of the ranks on their cores; each row's time their
    // mean, or the expected median of --rounds of them; its switches their mean.
    for (int k = 0; k < a.starts; ++k) {
      Topology start = topo;
      start.startSeed = static_cast<uint64_t>(k);
      std::vector<Row> each;
      if (!sweep(a, start, sizes, algo, &each, &error)) {
        std::fprintf(stderr, "zcoll-sim: %s: %s\n", algo.empty() ? "auto" : algo.c_str(), error.c_str());
        return 1;
      }
      runs.resize(each.size());
      for (size_t i = 0; i < each.size(); ++i) runs[i].push_back(each[i].us);
      if (k == 0) {
        rows = std::move(each);
        continue;
      }
      for (size_t i = 0; i < rows.size(); ++i) {
        rows[i].switches += each[i].switches;
        rows[i].wrong += each[i].wrong;
      }
    }
    for (size_t i = 0; i < rows.size(); ++i)
      rows[i].us = expectedMedian(runs[i], a.rounds), rows[i].switches /= a.starts;
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const std::string label = (algo.empty() ? std::string("auto") : algo) + " (simulated in " +
                              std::to_string(static_cast<int>(wall * 1000)) + " ms)";
    printTable(a, rows, label.c_str(), topo.cores > 0 && topo.cores < topo.ranks);
    for (const Row& r : rows) wrongTotal += static_cast<long long>(r.wrong);
  }
  if (a.check) std::printf("# wrong total: %lld\n", wrongTotal);
  return wrongTotal == 0 ? 0 : 1;
}

}  // namespace
}  // namespace zcoll::sim

int main(int argc, char** argv) { return zcoll::sim::run(argc, argv); }
