// group.cpp - see group.hpp.
#include "comm/group.hpp"

#include <vector>

#include "comm/handles.hpp"

namespace zcoll {
namespace {

struct Entry {
  zcollComm_t comm;
  OpArgs op;
  P2PItem item;
  zcollStream_t stream;
};

// One communicator's run of calls: collectives as they are, consecutive send/recv as one batch.
struct Batch {
  zcollComm_t comm;
  OpArgs op;
  size_t firstItem = 0;
  zcollStream_t stream = nullptr;  // device batches: the stream they are ordered on
};

struct GroupState {
  int depth = 0;
  // Kept across groups: no allocation once grown.
  std::vector<Entry> entries;
  std::vector<P2PItem> items;
  std::vector<Batch> batches;
  std::vector<zcollComm_t> comms;
};

thread_local GroupState tGroup;

}  // namespace

bool groupActive() { return tGroup.depth > 0; }

Status groupStart() {
  tGroup.depth++;
  return Status::ok();
}

Status groupAdd(zcollComm_t comm, const OpArgs& op, const P2PItem* item, zcollStream_t stream) {
  tGroup.entries.push_back(Entry{comm, op, item ? *item : P2PItem{}, stream});
  return Status::ok();
}

Status groupEnd() {
  GroupState& g = tGroup;
  if (g.depth == 0) return invalidUsage("zcollGroupEnd without a matching zcollGroupStart");
  if (--g.depth > 0) return Status::ok();

  // Per communicator: all its send/recv as one batch first, then its collectives in call order.
  // Send/recv and collectives share each pair's FIFO, so both ranks must run them in one order,
  // whatever order each rank queued them in (NCCL runs a group's calls concurrently).
  std::vector<Batch>& batches = g.batches;
  std::vector<zcollComm_t>& comms = g.comms;
  batches.clear();
  comms.clear();
  g.items.clear();
  for (const Entry& e : g.entries) {
    bool seen = false;
    for (zcollComm_t c : comms) seen |= c == e.comm;
    if (!seen) comms.push_back(e.comm);
  }
  for (zcollComm_t c : comms) {
    bool p2p = false;
    for (const Entry& e : g.entries) {
      if (e.comm != c || e.op.coll != Collective::SendRecv) continue;
      if (!p2p) {
        Batch b{c, e.op, g.items.size(), e.stream};
        b.op.nitems = 0;
        batches.push_back(b);
        p2p = true;
      }
      Batch& b = batches.back();
      if (e.op.device && b.op.device && e.stream != b.stream) {
        g.entries.clear();
        return invalidUsage("send/recv of one group on one communicator with device buffers must use one stream");
      }
      if (e.op.device && !b.op.device) b.stream = e.stream;
      b.op.device = b.op.device || e.op.device;  // a batch with any device buffer runs as a device op
      g.items.push_back(e.item);
      b.op.nitems++;
    }
    for (const Entry& e : g.entries)
      if (e.comm == c && e.op.coll != Collective::SendRecv) batches.push_back(Batch{c, e.op, 0, e.stream});
  }
  g.entries.clear();
  for (Batch& b : batches)
    if (b.op.coll == Collective::SendRecv) b.op.items = g.items.data() + b.firstItem;

  Status first;
  auto keep = [&first](Status s) {
    if (first && !s) first = std::move(s);
  };
  if (comms.size() == 1) {
    CommRef ref;
    if (Status s = ref.acquire(comms[0]); !s) return s;
    for (Batch& b : batches) {
      Status s = b.op.device ? ref->submitDevice(b.op, b.stream) : ref->call(b.op);
      if (!s) return s;
    }
    return Status::ok();
  }
  // Several communicators: all to their progress threads, then wait for every one.
  std::vector<CommRef> refs(comms.size());
  for (size_t i = 0; i < comms.size(); ++i)
    if (Status s = refs[i].acquire(comms[i]); !s) return s;
  std::vector<std::pair<Communicator*, Request*>> reqs;
  for (Batch& b : batches) {
    Communicator* c = b.comm->impl.get();
    if (b.op.device) {  // stream-ordered: nothing to wait for here
      keep(c->submitDevice(b.op, b.stream));
      continue;
    }
    Request* r = nullptr;
    Status s = c->submit(b.op, &r);
    if (s) reqs.emplace_back(c, r);
    keep(std::move(s));
  }
  for (auto& [c, r] : reqs) keep(c->wait(r));
  return first;
}

}  // namespace zcoll
