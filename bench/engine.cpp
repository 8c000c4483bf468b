// engine.cpp - see engine.hpp (its command line: args.cpp). Mirrors ../shared/anchors/common/
// bench_common.h and the MPI driver step for step (iteration budget, warm-up, trials, median, check
// pattern), so ratios are fair.
#include "bench/engine.hpp"
#include "bench/output.hpp"
#include "core/device.hpp"
#include "tests/common/typed.hpp"

#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace zcoll::bench {
namespace {

double now() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Inputs and expected outputs: the collective matrix's reference arithmetic (tests/common/typed.hpp),
// exact in every type and op. Rank q's input at index i is inputValue(op, type, q, i); collectives
// that do not reduce move the Sum pattern.
void fill(const Args& a, unsigned char* p, size_t n, int rank, size_t first = 0) {
  test::fillInput(a.dtype, traits(a.coll).reduces ? a.redop : zcollSum, rank, p, n, first);
}
void poison(unsigned char* p, size_t n, size_t es) { std::memset(p, 0xa5, n * es); }  // no input value looks like it

size_t countFor(Collective c, size_t bytes, int nranks, size_t es) {
  size_t n = bytes / es;
  if (traits(c).perRankBlocks) n = n / static_cast<size_t>(nranks) * static_cast<size_t>(nranks);
  return n;
}

// The sweep's next size: -i steps, else -f factors.
size_t nextSize(const Args& a, size_t bytes) {
  return a.stepBytes ? bytes + a.stepBytes
                     : std::max(bytes + 1, static_cast<size_t>(static_cast<double>(bytes) * a.stepFactor));
}

// The algorithm comm chooses for a call of `count` elements in all (per-rank blocks for the block
// collectives), as the table's algo column shows it.
std::string algorithmFor(zcollComm_t comm, const Args& a, size_t count, int nranks) {
  char algo[64] = "?";
  const size_t perCall = traits(a.coll).perRankBlocks ? count / static_cast<size_t>(nranks) : count;
  zcollCommAlgorithmFor(comm, collectiveName(a.coll).data(), perCall, a.dtype, algo, sizeof algo);
  return algo;
}

// What ran comm's last op (the table's algo column: "zcopy" when --mem-alloc buffers went zero-copy,
// which zcollCommAlgorithmFor cannot know); the prediction when nothing ran yet.
std::string lastAlgorithm(zcollComm_t comm, const Args& a, size_t count, int nranks) {
  char algo[64] = "";
  if (zcollCommLastAlgorithm(comm, algo, sizeof algo) != zcollSuccess || !algo[0])
    return algorithmFor(comm, a, count, nranks);
  return algo;
}


// Page-aligned and touched before timing, like the anchors' buffers (aligned_alloc(4096) + memset),
// so both sides start from the same memory layout.
// -O shifts the data that many bytes past the page start (a multiple of 4), to measure what
// glibc's mmap'd malloc (16) or a 64-byte-aligned allocator gives users.
// --mem-alloc: the host memory comes from zcollMemAlloc (shared with the local ranks: zero copy).
// --device: the data is device memory; the host memory is then its staging copy, uploaded before
// the timed loops and downloaded for the check.
class Buffer {
 public:
  ~Buffer() {
    if (dev_) rt_->free(dev_);
  }
  void allocate(size_t dataBytes, size_t offset, DeviceRuntime* rt, bool shared) {
    size_t bytes = ((dataBytes + offset) / 4096 + 1) * 4096;
    void* p = nullptr;
    if (!shared) p = std::aligned_alloc(4096, bytes);
    else if (zcollMemAlloc(&p, bytes) != zcollSuccess) p = nullptr;
    host_ = std::unique_ptr<unsigned char, Free>(static_cast<unsigned char*>(p), Free{shared});
    if (host_) std::memset(host_.get(), 0, bytes);
    offset_ = offset;
    bytes_ = bytes;
    rt_ = rt;
    if (rt && !rt->alloc(bytes, &dev_)) dev_ = nullptr;
  }
  // What the collective gets, and the host view prepare() and the check use.
  unsigned char* data() const { return (dev_ ? static_cast<unsigned char*>(dev_) : host_.get()) + offset_; }
  unsigned char* host() const { return host_.get() + offset_; }
  explicit operator bool() const { return host_ != nullptr && (!rt_ || dev_ != nullptr); }
  bool upload(DevStream s) const { return !dev_ || rt_->copyAsync(dev_, host_.get(), bytes_, s).isOk(); }
  bool download(DevStream s) const { return !dev_ || rt_->copyAsync(host_.get(), dev_, bytes_, s).isOk(); }

 private:
  struct Free {
    bool shared;  // from zcollMemAlloc (value-initialised: false)
    void operator()(unsigned char* p) const {
      if (shared) zcollMemFree(p);
      else std::free(p);
    }
  };
  std::unique_ptr<unsigned char, Free> host_;
  size_t offset_ = 0;
  size_t bytes_ = 0;
  DeviceRuntime* rt_ = nullptr;
  void* dev_ = nullptr;
};

// One rank's view of a benchmark: buffers and the collective call.
class Runner {
 public:
  Runner(const Args& a, int rank, int nranks) : a_(a), rank_(rank), nranks_(nranks), es_(test::typeSize(a.dtype)) {}
  ~Runner() {
    if (stream_) rt_->streamDestroy(stream_);
  }

  // Buffers (and with --device the rank's stream); false with a message on stderr.
  bool allocate(size_t maxCount) {
    if (a_.device) {
      rt_ = deviceRuntime();
      if (!rt_) {
        const std::string_view why = deviceRuntimeAbsence();
        std::fprintf(stderr, "zcoll-bench: --device: no device runtime (%.*s)\n", static_cast<int>(why.size()),
                     why.data());
        return false;
      }
      if (!rt_->streamCreate(&stream_)) {
        std::fprintf(stderr, "zcoll-bench: --device: cannot create a stream\n");
        return false;
      }
    }
    size_t maxSend = maxCount, maxRecv = maxCount;
    if (a_.coll == Collective::AllGather || a_.coll == Collective::Gather) maxSend = maxCount / nranks_ + 1;
    if (a_.coll == Collective::ReduceScatter || a_.coll == Collective::Scatter) maxRecv = maxCount / nranks_ + 1;
    send_.allocate(maxSend * es_, a_.offset, rt_, a_.memAlloc);
    recv_.allocate(maxRecv * es_, a_.offset, rt_, a_.memAlloc);
    if (!send_ || !recv_) std::fprintf(stderr, "zcoll-bench: rank %d: cannot allocate buffers\n", rank_);
    return send_ && recv_;
  }

  // Waits until this rank's queued ops are done (device ops return at once; host ops are done).
  bool finish() const {
    if (!stream_) return true;
    for (;;) {
      bool done = false;
      if (!rt_->streamQuery(stream_, &done)) return false;
      if (done) return true;
      sched_yield();
    }
  }

  zcollResult_t op(zcollComm_t comm_, size_t count) {
    unsigned char* s = send_.data();
    unsigned char* r = recv_.data();
    zcollStream_t const stream = stream_;  // NULL for host buffers
    const zcollDataType_t t = a_.dtype;
    const zcollRedOp_t o = a_.redop;
    const size_t per = count / static_cast<size_t>(nranks_);
    const size_t mine = per * static_cast<size_t>(rank_) * es_;  // this rank's block, in bytes
    if (a_.fresh) freshen(s, r, count, per, mine);
    switch (a_.coll) {
      case Collective::AllReduce:
        return zcollAllReduce(a_.inplace ? r : s, r, count, t, o, comm_, stream);
      case Collective::AllGather:
        return zcollAllGather(a_.inplace ? r + mine : s, r, per, t, comm_, stream);
      case Collective::ReduceScatter:
        return zcollReduceScatter(s, a_.inplace ? s + mine : r, per, t, o, comm_, stream);
      case Collective::Broadcast:
        return zcollBroadcast(r, r, count, t, a_.root, comm_, stream);
      case Collective::Reduce:
        return zcollReduce(a_.inplace ? r : s, r, count, t, o, a_.root, comm_, stream);
      case Collective::Gather:
        return zcollGather(a_.inplace && rank_ == a_.root ? r + mine : s, r, per, t, a_.root, comm_, stream);
      case Collective::Scatter:
        return zcollScatter(s, a_.inplace && rank_ == a_.root ? s + mine : r, per, t, a_.root, comm_, stream);
      case Collective::AllToAll:
        return zcollAlltoAll(s, r, per, t, comm_, stream);
      case Collective::Barrier:
        return zcollBarrier(comm_, stream);
      default:
        return zcollInvalidArgument;
    }
  }

  // --fresh: a store to each cache line of this rank's input for the op (the bytes stay as they are),
  // as an application that produces its data between calls: the op then finds the lines modified in
  // this rank's cache, not shared with the peers that read them last time.
  void freshen(unsigned char* s, unsigned char* r, size_t count, size_t per, size_t mine) const {
    unsigned char* in = nullptr;
    size_t bytes = count * es_;
    switch (a_.coll) {
      case Collective::AllReduce: in = a_.inplace ? r : s; break;
      case Collective::AllGather: in = a_.inplace ? r + mine : s; bytes = per * es_; break;
      case Collective::ReduceScatter: in = s; break;
      case Collective::Broadcast: in = rank_ == a_.root ? r : nullptr; break;
      case Collective::Reduce: in = a_.inplace ? r : s; break;
      case Collective::Gather: in = a_.inplace && rank_ == a_.root ? r + mine : s; bytes = per * es_; break;
      case Collective::Scatter: in = rank_ == a_.root ? s : nullptr; break;
      case Collective::AllToAll: in = s; break;
      default: break;  // barrier
    }
    if (!in || !bytes) return;
    // One byte of each line the input overlaps: its first byte, then each line start after it.
    auto touch = [](unsigned char* p) {
      volatile unsigned char* b = p;
      *b = *b;
    };
    touch(in);
    for (size_t off = 64 - reinterpret_cast<uintptr_t>(in) % 64; off < bytes; off += 64) touch(in + off);
  }

  // Inputs and poisoned outputs in the host views, then (--device) uploaded.
  bool prepare(size_t count) {
    prepareHost(count);
    return finish() && send_.upload(stream_) && recv_.upload(stream_) && finish();
  }

  void prepareHost(size_t count) {
    unsigned char* s = send_.host();
    unsigned char* r = recv_.host();
    const size_t per = count / static_cast<size_t>(nranks_);
    const size_t mine = per * static_cast<size_t>(rank_) * es_;
    switch (a_.coll) {
      case Collective::AllReduce: case Collective::Reduce:
        if (a_.inplace) fill(a_, r, count, rank_);
        else { fill(a_, s, count, rank_); poison(r, count, es_); }
        break;
      case Collective::AllGather:
        poison(r, count, es_);
        fill(a_, a_.inplace ? r + mine : s, per, rank_);
        break;
      case Collective::ReduceScatter:
        fill(a_, s, count, rank_);
        if (!a_.inplace) poison(r, per, es_);
        break;
      case Collective::Broadcast:
        if (rank_ == a_.root) fill(a_, r, count, rank_);
        else poison(r, count, es_);
        break;
      case Collective::Gather:
        poison(r, count, es_);
        fill(a_, a_.inplace && rank_ == a_.root ? r + mine : s, per, rank_);
        break;
      case Collective::Scatter:
        fill(a_, s, count, rank_);
        if (!(a_.inplace && rank_ == a_.root)) poison(r, per, es_);
        break;
      case Collective::AllToAll:
        fill(a_, s, count, rank_);
        poison(r, count, es_);
        break;
      default:  // barrier (and send/recv, which the command line refuses) move no data
        break;
    }
  }

  // Wrong output elements; -1 if the device results could not be read back. Each element is
  // compared with its expected value as computed (no second buffer of the output's size).
  long long wrong(size_t count) const {
    if (!finish() || !send_.download(stream_) || !recv_.download(stream_) || !finish()) return -1;
    const unsigned char* r = recv_.host();
    const size_t per = count / static_cast<size_t>(nranks_);
    const size_t R = static_cast<size_t>(rank_);
    const zcollDataType_t t = a_.dtype;
    unsigned char want[8];
    long long w = 0;
    auto reduced = [&](const unsigned char* got, size_t n, size_t first) {  // got[j] = reduction at first + j
      for (size_t j = 0; j < n; ++j) {
        test::storeExpected(t, a_.redop, nranks_, want, 0, first + j);
        w += std::memcmp(got + j * es_, want, es_) != 0;
      }
    };
    auto input = [&](const unsigned char* got, size_t n, int q, size_t first) {  // got[j] = q's input at first + j
      for (size_t j = 0; j < n; ++j) {
        test::fillInput(t, zcollSum, q, want, 1, first + j);
        w += std::memcmp(got + j * es_, want, es_) != 0;
      }
    };
    switch (a_.coll) {
      case Collective::AllReduce:
        reduced(r, count, 0);
        break;
      case Collective::Reduce:
        if (rank_ == a_.root) reduced(r, count, 0);
        break;
      case Collective::ReduceScatter:
        reduced(a_.inplace ? send_.host() + per * R * es_ : r, per, R * per);
        break;
      case Collective::Broadcast:
        input(r, count, a_.root, 0);
        break;
      case Collective::AllGather: case Collective::Gather:
        if (a_.coll == Collective::Gather && rank_ != a_.root) break;
        for (int q = 0; q < nranks_; ++q) input(r + static_cast<size_t>(q) * per * es_, per, q, 0);
        break;
      case Collective::Scatter:
        input(a_.inplace && rank_ == a_.root ? send_.host() + per * R * es_ : r, per, a_.root, R * per);
        break;
      case Collective::AllToAll:
        for (int q = 0; q < nranks_; ++q) input(r + static_cast<size_t>(q) * per * es_, per, q, R * per);
        break;
      default:  // barrier (and send/recv, which the command line refuses) move no data
        break;
    }
    return w;
  }

 private:
  const Args& a_;
  int rank_, nranks_;
  size_t es_;  // element size of a_.dtype
  DeviceRuntime* rt_ = nullptr;
  DevStream stream_ = nullptr;
  Buffer send_, recv_;
};

// Reductions over ranks of the benchmark's own bookkeeping, through zcoll itself.
long minorFaults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

bool sumOver(zcollComm_t comm, double* v) { return zcollAllReduce(v, v, 1, zcollDouble, zcollSum, comm, nullptr) == zcollSuccess; }
bool maxOver(zcollComm_t comm, double* v) { return zcollAllReduce(v, v, 1, zcollDouble, zcollMax, comm, nullptr) == zcollSuccess; }

// The sweep of args over `comms` (same ranks, e.g. one per forced algorithm). Within every trial of
// every size, each communicator runs its timed loop in turn (the order rotating from trial to
// trial), so all of them see the same machine.
// Fills (*results)[k] on rank 0; returns the wrong-element total or -1.
long long sweep(const std::vector<zcollComm_t>& comms, const Args& a, FILE* out,
                std::vector<std::vector<SizeResult>>* results) {
  zcollComm_t ctl = comms.front();
  int rank = 0, nranks = 1;
  zcollCommUserRank(ctl, &rank);
  zcollCommCount(ctl, &nranks);
  if (a.root < 0 || a.root >= nranks) {
    std::fprintf(stderr, "zcoll-bench: -r %d is not a rank of %d\n", a.root, nranks);
    return -1;
  }
  Runner runner(a, rank, nranks);
  const size_t es = test::typeSize(a.dtype);
  if (!runner.allocate(countFor(a.coll, a.maxBytes, nranks, es))) {
    std::fprintf(stderr, "zcoll-bench: rank %d: cannot allocate buffers for -e %zu\n", rank, a.maxBytes);
    return -1;
  }
  auto fail = [&](zcollComm_t c, zcollResult_t r) {
    std::fprintf(stderr, "zcoll-bench: rank %d: %s (%s)\n", rank, zcollGetErrorString(r), zcollGetLastError(c));
    return -1LL;
  };
  const size_t K = comms.size();
  results->assign(K, {});
  const int trials = std::clamp(a.trials, 1, kMaxTrials);
  long long wrongTotal = 0;
  bool first = true;
  const double tStart = now();
  const bool progress = rank == 0 && (a.progress > 0 || (a.progress < 0 && isatty(STDERR_FILENO)));
  for (size_t bytes = a.minBytes; bytes <= a.maxBytes;
       bytes = nextSize(a, bytes)) {
    const bool barrier = a.coll == Collective::Barrier;  // one row, of size 0
    const size_t count = barrier ? 0 : countFor(a.coll, bytes, nranks, es);
    if (!barrier && (count == 0 || (traits(a.coll).perRankBlocks && count / nranks == 0))) continue;
    const size_t pbytes = count * es;
    int iters = a.iters, warmup = a.warmup;
    if (a.budget && pbytes) {
      size_t bi = std::max(a.budget / pbytes, static_cast<size_t>(a.minIters));
      iters = static_cast<int>(std::min(static_cast<size_t>(iters), bi));
      size_t bw = std::max<size_t>(a.budget / (4 * pbytes), 1);
      warmup = static_cast<int>(std::min(static_cast<size_t>(warmup), bw));
    }
    if (!runner.prepare(count)) return fail(ctl, zcollUnhandledCudaError);
    double tw = 0;  // slowest warm-up op of any communicator
    for (zcollComm_t c : comms) {
      if (first)  // connection and cache warm-up must not land in the first row
        for (int w = 0; w < 20; ++w)
          if (zcollResult_t r = runner.op(c, count); r != zcollSuccess) return fail(c, r);
      double tw0 = now();
      for (int w = 0; w < warmup; ++w)
        if (zcollResult_t r = runner.op(c, count); r != zcollSuccess) return fail(c, r);
      if (!runner.finish()) return fail(c, zcollUnhandledCudaError);
      tw = std::max(tw, warmup > 0 ? (now() - tw0) / warmup : 0.0);
    }
    first = false;
    if (!maxOver(ctl, &tw)) return fail(ctl, zcollInternalError);
    if (a.sizeSec > 0 && tw > 0) {
      double cap = a.sizeSec / (trials * tw * static_cast<double>(K));
      int c = cap < a.minIters ? a.minIters : (cap > iters ? iters : static_cast<int>(cap));
      iters = std::min(iters, c);
    }
    std::vector<std::array<double, kMaxTrials>> tt(K);
    std::vector<double> faults(K, 0.0);  // minor page faults in the timed loops (getrusage, outside the clock)
    std::vector<std::string> ran(K);     // what ran each communicator's timed ops (the algo column)
    for (int tr = 0; tr < trials; ++tr) {
      for (size_t j = 0; j < K; ++j) {
        const size_t k = (j + static_cast<size_t>(tr)) % K;  // rotated: no communicator always goes first
        double zero = 0;
        if (!sumOver(comms[k], &zero)) return fail(comms[k], zcollInternalError);  // barrier
        const long f0 = minorFaults();
        double t0 = now();
        for (int it = 0; it < iters; ++it)
          if (zcollResult_t r = runner.op(comms[k], count); r != zcollSuccess) return fail(comms[k], r);
        if (!runner.finish()) return fail(comms[k], zcollUnhandledCudaError);
        double sec = (now() - t0) / iters;
        faults[k] += static_cast<double>(minorFaults() - f0);
        ran[k] = lastAlgorithm(comms[k], a, count, nranks);  // before the ops below (the sum) replace it
        if (!sumOver(comms[k], &sec)) return fail(comms[k], zcollInternalError);
        tt[k][tr] = sec / nranks;
      }
    }
    for (size_t k = 0; k < K; ++k) {
      SizeResult res;
      res.bytes = pbytes;
      res.count = count;
      res.iters = iters;
      std::sort(tt[k].begin(), tt[k].begin() + trials);
      res.sec = tt[k][(trials - 1) / 2];
      res.tmin = tt[k][0];
      res.tmax = tt[k][trials - 1];
      if (!sumOver(comms[k], &faults[k])) return fail(comms[k], zcollInternalError);
      res.faults = static_cast<long long>(faults[k]);
      if (a.check) {
        if (!runner.prepare(count)) return fail(comms[k], zcollUnhandledCudaError);
        if (zcollResult_t r = runner.op(comms[k], count); r != zcollSuccess) return fail(comms[k], r);
        const long long w = runner.wrong(count);
        if (w < 0) return fail(comms[k], zcollUnhandledCudaError);
        double wrongAll = static_cast<double>(w);
        if (!sumOver(comms[k], &wrongAll)) return fail(comms[k], zcollInternalError);
        res.wrong = static_cast<long long>(wrongAll);
        wrongTotal += res.wrong;
      }
      if (zcollResult_t async = zcollSuccess; zcollCommGetAsyncError(comms[k], &async) == zcollSuccess &&
                                                 async != zcollSuccess)
        return fail(comms[k], async);  // a stream-ordered (--device) op failed
      res.algo = ran[k];
      if (rank == 0) (*results)[k].push_back(res);
    }
    if (progress) std::fprintf(stderr, "\rzcoll-bench: %zu bytes done, %.1f s  ", pbytes, now() - tStart);
    if (barrier) break;
    if (a.totalSec > 0) {
      double el = now() - tStart;
      if (!maxOver(ctl, &el)) return fail(ctl, zcollInternalError);
      if (el > a.totalSec) {
        if (rank == 0) std::fprintf(out, "# stopped early: -T %g s exceeded after size %zu\n", a.totalSec, pbytes);
        break;
      }
    }
  }
  if (progress) std::fprintf(stderr, "\n");
  return wrongTotal;
}


}  // namespace

// The first op forEachTypeOp runs (the CSV header goes with it).
zcollRedOp_t firstOp(const Args& args) { return traits(args.coll).reduces ? args.redops.front() : zcollSum; }

// Calls f(a) for each type x op of args (-d, -o; one op for collectives that do not reduce), with
// a.dtype/a.redop set and, when there are several, a.jsonPath made distinct (FILE.TYPE.OP.json).
// Returns the sum of f's wrong counts, or -1 at the first -1.
template <typename F>
long long forEachTypeOp(const Args& args, F&& f) {
  const std::vector<zcollRedOp_t> ops = traits(args.coll).reduces ? args.redops : std::vector<zcollRedOp_t>{zcollSum};
  const std::vector<zcollDataType_t> types =
      args.coll == Collective::Barrier ? std::vector<zcollDataType_t>{args.dtypes.front()} : args.dtypes;  // moves no data
  const bool several = types.size() * ops.size() > 1;
  long long total = 0;
  for (zcollDataType_t t : types)
    for (zcollRedOp_t op : ops) {
      Args a = args;
      a.dtype = t;
      a.redop = op;
      if (several && !a.jsonPath.empty()) {
        const size_t dot = a.jsonPath.rfind('.');
        const std::string tag = std::string(".") + typeName(t) + (traits(a.coll).reduces ? std::string(".") + opName(op) : "");
        a.jsonPath.insert(dot == std::string::npos || dot < a.jsonPath.rfind('/') + 1 ? a.jsonPath.size() : dot, tag);
      }
      const long long w = f(static_cast<const Args&>(a));
      if (w < 0) return w;
      total += w;
    }
  return total;
}

long long run(zcollComm_t comm, const Args& args, FILE* out) {
  int rank = 0, nranks = 1;
  zcollCommUserRank(comm, &rank);
  zcollCommCount(comm, &nranks);
  return forEachTypeOp(args, [&](const Args& a) -> long long {
    std::vector<std::vector<SizeResult>> results;
    long long wrong = sweep({comm}, a, out, &results);
    if (wrong < 0 || rank != 0) return wrong;
    const std::vector<std::string> labels{a.algo.empty() ? "auto" : a.algo};
    if (a.csv) printCsv(out, a, nranks, labels, results, a.dtype == args.dtypes.front() && a.redop == firstOp(args));
    else printTable(out, a, nranks, labels[0], results[0]);
    if (!a.jsonPath.empty() && !writeJson(a.jsonPath, a, nranks, labels, results)) return -1;
    return wrong;
  });
}

void printChoices(zcollComm_t comm, const Args& a, FILE* out) {
  int rank = 0, nranks = 1;
  zcollCommUserRank(comm, &rank);
  zcollCommCount(comm, &nranks);
  if (rank != 0) return;
  std::fprintf(out, "# calibrated: %s on %d ranks; the automatic choice per size\n#    size(B)  algo\n",
               collectiveName(a.coll).data(), nranks);
  for (size_t bytes = a.minBytes; bytes <= a.maxBytes;
       bytes = nextSize(a, bytes)) {
    const size_t count = countFor(a.coll, bytes, nranks, test::typeSize(a.dtype));
    std::fprintf(out, "  %10zu  %s\n", count * test::typeSize(a.dtype), algorithmFor(comm, a, count, nranks).c_str());
  }
  std::fflush(out);
}

std::string algoRule(const Args& args, const std::string& algo) {
  return algo.empty() || algo == "auto" ? std::string() : std::string(collectiveName(args.coll).data()) + ":" + algo;
}

namespace {

// -a all's tables, then the summary: time per algorithm ("-" where it could not run and another ran
// instead), the automatic choice and its ratio to the fastest forced one.
void printSummary(FILE* out, const Args& args, int nranks, const std::vector<std::string>& names,
                  const std::vector<std::vector<SizeResult>>& results) {
  for (size_t k = 0; k < names.size(); ++k) printTable(out, args, nranks, names[k], results[k]);
  std::fprintf(out, "#\n# -a all: time(us) per algorithm, measured in turn within each trial; auto = the automatic\n"
                    "# choice; ratio = auto / fastest forced\n");
  std::fprintf(out, "# %10s", "size(B)");
  for (const std::string& n : names) std::fprintf(out, " %10s", n.c_str());
  std::fprintf(out, " %10s %8s\n", "choice", "ratio");
  const std::vector<SizeResult>& autoRows = results.back();
  double worst = 0;
  for (size_t i = 0; i < autoRows.size(); ++i) {
    std::fprintf(out, "  %10zu", autoRows[i].bytes);
    double best = 0;
    for (size_t k = 0; k < names.size(); ++k) {
      const bool ran = i < results[k].size() && (k + 1 == names.size() || results[k][i].algo == names[k]);
      if (!ran) {
        std::fprintf(out, " %10s", "-");
        continue;
      }
      std::fprintf(out, " %10.2f", results[k][i].sec * 1e6);
      if (k + 1 < names.size() && (best == 0 || results[k][i].sec < best)) best = results[k][i].sec;
    }
    const double ratio = best > 0 ? autoRows[i].sec / best : 0;
    worst = std::max(worst, ratio);
    std::fprintf(out, " %10s %8.3f\n", autoRows[i].algo.c_str(), ratio);
  }
  std::fprintf(out, "# worst auto / fastest forced: %.3f\n", worst);
  std::fflush(out);
}

}  // namespace

long long runAll(zcollComm_t control, const Args& args, FILE* out) {
  int rank = 0, nranks = 0;
  zcollCommUserRank(control, &rank);
  zcollCommCount(control, &nranks);
  char list[512] = "";
  if (zcollGetAlgorithmNames(collectiveName(args.coll).data(), list, sizeof list) != zcollSuccess) {
    std::fprintf(stderr, "zcoll-bench: %s\n", zcollGetLastError(control));
    return -1;
  }
  std::vector<std::string> names;
  for (const char* p = list; *p;) {
    const char* comma = std::strchr(p, ',');
    names.emplace_back(p, comma ? static_cast<size_t>(comma - p) : std::strlen(p));
    p = comma ? comma + 1 : p + std::strlen(p);
  }
  // One communicator per forced algorithm; the control communicator is the automatic one.
  std::vector<zcollComm_t> comms;
  auto destroyAll = [&] {
    for (zcollComm_t c : comms) zcollCommDestroy(c);
  };
  std::vector<std::string> kept;
  for (const std::string& name : names) {
    zcollUniqueId id;
    if (rank == 0 && zcollGetUniqueId(&id) != zcollSuccess) return destroyAll(), -1;
    if (zcollBroadcast(&id, &id, sizeof id, zcollUint8, 0, control, nullptr) != zcollSuccess) return destroyAll(), -1;
    const std::string rule = algoRule(args, name);
    zcollConfig_t config = ZCOLL_CONFIG_INITIALIZER;
    config.algo = rule.c_str();
    zcollComm_t comm = nullptr;
    if (zcollCommInitRankConfig(&comm, nranks, id, rank, &config) != zcollSuccess) {
      std::fprintf(stderr, "zcoll-bench: %s\n", zcollGetLastError(nullptr));
      return destroyAll(), -1;
    }
    // An algorithm this communicator cannot run (hier on one host) would fall back to the automatic
    // choice: leave it out rather than show the automatic one under its name.
    char chosen[32] = "";
    zcollCommAlgorithmFor(comm, collectiveName(args.coll).data(), 1 << 20, zcollFloat, chosen, sizeof chosen);
    if (name != chosen) {
      if (rank == 0) std::fprintf(out, "# %s: cannot run here, left out\n", name.c_str());
      zcollCommDestroy(comm);
      continue;
    }
    comms.push_back(comm);
    kept.push_back(name);
  }
  names = std::move(kept);
  names.push_back("auto");
  comms.push_back(control);
  long long wrong = forEachTypeOp(args, [&](const Args& a) -> long long {
    std::vector<std::vector<SizeResult>> results;
    long long w = sweep(comms, a, out, &results);
    if (w < 0 || rank != 0) return w;
    if (!a.jsonPath.empty() && !writeJson(a.jsonPath, a, nranks, names, results)) return -1;
    if (a.csv) printCsv(out, a, nranks, names, results, a.dtype == args.dtypes.front() && a.redop == firstOp(args));
    else printSummary(out, a, nranks, names, results);
    return w;
  });
  comms.pop_back();
  destroyAll();
  return wrong;
}

}  // namespace zcoll::bench
