// algorithm.hpp - what an algorithm is: a named schedule for one collective, run over the transport
// interface through Primitives. Adding one = one file defining a subclass + one line in registry.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "algorithms/cost_model.hpp"
#include "algorithms/patterns/hosts.hpp"
#include "algorithms/patterns/rhd.hpp"
#include "algorithms/scratch.hpp"
#include "core/status.hpp"
#include "core/trace.hpp"
#include "core/types.hpp"
#include "transport/transport.hpp"
#include "transport/wait.hpp"

namespace zcoll {

class DeviceExecutor;

// One point-to-point transfer of a grouped send/recv batch.
struct P2PItem {
  static constexpr int kAnyPeer = -2;  // a receive from whichever peer's message comes first
  bool isSend = false;
  int peer = -1;
  void* buf = nullptr;  // const for sends
  size_t bytes = 0;
  int* source = nullptr;  // kAnyPeer: where the peer it came from is written
};

// One operation as the algorithms see it (validated by the API layer).
struct OpArgs {
  Collective coll = Collective::AllReduce;
  const void* sendbuf = nullptr;
  void* recvbuf = nullptr;
  size_t count = 0;  // elements: per rank for all-reduce/broadcast/reduce; per block otherwise
  DataType dtype = DataType::Float32;
  RedOp op = RedOp::Sum;
  int root = 0;
  uint64_t seq = 0;  // per-communicator sequence number of this collective
  const P2PItem* items = nullptr;  // SendRecv only
  size_t nitems = 0;
  bool device = false;  // the buffers are device memory (core/device.hpp)
  // Bytes of sendbuf this rank reads, when the op writes none of them (out of place; set by the API
  // layer), else 0: sends may read them in place (zero copy) until the op ends.
  size_t stableSendBytes = 0;
};

// opBytes of an op, as a double for cost formulas.
inline double opSize(const OpArgs& op, int nranks) {
  return static_cast<double>(opBytes(op.coll, op.count, op.dtype, nranks));
}

struct ZeroCopyMemo;  // algorithms/zcopy.hpp

// What an algorithm may use while it runs.
struct AlgoContext {
  int rank = 0;
  int nranks = 1;
  Transport* transport = nullptr;
  Waiter* waiter = nullptr;
  size_t chunkBytes = 0;  // <= transport->chunkCapacity()
  Scratch* scratch = nullptr;
  ZeroCopyMemo* zeroCopyMemo = nullptr;  // the communicator's, kept between its zero-copy ops
  Tracer* tracer = nullptr;  // ZCOLL_TRACE, or nullptr
  // Device operations (buffers in device memory): the executor that computes on them, else nullptr.
  DeviceExecutor* device = nullptr;
  // Which ranks share a host (hierarchical algorithms); nullptr when the context is a sub-group.
  const patterns::HostLayout* hosts = nullptr;
  // Avg divides final values by this (0: nranks); a sub-group phase of a hierarchical algorithm
  // divides by the whole communicator's count once.
  int avgDivisor = 0;
  // Caller memory that stays unchanged until the whole operation ends (the user's sendbuf of an
  // out-of-place op): a send from it may be a zero-copy one (Transport::commitSendFrom).
  const void* stableSrc = nullptr;
  size_t stableBytes = 0;
  // A host operation larger than the cache (ZCOLL_STREAM_STORES): results it does not read again are
  // written with non-temporal stores (Primitives).
  bool streamStores = false;
  // zcoll-sim --nodata: buffers and slots hold no data, so Primitives copies and reduces nothing (the
  // transport still carries every chunk and prices its bytes); thousands of ranks at 1 GiB.
  bool sizesOnly = false;
};

class Algorithm {
 public:
  virtual ~Algorithm() = default;
  virtual std::string_view name() const = 0;
  virtual Collective collective() const = 0;
  // NotSupported with the reason when this algorithm cannot serve a communicator of nranks; selection
  // falls through. It depends on the communicator only, never on the call: the selector asks once per
  // size class when it builds its table, not per call.
  virtual Status supports(int nranks) const {
    (void)nranks;
    return Status::ok();
  }
  virtual Status run(const OpArgs& op, AlgoContext& ctx) const = 0;
  // Predicted seconds for the call under the model (the only algorithm of a collective may return 0).
  virtual double cost(const OpArgs& op, int nranks, const CostModel& m) const {
    (void)op;
    (void)nranks;
    (void)m;
    return 0.0;
  }
  // Whether it is its collective's eager schedule (algorithms/eager.cpp): chosen by the selector's
  // eager rule (ZCOLL_EAGER_BYTES) or by name, never by cost, and not calibrated - what it saves is
  // the call path, which the cost model does not see.
  virtual bool eager() const { return false; }
  // Whether it runs operations on device buffers (a ZCOLL_ALGO rule naming one that does not falls
  // through for them).
  virtual bool servesDevice() const { return true; }
  // The same two questions with the communicator's host layout, which selection and calibration
  // ask; only the hierarchical algorithms look at the layout.
  virtual Status supportsOn(const patterns::HostLayout& hosts) const {
    return supports(static_cast<int>(hosts.hostOf.size()));
  }
  virtual double costOn(const OpArgs& op, const patterns::HostLayout& hosts, const CostModel& m) const {
    return cost(op, static_cast<int>(hosts.hostOf.size()), m);
  }
};

// The usual base: an algorithm of one collective under one name.
template <Collective C>
class AlgorithmOf : public Algorithm {
 public:
  explicit constexpr AlgorithmOf(std::string_view name) : name_(name) {}
  std::string_view name() const final { return name_; }
  Collective collective() const final { return C; }

 private:
  std::string_view name_;
};

// supports() of the algorithms that need a power-of-two rank count.
inline Status requirePowerOfTwo(int nranks) {
  if (patterns::isPowerOfTwo(nranks)) return Status::ok();
  return notSupported("{} ranks is not a power of two", nranks);
}

// Defines the factory that registry.cpp lists, returning the one instance of Class.
#define ZCOLL_ALGORITHM_FACTORY(factory, Class, name) \
  const Algorithm& factory() {                        \
    static const Class instance(name);                \
    return instance;                                  \
  }

// The op's buffers as bytes, for offset arithmetic.
struct ByteBuffers {
  const char* send;
  char* recv;
};
inline ByteBuffers bytesOf(const OpArgs& op) {
  return {static_cast<const char*>(op.sendbuf), static_cast<char*>(op.recvbuf)};
}

}  // namespace zcoll
