// communicator.hpp - one rank's membership in a group of ranks: its bootstrap, transport, config,
// sequence numbers, and the engine that runs its operations in call order.
//
// Execution: a blocking call runs on the caller's thread when nothing is queued (lowest latency);
// nonblocking calls, and blocking calls issued while some are queued, go to the communicator's
// progress thread (started on first use) and complete a Request. Either way operations run one at a
// time, in call order, which is the order all ranks agree on.
//
// Failure: an operation that times out, meets a dead or mismatched peer, or is aborted leaves the
// FIFOs in an unknown state, so the communicator records that first error (zcollCommGetAsyncError)
// and refuses further operations with it. Argument errors are caught before execution and do not.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "algorithms/algorithm.hpp"
#include "algorithms/device_executor.hpp"
#include "algorithms/registry.hpp"
#include "algorithms/zcopy.hpp"
#include "bootstrap/bootstrap.hpp"
#include "core/config.hpp"
#include "core/device.hpp"
#include "transport/transport.hpp"
#include "transport/wait.hpp"

namespace zcoll {

class Communicator;

// A queued operation and its completion. Owned by the communicator's pool.
struct Request {
  static constexpr uint32_t kLive = 0x7a52514cu;  // "zRQL": handed to the user, not yet completed
  static constexpr uint32_t kFree = 0x7a525146u;  // back in the pool
  uint32_t magic = kFree;
  Communicator* comm = nullptr;
  OpArgs op;
  std::vector<P2PItem> items;  // SendRecv batches keep their transfers here
  Status result;
  std::atomic<uint32_t> done{0};
  // Device operations: recorded on the caller's stream at submission; the op starts once it has
  // completed. Created once per pooled request.
  DevEvent ready = nullptr;
  // Stream-ordered ops: the communicator's device-op counter value this op writes when done (0: not
  // stream-ordered); no one waits for them: the worker releases them.
  uint64_t deviceIndex = 0;
};

class Communicator {
 public:
  static Status create(const UniqueIdFields& id, int nranks, int rank, const Config& config,
                       std::unique_ptr<Communicator>* out);
  ~Communicator();

  int rank() const { return rank_; }
  int nranks() const { return nranks_; }
  const Config& config() const { return config_; }
  // Communicators of more ranks skip the cost-model probe unless ZCOLL_CALIBRATE=2 (calibration.cpp).
  static constexpr int kCalibrateMaxRanks = 8;
  // What creating this communicator cost in bootstrap messages (tools/scale-probe).
  BootstrapStats bootstrapStats() const;

  // Runs op now (blocking) in call order. For SendRecv, op.items must stay valid during the call.
  Status call(const OpArgs& op);
  // Queues op on the progress thread; *out completes later. items are copied.
  Status submit(const OpArgs& op, Request** out);
  // A device operation (op.device) ordered on `stream` like NCCL's: it starts after the work queued
  // on the stream before it, later work on the stream waits for it, and the caller does not block.
  // Nothing to wait for here: a failure becomes the communicator's async error (and the stream goes
  // on). Device ops through submit() are ordered by their request instead.
  Status submitDevice(const OpArgs& op, DevStream stream);
  // The device runtime this communicator serves device buffers with, or nullptr.
  DeviceRuntime* device() const { return device_; }
  // The transport host buffers go through (shm, ib, tcp, ucx).
  std::string_view transportName() const { return transport_->name(); }
  // The transport device operations use (cuda_ipc, or the host transport's slots), for zcoll-info.
  std::string_view deviceTransportName() const;
  // Completion of a submitted request; both release it once done.
  Status wait(Request* req);
  bool test(Request* req, Status* result);

  // How one op runs, all of it decided by plan() in this order (docs/algorithms.md, "Planning an op"):
  //   1. the algorithm: the eager rule, then ZCOLL_ALGO's rules, then the cost model's table;
  //   2. ZCOLL_CHECK's signature round, before any data moves;
  //   3. the short path: an eager host op with no tracer, which needs nothing below;
  //   4. the zero-copy offer: a host op zcopy serves, of at least ZCOLL_ZERO_COPY bytes, on a transport
  //      that maps peer memory, whose algorithm was chosen automatically (not forced, not eager);
  //   5. non-temporal stores: host ops of at least ZCOLL_STREAM_STORES whose results are not read again.
  struct Plan {
    const Algorithm* algo = nullptr;
    bool forced = false;         // a ZCOLL_ALGO rule chose algo
    bool check = false;
    bool shortPath = false;
    bool offerZeroCopy = false;
    bool zeroCopyStreams = false;  // the zero-copy path's stores go around the cache
    bool streamStores = false;
  };
  Status plan(const OpArgs& op, Plan* out) const;
  // The algorithm execute() would choose for op.
  Status algorithmFor(const OpArgs& op, const Algorithm** out) const {
    Plan p;
    Status s = plan(op, &p);
    *out = p.algo;
    return s;
  }
  // The name of what ran the last operation that completed without error ("zcopy" for the zero-copy
  // path, "" before the first).
  std::string_view lastAlgorithm() const;

  // Raises the abort flag and wakes every wait; safe from any thread.
  void abort();
  StatusCode asyncError() const { return static_cast<StatusCode>(asyncError_.load()); }
  // The message of that first error ("" while there is none).
  std::string asyncErrorMessage();

  // Waits (bounded by the timeout) for queued operations to finish; then the object may be deleted.
  Status drain();

  // zcollCommRegister: a buffer later operations may send from without a copy. Host memory goes to
  // the host transport (ib registers it with its NIC; the others need nothing); device memory is
  // remembered only (no GPUDirect RDMA: device data is staged through the slots). *handle for
  // deregisterBuffer; whatever is left goes with the communicator.
  Status registerBuffer(void* base, size_t bytes, void** handle);
  Status deregisterBuffer(void* handle);

 private:
  Communicator() = default;
  // Creation after the bootstrap: transport, device plan, calibration, tracer.
  Status setUp();
  // An op as plan() says: the check round, then the short path or run().
  Status execute(const OpArgs& op);
  // The calibration's ops: `algo` on op, with plan()'s stores and no check round or zero copy.
  Status execute(const OpArgs& op, const Algorithm& algo);
  // Step 5 of plan(): whether op's results go around the cache.
  bool streamsStores(const OpArgs& op) const;
  // The full path: device set-up, the zero-copy offer, the algorithm, tracing.
  Status run(const OpArgs& op, const Plan& plan);
  // The short path of an op the selector gave to an eager algorithm (host buffers, no tracer): the
  // schedule and the idle wait, none of run()'s device, zero-copy and tracing set-up.
  Status executeEager(const OpArgs& op, const Algorithm& algo);
  // The end of every executed op: what ran it (an Algorithm or &kZeroCopyName) becomes the last
  // algorithm when s is ok; a failure other than a usage error is recorded.
  // (Inline, like context(): both are on every op's path.)
  void settle(const Status& s, const void* ran) {
    if (s) lastAlgo_.store(ran, std::memory_order_relaxed);
    else if (s.code() != StatusCode::InvalidUsage) recordFailure(s);
  }
  // Waits (bounded) until the transport has handed over everything this op committed.
  Status awaitIdle(const OpArgs& op, std::string_view algoName, Transport* transport, Waiter* waiter);
  // Measures the cost model on the real transport (collective; rank 0's figures win).
  Status calibrate();
  // ZCOLL_CHECK: all-gathers op's signature and compares (collective; comm/check.cpp).
  Status checkSignature(const OpArgs& op);
  Waiter newWaiter(Transport* transport);
  AlgoContext context(Waiter* waiter, Transport* transport) {
    AlgoContext ctx;
    ctx.rank = rank_;
    ctx.nranks = nranks_;
    ctx.transport = transport;
    ctx.waiter = waiter;
    // A chunk is one slot of the transport that carries it (hostChunkBytes_: the host transport's, cached).
    ctx.chunkBytes = transport == transport_.get() ? hostChunkBytes_ : transport->chunkCapacity();
    ctx.scratch = &scratch_;
    ctx.zeroCopyMemo = &zeroCopyMemo_;
    ctx.tracer = tracer_.get();
    ctx.hosts = &selector_.hosts();
    return ctx;
  }
  // Device state. At creation only the plan (no device call: a host-only user of a GPU machine gets
  // no CUDA context); at the first device op, under mutex_, the local part (stream, completion
  // counter, registration of the host transport's slots); at the first device op's execution, on the
  // progress thread, its current device and the collective part (the cuda_ipc transport: all ranks
  // reach it in op order).
  void planDevice(bool oneHost);
  Status prepareDeviceLocked();
  Status prepareDeviceWorker();
  void teardownDevice();
  // Waits until the work before a device op on its stream has run.
  Status awaitReady(Request* req);
  Request* acquireRequest();
  void releaseRequest(Request* req);
  void workerLoop();
  void recordFailure(const Status& s);
  // After a failed run: tells the peers whom it blames (Waiter::blamed), so that they name that rank.
  void announceFailure(const Waiter& waiter) {
    if (waiter.blamed() >= 0 && asyncError() == StatusCode::Ok)
      transport_->announceFailure(waiter.blamed(), waiter.blamedStalled());
  }
  // One thread at a time (zcoll.h): call() marks its thread in runner_ with plain stores (no locked
  // instruction on an op's path). A thread that finds another's mark backs out with InvalidUsage;
  // two that passed the check at once find the mark changed at exit and fail the communicator.
  Status callMarked(const OpArgs& op);
  Status concurrentUse(const OpArgs& op) const;
  static const void* threadMark() {
    static thread_local const char mark = 0;
    return &mark;
  }
  static constexpr char kConflict = 0;

  int rank_ = 0;
  int nranks_ = 1;
  Config config_;
  std::unique_ptr<Bootstrap> bootstrap_;
  std::unique_ptr<Transport> transport_;
  HostScratch scratch_;
  ZeroCopyMemo zeroCopyMemo_;
  size_t hostChunkBytes_ = 0;  // the host transport's chunk: its slot size
  // Device buffers (when the process has a device runtime): the device this communicator was made
  // on, its stream for copies and kernels, the cuda_ipc transport when all ranks share this host, the
  // host-mapped counter of completed device ops that callers' streams wait on, and per caller stream
  // an event marking its last wait (destroy waits for those before freeing the counter).
  DeviceRuntime* device_ = nullptr;
  int deviceId_ = 0;
  DevStream deviceStream_ = nullptr;
  std::unique_ptr<Transport> deviceTransport_;            // made and used by the progress thread
  std::atomic<Transport*> deviceTransportLive_{nullptr};  // the same, for abort() from any thread
  bool deviceLocalReady_ = false;                         // guarded by mutex_
  bool workerOnDevice_ = false;                           // progress thread only
  bool cudaIpcPlanned_ = false;
  DeviceScratch deviceScratch_;
  uint64_t* deviceDone_ = nullptr;
  uint64_t deviceIssued_ = 0;  // guarded by mutex_
  std::vector<std::pair<DevStream, DevEvent>> streamMarks_;  // guarded by mutex_
  std::vector<void*> registered_;
  bool hostSlotsForDevice_ = false;  // the host transport's slots are registered (device ops may use them)
  std::unique_ptr<Tracer> tracer_;  // ZCOLL_TRACE
  AlgorithmSelector selector_;
  std::vector<char> signatures_;  // ZCOLL_CHECK's all-gather buffer, sized once
  std::atomic<bool> abort_{false};
  // What ran the last successful operation: an Algorithm, or &kZeroCopyName (one store per op).
  std::atomic<const void*> lastAlgo_{nullptr};
  std::atomic<const void*> runner_{nullptr};  // the thread inside call() (threadMark), or &kConflict
  std::atomic<int> asyncError_{0};
  std::string firstError_;  // guarded by mutex_
  uint64_t collSeq_ = 0;    // collectives issued so far (the sequence all ranks share)
  uint64_t p2pSeq_ = 0;

  std::mutex mutex_;  // guards everything below
  std::condition_variable workCv_;
  std::deque<Request*> queue_;
  std::vector<std::unique_ptr<Request>> requests_;
  std::vector<Request*> freeRequests_;
  std::atomic<int> pending_{0};  // submitted and not yet completed
  struct Registration {
    void* base = nullptr;
    size_t bytes = 0;
    uint64_t id = 0;  // the transport's (0: none)
  };
  std::vector<std::unique_ptr<Registration>> registrations_;
  bool stopWorker_ = false;
  std::thread worker_;
};

}  // namespace zcoll
