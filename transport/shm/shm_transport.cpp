// shm_transport.cpp - see shm_transport.hpp.
#include "transport/shm/shm_transport.hpp"

#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cassert>
#include <cstring>

#include "core/adopted_memory.hpp"
#include "core/log.hpp"
#include "core/membarrier.hpp"
#include "transport/shm/memfd_exchange.hpp"

namespace zcoll::shm {

namespace {
// Host transports alive in this process: when the last goes, registered plain buffers stop being shared.
std::atomic<int> gLiveHostTransports{0};



long futex(std::atomic<uint32_t>* addr, int op, uint32_t value, const timespec* timeout) {
  return ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), op, value, timeout, nullptr, 0);
}

// Maps `bytes` of fd shared; the owner touches every page (huge pages where the kernel allows),
// peers pre-fault their page tables.
Status mapSegment(int fd, size_t bytes, bool owner, uint8_t** out) {
  int flags = MAP_SHARED | (owner ? 0 : MAP_POPULATE);
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, flags, fd, 0);
  if (p == MAP_FAILED) return systemError(fmt::format("mmap of a {}-byte shared segment", bytes), errno);
  if (owner) {
    ::madvise(p, bytes, MADV_HUGEPAGE);  // best effort: shmem THP may be off
    std::memset(p, 0, bytes);
  }
  *out = static_cast<uint8_t*>(p);
  return Status::ok();
}

}  // namespace

Status ShmTransport::create(const TransportArgs& args, std::unique_ptr<Transport>* out) {
  Bootstrap& boot = args.boot;
  const Config& config = args.config;
  const std::atomic<bool>* abort = args.abort;
  DeviceRuntime* device = args.device;
  const std::vector<int>* members = args.members;
  const int rank = boot.rank();
  std::vector<int> others;
  if (members) {
    others = *members;
  } else {
    for (int r = 0; r < boot.nranks(); ++r)
      if (r != rank) others.push_back(r);
  }
  // FIFO indices are positions in the group (the ranks served, and this one), in rank order.
  std::vector<int> group = others;
  group.push_back(rank);
  std::sort(group.begin(), group.end());
  auto local = [&](int r) { return static_cast<int>(std::lower_bound(group.begin(), group.end(), r) - group.begin()); };
  const int nranks = static_cast<int>(group.size());
  Deadline deadline = Deadline::afterMs(config.timeoutMs);
  std::unique_ptr<ShmTransport> t(new ShmTransport());
  t->rank_ = rank;
  t->layout_.nranks = nranks;
  t->layout_.slots = config.fifoSlots;
  t->layout_.slotBytes = static_cast<size_t>(config.chunkBytes);
  t->layout_.hostData = device == nullptr;
  t->inlineSmall_ = t->layout_.hostData;  // device slots: a chunk must stay in device memory
  t->headers_ = t->inlineSmall_ ? kMaxSlots : static_cast<size_t>(config.fifoSlots);
  t->localRegister_ = args.config.localRegister;
  t->stride_ = t->layout_.slotStride();
  const size_t bytes = t->layout_.totalBytes();
  t->peers_.resize(static_cast<size_t>(boot.nranks()));

  Fd memfd(::memfd_create(fmt::format("zcoll-shm-r{}", rank).c_str(), MFD_CLOEXEC));
  if (!memfd.valid()) return systemError("memfd_create", errno);
  if (::ftruncate(memfd.get(), static_cast<off_t>(bytes)) != 0)
    return systemError(fmt::format("ftruncate of the shared segment to {} bytes", bytes), errno);
  if (Status s = mapSegment(memfd.get(), bytes, true, &t->mine_); !s) return s;
  t->peers_[rank].segment = t->mine_;  // unmapped by the destructor from here on
  t->myHeader_ = reinterpret_cast<SegmentHeader*>(t->mine_);
  SegmentHeader* h = t->myHeader_;
  h->magic = kSegmentMagic;
  h->rank = rank;
  h->nranks = nranks;
  h->slots = t->layout_.slots;
  h->pid = getpid();
  h->slotBytes = t->layout_.slotBytes;
  h->nonce = boot.nonce();
  h->hostBarrier = hostBarrierAvailable() ? 1 : 0;
  t->lightRing_ = h->hostBarrier != 0;

  std::vector<Fd> fds;
  if (Status s = exchangeMemfds(boot, others, memfd.get(), deadline, abort, &fds); !s) return s;
  memfd.reset();
  if (device) {
    // The data plane: one device region per rank holding its inbound FIFOs' slots, exported as an
    // fd, sent like the segment, imported by every peer.
    t->device_ = device;
    t->deviceData_.assign(static_cast<size_t>(boot.nranks()), nullptr);
    int rawFd = -1;
    if (Status s = device->allocShareable(t->layout_.deviceDataBytes(), &t->deviceData_[rank], &rawFd,
                                          &t->deviceMapped_);
        !s)
      return std::move(s).withContext("cuda_ipc: allocating the FIFOs' device memory");
    Fd devFd(rawFd);
    std::vector<Fd> devFds;
    if (Status s = exchangeMemfds(boot, others, devFd.get(), deadline, abort, &devFds); !s)
      return std::move(s).withContext("cuda_ipc: exchanging device memory handles");
    for (int r : others)
      if (Status s = device->importShareable(devFds[r].get(), t->deviceMapped_, &t->deviceData_[r]); !s)
        return std::move(s).withContext(fmt::format("cuda_ipc: mapping rank {}'s device memory", r));
  }

  for (int r : others) {
    Peer& p = t->peers_[r];
    if (Status s = mapSegment(fds[r].get(), bytes, false, &p.segment); !s) return s;
    fds[r].reset();
    p.header = reinterpret_cast<SegmentHeader*>(p.segment);
    if (p.header->magic != kSegmentMagic || p.header->rank != r || p.header->nranks != nranks ||
        p.header->slots != t->layout_.slots || p.header->slotBytes != t->layout_.slotBytes ||
        p.header->nonce != boot.nonce())
      return invalidUsage(
          "shm: rank {}'s segment does not match this rank's (slots {} vs {}, chunk {} vs {} bytes): "
          "ZCOLL_CHUNK_SIZE and ZCOLL_FIFO_SLOTS must be the same on all ranks",
          r, p.header->slots, t->layout_.slots, p.header->slotBytes, t->layout_.slotBytes);
    t->lightRing_ = t->lightRing_ && p.header->hostBarrier != 0;  // every rank of the group, or none
    int out = Layout::fifoIndex(local(r), local(rank));
    int in = Layout::fifoIndex(local(rank), local(r));
    p.outCtrl = reinterpret_cast<FifoCtrl*>(p.segment + t->layout_.ctrlOffset(out));
    p.inCtrl = reinterpret_cast<FifoCtrl*>(t->mine_ + t->layout_.ctrlOffset(in));
    if (device) {
      p.outData = static_cast<uint8_t*>(t->deviceData_[r]) + t->layout_.deviceDataOffset(out);
      p.inData = static_cast<uint8_t*>(t->deviceData_[rank]) + t->layout_.deviceDataOffset(in);
    } else {
      p.outData = p.segment + t->layout_.dataOffset(out);
      p.inData = t->mine_ + t->layout_.dataOffset(in);
    }
  }
  if (members) {
    // Beside a network transport: sleep on an eventfd the peers write (a futex cannot be polled).
    Fd wake(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    if (!wake.valid()) return systemError("shm: eventfd", errno);
    std::vector<Fd> wakeFds;
    if (Status s = exchangeMemfds(boot, others, wake.get(), deadline, abort, &wakeFds); !s)
      return std::move(s).withContext("shm: exchanging wake eventfds");
    for (int r : others) t->peers_[static_cast<size_t>(r)].wakeFd = std::move(wakeFds[static_cast<size_t>(r)]);
    t->wakeFd_ = std::move(wake);
  }
  // Watch the peers, to fail fast when one dies: each hands over a pidfd of its own process (its pid
  // may name another process here: a peer in its own PID namespace). Without pidfds (Linux < 5.3) an
  // eventfd stands in (never readable: the timeout remains) and the table's pids are tried.
  Fd self(static_cast<int>(::syscall(SYS_pidfd_open, ::getpid(), 0)));
  const bool havePidfd = self.valid();
  if (!havePidfd) self.reset(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!self.valid()) return systemError("shm: pidfd_open/eventfd", errno);
  std::vector<Fd> pidFds;
  if (Status s = exchangeMemfds(boot, others, self.get(), deadline, abort, &pidFds); !s)
    return std::move(s).withContext("shm: exchanging pidfds");
  if (havePidfd) t->watch_.watchPidfds(std::move(pidFds));
  else t->watch_.watch(boot);
  // Nobody may write into a FIFO before its owner has mapped... the owner mapped before sending its
  // fd, and the barrier makes every mapping complete before any rank uses the transport.
  if (Status s = boot.barrier(); !s) return std::move(s).withContext("shm: barrier after mapping");
  ZCOLL_INFO(Shm, rank, "{} transport: {} ranks, {} slots x {} bytes per peer, {} bytes per segment, sleep/wake {}{}",
             t->name(), nranks, t->layout_.slots, t->layout_.slotBytes, bytes,
             t->lightRing_ ? "fenced by the sleeper (membarrier)" : "fenced on both sides",
             device ? fmt::format(", {} bytes of device memory", t->deviceMapped_) : std::string());
  if (t->localRegister_ && !device) {
    t->counted_ = true;
    gLiveHostTransports.fetch_add(1);
  }
  *out = std::move(t);
  return Status::ok();
}

ShmTransport::~ShmTransport() {
  const size_t bytes = layout_.totalBytes();
  for (Peer& p : peers_) {
    if (p.segment) ::munmap(p.segment, bytes);
    dropImports(p);
  }
  if (counted_ && gLiveHostTransports.fetch_sub(1) == 1) adoptedRelease();
  for (void* d : deviceData_)
    if (d) device_->freeShareable(d, deviceMapped_);
}

void ShmTransport::ring(const Peer& p) const {
  // Pairs with prepareSleep(): either the sleeper sees our publish, or we see it sleeping. With
  // lightRing_ the sleeper's hostBarrier() is the fence on this side.
  if (lightRing_) lightBarrier();
  else std::atomic_thread_fence(std::memory_order_seq_cst);
  SegmentHeader* header = p.header;
  if (header->sleepers.load(std::memory_order_relaxed) != 0) {
    header->doorbell.fetch_add(1, std::memory_order_seq_cst);
    futex(&header->doorbell, FUTEX_WAKE, INT32_MAX, nullptr);
  }
  if (header->fdSleepers.load(std::memory_order_relaxed) != 0 && p.wakeFd.valid()) {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t r = ::write(p.wakeFd.get(), &one, sizeof one);
  }
}

bool ShmTransport::headerRoom(Peer& p) {
  if (p.sendHead - p.cachedTail < headers_) return true;
  p.cachedTail = p.outCtrl->tail.load(std::memory_order_acquire);
  return p.sendHead - p.cachedTail < headers_;
}

bool ShmTransport::tryAcquireSend(int peer, SendSlot* slot) {
  Peer& p = peers_[peer];
  if (!headerRoom(p)) return false;
  if (p.sendData - p.cachedDataTail >= static_cast<uint64_t>(layout_.slots)) {
    p.cachedDataTail = p.outCtrl->dataTail.load(std::memory_order_acquire);
    if (p.sendData - p.cachedDataTail >= static_cast<uint64_t>(layout_.slots)) return false;
  }
  slot->data = p.outData + p.sendDataIndex * stride_;
  slot->capacity = layout_.slotBytes;
  p.acquiredInline = false;
  return true;
}

bool ShmTransport::tryAcquireSendFor(int peer, size_t bytes, SendSlot* slot) {
  if (!inlined(bytes)) return tryAcquireSend(peer, slot);
  Peer& p = peers_[peer];
  if (!headerRoom(p)) return false;
  slot->data = p.outCtrl->slot[p.sendIndex].inlined;
  slot->capacity = kInlineBytes;
  p.acquiredInline = true;
  return true;
}

void ShmTransport::commitSend(int peer, size_t bytes) {
  Peer& p = peers_[peer];
  SlotHeader& h = p.outCtrl->slot[p.sendIndex];
  h.bytes = bytes;
  assert(!p.acquiredInline || inlined(bytes));  // a slot taken for a small chunk holds no more
  if (inlined(bytes)) {
    if (!p.acquiredInline) std::memcpy(h.inlined, p.outData + p.sendDataIndex * stride_, bytes);
  } else {
    ++p.sendData;
    p.sendDataIndex = nextData(p.sendDataIndex);
  }
  h.seq.store(++p.sendHead, std::memory_order_release);
  p.sendIndex = nextHeader(p.sendIndex);
  ring(p);
}

bool ShmTransport::tryRecv(int peer, RecvChunk* chunk) {
  Peer& p = peers_[peer];
  const SlotHeader& h = p.inCtrl->slot[p.recvIndex];
  if (h.seq.load(std::memory_order_acquire) != p.recvTail + 1) return false;
  chunk->bytes = h.bytes;
  chunk->data = inlined(chunk->bytes) ? h.inlined : p.inData + p.recvDataIndex * stride_;
  return true;
}

void ShmTransport::releaseRecv(int peer) {
  Peer& p = peers_[peer];
  if (!inlined(p.inCtrl->slot[p.recvIndex].bytes)) {
    p.inCtrl->dataTail.store(++p.recvData, std::memory_order_release);
    p.recvDataIndex = nextData(p.recvDataIndex);
  }
  p.inCtrl->tail.store(++p.recvTail, std::memory_order_release);
  p.recvIndex = nextHeader(p.recvIndex);
  // The next chunk's header line, on its way while this rank finishes its op: when the sender is
  // ahead it was written already and the next tryRecv hits.
  __builtin_prefetch(&p.inCtrl->slot[p.recvIndex]);
  ring(p);
}

uint32_t ShmTransport::prepareSleep() {
  uint32_t token = 0;
  if (wakeFd_.valid()) {
    myHeader_->fdSleepers.fetch_add(1, std::memory_order_seq_cst);
  } else {
    token = myHeader_->doorbell.load(std::memory_order_seq_cst);
    myHeader_->sleepers.fetch_add(1, std::memory_order_seq_cst);
  }
  // The peers' ring() has no fence of its own: a full fence on each of them now, so that a publish
  // before it is seen by our re-check and a ring() after it sees us asleep. Should the kernel refuse
  // it (never seen after a successful registration), a wake-up may be missed: the sleep then ends
  // with its 50 ms slice (Waiter), late but not hung.
  if (lightRing_) (void)hostBarrier();
  return token;
}

void ShmTransport::cancelSleep() {
  (wakeFd_.valid() ? myHeader_->fdSleepers : myHeader_->sleepers).fetch_sub(1, std::memory_order_seq_cst);
}

void ShmTransport::sleep(uint32_t token, int64_t maxNs) {
  if (wakeFd_.valid()) {  // poll the eventfd (maxNs 0: a mixed transport polled it already), drain it
    pollfd pfd{wakeFd_.get(), POLLIN, 0};
    const timespec ts{static_cast<time_t>(maxNs / 1'000'000'000), static_cast<long>(maxNs % 1'000'000'000)};
    if (maxNs > 0) ::ppoll(&pfd, 1, &ts, nullptr);
    uint64_t v;
    [[maybe_unused]] ssize_t r = ::read(wakeFd_.get(), &v, sizeof v);
    myHeader_->fdSleepers.fetch_sub(1, std::memory_order_seq_cst);
    return;
  }
  timespec ts{static_cast<time_t>(maxNs / 1'000'000'000), static_cast<long>(maxNs % 1'000'000'000)};
  futex(&myHeader_->doorbell, FUTEX_WAIT, token, &ts);
  myHeader_->sleepers.fetch_sub(1, std::memory_order_seq_cst);
}

void ShmTransport::forEachSlotRegion(const std::function<void(void*, size_t)>& fn) {
  if (device_) return;  // the slots are device memory already
  for (Peer& p : peers_)
    if (p.segment) fn(p.segment, layout_.totalBytes());
}

void ShmTransport::dropImports(Peer& p) {
  for (const Peer::Imported& m : p.imported) ::munmap(m.base, m.bytes);
  p.imported.clear();
}

Status ShmTransport::importMemory(int peer, const SharedMemRef& ref, void** local) {
  if (peer < 0 || static_cast<size_t>(peer) >= peers_.size() || !peers_[static_cast<size_t>(peer)].header)
    return invalidArgument("shm: rank {} is not a peer of this transport", peer);
  Peer& p = peers_[static_cast<size_t>(peer)];
  if (ref.offset > ref.allocBytes || ref.bytes > ref.allocBytes - ref.offset)
    return remoteError("shm: rank {} named bytes [{}, +{}) of a {}-byte allocation", peer, ref.offset, ref.bytes,
                       ref.allocBytes);
  if (ref.freeGeneration != p.importGeneration) {  // it freed something since: maybe what we map
    dropImports(p);
    p.importGeneration = ref.freeGeneration;
  }
  for (const Peer::Imported& m : p.imported)
    if (m.id == ref.id) {
      *local = m.base + ref.offset;
      return Status::ok();
    }
  if (!p.importRefused.empty()) return notSupported("{}", p.importRefused);
  auto refuse = [&](Status s) {
    p.importRefused = s.message();
    return s;
  };
  if (ref.pid != p.header->pid)
    return refuse(notSupported("shm: rank {} exports memory as pid {}, its segment says pid {}", peer, ref.pid,
                               p.header->pid));
  const std::string path = fmt::format("/proc/{}/fd/{}", ref.pid, ref.fd);
  Fd fd(::open(path.c_str(), O_RDWR | O_CLOEXEC));
  if (!fd.valid()) return refuse(systemError(fmt::format("shm: opening rank {}'s allocation ({})", peer, path), errno));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return systemError("shm: fstat of a peer's allocation", errno);
  if (static_cast<uint64_t>(st.st_dev) != ref.dev || static_cast<uint64_t>(st.st_ino) != ref.ino ||
      static_cast<uint64_t>(st.st_size) < ref.allocBytes)
    return refuse(notSupported("shm: {} is not the allocation rank {} named (another PID namespace?)", path, peer));
  void* m = ::mmap(nullptr, ref.allocBytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd.get(), 0);
  if (m == MAP_FAILED)
    return systemError(fmt::format("shm: mapping rank {}'s {}-byte allocation", peer, ref.allocBytes), errno);
  p.imported.push_back(Peer::Imported{ref.id, static_cast<uint8_t*>(m), ref.allocBytes});
  *local = static_cast<uint8_t*>(m) + ref.offset;
  return Status::ok();
}

void ShmTransport::wake() {
  myHeader_->doorbell.fetch_add(1, std::memory_order_seq_cst);
  futex(&myHeader_->doorbell, FUTEX_WAKE, INT32_MAX, nullptr);
  if (wakeFd_.valid()) {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t r = ::write(wakeFd_.get(), &one, sizeof one);
  }
}

}  // namespace zcoll::shm
