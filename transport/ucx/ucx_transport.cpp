// ucx_transport.cpp - see ucx_transport.hpp.
#include "transport/ucx/ucx_transport.hpp"

#include <sys/epoll.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/log.hpp"

namespace zcoll::ucx {
namespace {

constexpr uint64_t kRankMask = 0xffffffffull;

void sendDone(void*, ucs_status_t status, void* user) {
  auto* op = static_cast<UcxTransport::Op*>(user);
  op->status = status;
  op->done = true;
}

void recvDone(void*, ucs_status_t status, const ucp_tag_recv_info_t* info, void* user) {
  auto* op = static_cast<UcxTransport::Op*>(user);
  op->status = status;
  op->length = info ? info->length : 0;
  op->done = true;
}

void endpointFailed(void* arg, ucp_ep_h, ucs_status_t) { static_cast<UcxTransport::Peer*>(arg)->dead = true; }

Status ucxError(const char* what, ucs_status_t s) {
  return Status(StatusCode::System, fmt::format("ucx: {}: {}", what, ucs_status_string(s)));
}

}  // namespace

Status UcxTransport::create(const TransportArgs& args, std::unique_ptr<Transport>* out) {
  Bootstrap& boot = args.boot;
  const Config& config = args.config;
  const std::vector<int>* members = args.members;
  std::unique_ptr<UcxTransport> t(new UcxTransport());
  const int n = boot.nranks();
  t->rank_ = boot.rank();
  t->chunk_ = std::max<size_t>(64, static_cast<size_t>(config.chunkBytes) / 64 * 64);  // slots stay 64-byte aligned
  t->slots_ = config.fifoSlots;
  t->tagBase_ = boot.nonce() << 32;
  t->peers_.resize(static_cast<size_t>(n));

  ucp_config_t* ucfg = nullptr;
  ucs_status_t s = ucp_config_read(nullptr, nullptr, &ucfg);
  if (s != UCS_OK) return ucxError("ucp_config_read", s);
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_ESTIMATED_NUM_EPS;
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
  params.estimated_num_eps = static_cast<size_t>(n);
  s = ucp_init(&params, ucfg, &t->context_);
  ucp_config_release(ucfg);
  if (s != UCS_OK) return ucxError("ucp_init", s);
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;  // the communicator's operations run one at a time
  if ((s = ucp_worker_create(t->context_, &wp, &t->worker_)) != UCS_OK) return ucxError("ucp_worker_create", s);

  // Worker addresses: their lengths first, then the addresses padded to the longest.
  ucp_address_t* addr = nullptr;
  size_t len = 0;
  if ((s = ucp_worker_get_address(t->worker_, &addr, &len)) != UCS_OK) return ucxError("ucp_worker_get_address", s);
  std::vector<uint64_t> lens(static_cast<size_t>(n));
  lens[static_cast<size_t>(t->rank_)] = len;
  Status st = boot.allGather(lens.data(), sizeof(uint64_t));
  const size_t maxLen = st ? *std::max_element(lens.begin(), lens.end()) : 0;
  std::vector<uint8_t> addrs(maxLen * static_cast<size_t>(n));
  if (st) {
    std::memcpy(addrs.data() + maxLen * static_cast<size_t>(t->rank_), addr, len);
    st = boot.allGather(addrs.data(), maxLen);
  }
  ucp_worker_release_address(t->worker_, addr);
  if (!st) return st;

  std::vector<uint8_t> served(static_cast<size_t>(n), members ? 0 : 1);
  if (members)
    for (int r : *members) served[static_cast<size_t>(r)] = 1;
  for (int peer = 0; peer < n; ++peer) {
    if (peer == t->rank_ || !served[static_cast<size_t>(peer)]) continue;
    Peer& p = t->peers_[static_cast<size_t>(peer)];
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep.address = reinterpret_cast<const ucp_address_t*>(addrs.data() + maxLen * static_cast<size_t>(peer));
    ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    ep.err_handler.cb = endpointFailed;
    ep.err_handler.arg = &p;
    if ((s = ucp_ep_create(t->worker_, &ep, &p.ep)) != UCS_OK)
      return ucxError(fmt::format("ucp_ep_create to rank {}", peer).c_str(), s);
    p.send.assign(static_cast<size_t>(t->slots_) * t->chunk_, 0);
    p.recv.assign(static_cast<size_t>(t->slots_) * t->chunk_, 0);
    p.sendOps.resize(static_cast<size_t>(t->slots_));
    p.recvOps.resize(static_cast<size_t>(t->slots_));
    for (size_t slot = 0; slot < static_cast<size_t>(t->slots_); ++slot) t->postRecv(peer, slot);
  }

  int efd = -1;
  if ((s = ucp_worker_get_efd(t->worker_, &efd)) != UCS_OK) return ucxError("ucp_worker_get_efd", s);
  if (Status e = t->sleeper_.init(); !e) return std::move(e).withContext("ucx");
  if (Status e = t->sleeper_.add(efd, EPOLLIN); !e) return std::move(e).withContext("ucx");
  // Everyone's endpoints and receives exist before anyone sends.
  if (Status b = boot.barrier(); !b) return b;
  *out = std::move(t);
  return Status::ok();
}

UcxTransport::~UcxTransport() {
  if (!worker_) {
    if (context_) ucp_cleanup(context_);
    return;
  }
  for (Peer& p : peers_) {
    for (Op& op : p.recvOps)
      if (op.busy && op.request) ucp_request_cancel(worker_, op.request);
  }
  for (int i = 0; i < 1000; ++i) {  // let cancelled receives and sends call back (bounded)
    progress();
    bool busy = false;
    for (Peer& p : peers_)
      for (auto* ops : {&p.recvOps, &p.sendOps})
        for (Op& op : *ops) {
          if (op.done) retire(op);
          busy = busy || op.busy;
        }
    if (!busy) break;
  }
  for (Peer& p : peers_) {
    if (!p.ep) continue;
    ucp_request_param_t rp{};
    rp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    rp.flags = UCP_EP_CLOSE_FLAG_FORCE;
    void* req = ucp_ep_close_nbx(p.ep, &rp);
    for (int i = 0; UCS_PTR_IS_PTR(req) && i < 100000 && ucp_request_check_status(req) == UCS_INPROGRESS; ++i) progress();
    if (UCS_PTR_IS_PTR(req)) ucp_request_free(req);
  }
  ucp_worker_destroy(worker_);
  ucp_cleanup(context_);
}

void UcxTransport::progress() {
  while (ucp_worker_progress(worker_) != 0) {
  }
}

void UcxTransport::retire(Op& op) {
  if (op.request) ucp_request_free(op.request);
  op.request = nullptr;
  op.busy = false;
}

void UcxTransport::postRecv(int peer, size_t slot) {
  Peer& p = peers_[static_cast<size_t>(peer)];
  Op& op = p.recvOps[slot];
  op = Op{};
  op.busy = true;
  // Always a request and a callback: UCX 1.13 leaves the length of a receive that completes at
  // once (from its unexpected queue) unreported, whatever recv_info says.
  ucp_request_param_t rp{};
  rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  rp.cb.recv = recvDone;
  rp.user_data = &op;
  void* req = ucp_tag_recv_nbx(worker_, p.recv.data() + slot * chunk_, chunk_, tagBase_ | static_cast<uint64_t>(peer),
                               ~uint64_t{0}, &rp);
  if (UCS_PTR_IS_ERR(req)) {
    op.done = true;
    op.status = UCS_PTR_STATUS(req);
    p.dead = true;
  } else {
    op.request = req;
  }
}

void UcxTransport::retireSends(Peer& p) {
  while (p.sendDone < p.sendHead) {  // oldest first
    Op& op = p.sendOps[static_cast<size_t>(p.sendDone % static_cast<uint64_t>(slots_))];
    if (!op.done) break;
    if (op.status != UCS_OK) p.dead = true;
    retire(op);
    ++p.sendDone;
  }
}

bool UcxTransport::idle() {
  progress();
  for (Peer& p : peers_) {
    retireSends(p);
    if (p.sendDone < p.sendHead && !p.dead) return false;
  }
  return true;
}

bool UcxTransport::tryAcquireSend(int peer, SendSlot* slot) {
  Peer& p = peers_[static_cast<size_t>(peer)];
  progress();
  retireSends(p);
  if (p.sendHead - p.sendDone >= static_cast<uint64_t>(slots_)) return false;
  slot->data = p.send.data() + (p.sendHead % static_cast<uint64_t>(slots_)) * chunk_;
  slot->capacity = chunk_;
  return true;
}

void UcxTransport::commitSend(int peer, size_t bytes) {
  Peer& p = peers_[static_cast<size_t>(peer)];
  postSend(peer, p.send.data() + static_cast<size_t>(p.sendHead % static_cast<uint64_t>(slots_)) * chunk_, bytes);
}

bool UcxTransport::commitSendFrom(int peer, const void* src, size_t bytes) {
  postSend(peer, src, bytes);
  return true;
}

void UcxTransport::postSend(int peer, const void* data, size_t bytes) {
  Peer& p = peers_[static_cast<size_t>(peer)];
  const size_t slot = static_cast<size_t>(p.sendHead % static_cast<uint64_t>(slots_));
  Op& op = p.sendOps[slot];
  op = Op{};
  op.busy = true;
  ucp_request_param_t rp{};
  rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  rp.cb.send = sendDone;
  rp.user_data = &op;
  void* req = ucp_tag_send_nbx(p.ep, data, bytes, tagBase_ | static_cast<uint64_t>(rank_), &rp);
  if (req == nullptr) {
    op.done = true;
  } else if (UCS_PTR_IS_ERR(req)) {
    op.done = true;
    op.status = UCS_PTR_STATUS(req);
    p.dead = true;
  } else {
    op.request = req;
  }
  ++p.sendHead;
}

bool UcxTransport::tryRecv(int peer, RecvChunk* chunk) {
  Peer& p = peers_[static_cast<size_t>(peer)];
  const size_t slot = static_cast<size_t>(p.recvTail % static_cast<uint64_t>(slots_));
  Op& op = p.recvOps[slot];
  if (!op.done) progress();
  if (!op.done) return false;
  if (op.status != UCS_OK) {
    p.dead = true;
    return false;
  }
  chunk->data = p.recv.data() + slot * chunk_;
  chunk->bytes = op.length;
  return true;
}

void UcxTransport::releaseRecv(int peer) {
  Peer& p = peers_[static_cast<size_t>(peer)];
  const size_t slot = static_cast<size_t>(p.recvTail % static_cast<uint64_t>(slots_));
  retire(p.recvOps[slot]);
  ++p.recvTail;
  postRecv(peer, slot);
}

uint32_t UcxTransport::prepareSleep() {
  progress();
  armed_ = ucp_worker_arm(worker_) == UCS_OK;  // UCS_ERR_BUSY: events are waiting, do not sleep
  return 0;
}

void UcxTransport::sleep(uint32_t, int64_t maxNs) {
  if (!armed_) return;
  armed_ = false;
  sleeper_.sleep(maxNs);
}

}  // namespace zcoll::ucx
