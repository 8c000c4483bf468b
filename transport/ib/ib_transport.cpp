// ib_transport.cpp - see ib_transport.hpp.
#include "transport/ib/ib_transport.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>

#include <fmt/ranges.h>

#include "core/log.hpp"

namespace zcoll::ib {
namespace {

constexpr uint32_t kCredit = 0x80000000u;  // immediate of a credit; else the byte count of a chunk
constexpr uint8_t kTimeout = 17;           // ACK timeout 4.096 us * 2^17 = 0.54 s, then
constexpr uint8_t kRetries = 7;            // 7 retries: a gone peer fails a send within ~4 s
constexpr uint8_t kRnrForever = 7;         // receiver not ready: retry forever (receives are always posted)
// A work request's id: the peer, and what it is.
constexpr uint64_t kSendWr = 0, kRecvWr = 1, kProbeWr = 2, kZeroCopyWr = 3;
uint64_t wrId(int peer, uint64_t kind) { return static_cast<uint64_t>(peer) << 2 | kind; }

// What a rank tells the others about itself (first exchange).
struct Usable {
  uint8_t ok = 0;
  uint8_t badSetting = 0;  // the failure is a ZCOLL_IB_* value that names nothing here: an error even when ib is optional
  char why[126] = {};
};

// What rank i tells rank j about the queue pair i uses for j (second exchange, n x n).
struct Endpoint {
  uint8_t gid[16];
  uint64_t recvAddr;  // rank i's receive slots for rank j
  uint32_t qpn, psn, rkey;
  uint16_t lid;
  uint8_t mtu, ethernet;
};

// The first RoCE v2 GID holding an IPv4 address, else the first RoCE v2 GID, else index 0.
int chooseGid(ibv_context* ctx, int port, int tableLength) {
  int v2 = -1;
  for (int i = 0; i < tableLength; ++i) {
    ibv_gid_entry e{};
    if (ibv_query_gid_ex(ctx, static_cast<uint32_t>(port), static_cast<uint32_t>(i), &e, 0) != 0) continue;
    if (e.gid_type != IBV_GID_TYPE_ROCE_V2) continue;
    static constexpr uint8_t kV4Prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (std::memcmp(e.gid.raw, kV4Prefix, sizeof kV4Prefix) == 0) return i;
    if (v2 < 0) v2 = i;
  }
  return v2 >= 0 ? v2 : 0;
}

Status verbsError(std::string_view what, int err) { return systemError(what, err != 0 ? err : EIO); }

}  // namespace

std::vector<std::string> describeDevices() {
  std::vector<std::string> lines;
  int count = 0;
  ibv_device** list = ibv_get_device_list(&count);
  if (!list) return {fmt::format("no RDMA device: ibv_get_device_list: {}", std::strerror(errno))};
  for (int d = 0; d < count; ++d) {
    const char* name = ibv_get_device_name(list[d]);
    ibv_context* ctx = ibv_open_device(list[d]);
    ibv_device_attr dev{};
    if (!ctx || ibv_query_device(ctx, &dev) != 0) {
      lines.push_back(fmt::format("{}: cannot open: {}", name, std::strerror(errno)));
      if (ctx) ibv_close_device(ctx);
      continue;
    }
    for (int port = 1; port <= dev.phys_port_cnt; ++port) {
      ibv_port_attr pa{};
      if (ibv_query_port(ctx, static_cast<uint8_t>(port), &pa) != 0) continue;
      lines.push_back(fmt::format("{} port {}: {}, {}, mtu {}", name, port, ibv_port_state_str(pa.state),
                                  pa.link_layer == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "InfiniBand", 128 << pa.active_mtu));
    }
    ibv_close_device(ctx);
  }
  ibv_free_device_list(list);
  if (lines.empty()) lines.emplace_back("no RDMA device on this host");
  return lines;
}

Status IbTransport::open(const Config& config, PortChoice* choice) {
  std::vector<std::pair<std::string, int>> wanted;
  if (Status s = parseHcaList(config.ibHca, &wanted); !s) return s;
  int count = 0;
  ibv_device** list = ibv_get_device_list(&count);
  if (!list) return verbsError("ibv_get_device_list (no RDMA device, or no kernel support)", errno);
  std::unique_ptr<ibv_device*, void (*)(ibv_device**)> guard(list, ibv_free_device_list);
  std::vector<std::string> seen;
  ibv_port_attr portAttr{};
  for (int d = 0; d < count && !ctx_; ++d) {
    const std::string name = ibv_get_device_name(list[d]);
    seen.push_back(name);
    int wantPort = -1;
    for (const auto& [n, p] : wanted)
      if (n == name) wantPort = p;
    if (!wanted.empty() && wantPort < 0) continue;
    ibv_context* ctx = ibv_open_device(list[d]);
    if (!ctx) continue;
    ibv_device_attr dev{};
    if (ibv_query_device(ctx, &dev) == 0) {
      for (int port = 1; port <= dev.phys_port_cnt; ++port) {
        if (wantPort > 0 && port != wantPort) continue;
        if (ibv_query_port(ctx, static_cast<uint8_t>(port), &portAttr) != 0 || portAttr.state != IBV_PORT_ACTIVE) continue;
        choice->device = name;
        choice->port = port;
        break;
      }
    }
    if (choice->port > 0) ctx_ = ctx;
    else ibv_close_device(ctx);
  }
  if (!ctx_) {
    if (count == 0) return makeStatus(StatusCode::System, "no RDMA device on this host");
    return makeStatus(StatusCode::System, "no active port on {} (devices here: {})",
                      config.ibHca.empty() ? std::string("any device") : fmt::format("ZCOLL_IB_HCA='{}'", config.ibHca),
                      fmt::join(seen, ", "));
  }
  choice->ethernet = portAttr.link_layer == IBV_LINK_LAYER_ETHERNET;
  if (choice->ethernet) {
    choice->gidIndex = config.ibGidIndex >= 0 ? config.ibGidIndex : chooseGid(ctx_, choice->port, portAttr.gid_tbl_len);
    ibv_gid_entry entry{};
    if (ibv_query_gid_ex(ctx_, static_cast<uint32_t>(choice->port), static_cast<uint32_t>(choice->gidIndex), &entry, 0) != 0) {
      std::vector<int> valid;
      for (int i = 0; i < portAttr.gid_tbl_len; ++i)
        if (ibv_query_gid_ex(ctx_, static_cast<uint32_t>(choice->port), static_cast<uint32_t>(i), &entry, 0) == 0)
          valid.push_back(i);
      return invalidArgument("ZCOLL_IB_GID_INDEX={}: {} port {} has no GID there (its GIDs: {})", choice->gidIndex,
                             choice->device, choice->port, fmt::join(valid, ", "));
    }
  } else if (config.ibGidIndex >= 0) {
    choice->gidIndex = config.ibGidIndex;  // InfiniBand with a GID: routed (global) addressing
  }

  const size_t n = peers_.size();
  size_t served = 0;
  for (const Peer& p : peers_) served += p.served ? 1 : 0;
  const size_t slotBytes = static_cast<size_t>(slots_) * chunk_;
  if (!(pd_ = ibv_alloc_pd(ctx_))) return verbsError("ibv_alloc_pd", errno);
  mrs_ = std::make_unique<MrCache>(pd_);
  if (!(channel_ = ibv_create_comp_channel(ctx_))) return verbsError("ibv_create_comp_channel", errno);
  const int flags = ::fcntl(channel_->fd, F_GETFL);
  if (flags < 0 || ::fcntl(channel_->fd, F_SETFL, flags | O_NONBLOCK) != 0) return verbsError("fcntl O_NONBLOCK", errno);
  // Per peer at most `slots` chunks and `slots` credits travel each way, and each direction has its
  // own work requests: receives 2 x slots, sends (writes and credits) sendDepth_.
  sendDepth_ = 2 * slots_ + 1;
  const int cqe = static_cast<int>(served) * (2 * slots_ + sendDepth_) + 1;
  if (!(cq_ = ibv_create_cq(ctx_, cqe, nullptr, channel_, 0))) return verbsError(fmt::format("ibv_create_cq ({} entries)", cqe), errno);
  // The slots of every peer in one mapping, registered once: send slots then receive slots per peer.
  regionBytes_ = std::max<size_t>(1, 2 * slotBytes * served);
  void* mem = ::mmap(nullptr, regionBytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) return systemError(fmt::format("mmap of {} bytes of slots", regionBytes_), errno);
  region_ = static_cast<uint8_t*>(mem);
  std::memset(region_, 0, regionBytes_);  // faulted in now, not in a step
  mr_ = ibv_reg_mr(pd_, region_, regionBytes_, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  if (!mr_)
    return verbsError(fmt::format("ibv_reg_mr of {} bytes (is the locked-memory limit, ulimit -l, large enough?)", regionBytes_),
                      errno);
  size_t at = 0;  // the served peer's place in the region
  for (size_t peer = 0; peer < n; ++peer) {
    Peer& p = peers_[peer];
    if (!p.served) continue;
    p.send = region_ + 2 * slotBytes * at++;
    p.recv = p.send + slotBytes;
    p.recvBytes.assign(static_cast<size_t>(slots_), 0);
    ibv_qp_init_attr qa{};
    qa.send_cq = cq_;
    qa.recv_cq = cq_;
    qa.qp_type = IBV_QPT_RC;
    qa.sq_sig_all = 1;
    qa.cap.max_send_wr = static_cast<uint32_t>(sendDepth_);
    qa.cap.max_recv_wr = static_cast<uint32_t>(2 * slots_);
    qa.cap.max_send_sge = 1;
    qa.cap.max_recv_sge = 1;
    if (!(p.qp = ibv_create_qp(pd_, &qa))) return verbsError(fmt::format("ibv_create_qp for rank {}", peer), errno);
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num = static_cast<uint8_t>(choice->port);
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
    if (int e = ibv_modify_qp(p.qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
      return verbsError("ibv_modify_qp to INIT", e);
    for (int i = 0; i < 2 * slots_; ++i) postRecv(static_cast<int>(peer));
  }
  if (Status s = sleeper_.init(); !s) return s;
  if (Status s = sleeper_.add(channel_->fd, EPOLLIN); !s) return s;
  return Status::ok();
}

Status IbTransport::create(const TransportArgs& args, std::unique_ptr<Transport>* out) {
  Bootstrap& boot = args.boot;
  const Config& config = args.config;
  const bool required = args.lastChoice;
  const std::vector<int>* members = args.members;
  std::unique_ptr<IbTransport> t(new IbTransport());
  const int n = boot.nranks();
  t->rank_ = boot.rank();
  t->chunk_ = std::max<size_t>(64, static_cast<size_t>(config.chunkBytes) / 64 * 64);  // slots stay 64-byte aligned
  t->slots_ = config.fifoSlots;
  t->peers_.resize(static_cast<size_t>(n));
  if (members) {
    for (int r : *members) t->peers_[static_cast<size_t>(r)].served = true;
  } else {
    for (int r = 0; r < n; ++r) t->peers_[static_cast<size_t>(r)].served = r != t->rank_;
  }

  // 1. Can every rank use a port? Everyone learns the same answer, so all take the same transport.
  PortChoice port;
  Status opened = t->open(config, &port);
  std::vector<Usable> usable(static_cast<size_t>(n));
  Usable& mine = usable[static_cast<size_t>(t->rank_)];
  mine.ok = opened ? 1 : 0;
  mine.badSetting = opened.code() == StatusCode::InvalidArgument ? 1 : 0;
  if (!opened) fmt::format_to_n(mine.why, sizeof mine.why - 1, "{}", opened.message());
  if (Status s = boot.allGather(usable.data(), sizeof(Usable)); !s) return s;
  for (int r = 0; r < n; ++r) {
    const Usable& u = usable[static_cast<size_t>(r)];
    if (u.ok) continue;
    if (!required && !u.badSetting) {
      ZCOLL_INFO(Init, t->rank_, "ib transport not used: rank {}: {}", r, u.why);
      return Status::ok();
    }
    // Forced and refused by a rank: every rank knows it from the exchange, so each reports it as its own
    // refusal (NotSupported), not as the other ranks leaving the creation.
    const StatusCode code = u.badSetting ? StatusCode::InvalidArgument : StatusCode::NotSupported;
    if (r == t->rank_) return Status(code, std::string(opened.message()));
    return makeStatus(code, "rank {} has no usable RDMA port: {}", r, u.why);
  }
  ibv_port_attr pa{};
  if (int e = ibv_query_port(t->ctx_, static_cast<uint8_t>(port.port), &pa)) return verbsError("ibv_query_port", e);
  ibv_gid gid{};
  if (port.gidIndex >= 0 && ibv_query_gid(t->ctx_, static_cast<uint8_t>(port.port), port.gidIndex, &gid) != 0)
    return verbsError(fmt::format("ibv_query_gid {} of {} port {}", port.gidIndex, port.device, port.port), errno);
  ZCOLL_INFO(Init, t->rank_, "ib: {} port {} ({}, lid {}, gid index {}, mtu {})", port.device, port.port,
             port.ethernet ? "RoCE" : "InfiniBand", pa.lid, port.gidIndex, 128 << pa.active_mtu);

  // 2. Queue pairs: rank i's block holds, for each peer j, what j needs to reach i's queue pair for j.
  std::random_device rng;
  std::vector<Endpoint> table(static_cast<size_t>(n) * static_cast<size_t>(n));
  for (int peer = 0; peer < n; ++peer) {
    const Peer& p = t->peers_[static_cast<size_t>(peer)];
    if (!p.served) continue;
    Endpoint& e = table[static_cast<size_t>(t->rank_) * static_cast<size_t>(n) + static_cast<size_t>(peer)];
    std::memcpy(e.gid, gid.raw, sizeof e.gid);
    e.recvAddr = reinterpret_cast<uint64_t>(p.recv);
    e.qpn = p.qp->qp_num;
    e.psn = rng() & 0xffffffu;
    e.rkey = t->mr_->rkey;
    e.lid = pa.lid;
    e.mtu = static_cast<uint8_t>(pa.active_mtu);
    e.ethernet = port.ethernet ? 1 : 0;
  }
  if (Status s = boot.allGather(table.data(), sizeof(Endpoint) * static_cast<size_t>(n)); !s) return s;
  for (int peer = 0; peer < n; ++peer) {
    Peer& p = t->peers_[static_cast<size_t>(peer)];
    if (!p.served) continue;
    const Endpoint& local = table[static_cast<size_t>(t->rank_) * static_cast<size_t>(n) + static_cast<size_t>(peer)];
    const Endpoint& remote = table[static_cast<size_t>(peer) * static_cast<size_t>(n) + static_cast<size_t>(t->rank_)];
    if (remote.ethernet != local.ethernet)
      return makeStatus(StatusCode::System, "rank {} is on {} and rank {} on {}: no path between them", t->rank_,
                        local.ethernet ? "RoCE" : "InfiniBand", peer, remote.ethernet ? "RoCE" : "InfiniBand");
    p.remoteRecv = remote.recvAddr;
    p.remoteKey = remote.rkey;
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = static_cast<ibv_mtu>(std::min(local.mtu, remote.mtu));
    a.dest_qp_num = remote.qpn;
    a.rq_psn = remote.psn;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.ah_attr.port_num = static_cast<uint8_t>(port.port);
    a.ah_attr.dlid = remote.lid;
    if (port.gidIndex >= 0) {
      a.ah_attr.is_global = 1;
      std::memcpy(a.ah_attr.grh.dgid.raw, remote.gid, sizeof remote.gid);
      a.ah_attr.grh.sgid_index = static_cast<uint8_t>(port.gidIndex);
      a.ah_attr.grh.hop_limit = 64;
    }
    if (int e = ibv_modify_qp(p.qp, &a,
                              IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
      return verbsError(fmt::format("ibv_modify_qp to RTR (rank {})", peer), e);
    a = ibv_qp_attr{};
    a.qp_state = IBV_QPS_RTS;
    a.timeout = kTimeout;
    a.retry_cnt = kRetries;
    a.rnr_retry = kRnrForever;
    a.sq_psn = local.psn;
    a.max_rd_atomic = 1;
    if (int e = ibv_modify_qp(p.qp, &a,
                              IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                                  IBV_QP_MAX_QP_RD_ATOMIC))
      return verbsError(fmt::format("ibv_modify_qp to RTS (rank {})", peer), e);
  }
  t->watch_.watch(boot);
  // Everyone's queue pairs are ready to receive before anyone writes.
  if (Status s = boot.barrier(); !s) return s;
  *out = std::move(t);
  return Status::ok();
}

IbTransport::~IbTransport() {
  if (zeroCopyChunks_ > 0)
    ZCOLL_INFO(Init, rank_, "ib: {} chunks sent from registered memory (zero copy), {} through the slots", zeroCopyChunks_,
               slotChunks_);
  for (Peer& p : peers_)
    if (p.qp) ibv_destroy_qp(p.qp);
  if (cq_) {
    if (unackedEvents_) ibv_ack_cq_events(cq_, unackedEvents_);
    ibv_destroy_cq(cq_);
  }
  if (mr_) ibv_dereg_mr(mr_);
  mrs_.reset();
  if (region_) ::munmap(region_, regionBytes_);
  if (channel_) ibv_destroy_comp_channel(channel_);
  if (pd_) ibv_dealloc_pd(pd_);
  if (ctx_) ibv_close_device(ctx_);
}

void IbTransport::markDead(int peer, const char* why) {
  Peer& p = peers_[static_cast<size_t>(peer)];
  if (!p.dead) ZCOLL_WARN(Coll, rank_, "ib: rank {} unreachable: {}", peer, why);
  p.dead = true;
}

void IbTransport::postRecv(int peer) {
  ibv_recv_wr wr{};
  wr.wr_id = wrId(peer, kRecvWr);
  ibv_recv_wr* bad = nullptr;
  if (int e = ibv_post_recv(peers_[static_cast<size_t>(peer)].qp, &wr, &bad)) markDead(peer, std::strerror(e));
}

void IbTransport::postWrite(int peer, uint64_t addr, uint32_t lkey, uint32_t bytes, uint64_t remote, int64_t imm,
                            uint64_t kind) {
  Peer& p = peers_[static_cast<size_t>(peer)];
  while (p.inFlight >= sendDepth_ && !p.dead) poll();  // not reached while credits bound the writes
  if (p.dead) return;
  ibv_sge sge{};
  sge.addr = addr;
  sge.length = bytes;
  sge.lkey = lkey;
  ibv_send_wr wr{};
  wr.wr_id = wrId(peer, kind);
  wr.sg_list = bytes ? &sge : nullptr;
  wr.num_sge = bytes ? 1 : 0;
  wr.opcode = imm < 0 ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_WRITE_WITH_IMM;
  wr.imm_data = imm < 0 ? 0 : htonl(static_cast<uint32_t>(imm));
  wr.wr.rdma.remote_addr = remote;
  wr.wr.rdma.rkey = p.remoteKey;
  ibv_send_wr* bad = nullptr;
  if (int e = ibv_post_send(p.qp, &wr, &bad)) {
    markDead(peer, std::strerror(e));
    return;
  }
  ++p.inFlight;
  if (kind == kZeroCopyWr) ++zeroCopyInFlight_;
}

void IbTransport::poll() {
  ibv_wc wc[32];
  int got;
  while ((got = ibv_poll_cq(cq_, 32, wc)) > 0) {
    for (int i = 0; i < got; ++i) {
      const int peer = static_cast<int>(wc[i].wr_id >> 2);
      Peer& p = peers_[static_cast<size_t>(peer)];
      const bool isRecv = (wc[i].wr_id & 3) == kRecvWr;
      if ((wc[i].wr_id & 3) == kZeroCopyWr) --zeroCopyInFlight_;
      if ((wc[i].wr_id & 3) == kProbeWr) {
        p.probing = false;
        ZCOLL_TRACE(Coll, rank_, "ib: probe of rank {}: {}", peer, ibv_wc_status_str(wc[i].status));
      }
      if (wc[i].status != IBV_WC_SUCCESS) {
        if (!isRecv) --p.inFlight;
        markDead(peer, ibv_wc_status_str(wc[i].status));
        continue;
      }
      if (!isRecv) {
        --p.inFlight;
        continue;
      }
      const uint32_t imm = ntohl(wc[i].imm_data);
      if (imm & kCredit) {
        p.credits += imm & ~kCredit;
      } else {
        p.recvBytes[static_cast<size_t>(p.recvHead % static_cast<uint64_t>(slots_))] = imm;
        ++p.recvHead;
      }
      postRecv(peer);
    }
  }
  if (got < 0) ZCOLL_WARN(Coll, rank_, "ib: ibv_poll_cq failed ({})", got);
}

bool IbTransport::tryAcquireSend(int peer, SendSlot* slot) {
  Peer& p = peers_[static_cast<size_t>(peer)];
  if (p.sendHead - p.credits >= static_cast<uint64_t>(slots_)) poll();
  if (p.dead || p.sendHead - p.credits >= static_cast<uint64_t>(slots_)) return false;
  slot->data = p.send + (p.sendHead % static_cast<uint64_t>(slots_)) * chunk_;
  slot->capacity = chunk_;
  return true;
}

void IbTransport::commitSend(int peer, size_t bytes) {
  Peer& p = peers_[static_cast<size_t>(peer)];
  const uint64_t slot = (p.sendHead % static_cast<uint64_t>(slots_)) * chunk_;
  ++p.sendHead;
  ++slotChunks_;
  postWrite(peer, reinterpret_cast<uint64_t>(p.send + slot), mr_->lkey, static_cast<uint32_t>(bytes), p.remoteRecv + slot,
            static_cast<int64_t>(bytes), kSendWr);
}

bool IbTransport::commitSendFrom(int peer, const void* src, size_t bytes) {
  if (zeroCopyInFlight_ == 0) mrs_->refresh();  // no write names an MR now: registrations may change
  uint32_t lkey = 0;
  if (mrs_->empty() || !mrs_->find(src, bytes, &lkey)) return false;
  Peer& p = peers_[static_cast<size_t>(peer)];
  const uint64_t slot = (p.sendHead % static_cast<uint64_t>(slots_)) * chunk_;
  ++p.sendHead;
  ++zeroCopyChunks_;
  postWrite(peer, reinterpret_cast<uint64_t>(src), lkey, static_cast<uint32_t>(bytes), p.remoteRecv + slot,
            static_cast<int64_t>(bytes), kZeroCopyWr);
  return true;
}

bool IbTransport::idle() {
  if (zeroCopyInFlight_ > 0) poll();
  return zeroCopyInFlight_ == 0;
}

bool IbTransport::tryRecv(int peer, RecvChunk* chunk) {
  Peer& p = peers_[static_cast<size_t>(peer)];
  if (p.recvHead == p.recvTail) poll();
  if (p.recvHead == p.recvTail) return false;
  const size_t slot = static_cast<size_t>(p.recvTail % static_cast<uint64_t>(slots_));
  chunk->data = p.recv + slot * chunk_;
  chunk->bytes = p.recvBytes[slot];
  return true;
}

void IbTransport::releaseRecv(int peer) {
  Peer& p = peers_[static_cast<size_t>(peer)];
  ++p.recvTail;
  postWrite(peer, 0, 0, 0, p.remoteRecv, int64_t{kCredit | 1}, kSendWr);
}

bool IbTransport::peerExited(int peer) {
  Peer& p = peers_[static_cast<size_t>(peer)];
  if (!p.dead && watch_.exited(peer)) markDead(peer, "its process has exited");
  if (!p.dead && !p.probing) {
    p.probing = true;
    postWrite(peer, 0, 0, 0, p.remoteRecv, -1, kProbeWr);
  }
  poll();
  return p.dead;
}

uint32_t IbTransport::prepareSleep() {
  // Acknowledge the events that woke earlier sleeps, then ask for the next completion's event; the
  // caller re-checks its condition (polling the queue) before it sleeps.
  ibv_cq* cq = nullptr;
  void* context = nullptr;
  while (ibv_get_cq_event(channel_, &cq, &context) == 0) ++unackedEvents_;
  if (unackedEvents_ >= 64) {
    ibv_ack_cq_events(cq_, unackedEvents_);
    unackedEvents_ = 0;
  }
  armed_ = ibv_req_notify_cq(cq_, 0) == 0;
  return 0;
}

void IbTransport::sleep(uint32_t, int64_t maxNs) {
  if (!armed_) return;
  armed_ = false;
  sleeper_.sleep(maxNs);
}

}  // namespace zcoll::ib
