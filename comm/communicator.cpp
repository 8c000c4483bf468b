// communicator.cpp - creation, execution engine and teardown (see communicator.hpp).
#include "comm/communicator.hpp"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include <fmt/ranges.h>

#include "algorithms/registry.hpp"
#include "algorithms/zcopy.hpp"
#include "core/log.hpp"
#include "transport/registry.hpp"
#include "transport/wait.hpp"
#ifdef ZCOLL_HAVE_CUDA_IPC
#include "transport/cuda_ipc/cuda_ipc_transport.hpp"
#endif

namespace zcoll {

Status Communicator::create(const UniqueIdFields& id, int nranks, int rank, const Config& config,
                            std::unique_ptr<Communicator>* out) {
  std::vector<AlgoRule> rules;
  if (Status s = parseAlgoOverride(config.algo, &rules); !s) return s;
  if (Status s = checkTransportNames(config.transports, config.transportsOrigin); !s) return s;
  std::unique_ptr<Communicator> c(new Communicator());
  c->selector_ = AlgorithmSelector(std::move(rules), CostModel{}, nranks, static_cast<size_t>(config.eagerBytes));
  c->rank_ = rank;
  c->nranks_ = nranks;
  c->config_ = config;
  if (Status s = Bootstrap::create(id, rank, nranks, config, &c->abort_, &c->bootstrap_); !s) return s;
  // Every rank reports to the root that its communicator is created, or leaves without a word and
  // the root tells the others at once (a rank that died fails them within a second, naming it).
  Status s = c->bootstrap_->endCreation(c->setUp());
  RendezvousRoot::join(id.root, id.secret);  // its service ends once every rank reported or left
  if (!s) return s;
  *out = std::move(c);
  return Status::ok();
}

BootstrapStats Communicator::bootstrapStats() const {
  BootstrapStats s = bootstrap_ ? bootstrap_->stats() : BootstrapStats{};
  RendezvousRoot::lastStats(&s.rootBytesSent, &s.rootBytesReceived);
  return s;
}

Status Communicator::setUp() {
  Communicator* const c = this;
  const int rank = rank_, nranks = nranks_;
  const Config& config = config_;
  const std::vector<PeerInfo>& peers = c->bootstrap_->peers();
  for (const PeerInfo& p : peers)
    if (p.settings != peers[static_cast<size_t>(rank)].settings)
      return invalidUsage("rank {} runs with other settings than rank {} ({}): these must be equal on all ranks",
                          p.rank, rank, sharedSettingsText(config));
  bool oneHost = true;
  int localRanks = 0;
  cpu_set_t hostCpus;  // the CPUs some rank of this host may use
  CPU_ZERO(&hostCpus);
  for (const PeerInfo& p : peers) {
    const bool local = p.hostHash == peers[static_cast<size_t>(rank)].hostHash;
    oneHost = oneHost && local;
    localRanks += local;
    if (local) CPU_OR(&hostCpus, &hostCpus, &p.cpus);
  }
  if (c->config_.spinNs < 0) {
    // A rank that spins while it waits holds a core; when the host's ranks outnumber the CPUs they
    // may use (together: ranks pinned to a core each are not oversubscribed) that core may be the
    // one the awaited rank needs, so spin briefly and yield soon.
    const int cores = CPU_COUNT(&hostCpus);
    c->config_.spinNs = localRanks > std::max(cores, 1) ? 200 : 2'000;
    ZCOLL_INFO(Init, rank, "wait policy: {} ranks on this host, {} cores: spin {} ns", localRanks, cores, c->config_.spinNs);
  }
  if (Status s = createTransport(*c->bootstrap_, config, &c->abort_, &c->transport_); !s) return s;
  {
    std::vector<uint64_t> hostIds;
    for (const PeerInfo& p : peers) hostIds.push_back(p.hostHash);
    c->selector_.setHosts(patterns::HostLayout::fromHostIds(hostIds));
  }
  if (!c->transport_ && !oneHost) {
    for (const PeerInfo& p : peers)
      if (p.hostHash != peers[static_cast<size_t>(rank)].hostHash)
        return notSupported(
            "rank {} runs on host '{}', not this rank's ('{}', or another network/IPC namespace), and ZCOLL_TRANSPORTS='{}' "
            "names no transport of this build that reaches another host (ib, tcp, ucx)",
            p.rank, p.hostname, peers[static_cast<size_t>(rank)].hostname, config.transports);
  }
  if (!c->transport_)
    return notSupported("ZCOLL_TRANSPORTS='{}': none of these transports is built and usable here (built: {})",
                        config.transports, builtTransportNames());
  // The transport's slot size: ZCOLL_CHUNK_SIZE, or ZCOLL_SOCKET_CHUNK_SIZE for tcp (shm+tcp: the
  // smaller).
  c->hostChunkBytes_ = c->transport_->chunkCapacity();
  c->planDevice(oneHost);
  if (config.calibrate)
    if (Status s = c->calibrate(); !s) return std::move(s).withContext(fmt::format("rank {}: calibration", rank));
  {  // the slot size prices the algorithms that pay their latency per chunk round
    CostModel m = c->selector_.model();
    m.chunkBytes = static_cast<double>(c->hostChunkBytes_);
    c->selector_.setModel(m);
  }
  // After the calibration: the trace and zcollCommLastAlgorithm show the user's operations only.
  c->lastAlgo_.store(nullptr, std::memory_order_relaxed);
  if (Status s = Tracer::create(config.tracePath, rank, nranks, config.traceEvents, &c->tracer_); !s) return s;
  const CostModel& m = c->selector_.model();
  // One summary per communicator, from rank 0.
  if (rank == 0 && logEnabled(LogLevel::Info, Subsys::Init)) {
    std::vector<std::string> hosts;
    for (const PeerInfo& p : peers)
      if (std::find(hosts.begin(), hosts.end(), p.hostname) == hosts.end()) hosts.emplace_back(p.hostname);
    ZCOLL_INFO(Init, rank,
               "communicator ready: {} ranks on {} host(s) ({}), transport {}, chunk {} bytes x {} slots, timeout {} "
               "ms, cost model {} (alpha {:.2f} us, beta {:.2f} GB/s); all-reduce: {}{}",
               nranks, hosts.size(), fmt::join(hosts, ", "), c->transport_->name(), c->hostChunkBytes_,
               config.fifoSlots, config.timeoutMs, m.allReduce.empty() ? "built-in" : "measured", m.alpha * 1e6, 1e-9 / m.beta,
               c->selector_.describe(Collective::AllReduce),
               config.algo.empty() ? "" : fmt::format(" (ZCOLL_ALGO={} applies first)", config.algo));
  }
  return Status::ok();
}

Communicator::~Communicator() {
  // The creation watch (a thread that may raise abort_) ends before any member goes.
  if (bootstrap_) (void)bootstrap_->endCreation(Status(StatusCode::Aborted, "communicator destroyed"));
  abort_.store(true);
  {
    std::lock_guard lock(mutex_);
    stopWorker_ = true;
  }
  workCv_.notify_all();
  if (transport_) transport_->wake();
  if (Transport* d = deviceTransportLive_.load()) d->wake();
  if (worker_.joinable()) worker_.join();
  teardownDevice();
  if (tracer_)
    if (Status s = tracer_->write(); !s) ZCOLL_WARN(Coll, rank_, "{}", s.message());
}

void Communicator::recordFailure(const Status& s) {
  int expected = 0;
  if (asyncError_.compare_exchange_strong(expected, static_cast<int>(s.code()))) {
    std::lock_guard lock(mutex_);
    firstError_ = s.message();
  }
  ZCOLL_WARN(Coll, rank_, "{}", s.message());
}

Status Communicator::registerBuffer(void* base, size_t bytes, void** handle) {
  auto reg = std::make_unique<Registration>();
  reg->base = base;
  reg->bytes = bytes;
  DeviceRuntime* rt = deviceRuntime();
  if (!rt || rt->kindOf(base) != MemKind::Device)
    if (Status s = transport_->registerMemory(base, bytes, &reg->id); !s) return s;
  std::lock_guard lock(mutex_);
  *handle = reg.get();
  registrations_.push_back(std::move(reg));
  return Status::ok();
}

Status Communicator::deregisterBuffer(void* handle) {
  std::unique_ptr<Registration> reg;
  {
    std::lock_guard lock(mutex_);
    auto it = std::find_if(registrations_.begin(), registrations_.end(), [&](const auto& r) { return r.get() == handle; });
    if (it == registrations_.end())
      return invalidArgument("handle: {} is not a registration of this communicator (deregistered already?)", handle);
    reg = std::move(*it);
    registrations_.erase(it);
  }
  if (reg->id) transport_->unregisterMemory(reg->id);
  return Status::ok();
}

std::string_view Communicator::lastAlgorithm() const {
  const void* p = lastAlgo_.load(std::memory_order_relaxed);
  if (!p) return {};
  if (p == &kZeroCopyName) return kZeroCopyName;
  return static_cast<const Algorithm*>(p)->name();
}

std::string Communicator::asyncErrorMessage() {
  std::lock_guard lock(mutex_);
  return firstError_;
}

Status Communicator::plan(const OpArgs& op, Plan* out) const {
  *out = Plan{};
  if (Status s = selector_.select(op, nranks_, &out->algo, &out->forced); !s) return s;
  out->check = config_.check && op.coll != Collective::SendRecv && nranks_ > 1;
  const bool host = !op.device;
  const bool eager = out->algo->eager();
  out->shortPath = eager && host && !tracer_;
  if (out->shortPath || !host) return Status::ok();
  const size_t bytes = opBytes(op.coll, op.count, op.dtype, nranks_);
  // An eager op never offers zero copy (traced or not, every rank takes the same path).
  out->offerZeroCopy = !out->forced && !eager && zeroCopyServes(op.coll) && nranks_ > 1 && config_.zeroCopyBytes > 0 &&
                       transport_->mapsPeerMemory() && bytes >= static_cast<size_t>(config_.zeroCopyBytes);
  out->streamStores = streamsStores(op);
  // The zero-copy path's stores go around the cache once all ranks' buffers together outgrow it.
  out->zeroCopyStreams = out->offerZeroCopy && config_.streamBytes > 0 &&
                         zeroCopyFootprint(op, nranks_) >= static_cast<size_t>(config_.streamBytes);
  return Status::ok();
}

Status Communicator::execute(const OpArgs& op) {
  if (int err = asyncError_.load(); err != 0) {
    std::lock_guard lock(mutex_);
    return Status(static_cast<StatusCode>(err),
                  fmt::format("communicator unusable after an earlier failure: {}", firstError_));
  }
  if (abort_.load()) return Status(StatusCode::Aborted, "communicator aborted");
  Plan p;
  if (Status s = plan(op, &p); !s) return s;
  if (p.check) {
    Status s = checkSignature(op);
    if (!s) {
      if (s.code() != StatusCode::InvalidUsage) recordFailure(s);
      return s;
    }
  }
  if (p.shortPath) return executeEager(op, *p.algo);
  return run(op, p);
}

Status Communicator::execute(const OpArgs& op, const Algorithm& algo) {
  Plan p;
  p.algo = &algo;
  p.streamStores = streamsStores(op);
  return run(op, p);
}

bool Communicator::streamsStores(const OpArgs& op) const {
  // Non-temporal stores of results, in ops larger than the cache: they win for the reducing
  // collectives and all-gather; broadcast's receivers, which read the result again, lose.
  return !op.device && traits(op.coll).streamsResults && config_.streamBytes > 0 &&
         opBytes(op.coll, op.count, op.dtype, nranks_) >= static_cast<size_t>(config_.streamBytes);
}

Status Communicator::executeEager(const OpArgs& op, const Algorithm& algo) {
  ZCOLL_TRACE(Coll, rank_, "{} #{} ({}): count {} {} {} root {}", collectiveName(op.coll), op.seq, algo.name(),
              op.count, dataTypeName(op.dtype), redOpName(op.op), op.root);
  Transport* transport = transport_.get();
  Waiter waiter = newWaiter(transport);
  AlgoContext ctx = context(&waiter, transport);
  Status s = algo.run(op, ctx);
  if (s) s = awaitIdle(op, algo.name(), transport, &waiter);
  else announceFailure(waiter);
  settle(s, &algo);
  return s;
}

Status Communicator::awaitIdle(const OpArgs& op, std::string_view algoName, Transport* transport, Waiter* waiter) {
  // The op's last frames leave this rank (and zero-copy sends stop reading the caller's buffers)
  // before it returns: a rank that then blocks outside zcoll must not starve a peer.
  const WaitResult r = waiter->until([&] { return transport->idle(); }, [] { return -1; });
  if (r == WaitResult::Ready) return Status::ok();
  return Status(r == WaitResult::Aborted ? StatusCode::Aborted : StatusCode::Timeout,
                fmt::format("{} #{} ({}): rank {} could not hand its last {} sends over before the {}",
                            collectiveName(op.coll), op.seq, algoName, rank_, transport->name(),
                            r == WaitResult::Aborted ? "communicator was aborted"
                                                     : "timeout (is a peer still receiving?)"));
}

Waiter Communicator::newWaiter(Transport* transport) {
  return Waiter(transport, WaitPolicy{config_.spinNs, config_.yieldNs}, config_.timeoutMs, &abort_);
}

Status Communicator::run(const OpArgs& op, const Plan& plan) {
  const Algorithm* algo = plan.algo;
  // Device buffers: the device transport (cuda_ipc) when there is one, else the host transport's
  // slots (registered with the runtime at the first device op), and the device executor.
  Transport* transport = transport_.get();
  std::optional<DeviceExecutor> dev;
  if (op.device) {
    if (Status s = prepareDeviceWorker(); !s) {
      recordFailure(s);
      return s;
    }
    if (deviceTransport_) {
      transport = deviceTransport_.get();
    } else if (!hostSlotsForDevice_) {
      return notSupported("{} #{}: device buffers over the {} transport need its slots registered with the device "
                          "runtime, which failed (see the warning at its first device op)",
                          collectiveName(op.coll), op.seq, transport_->name());
    }
    dev.emplace(device_, deviceStream_, transport, WaitPolicy{config_.spinNs, config_.yieldNs}, &abort_);
  }
  Waiter waiter = newWaiter(transport);
  AlgoContext ctx = context(&waiter, transport);
  if (dev) {
    ctx.device = &*dev;
    ctx.scratch = &deviceScratch_;
  } else if (op.coll != Collective::SendRecv) {
    ctx.stableSrc = op.sendbuf;
    ctx.stableBytes = op.stableSendBytes;
  }
  ctx.streamStores = plan.streamStores;
  ZCOLL_TRACE(Coll, rank_, "{} #{} ({}): count {} {} {} root {}", collectiveName(op.coll), op.seq, algo->name(),
              op.count, dataTypeName(op.dtype), redOpName(op.op), op.root);
  const int64_t t0 = tracer_ ? nowNs() : 0;
  // Zero copy between the processes of this host, when every rank's buffers allow it (all ranks
  // decide the same from the offers they exchange), else the selected algorithm.
  bool ranZeroCopy = false;
  Status s;
  if (plan.offerZeroCopy) {
    AlgoContext zctx = ctx;
    zctx.streamStores = plan.zeroCopyStreams;
    s = zeroCopyCollective(op, zctx, &ranZeroCopy);
  }
  const std::string_view algoName = ranZeroCopy ? kZeroCopyName : algo->name();
  if (s && !ranZeroCopy) {
    s = algo->run(op, ctx);
    if (!s) announceFailure(waiter);
  }
  if (s) s = awaitIdle(op, algoName, transport, &waiter);
  if (dev) {
    // Whatever happened, the device work queued for this op ends before the op does.
    Status d = dev->sync(waiter.deadline());
    if (s && !d) s = std::move(d).withContext(fmt::format("{} #{} ({})", collectiveName(op.coll), op.seq, algoName));
  }
  if (tracer_) tracer_->op(op.coll, op.seq, algoName, op.count, op.dtype, t0, nowNs(), s.isOk());
  settle(s, ranZeroCopy ? static_cast<const void*>(&kZeroCopyName) : static_cast<const void*>(algo));
  return s;
}

Status Communicator::call(const OpArgs& opIn) {
  const void* const self = threadMark();
  if (const void* other = runner_.load(std::memory_order_relaxed); other && other != self) return concurrentUse(opIn);
  runner_.store(self, std::memory_order_relaxed);
  struct Unmark {  // also when callMarked throws (apiCall catches it): the mark never stays behind
    std::atomic<const void*>& runner;
    const void* self;
    ~Unmark() {
      if (runner.load(std::memory_order_relaxed) == self) runner.store(nullptr, std::memory_order_relaxed);
    }
  } unmark{runner_, self};
  Status s = callMarked(opIn);
  // Another thread entered while this one ran (both passed the check at once): the FIFOs and the
  // sequence numbers are in an unknown state, so the communicator fails from here on.
  if (runner_.load(std::memory_order_relaxed) != self) {
    runner_.store(&kConflict, std::memory_order_relaxed);  // the other thread sees it at its exit
    Status c = concurrentUse(opIn);
    recordFailure(c);
    return c;
  }
  return s;
}

Status Communicator::concurrentUse(const OpArgs& op) const {
  return invalidUsage("{} on the communicator of rank {} while another thread was in a call on it: a communicator may "
                      "be used by one thread at a time",
                      collectiveName(op.coll), rank_);
}

Status Communicator::callMarked(const OpArgs& opIn) {
  OpArgs op = opIn;
  op.seq = op.coll == Collective::SendRecv ? p2pSeq_++ : collSeq_++;
  if (pending_.load() == 0) return execute(op);
  // Earlier nonblocking operations are still queued: keep the order.
  Request* req = nullptr;
  {
    std::lock_guard lock(mutex_);
    req = acquireRequest();
  }
  req->op = op;
  if (op.coll == Collective::SendRecv) {
    req->items.assign(op.items, op.items + op.nitems);
    req->op.items = req->items.data();
  }
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(req);
    pending_.fetch_add(1);
  }
  workCv_.notify_one();
  return wait(req);
}

Status Communicator::submit(const OpArgs& opIn, Request** out) {
  if (const void* other = runner_.load(std::memory_order_relaxed); other && other != threadMark())
    return concurrentUse(opIn);
  std::lock_guard lock(mutex_);
  if (opIn.device)
    if (Status s = prepareDeviceLocked(); !s) return s;
  if (!worker_.joinable()) {
    try {
      worker_ = std::thread([this] { workerLoop(); });
    } catch (const std::system_error& e) {
      return systemError("starting the progress thread", e.code().value());
    }
  }
  Request* req = acquireRequest();
  req->op = opIn;
  req->op.seq = opIn.coll == Collective::SendRecv ? p2pSeq_++ : collSeq_++;
  if (opIn.coll == Collective::SendRecv) {
    req->items.assign(opIn.items, opIn.items + opIn.nitems);
    req->op.items = req->items.data();
  }
  queue_.push_back(req);
  pending_.fetch_add(1);
  workCv_.notify_one();
  *out = req;
  return Status::ok();
}

void Communicator::workerLoop() {
  std::unique_lock lock(mutex_);
  for (;;) {
    workCv_.wait(lock, [this] { return stopWorker_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, nothing left
    Request* req = queue_.front();
    queue_.pop_front();
    lock.unlock();
    if (req->deviceIndex) {
      // Stream-ordered: nobody waits for the request. A failure becomes the communicator's async
      // error before the caller's stream moves on (as NCCL's, it goes on either way).
      Status ready = prepareDeviceWorker();  // the device current before any device call here
      if (ready) ready = awaitReady(req);
      const Status s = ready ? execute(req->op) : std::move(ready);
      if (!s && asyncError() == StatusCode::Ok) recordFailure(s);
      std::atomic_ref<uint64_t>(*deviceDone_).store(req->deviceIndex, std::memory_order_release);
      lock.lock();
      releaseRequest(req);
      pending_.fetch_sub(1);
      continue;
    }
    req->result = execute(req->op);
    req->done.store(1, std::memory_order_release);
    req->done.notify_all();
    pending_.fetch_sub(1);
    lock.lock();
  }
}

Status Communicator::submitDevice(const OpArgs& opIn, DevStream stream) {
  std::lock_guard lock(mutex_);
  if (!worker_.joinable()) {
    try {
      worker_ = std::thread([this] { workerLoop(); });
    } catch (const std::system_error& e) {
      return systemError("starting the progress thread", e.code().value());
    }
  }
  if (Status s = prepareDeviceLocked(); !s) return s;
  Request* req = acquireRequest();
  auto fail = [&](Status s, const char* what) {
    releaseRequest(req);
    return std::move(s).withContext(fmt::format("{}: {}", collectiveName(opIn.coll), what));
  };
  if (!req->ready)
    if (Status s = device_->eventCreate(&req->ready); !s) return fail(std::move(s), "creating an event");
  if (Status s = device_->eventRecord(req->ready, stream); !s) return fail(std::move(s), "recording on the stream");
  const uint64_t index = deviceIssued_ + 1;
  if (Status s = device_->streamWaitFlag(stream, deviceDone_, index); !s)
    return fail(std::move(s), "making the stream wait for the operation");
  deviceIssued_ = index;
  // Mark the stream's last wait, so that destroy knows when the counter is no longer read.
  auto mark = std::find_if(streamMarks_.begin(), streamMarks_.end(), [&](const auto& m) { return m.first == stream; });
  if (mark == streamMarks_.end()) {
    DevEvent e = nullptr;
    if (device_->eventCreate(&e)) mark = streamMarks_.insert(streamMarks_.end(), {stream, e});
  }
  if (mark != streamMarks_.end())
    if (Status s = device_->eventRecord(mark->second, stream); !s)
      ZCOLL_WARN(Coll, rank_, "recording the stream's mark: {}", s.message());
  req->op = opIn;
  req->op.seq = opIn.coll == Collective::SendRecv ? p2pSeq_++ : collSeq_++;
  if (opIn.coll == Collective::SendRecv) {
    req->items.assign(opIn.items, opIn.items + opIn.nitems);
    req->op.items = req->items.data();
  }
  req->deviceIndex = index;
  queue_.push_back(req);
  pending_.fetch_add(1);
  workCv_.notify_one();
  return Status::ok();
}

Status Communicator::awaitReady(Request* req) {
  Status failure;
  Waiter waiter(nullptr, WaitPolicy{config_.spinNs, config_.yieldNs}, Deadline::afterMs(config_.timeoutMs), &abort_);
  const WaitResult r = waiter.until(
      [&] {
        bool done = false;
        Status s = device_->eventQuery(req->ready, &done);
        if (!s) failure = std::move(s);
        return done || !failure;
      },
      [] { return -1; });
  const std::string what = fmt::format("{} #{}", collectiveName(req->op.coll), req->op.seq);
  if (!failure) return std::move(failure).withContext(what + ": the work before it on its stream");
  if (r == WaitResult::Aborted) return Status(StatusCode::Aborted, what + ": communicator aborted");
  if (r == WaitResult::Timeout)
    return timeoutError("{}: the work queued before it on its stream did not finish within the timeout", what);
  return Status::ok();
}

Status Communicator::wait(Request* req) {
  req->done.wait(0, std::memory_order_acquire);
  Status s = std::move(req->result);
  std::lock_guard lock(mutex_);
  releaseRequest(req);
  return s;
}

bool Communicator::test(Request* req, Status* result) {
  if (req->done.load(std::memory_order_acquire) == 0) return false;
  *result = std::move(req->result);
  std::lock_guard lock(mutex_);
  releaseRequest(req);
  return true;
}

Request* Communicator::acquireRequest() {
  if (freeRequests_.empty()) {
    requests_.push_back(std::make_unique<Request>());
    requests_.back()->comm = this;
    freeRequests_.push_back(requests_.back().get());
  }
  Request* r = freeRequests_.back();
  freeRequests_.pop_back();
  r->magic = Request::kLive;
  r->done.store(0);
  r->result = Status::ok();
  r->items.clear();
  r->deviceIndex = 0;
  return r;
}

void Communicator::releaseRequest(Request* req) {
  req->magic = Request::kFree;
  freeRequests_.push_back(req);
}

void Communicator::abort() {
  abort_.store(true);
  if (transport_) transport_->wake();
  if (Transport* d = deviceTransportLive_.load()) d->wake();
  workCv_.notify_all();
}

Status Communicator::drain() {
  Deadline d = Deadline::afterMs(config_.timeoutMs + 1000);
  while (pending_.load() > 0) {
    if (d.passed()) return timeoutError("destroy: {} operations still pending after the timeout", pending_.load());
    struct timespec ts{0, 1'000'000};
    nanosleep(&ts, nullptr);
  }
  return Status::ok();
}

}  // namespace zcoll
