// api_coll.cpp - the C ABI of operations: argument validation, then one path into the
// communicator (blocking, grouped or nonblocking).
#include <cstdint>

#include "comm/boundary.hpp"
#include "comm/group.hpp"
#include "comm/handles.hpp"
#include "core/device.hpp"

namespace zcoll {

static_assert(static_cast<int>(DataType::Bfloat16) == zcollBfloat16 && kNumDataTypes == zcollNumTypes);
static_assert(static_cast<int>(DataType::Float16) == zcollFloat16 && static_cast<int>(DataType::Float64) == zcollFloat64);
static_assert(static_cast<int>(RedOp::Avg) == zcollAvg && kNumRedOps == zcollNumOps);
static_assert(static_cast<int>(RedOp::Max) == zcollMax && static_cast<int>(RedOp::Min) == zcollMin);

namespace {

enum class Mode { Blocking, Async };

struct Call {
  const char* sendName = "sendbuff";
  const char* recvName = "recvbuff";
  size_t sendElems = 0;  // elements read from sendbuff on this rank
  size_t recvElems = 0;  // elements written to recvbuff on this rank
  bool needSend = true;
  bool needRecv = true;
  // In-place layout: sendbuff == recvbuff + inPlaceOffset elements may overlap (signed).
  int64_t inPlaceOffset = 0;
  bool allowInPlace = true;
};

bool mulOverflows(size_t a, size_t b, size_t* out) { return __builtin_mul_overflow(a, b, out); }

Status checkType(zcollDataType_t datatype) {
  if (static_cast<int>(datatype) < 0 || static_cast<int>(datatype) >= zcollNumTypes)
    return invalidArgument("datatype = {}: not a zcollDataType_t", static_cast<int>(datatype));
  return Status::ok();
}

Status checkOp(zcollRedOp_t op) {
  if (static_cast<int>(op) < 0 || static_cast<int>(op) >= zcollNumOps)
    return invalidArgument("op = {}: not a zcollRedOp_t", static_cast<int>(op));
  return Status::ok();
}

Status checkRank(int value, const char* name, int nranks) {
  if (value < 0 || value >= nranks) return invalidArgument("{} = {}: must be in [0, nranks = {})", name, value, nranks);
  return Status::ok();
}

// Host or device: both buffers of a call must be of one kind; a stream goes with device buffers only.
Status memoryKind(const Call& c, const OpArgs& op, zcollStream_t stream, bool* device) {
  *device = false;
  DeviceRuntime* rt = deviceRuntime();
  if (!rt) {
    if (stream) return invalidArgument("stream: must be NULL: this process has no device runtime ({})",
                                       deviceRuntimeAbsence());
    return Status::ok();
  }
  const bool hasSend = c.needSend && c.sendElems > 0 && op.sendbuf;
  const bool hasRecv = c.needRecv && c.recvElems > 0 && op.recvbuf;
  const MemKind send = hasSend ? rt->kindOf(op.sendbuf) : MemKind::Host;
  const MemKind recv = hasRecv ? rt->kindOf(op.recvbuf) : MemKind::Host;
  auto kindName = [](MemKind k) { return k == MemKind::Device ? "device" : "host"; };
  if (hasSend && hasRecv && send != recv)
    return invalidArgument("{} is {} memory but {} is {} memory: both must be device memory, or both host memory",
                           c.sendName, kindName(send), c.recvName, kindName(recv));
  if (hasSend || hasRecv) {
    *device = (hasSend ? send : recv) == MemKind::Device;
    if (!*device && stream)
      return invalidArgument("stream: must be NULL for host buffers ({} is host memory)",
                             hasSend ? c.sendName : c.recvName);
  } else {
    *device = stream != nullptr;  // nothing to move: ordered on the stream when one is given
  }
  return Status::ok();
}

// Byte sizes, null pointers and overlaps of one call's buffers.
Status checkBuffers(const Call& c, const void* send, const void* recv, size_t elemSize, const char* countName) {
  size_t sendBytes = 0, recvBytes = 0;
  if (mulOverflows(c.sendElems, elemSize, &sendBytes) || mulOverflows(c.recvElems, elemSize, &recvBytes) ||
      sendBytes > PTRDIFF_MAX || recvBytes > PTRDIFF_MAX)
    return invalidArgument("{}: {} elements of {} bytes overflow the address space", countName,
                           std::max(c.sendElems, c.recvElems), elemSize);
  if (c.needSend && sendBytes > 0 && !send) return invalidArgument("{}: NULL with {} > 0", c.sendName, countName);
  if (c.needRecv && recvBytes > 0 && !recv) return invalidArgument("{}: NULL with {} > 0", c.recvName, countName);
  if (c.needSend && c.needRecv && sendBytes > 0 && recvBytes > 0) {
    auto s = reinterpret_cast<uintptr_t>(send), r = reinterpret_cast<uintptr_t>(recv);
    bool overlap = s < r + recvBytes && r < s + sendBytes;
    bool inPlace = c.allowInPlace && static_cast<int64_t>(s - r) == c.inPlaceOffset * static_cast<int64_t>(elemSize);
    if (overlap && !inPlace)
      return invalidArgument("{} and {} overlap but are not in the in-place layout", c.sendName, c.recvName);
  }
  return Status::ok();
}

// The bytes of sendbuff that the op reads and never writes (no overlap with recvbuff), else 0.
size_t stableSendBytes(const Call& c, const void* send, const void* recv, size_t elemSize) {
  if (!c.needSend || !send) return 0;
  const size_t sendBytes = c.sendElems * elemSize, recvBytes = c.needRecv && recv ? c.recvElems * elemSize : 0;
  auto s = reinterpret_cast<uintptr_t>(send), r = reinterpret_cast<uintptr_t>(recv);
  return recvBytes > 0 && s < r + recvBytes && r < s + sendBytes ? 0 : sendBytes;
}

// Validates the buffers, then runs / queues / groups the operation on the communicator `ref` pins
// (op by reference: the caller's OpArgs is completed in place, not copied per call).
Status launch(const CommRef& ref, zcollComm_t comm, OpArgs& op, const Call& call, const char* countName, Mode mode,
              zcollRequest_t* request, zcollStream_t stream, const P2PItem* item = nullptr) {
  if (Status s = checkBuffers(call, op.sendbuf, op.recvbuf, dataTypeSize(op.dtype), countName); !s) return s;
  if (Status s = memoryKind(call, op, stream, &op.device); !s) return s;
  op.stableSendBytes = stableSendBytes(call, op.sendbuf, op.recvbuf, dataTypeSize(op.dtype));
  if (op.device && !ref->device())
    return invalidUsage("device buffers on a communicator created before the process had a device runtime");
  if (mode == Mode::Async) {
    if (!request) return invalidArgument("request: NULL pointer");
    if (groupActive()) return invalidUsage("nonblocking (Async) calls are not allowed inside a group");
    Request* r = nullptr;
    // Device buffers too: the request orders the op, no stream is involved.
    if (Status s = ref->submit(op, &r); !s) return s;
    *request = reinterpret_cast<zcollRequest_t>(r);
    return Status::ok();
  }
  if (groupActive()) return groupAdd(comm, op, item, stream);
  if (item) {
    op.items = item;
    op.nitems = 1;
  }
  // Device buffers: ordered on the stream, the caller does not wait (NCCL's semantics).
  if (op.device) return ref->submitDevice(op, stream);
  return ref->call(op);
}

// Every collective but send/recv, checked by its traits (a reducing one's op, a rooted one's root, a
// count of nranks blocks that must not overflow) and its buffers' sizes and in-place layout. A template
// on the collective, so that each entry point compiles to its own checks only.
template <Collective C>
Status collective(const void* sendbuff, void* recvbuff, size_t count, zcollDataType_t datatype, zcollRedOp_t op,
                  int root, const char* countName, zcollComm_t comm, Mode mode, zcollRequest_t* request,
                  zcollStream_t stream) {
  constexpr CollectiveTraits t = traits(C);
  if (Status s = checkType(datatype); !s) return s;
  if constexpr (t.reduces)
    if (Status s = checkOp(op); !s) return s;
  CommRef ref;
  if (Status s = ref.acquire(comm); !s) return s;
  if constexpr (t.rooted)
    if (Status s = checkRank(root, "root", ref->nranks()); !s) return s;
  [[maybe_unused]] size_t all = count;
  if constexpr (t.perRankBlocks)
    if (mulOverflows(count, static_cast<size_t>(ref->nranks()), &all))
      return invalidArgument("{} = {}: times nranks overflows", countName, count);
  Call c;
  c.sendElems = c.recvElems = count;
  [[maybe_unused]] const bool atRoot = t.rooted && ref->rank() == root;
  if constexpr (C == Collective::AllGather) {
    c.recvElems = all, c.inPlaceOffset = static_cast<int64_t>(count) * ref->rank();
  } else if constexpr (C == Collective::ReduceScatter) {  // recvbuff == sendbuff + rank * count
    c.sendElems = all, c.inPlaceOffset = -static_cast<int64_t>(count) * ref->rank();
  } else if constexpr (C == Collective::Broadcast) {
    c.needSend = atRoot;
  } else if constexpr (C == Collective::Reduce) {
    c.needRecv = atRoot;
  } else if constexpr (C == Collective::Gather) {  // count elements per rank, nranks * count at the root
    c.recvElems = atRoot ? all : 0, c.needRecv = atRoot, c.inPlaceOffset = static_cast<int64_t>(count) * root;
  } else if constexpr (C == Collective::Scatter) {
    c.sendElems = atRoot ? all : 0, c.needSend = atRoot, c.inPlaceOffset = -static_cast<int64_t>(count) * root;
  } else if constexpr (C == Collective::AllToAll) {
    c.sendElems = c.recvElems = all, c.allowInPlace = false;
  }
  OpArgs a{C, sendbuff, recvbuff, count, static_cast<DataType>(datatype), t.reduces ? static_cast<RedOp>(op) : RedOp::Sum};
  if constexpr (t.rooted) a.root = root;
  return launch(ref, comm, a, c, countName, mode, request, stream);
}

// A collective's C entry point: the call through the ABI boundary (comm/boundary.hpp). A macro, so that
// the body stays a lambda of the entry point itself: through a function template (always_inline
// too) the small-op path cost 7-13 ns more (zcoll-micro OpCost).
#define ZCOLL_COLLECTIVE_ENTRY(C, function, ...) apiCall(function, [&] { return collective<C>(__VA_ARGS__); })

Status sendRecv(bool isSend, const void* buf, size_t count, zcollDataType_t datatype, int peer, zcollComm_t comm,
                zcollStream_t stream) {
  if (Status s = checkType(datatype); !s) return s;
  CommRef ref;
  if (Status s = ref.acquire(comm); !s) return s;
  if (Status s = checkRank(peer, "peer", ref->nranks()); !s) return s;
  Call c;
  c.sendName = isSend ? "sendbuff" : "recvbuff";
  c.sendElems = count;
  c.needRecv = false;
  P2PItem item{isSend, peer, const_cast<void*>(buf), count * dataTypeSize(static_cast<DataType>(datatype))};
  OpArgs a{Collective::SendRecv, buf, nullptr, count, static_cast<DataType>(datatype)};
  a.root = peer;
  return launch(ref, comm, a, c, "count", Mode::Blocking, nullptr, stream, &item);
}

Status recvAny(void* buf, size_t count, zcollDataType_t datatype, int* source, zcollComm_t comm, zcollStream_t stream) {
  if (Status s = checkType(datatype); !s) return s;
  if (!source) return invalidArgument("peer: NULL output pointer");
  CommRef ref;
  if (Status s = ref.acquire(comm); !s) return s;
  if (groupActive()) return invalidUsage("zcollRecvAny is not allowed inside a group (name the source with zcollRecv)");
  if (ref->nranks() < 2) return invalidUsage("zcollRecvAny on a communicator of one rank: there is no other rank to receive from");
  Call c;
  c.sendName = "recvbuff";
  c.sendElems = count;
  c.needRecv = false;
  int from = -1;  // written on success only; stays -1 for an empty message
  P2PItem item{false, P2PItem::kAnyPeer, buf, count * dataTypeSize(static_cast<DataType>(datatype)), &from};
  OpArgs a{Collective::SendRecv, buf, nullptr, count, static_cast<DataType>(datatype)};
  a.root = -1;
  if (Status s = memoryKind(c, a, stream, &a.device); !s) return s;
  if (a.device) return notSupported("zcollRecvAny takes host buffers only");
  if (item.bytes == 0) {  // an empty message is never sent: nothing to wait for, nobody to name
    *source = -1;
    return Status::ok();
  }
  if (Status s = launch(ref, comm, a, c, "count", Mode::Blocking, nullptr, stream, &item); !s) return s;
  *source = from;
  return Status::ok();
}

}  // namespace
}  // namespace zcoll

using namespace zcoll;

extern "C" {

zcollResult_t zcollAllReduce(const void* sendbuff, void* recvbuff, size_t count, zcollDataType_t datatype,
                             zcollRedOp_t op, zcollComm_t comm, zcollStream_t stream) {
  return ZCOLL_COLLECTIVE_ENTRY(Collective::AllReduce, "zcollAllReduce", sendbuff, recvbuff, count, datatype, op, 0,
                                "count", comm, Mode::Blocking, nullptr, stream);
}

zcollResult_t zcollAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, zcollDataType_t datatype,
                             zcollComm_t comm, zcollStream_t stream) {
  return ZCOLL_COLLECTIVE_ENTRY(Collective::AllGather, "zcollAllGather", sendbuff, recvbuff, sendcount, datatype,
                                zcollSum, 0, "sendcount", comm, Mode::Blocking, nullptr, stream);
}

zcollResult_t zcollReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, zcollDataType_t datatype,
                                 zcollRedOp_t op, zcollComm_t comm, zcollStream_t stream) {
  return ZCOLL_COLLECTIVE_ENTRY(Collective::ReduceScatter, "zcollReduceScatter", sendbuff, recvbuff, recvcount,
                                datatype, op, 0, "recvcount", comm, Mode::Blocking, nullptr, stream);
}

zcollResult_t zcollBroadcast(const void* sendbuff, void* recvbuff, size_t count, zcollDataType_t datatype, int root,
                             zcollComm_t comm, zcollStream_t stream) {
  return ZCOLL_COLLECTIVE_ENTRY(Collective::Broadcast, "zcollBroadcast", sendbuff, recvbuff, count, datatype, zcollSum,
                                root, "count", comm, Mode::Blocking, nullptr, stream);
}

zcollResult_t zcollReduce(const void* sendbuff, void* recvbuff, size_t count, zcollDataType_t datatype, zcollRedOp_t op,
                          int root, zcollComm_t comm, zcollStream_t stream) {
  return ZCOLL_COLLECTIVE_ENTRY(Collective::Reduce, "zcollReduce", sendbuff, recvbuff, count, datatype, op, root,
                                "count", comm, Mode::Blocking, nullptr, stream);
}

zcollResult_t zcollGather(const void* sendbuff, void* recvbuff, size_t count, zcollDataType_t datatype, int root,
                          zcollComm_t comm, zcollStream_t stream) {
  return ZCOLL_COLLECTIVE_ENTRY(Collective::Gather, "zcollGather", sendbuff, recvbuff, count, datatype, zcollSum, root,
                                "count", comm, Mode::Blocking, nullptr, stream);
}

zcollResult_t zcollScatter(const void* sendbuff, void* recvbuff, size_t count, zcollDataType_t datatype, int root,
                           zcollComm_t comm, zcollStream_t stream) {
  return ZCOLL_COLLECTIVE_ENTRY(Collective::Scatter, "zcollScatter", sendbuff, recvbuff, count, datatype, zcollSum,
                                root, "count", comm, Mode::Blocking, nullptr, stream);
}

zcollResult_t zcollAlltoAll(const void* sendbuff, void* recvbuff, size_t count, zcollDataType_t datatype,
                            zcollComm_t comm, zcollStream_t stream) {
  return ZCOLL_COLLECTIVE_ENTRY(Collective::AllToAll, "zcollAlltoAll", sendbuff, recvbuff, count, datatype, zcollSum, 0,
                                "count", comm, Mode::Blocking, nullptr, stream);
}

zcollResult_t zcollBarrier(zcollComm_t comm, zcollStream_t stream) {
  return apiCall("zcollBarrier", [&] {
    CommRef ref;
    if (Status s = ref.acquire(comm); !s) return s;
    OpArgs a{Collective::Barrier, nullptr, nullptr, 0, DataType::Uint8};
    return launch(ref, comm, a, Call{}, "count", Mode::Blocking, nullptr, stream);
  });
}

zcollResult_t zcollSend(const void* sendbuff, size_t count, zcollDataType_t datatype, int peer, zcollComm_t comm,
                        zcollStream_t stream) {
  return apiCall("zcollSend", [&] { return sendRecv(true, sendbuff, count, datatype, peer, comm, stream); });
}

zcollResult_t zcollRecv(void* recvbuff, size_t count, zcollDataType_t datatype, int peer, zcollComm_t comm,
                        zcollStream_t stream) {
  return apiCall("zcollRecv", [&] { return sendRecv(false, recvbuff, count, datatype, peer, comm, stream); });
}

zcollResult_t zcollRecvAny(void* recvbuff, size_t count, zcollDataType_t datatype, int* peer, zcollComm_t comm,
                           zcollStream_t stream) {
  return apiCall("zcollRecvAny", [&] { return recvAny(recvbuff, count, datatype, peer, comm, stream); });
}

zcollResult_t zcollGroupStart(void) {
  return apiCall("zcollGroupStart", [&] { return groupStart(); });
}

zcollResult_t zcollGroupEnd(void) {
  return apiCall("zcollGroupEnd", [&] { return groupEnd(); });
}

zcollResult_t zcollAllReduceAsync(const void* sendbuff, void* recvbuff, size_t count, zcollDataType_t datatype,
                                  zcollRedOp_t op, zcollComm_t comm, zcollRequest_t* request) {
  return ZCOLL_COLLECTIVE_ENTRY(Collective::AllReduce, "zcollAllReduceAsync", sendbuff, recvbuff, count, datatype, op,
                                0, "count", comm, Mode::Async, request, nullptr);
}

zcollResult_t zcollAllGatherAsync(const void* sendbuff, void* recvbuff, size_t sendcount, zcollDataType_t datatype,
                                  zcollComm_t comm, zcollRequest_t* request) {
  return ZCOLL_COLLECTIVE_ENTRY(Collective::AllGather, "zcollAllGatherAsync", sendbuff, recvbuff, sendcount, datatype,
                                zcollSum, 0, "sendcount", comm, Mode::Async, request, nullptr);
}

zcollResult_t zcollReduceScatterAsync(const void* sendbuff, void* recvbuff, size_t recvcount, zcollDataType_t datatype,
                                      zcollRedOp_t op, zcollComm_t comm, zcollRequest_t* request) {
  return ZCOLL_COLLECTIVE_ENTRY(Collective::ReduceScatter, "zcollReduceScatterAsync", sendbuff, recvbuff, recvcount,
                                datatype, op, 0, "recvcount", comm, Mode::Async, request, nullptr);
}

zcollResult_t zcollBroadcastAsync(const void* sendbuff, void* recvbuff, size_t count, zcollDataType_t datatype,
                                  int root, zcollComm_t comm, zcollRequest_t* request) {
  return ZCOLL_COLLECTIVE_ENTRY(Collective::Broadcast, "zcollBroadcastAsync", sendbuff, recvbuff, count, datatype,
                                zcollSum, root, "count", comm, Mode::Async, request, nullptr);
}

zcollResult_t zcollReduceAsync(const void* sendbuff, void* recvbuff, size_t count, zcollDataType_t datatype,
                               zcollRedOp_t op, int root, zcollComm_t comm, zcollRequest_t* request) {
  return ZCOLL_COLLECTIVE_ENTRY(Collective::Reduce, "zcollReduceAsync", sendbuff, recvbuff, count, datatype, op, root,
                                "count", comm, Mode::Async, request, nullptr);
}

zcollResult_t zcollTest(zcollRequest_t request, int* done) {
  return apiCall("zcollTest", [&] {
    if (!request) return invalidArgument("request: NULL");
    if (!done) return invalidArgument("done: NULL pointer");
    Request* r = reinterpret_cast<Request*>(request);
    if (r->magic != Request::kLive)
      return invalidUsage("request: not a pending request (already reported done by zcollWait or zcollTest?)");
    Status result;
    if (!r->comm->test(r, &result)) {
      *done = 0;
      return Status::ok();
    }
    *done = 1;
    return result;
  });
}

zcollResult_t zcollWait(zcollRequest_t request) {
  return apiCall("zcollWait", [&] {
    if (!request) return invalidArgument("request: NULL");
    Request* r = reinterpret_cast<Request*>(request);
    if (r->magic != Request::kLive)
      return invalidUsage("request: not a pending request (already reported done by zcollWait or zcollTest?)");
    return r->comm->wait(r);
  });
}

}  // extern "C"
