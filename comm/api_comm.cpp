// api_comm.cpp - the C ABI of communicator lifecycle: ids, init, destroy, abort, queries.
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <deque>
#include <mutex>
#include <shared_mutex>
#include <unordered_set>
#include <vector>

#include "algorithms/registry.hpp"
#include "comm/boundary.hpp"
#include "comm/handles.hpp"
#include "core/log.hpp"
#include "core/membarrier.hpp"
#include "core/shared_memory.hpp"

namespace zcoll {
namespace {

std::shared_mutex gHandlesMutex;
// Bumped (under the lock) whenever a handle stops being live: a thread's remembered validation of
// an earlier epoch no longer counts.
std::atomic<uint64_t> gHandleEpoch{1};
// The registry and the spare handles are never destroyed: a handle stays reachable (LeakSanitizer)
// and a call during exit finds them intact.
std::unordered_set<zcollComm_t>& handles() {
  static auto* set = new std::unordered_set<zcollComm_t>;
  return *set;
}
// Destroyed handles, for later inits (guarded by gHandlesMutex): never deallocated. Reused oldest
// first and only beyond a quarantine, so that a stale handle names no new communicator until many
// more were destroyed (malloc hands a freed handle straight to the next init).
constexpr size_t kHandleQuarantine = 64;
std::deque<zcollComm_t>& spareHandles() {
  static auto* spare = new std::deque<zcollComm_t>;
  return *spare;
}
// The last handle this thread validated, at which epoch.
struct ValidatedHandle {
  zcollComm_t handle = nullptr;
  uint64_t epoch = 0;
};
thread_local ValidatedHandle tValidated;

// The CallSlots (handles.hpp), guarded by gSlotsMutex; never freed.
std::mutex gSlotsMutex;
std::vector<CallSlot*>& callSlots() {
  static auto* slots = new std::vector<CallSlot*>;
  return *slots;
}
// This thread's slot (null until its first validation where membarrier serves, and again once the
// thread exits). Plain thread-locals: one with a destructor costs an initialisation check per call.
thread_local CallSlot* tSlot = nullptr;
// Whether this thread already asked for a slot (it never asks twice: no syscall per slow path).
thread_local bool tSlotAsked = false;
// Set when a processBarrier() failed (retireHandle): no new announcement goes into a slot.
std::atomic<bool> gSlotsOff{false};
std::atomic<bool> gSlotsUsed{false};  // some thread has a slot: destroy must fence
// Hands the slot back when the thread exits (constructed by takeSlot() only). A call made after
// this (a later thread-local's destructor) finds no slot and counts itself in activeCalls.
struct SlotRelease {
  bool armed = false;  // set when this thread takes its slot (which constructs this object)
  ~SlotRelease() {
    if (!tSlot) return;
    tSlot->owned.store(false, std::memory_order_release);
    tSlot = nullptr;
  }
};
thread_local SlotRelease tSlotRelease;

void takeSlot() {
  tSlotAsked = true;
  if (!processBarrierAvailable()) return;
  std::lock_guard lock(gSlotsMutex);
  CallSlot* mine = nullptr;
  for (CallSlot* s : callSlots())
    if (!s->owned.load(std::memory_order_relaxed)) {
      mine = s;
      break;
    }
  if (!mine) {
    mine = new CallSlot;
    callSlots().push_back(mine);
  }
  mine->owned.store(true, std::memory_order_relaxed);
  gSlotsUsed.store(true, std::memory_order_seq_cst);
  tSlotRelease.armed = true;  // constructs it: its destructor runs when this thread exits
  tSlot = mine;
}

// Whether a call announced in a CallSlot is inside `handle`.
bool inSomeSlot(zcollComm_t handle) {
  std::lock_guard lock(gSlotsMutex);
  for (const CallSlot* s : callSlots())
    if (s->inCall.load(std::memory_order_acquire) == handle) return true;
  return false;
}

Status initRank(zcollComm_t* comm, int nranks, const UniqueIdFields& id, int rank, const zcollConfig_t* apiConfig) {
  if (!comm) return invalidArgument("comm: NULL output pointer");
  if (nranks < 1) return invalidArgument("nranks = {}: must be >= 1", nranks);
  if (rank < 0 || rank >= nranks) return invalidArgument("rank = {}: must be in [0, nranks = {})", rank, nranks);
  Config config;
  if (Status s = buildConfig(apiConfig, &config); !s) return s;
  std::unique_ptr<Communicator> impl;
  if (Status s = Communicator::create(id, nranks, rank, config, &impl); !s) return s;
  *comm = registerHandle(std::move(impl));
  return Status::ok();
}

// The introspection calls' arguments: a collective's name, and a caller's string buffer.
Status parseCollectiveArg(const char* name, Collective* out) {
  if (!name || !parseCollective(name, out))
    return invalidArgument("collective: '{}' is not a collective name", name ? name : "(null)");
  return Status::ok();
}

Status copyOut(std::string_view text, char* buf, size_t len, const char* bufName) {
  if (!buf || len == 0) return invalidArgument("{}: NULL or empty buffer", bufName);
  if (text.size() + 1 > len) return invalidArgument("len = {}: {} bytes are needed for '{}'", len, text.size() + 1, text);
  if (!text.empty()) std::memcpy(buf, text.data(), text.size());  // an empty view's data() may be NULL
  buf[text.size()] = 0;
  return Status::ok();
}

}  // namespace

zcollComm_t registerHandle(std::unique_ptr<Communicator> impl) {
  std::unique_lock lock(gHandlesMutex);
  zcollComm_t handle = nullptr;
  if (spareHandles().size() <= kHandleQuarantine) {
    handle = new zcollComm();
  } else {
    handle = spareHandles().front();
    spareHandles().pop_front();
  }
  handle->impl = std::move(impl);
  handles().insert(handle);
  return handle;
}

bool unregisterHandle(zcollComm_t comm) {
  std::unique_lock lock(gHandlesMutex);
  if (handles().erase(comm) != 1) return false;
  gHandleEpoch.fetch_add(1, std::memory_order_seq_cst);
  return true;
}

void retireHandle(zcollComm_t handle) {
  // unregisterHandle moved the epoch: after this fence on every thread, a call announced in a slot
  // before it is visible here, and one announced after it sees the new epoch and backs out.
  if (gSlotsUsed.load(std::memory_order_seq_cst) && !processBarrier()) {
    // No fence to be had (the kernel refused it after registration): slots are off from now on,
    // and the scan waits a grace period in which any announcement still in a store buffer
    // (drained in microseconds; at once by a context switch) becomes visible.
    gSlotsOff.store(true, std::memory_order_seq_cst);
    ZCOLL_WARN(Init, -1, "membarrier failed after registration: API calls count themselves in the handle from now on");
    struct timespec grace{0, 20'000'000};
    nanosleep(&grace, nullptr);
  }
  while (handle->activeCalls.load(std::memory_order_seq_cst) > 0 || inSomeSlot(handle)) {
    struct timespec ts{0, 200'000};
    nanosleep(&ts, nullptr);
  }
  handle->impl.reset();
  std::unique_lock lock(gHandlesMutex);
  spareHandles().push_back(handle);
}

Status CommRef::acquire(zcollComm_t handle, const char* argName) {
  if (!handle) return invalidArgument("{}: NULL communicator", argName);
  if (tValidated.handle == handle) {
    CallSlot* slot = tSlot;
    if (slot && !slot->inCall.load(std::memory_order_relaxed) && !gSlotsOff.load(std::memory_order_relaxed)) {
      // Announce the call in this thread's slot, then check no handle died since this thread
      // validated it; retireHandle's processBarrier() orders the two (handles.hpp).
      slot->inCall.store(handle, std::memory_order_relaxed);
      lightBarrier();
      if (gHandleEpoch.load(std::memory_order_relaxed) == tValidated.epoch) {
        slot_ = slot;
        handle_ = handle;
        comm_ = handle->impl.get();
        return Status::ok();
      }
      slot->inCall.store(nullptr, std::memory_order_release);
      return acquireLocked(handle, argName);
    }
    // Announce the call, then check no handle died since this thread validated it (both seq_cst:
    // unregisterHandle bumps the epoch before retireHandle reads activeCalls, so either this sees
    // the new epoch or the destroyer waits for this call).
    handle->activeCalls.fetch_add(1, std::memory_order_seq_cst);
    if (gHandleEpoch.load(std::memory_order_seq_cst) == tValidated.epoch) {
      handle_ = handle;
      comm_ = handle->impl.get();
      return Status::ok();
    }
    handle->activeCalls.fetch_sub(1, std::memory_order_release);
  }
  return acquireLocked(handle, argName);
}

Status CommRef::acquireLocked(zcollComm_t handle, const char* argName) {
  if (!tSlotAsked) takeSlot();  // the next call of this thread takes the fast path
  std::shared_lock lock(gHandlesMutex);
  if (!handles().count(handle))
    return invalidUsage("{}: not a live communicator (destroyed, aborted or never created)", argName);
  handle->activeCalls.fetch_add(1, std::memory_order_seq_cst);
  tValidated = ValidatedHandle{handle, gHandleEpoch.load(std::memory_order_relaxed)};
  handle_ = handle;
  comm_ = handle->impl.get();
  return Status::ok();
}

}  // namespace zcoll

using namespace zcoll;

extern "C" {

zcollResult_t zcollGetVersion(int* version) {
  return apiCall("zcollGetVersion", [&] {
    if (!version) return invalidArgument("version: NULL pointer");
    *version = ZCOLL_VERSION_CODE;
    return Status::ok();
  });
}

zcollResult_t zcollGetUniqueId(zcollUniqueId* uniqueId) {
  return apiCall("zcollGetUniqueId", [&] {
    if (!uniqueId) return invalidArgument("uniqueId: NULL pointer");
    Config config;
    if (Status s = buildConfig(nullptr, &config); !s) return s;
    UniqueIdFields f;
    if (Status s = interfaceAddress(config.socketIfname, &f.root); !s) return s;
    if (Status s = randomSecret(&f.secret); !s) return s;
    SockAddr bound;
    if (Status s = RendezvousRoot::start(f.root, f.secret, config.timeoutMs, &bound); !s) return s;
    f.root = bound;
    encodeUniqueId(f, uniqueId->internal);
    return Status::ok();
  });
}

zcollResult_t zcollCommInitRankConfig(zcollComm_t* comm, int nranks, zcollUniqueId commId, int rank,
                                      const zcollConfig_t* config) {
  return apiCall("zcollCommInitRankConfig", [&] {
    UniqueIdFields id;
    if (Status s = decodeUniqueId(commId.internal, &id); !s) return s;
    return initRank(comm, nranks, id, rank, config);
  });
}

zcollResult_t zcollCommInitRank(zcollComm_t* comm, int nranks, zcollUniqueId commId, int rank) {
  return apiCall("zcollCommInitRank", [&] {
    UniqueIdFields id;
    if (Status s = decodeUniqueId(commId.internal, &id); !s) return s;
    return initRank(comm, nranks, id, rank, nullptr);
  });
}

zcollResult_t zcollCommInitFromEnv(zcollComm_t* comm, const zcollConfig_t* apiConfig) {
  return apiCall("zcollCommInitFromEnv", [&] {
    if (!comm) return invalidArgument("comm: NULL output pointer");
    LaunchEnv env;
    if (Status s = readLaunchEnv(&env); !s) return s;
    Config config;
    if (Status s = buildConfig(apiConfig, &config); !s) return s;
    UniqueIdFields id;
    if (Status s = resolveAddress(env.rendezvousHost, env.rendezvousPort, &id.root); !s) return s;
    if (!config.bootstrapSecret.empty()) {
      if (!parseSecretHex(config.bootstrapSecret, &id.secret))
        return invalidArgument("ZCOLL_BOOTSTRAP_SECRET: expected 32 hex digits");
    } else {
      // No secret given by the launcher: derive one from the job's variables. It keeps two jobs on one
      // port apart but is no protection against a deliberate stranger.
      std::string key = fmt::format("zcoll-env:{}:{}:{}", env.rendezvousHost, env.rendezvousPort, env.size);
      uint64_t a = fnv1a(key.data(), key.size()), b = fnv1a(key.data(), key.size(), a);
      std::memcpy(id.secret.data(), &a, 8);
      std::memcpy(id.secret.data() + 8, &b, 8);
      ZCOLL_INFO(Init, env.rank, "no ZCOLL_BOOTSTRAP_SECRET: using a secret derived from the job's variables");
    }
    if (env.rank == 0) {
      SockAddr bound;
      Status s = RendezvousRoot::start(id.root, id.secret, config.timeoutMs, &bound);
      if (!s && !config.socketIfname.empty()) {
        // MASTER_ADDR may name this host by an address it cannot bind (an alias, NAT): listen on the
        // configured interface instead, never on every address.
        SockAddr at;
        if (Status r = interfaceAddress(config.socketIfname, &at); !r) return r;
        at.setPort(env.rendezvousPort);
        if (Status r = RendezvousRoot::start(at, id.secret, config.timeoutMs, &bound); !r)
          return std::move(s).withContext(fmt::format("{} (and on ZCOLL_SOCKET_IFNAME: {})", env.source, r.message()));
      } else if (!s) {
        return std::move(s).withContext(fmt::format(
            "{}: rank 0 cannot listen at the rendezvous address (set ZCOLL_SOCKET_IFNAME to listen on an "
            "interface of this host instead)",
            env.source));
      }
    }
    Status s = initRank(comm, env.size, id, env.rank, apiConfig);
    if (!s && env.rank == 0) RendezvousRoot::cancel(id.root, id.secret);
    return s;
  });
}

zcollResult_t zcollCommDestroy(zcollComm_t comm) {
  return apiCall("zcollCommDestroy", [&] {
    if (!comm) return invalidArgument("comm: NULL communicator");
    if (!unregisterHandle(comm))
      return invalidUsage("comm: not a live communicator (destroyed, aborted or never created)");
    Status s = comm->impl->drain();
    retireHandle(comm);
    return s;
  });
}

zcollResult_t zcollCommAbort(zcollComm_t comm) {
  return apiCall("zcollCommAbort", [&] {
    if (!comm) return invalidArgument("comm: NULL communicator");
    if (!unregisterHandle(comm))
      return invalidUsage("comm: not a live communicator (destroyed, aborted or never created)");
    comm->impl->abort();
    retireHandle(comm);
    return Status::ok();
  });
}

zcollResult_t zcollGetAlgorithmNames(const char* collective, char* names, size_t len) {
  return apiCall("zcollGetAlgorithmNames", [&] {
    Collective c;
    if (Status s = parseCollectiveArg(collective, &c); !s) return s;
    std::string list;
    for (const Algorithm* a : allAlgorithms()) {
      if (a->collective() != c) continue;
      if (!list.empty()) list += ',';
      list += a->name();
    }
    return copyOut(list, names, len, "names");
  });
}

zcollResult_t zcollCommAlgorithmFor(zcollComm_t comm, const char* collective, size_t count, zcollDataType_t datatype,
                                    char* name, size_t len) {
  return apiCall("zcollCommAlgorithmFor", [&] {
    CommRef c;
    if (Status s = c.acquire(comm); !s) return s;
    Collective coll;
    if (Status s = parseCollectiveArg(collective, &coll); !s) return s;
    if (static_cast<int>(datatype) < 0 || static_cast<int>(datatype) >= zcollNumTypes)
      return invalidArgument("datatype = {}: not a zcollDataType_t", static_cast<int>(datatype));
    OpArgs op{coll, nullptr, nullptr, count, static_cast<DataType>(datatype)};
    const Algorithm* algo = nullptr;
    if (Status s = c->algorithmFor(op, &algo); !s) return s;
    return copyOut(algo->name(), name, len, "name");
  });
}

zcollResult_t zcollCommLastAlgorithm(zcollComm_t comm, char* name, size_t len) {
  return apiCall("zcollCommLastAlgorithm", [&] {
    CommRef c;
    if (Status s = c.acquire(comm); !s) return s;
    return copyOut(c->lastAlgorithm(), name, len, "name");
  });
}

zcollResult_t zcollCommGetAsyncError(zcollComm_t comm, zcollResult_t* asyncError) {
  return apiCall("zcollCommGetAsyncError", [&] {
    CommRef c;
    if (Status s = c.acquire(comm); !s) return s;
    if (!asyncError) return invalidArgument("asyncError: NULL pointer");
    *asyncError = toResult(c->asyncError());
    // The failure happened on another thread (the progress thread, for stream-ordered device ops):
    // its message becomes this thread's last error, for zcollGetLastError.
    if (c->asyncError() != StatusCode::Ok)
      setLastError("zcollCommGetAsyncError", Status(c->asyncError(), c->asyncErrorMessage()));
    return Status::ok();
  });
}

zcollResult_t zcollCommCount(const zcollComm_t comm, int* count) {
  return apiCall("zcollCommCount", [&] {
    CommRef c;
    if (Status s = c.acquire(comm); !s) return s;
    if (!count) return invalidArgument("count: NULL pointer");
    *count = c->nranks();
    return Status::ok();
  });
}

zcollResult_t zcollCommUserRank(const zcollComm_t comm, int* rank) {
  return apiCall("zcollCommUserRank", [&] {
    CommRef c;
    if (Status s = c.acquire(comm); !s) return s;
    if (!rank) return invalidArgument("rank: NULL pointer");
    *rank = c->rank();
    return Status::ok();
  });
}

zcollResult_t zcollCommRegister(const zcollComm_t comm, void* buff, size_t size, void** handle) {
  return apiCall("zcollCommRegister", [&] {
    CommRef c;
    if (Status s = c.acquire(comm); !s) return s;
    if (!handle) return invalidArgument("handle: NULL pointer");
    if (!buff) return invalidArgument("buff: NULL pointer");
    if (size == 0) return invalidArgument("size: 0 (nothing to register)");
    if (size > PTRDIFF_MAX || reinterpret_cast<uintptr_t>(buff) + size < reinterpret_cast<uintptr_t>(buff))
      return invalidArgument("size = {}: beyond the address space", size);
    return c->registerBuffer(buff, size, handle);
  });
}

zcollResult_t zcollMemAlloc(void** ptr, size_t size) {
  return apiCall("zcollMemAlloc", [&] {
    if (!ptr) return invalidArgument("ptr: NULL pointer");
    return sharedMemAlloc(size, ptr);
  });
}

zcollResult_t zcollMemFree(void* ptr) {
  return apiCall("zcollMemFree", [&] { return sharedMemFree(ptr); });
}

zcollResult_t zcollCommDeregister(const zcollComm_t comm, void* handle) {
  return apiCall("zcollCommDeregister", [&] {
    CommRef c;
    if (Status s = c.acquire(comm); !s) return s;
    if (!handle) return invalidArgument("handle: NULL pointer");
    return c->deregisterBuffer(handle);
  });
}

}  // extern "C"
