// config.cpp - defaults, API fields and the ZCOLL_* environment, in that order; the only file
// that calls getenv.
#include "core/config.hpp"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <cstddef>
#include <cstdint>
#include <strings.h>
#include <unistd.h>

#include <algorithm>
#include <mutex>

#include <fmt/ranges.h>

#include "core/log.hpp"

namespace zcoll {
namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

bool parseInt(std::string_view s, int64_t* out) {
  if (s.empty()) return false;
  std::string tmp(s);
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(tmp.c_str(), &end, 10);
  if (errno || *end) return false;
  *out = v;
  return true;
}

Status envPositive(const char* name, int64_t minValue, int64_t maxValue, bool bytes, int64_t* field) {
  const char* v = env(name);
  if (!v) return Status::ok();
  int64_t x = 0;
  bool ok = bytes ? parseByteSize(v, &x) : parseInt(v, &x);
  if (!ok || x < minValue || x > maxValue)
    return invalidArgument("environment variable {}='{}': expected {} in [{}, {}]", name, v,
                           bytes ? "a size (e.g. 256K)" : "an integer", minValue, maxValue);
  *field = x;
  return Status::ok();
}

void envString(const char* name, std::string* field) {
  if (const char* v = env(name)) *field = v;
}

constexpr int64_t kMaxChunk = int64_t{1} << 30;

// "12", "2.5", ".5": digits with at most one point (strtod alone takes hex, exponents, inf and nan).
bool isDecimal(std::string_view s) {
  bool digit = false, point = false;
  for (char ch : s) {
    if (ch >= '0' && ch <= '9') digit = true;
    else if (ch == '.' && !point) point = true;
    else return false;
  }
  return digit;
}

constexpr std::string_view kLogLevels[] = {"NONE", "OFF", "WARN", "INFO", "TRACE"};

Status checkLogSettings() {
  if (const char* v = env("ZCOLL_DEBUG"); v && std::none_of(std::begin(kLogLevels), std::end(kLogLevels),
                                                             [v](std::string_view l) { return !strcasecmp(v, l.data()); }))
    return invalidArgument("environment variable ZCOLL_DEBUG='{}': expected NONE, WARN, INFO or TRACE", v);
  if (const char* v = env("ZCOLL_DEBUG_SUBSYS")) {
    for (std::string_view rest = v; !rest.empty();) {
      const std::string_view item = nextListItem(&rest);
      if (item != "all" && std::find(std::begin(kLogSubsystems), std::end(kLogSubsystems), item) == std::end(kLogSubsystems))
        return invalidArgument("environment variable ZCOLL_DEBUG_SUBSYS='{}': unknown subsystem '{}' (known: {}, all)",
                               v, item, fmt::join(kLogSubsystems, ", "));
    }
  }
  return Status::ok();
}

// Variables that the tools and tests of this repository read, beside the library's own (and any
// ZCOLL_TEST_*).
constexpr std::string_view kToolVariables[] = {
    "ZCOLL_RUN", "ZCOLL_BENCH", "ZCOLL_RANK_PROG", "ZCOLL_BUILDDIR", "ZCOLL_FUZZ_SECONDS", "ZCOLL_SOAK_OPS",
    "ZCOLL_SOAK_CYCLES", "ZCOLL_ZERO_TRAIN", "ZCOLL_ZERO_CONSOLIDATE", "ZCOLL_SOURCE_DIR", "ZCOLL_DEVICE_RANK",
    "ZCOLL_TORCH_END_COALESCING_RETURNS_WORK"};

size_t editDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1])});
      diag = up;
    }
  }
  return row[b.size()];
}

}  // namespace

std::string closestConfigVariable(std::string_view name) {
  std::string_view best;
  size_t bestDistance = SIZE_MAX;
  for (const ConfigVariable& v : configVariables())
    if (const size_t d = editDistance(name, v.name); d < bestDistance) bestDistance = d, best = v.name;
  return std::string(best);
}

std::vector<std::string> unknownConfigVariables() {
  std::vector<std::string> unknown;
  for (char** e = environ; e && *e; ++e) {
    const std::string_view entry(*e);
    if (entry.substr(0, 6) != "ZCOLL_") continue;
    const std::string_view name = entry.substr(0, entry.find('='));
    const auto& vars = configVariables();
    if (std::any_of(vars.begin(), vars.end(), [name](const ConfigVariable& v) { return v.name == name; }) ||
        std::find(std::begin(kToolVariables), std::end(kToolVariables), name) != std::end(kToolVariables) ||
        name.substr(0, 11) == "ZCOLL_TEST_")
      continue;
    unknown.emplace_back(name);
  }
  return unknown;
}

namespace {

// Once per process: an unknown ZCOLL_* name is most likely a typo of a known one.
void warnUnknownVariables() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (const std::string& name : unknownConfigVariables())
      ZCOLL_WARN(Init, -1, "unknown environment variable {} ignored (did you mean {}?)", name,
                 closestConfigVariable(name));
  });
}

}  // namespace

const std::vector<ConfigVariable>& configVariables() {
  using L = const LogSettings&;
  using A = const zcollConfig_t&;
  static const auto orText = [](const std::string& v, const char* empty) { return v.empty() ? std::string(empty) : v; };
  static const std::vector<ConfigVariable> vars = {
      {"ZCOLL_TIMEOUT_S", "300", "bound on every wait, in seconds (fractions allowed)",
       [](const Config& c, L) { return fmt::format("{:g}", static_cast<double>(c.timeoutMs) / 1000.0); },
       [](A a) { return a.timeoutMs != ZCOLL_CONFIG_UNDEF_INT; }},
      {"ZCOLL_CHUNK_SIZE", "256K", "pipelining chunk and shared-memory slot size (K/M/G suffixes)",
       [](const Config& c, L) { return std::to_string(c.chunkBytes); },
       [](A a) { return a.chunkBytes != ZCOLL_CONFIG_UNDEF_INT; }},
      {"ZCOLL_FIFO_SLOTS", "4", "slots per peer FIFO (2 to 64)",
       [](const Config& c, L) { return std::to_string(c.fifoSlots); },
       [](A a) { return a.fifoSlots != ZCOLL_CONFIG_UNDEF_INT; }},
      {"ZCOLL_SPIN_NS", "auto", "a wait spins this many nanoseconds before yielding (auto: 2000, or 200 when this host's ranks outnumber its cores)",
       [](const Config& c, L) { return c.spinNs < 0 ? std::string("auto") : std::to_string(c.spinNs); }, nullptr},
      {"ZCOLL_YIELD_NS", "50000", "then yields the CPU this many nanoseconds before sleeping",
       [](const Config& c, L) { return std::to_string(c.yieldNs); }, nullptr},
      {"ZCOLL_STREAM_STORES", "32M", "all-reduce, reduce-scatter, reduce and all-gather on host memory of at least this size (zcoll-bench's size column) write their results around the cache (non-temporal stores); 0 = never (K/M/G suffixes)",
       [](const Config& c, L) { return std::to_string(c.streamBytes); }, nullptr},
      {"ZCOLL_ZERO_COPY", "32K", "all-reduces, reduce-scatters, all-gathers and broadcasts of at least this size whose buffers every rank allocated with zcollMemAlloc (or registered: ZCOLL_LOCAL_REGISTER), on a communicator of one host (shm), run zero-copy: the ranks read each other's buffers in place; 0 = never (K/M/G suffixes)",
       [](const Config& c, L) { return std::to_string(c.zeroCopyBytes); }, nullptr},
      {"ZCOLL_LOCAL_REGISTER", "1", "1: ZCOLL_ZERO_COPY serves plain host buffers too: the second op on a buffer moves its whole pages into shared memory in place (same address and contents; UCX's memory hooks end the registration when the memory is unmapped or given back, and a forked child gets private copies); 0 = zcollMemAlloc buffers only",
       [](const Config& c, L) { return std::string(c.localRegister ? "1" : "0"); }, nullptr},
      {"ZCOLL_EAGER_BYTES", "2K", "host all-reduces, reduce-scatters, reduces, all-gathers and broadcasts of at most this size / (nranks - 1) (zcoll-bench's size column) run the eager schedule: one round in which every rank sends its part straight to each rank that needs it, and a short call path (larger ones to 16K too while the cost model prices it cheapest; across hosts only that); device buffers never; 0 = never (K/M/G suffixes; ZCOLL_ALGO rules for the collective take precedence from their lower bound up)",
       [](const Config& c, L) { return std::to_string(c.eagerBytes); }, nullptr},
      {"ZCOLL_ALGO", "(automatic)", "force algorithms: NAME, COLL:NAME or COLL:LO-HI:NAME, comma-separated",
       [](const Config& c, L) { return orText(c.algo, "(automatic)"); }, [](A a) { return a.algo != nullptr; }},
      {"ZCOLL_CHECK", "0", "1: before each collective, compare its signature across ranks; a mismatch fails every rank",
       [](const Config& c, L) { return std::to_string(c.check ? 1 : 0); }, nullptr},
      {"ZCOLL_CALIBRATE", "1", "0: skip the cost-model probe (built-in figures); 1: probe communicators of up to 8 ranks; 2: measure at any size, even if cached",
       [](const Config& c, L) { return std::to_string(c.recalibrate ? 2 : c.calibrate ? 1 : 0); }, nullptr},
      {"ZCOLL_CALIBRATION_DIR", "$XDG_CACHE_HOME/zcoll or ~/.cache/zcoll",
       "cache of measured cost models; 'none' = no cache",
       [](const Config& c, L) { return orText(c.calibrationDir, "none"); }, nullptr},
      {"ZCOLL_TRANSPORTS", "(automatic)", "transports to use, in order of preference, comma-separated (shm, ib, tcp, ucx)",
       [](const Config& c, L) { return orText(c.transports, "(automatic)"); },
       [](A a) { return a.transports != nullptr; }},
      {"ZCOLL_DEVICE", "auto", "device runtime for CUDA buffers: auto (CUDA where built and a GPU is present), cuda, emulated (host emulation, for tests), none",
       [](const Config&, L) { return readDeviceSetting(); }, nullptr},
      {"ZCOLL_SOCKET_IFNAME", "(loopback)", "network interface of the bootstrap sockets",
       [](const Config& c, L) { return orText(c.socketIfname, "(loopback)"); }, nullptr},
      {"ZCOLL_SOCKETS_PER_PEER", "1", "tcp transport: connections per peer, 1 to 16 (frame f on connection f mod K); the same on all ranks",
       [](const Config& c, L) { return std::to_string(c.socketsPerPeer); }, nullptr},
      {"ZCOLL_SOCKET_MEMORY", "1G", "tcp transport: the slot memory a rank keeps for the peers it talks to; beyond it the slots of the peers idle longest are given back (K/M/G suffixes)",
       [](const Config& c, L) { return std::to_string(c.socketMemoryBytes); }, nullptr},
      {"ZCOLL_SOCKET_CHUNK_SIZE", "512K",
       "pipelining chunk and slot size of the tcp transport; when unset, a ZCOLL_CHUNK_SIZE or chunkBytes that is set "
       "applies to it too (K/M/G suffixes)",
       [](const Config& c, L) { return std::to_string(c.socketChunkBytes); },
       [](A a) { return a.chunkBytes != ZCOLL_CONFIG_UNDEF_INT; }},  // it follows chunkBytes
      {"ZCOLL_IB_HCA", "(first active port)", "ib transport: RDMA devices to use, NAME[:PORT] comma-separated, first usable wins",
       [](const Config& c, L) { return orText(c.ibHca, "(first active port)"); }, nullptr},
      {"ZCOLL_IB_GID_INDEX", "auto", "ib transport on RoCE: GID index (auto: the first RoCE v2 GID with an IPv4 address, else the first RoCE v2 one, else 0)",
       [](const Config& c, L) { return c.ibGidIndex < 0 ? std::string("auto") : std::to_string(c.ibGidIndex); }, nullptr},
      {"ZCOLL_BOOTSTRAP_SECRET", "(derived)", "32 hex digits: the rendezvous secret for env launch",
       [](const Config& c, L) { return std::string(c.bootstrapSecret.empty() ? "(derived)" : "(set, not shown)"); },
       nullptr},
      {"ZCOLL_COMM_ID", "(unset)", "host:port of the rendezvous for zcollCommInitFromEnv",
       [](const Config&, L) { return std::string(env("ZCOLL_COMM_ID") ? env("ZCOLL_COMM_ID") : "(unset)"); },
       nullptr},
      {"ZCOLL_DEBUG", "WARN", "log level: NONE, WARN, INFO or TRACE",
       [](const Config&, L log) {
         static constexpr const char* kLevels[] = {"NONE", "WARN", "INFO", "TRACE"};
         return std::string(kLevels[static_cast<int>(log.level)]);
       },
       nullptr},
      {"ZCOLL_DEBUG_SUBSYS", "(all)", "comma-separated subsystems to log: init, boot, coll, shm",
       [](const Config&, L log) { return orText(log.subsystems, "(all)"); }, nullptr},
      {"ZCOLL_DEBUG_FILE", "(stderr)", "log file; %h is replaced by the host name, %p by the pid",
       [](const Config&, L log) { return orText(log.file, "(stderr)"); }, nullptr},
      {"ZCOLL_TRACE", "(off)", "Chrome trace of every collective and step, one file per rank (%r rank, %p pid)",
       [](const Config& c, L) { return orText(c.tracePath, "(off)"); }, nullptr},
      {"ZCOLL_TRACE_EVENTS", "262144", "trace events kept per rank (the buffer is reserved at creation)",
       [](const Config& c, L) { return std::to_string(c.traceEvents); }, nullptr},
      {"ZCOLL_WAIT_TRACE", "(off)", "a -Dwait_trace=true build: directory where each process writes its waits "
       "(PID.bin; tools/sched-probe --waits)",
       [](const Config&, L) { return orText(readWaitTraceDir(), "(off)"); },
       nullptr},
  };
  return vars;
}

bool parseByteSize(std::string_view s, int64_t* out) {
  if (s.empty()) return false;
  int64_t mul = 1;
  char last = s.back();
  switch (last) {
    case 'k': case 'K': mul = int64_t{1} << 10; break;
    case 'm': case 'M': mul = int64_t{1} << 20; break;
    case 'g': case 'G': mul = int64_t{1} << 30; break;
    default: break;
  }
  if (mul != 1) s.remove_suffix(1);
  int64_t v = 0;
  if (!parseInt(s, &v) || v < 0 || v > INT64_MAX / mul) return false;
  *out = v * mul;
  return true;
}

Status parseHcaList(std::string_view text, std::vector<std::pair<std::string, int>>* out) {
  out->clear();
  std::string_view rest = text;
  while (!rest.empty()) {
    std::string_view item = nextListItem(&rest);
    if (item.empty()) continue;
    int port = 0;
    if (const size_t colon = item.find(':'); colon != std::string_view::npos) {
      int64_t p = 0;
      if (!parseInt(item.substr(colon + 1), &p) || p < 1 || p > 255)
        return invalidArgument("ZCOLL_IB_HCA='{}': '{}' has no port number 1-255 after ':'", text, item);
      port = static_cast<int>(p);
      item = item.substr(0, colon);
    }
    if (item.empty()) return invalidArgument("ZCOLL_IB_HCA='{}': an entry has no device name", text);
    out->emplace_back(std::string(item), port);
  }
  return Status::ok();
}

Status buildConfig(const zcollConfig_t* api, Config* out) {
  Config c;  // defaults
  if (api) {
    if (api->size < offsetof(zcollConfig_t, transports) + sizeof(api->transports) ||
        api->magic != ZCOLL_CONFIG_MAGIC)
      return invalidArgument("config: not initialized with ZCOLL_CONFIG_INITIALIZER (size {}, magic {:#x})",
                             api->size, api->magic);
    if (api->timeoutMs != ZCOLL_CONFIG_UNDEF_INT) {
      if (api->timeoutMs <= 0) return invalidArgument("config->timeoutMs = {}: must be > 0", api->timeoutMs);
      c.timeoutMs = api->timeoutMs;
    }
    if (api->chunkBytes != ZCOLL_CONFIG_UNDEF_INT) {
      if (api->chunkBytes < 8) return invalidArgument("config->chunkBytes = {}: must be >= 8", api->chunkBytes);
      c.chunkBytes = api->chunkBytes;
    }
    if (api->fifoSlots != ZCOLL_CONFIG_UNDEF_INT) {
      if (api->fifoSlots < 2 || api->fifoSlots > 64)
        return invalidArgument("config->fifoSlots = {}: must be in [2, 64]", api->fifoSlots);
      c.fifoSlots = api->fifoSlots;
    }
    if (api->algo) c.algo = api->algo;
    if (api->transports) c.transports = api->transports;
  }

  if (const char* v = env("ZCOLL_TIMEOUT_S")) {
    char* end = nullptr;
    double s = isDecimal(v) ? std::strtod(v, &end) : 0;
    if (!end || *end || !(s > 0) || s > 1e7)
      return invalidArgument("environment variable ZCOLL_TIMEOUT_S='{}': expected seconds > 0", v);
    c.timeoutMs = static_cast<int64_t>(s * 1000.0 + 0.5);
    if (c.timeoutMs < 1) c.timeoutMs = 1;
  }
  if (Status s = envPositive("ZCOLL_CHUNK_SIZE", 8, kMaxChunk, true, &c.chunkBytes); !s) return s;
  if (env("ZCOLL_SOCKET_CHUNK_SIZE")) {
    if (Status s = envPositive("ZCOLL_SOCKET_CHUNK_SIZE", 8, kMaxChunk, true, &c.socketChunkBytes); !s) return s;
  } else if (env("ZCOLL_CHUNK_SIZE") || (api && api->chunkBytes != ZCOLL_CONFIG_UNDEF_INT)) {
    c.socketChunkBytes = c.chunkBytes;  // a chunk size that was asked for holds for every transport
  }
  int64_t slots = c.fifoSlots;
  if (Status s = envPositive("ZCOLL_FIFO_SLOTS", 2, 64, false, &slots); !s) return s;
  c.fifoSlots = static_cast<int>(slots);
  if (const char* v = env("ZCOLL_SPIN_NS"); v && std::string_view(v) == "auto") {
    c.spinNs = -1;  // the default, as zcoll-info shows it
  } else if (Status s = envPositive("ZCOLL_SPIN_NS", 0, int64_t{1} << 40, false, &c.spinNs); !s) {
    return s;
  }
  if (Status s = envPositive("ZCOLL_YIELD_NS", 0, int64_t{1} << 40, false, &c.yieldNs); !s) return s;
  if (Status s = envPositive("ZCOLL_STREAM_STORES", 0, int64_t{1} << 50, true, &c.streamBytes); !s) return s;
  if (Status s = envPositive("ZCOLL_ZERO_COPY", 0, int64_t{1} << 50, true, &c.zeroCopyBytes); !s) return s;
  if (Status s = envPositive("ZCOLL_EAGER_BYTES", 0, int64_t{1} << 30, true, &c.eagerBytes); !s) return s;
  int64_t localRegister = c.localRegister ? 1 : 0;
  if (Status s = envPositive("ZCOLL_LOCAL_REGISTER", 0, 1, false, &localRegister); !s) return s;
  c.localRegister = localRegister != 0;
  envString("ZCOLL_ALGO", &c.algo);
  int64_t check = c.check ? 1 : 0;
  if (Status s = envPositive("ZCOLL_CHECK", 0, 1, false, &check); !s) return s;
  c.check = check != 0;
  int64_t calibrate = c.calibrate ? 1 : 0;
  if (Status s = envPositive("ZCOLL_CALIBRATE", 0, 2, false, &calibrate); !s) return s;
  c.calibrate = calibrate != 0;
  c.recalibrate = calibrate == 2;
  if (const char* dir = env("ZCOLL_CALIBRATION_DIR")) {
    c.calibrationDir = std::string_view(dir) == "none" ? std::string() : std::string(dir);
  } else if (const char* xdg = env("XDG_CACHE_HOME")) {
    c.calibrationDir = std::string(xdg) + "/zcoll";
  } else if (const char* home = env("HOME")) {
    c.calibrationDir = std::string(home) + "/.cache/zcoll";
  }
  envString("ZCOLL_TRANSPORTS", &c.transports);
  c.transportsOrigin = api && api->transports && !env("ZCOLL_TRANSPORTS") ? "config->transports"
                                                                           : "environment variable ZCOLL_TRANSPORTS";
  if (Status s = checkLogSettings(); !s) return s;
  warnUnknownVariables();
  if (const char* v = env("ZCOLL_DEVICE"); v && readDeviceSetting() != v)
    return invalidArgument("environment variable ZCOLL_DEVICE='{}': expected auto, cuda, emulated or none", v);
  envString("ZCOLL_SOCKET_IFNAME", &c.socketIfname);
  int64_t sockets = c.socketsPerPeer;
  if (Status s = envPositive("ZCOLL_SOCKETS_PER_PEER", 1, 16, false, &sockets); !s) return s;
  c.socketsPerPeer = static_cast<int>(sockets);
  if (Status s = envPositive("ZCOLL_SOCKET_MEMORY", 1 << 20, int64_t{1} << 40, true, &c.socketMemoryBytes); !s) return s;
  envString("ZCOLL_IB_HCA", &c.ibHca);
  std::vector<std::pair<std::string, int>> hcas;
  if (Status s = parseHcaList(c.ibHca, &hcas); !s) return s;
  if (const char* v = env("ZCOLL_IB_GID_INDEX"); v && std::string_view(v) == "auto") {
    c.ibGidIndex = -1;
  } else {
    int64_t gid = c.ibGidIndex;
    if (Status s = envPositive("ZCOLL_IB_GID_INDEX", 0, 255, false, &gid); !s) return s;
    c.ibGidIndex = static_cast<int>(gid);
  }
  envString("ZCOLL_BOOTSTRAP_SECRET", &c.bootstrapSecret);
  envString("ZCOLL_TRACE", &c.tracePath);
  if (Status s = envPositive("ZCOLL_TRACE_EVENTS", 1, int64_t{1} << 28, false, &c.traceEvents); !s) return s;
  if (c.chunkBytes > kMaxChunk) return invalidArgument("chunk size {} is above 1 GiB", c.chunkBytes);
  *out = std::move(c);
  return Status::ok();
}

std::string readDeviceSetting() {
  const char* v = env("ZCOLL_DEVICE");
  if (!v) return "auto";
  for (const char* known : {"auto", "cuda", "emulated", "none"})
    if (std::string_view(v) == known) return known;
  return "auto";
}

LogSettings readLogSettings() {
  LogSettings s;
  if (const char* v = env("ZCOLL_DEBUG")) {
    if (!strcasecmp(v, "NONE") || !strcasecmp(v, "OFF")) s.level = LogLevel::Off;
    else if (!strcasecmp(v, "INFO")) s.level = LogLevel::Info;
    else if (!strcasecmp(v, "TRACE")) s.level = LogLevel::Trace;
    else s.level = LogLevel::Warn;
  }
  envString("ZCOLL_DEBUG_SUBSYS", &s.subsystems);
  envString("ZCOLL_DEBUG_FILE", &s.file);
  return s;
}

std::string readWaitTraceDir() {
  const char* v = env("ZCOLL_WAIT_TRACE");
  return v ? v : "";
}

Status describeConfig(const zcollConfig_t* api, std::vector<ConfigValue>* out) {
  Config c;
  if (Status s = buildConfig(api, &c); !s) return s;
  const LogSettings log = readLogSettings();
  out->clear();
  for (const ConfigVariable& v : configVariables()) {
    const bool fromApi = api && v.fromApi && v.fromApi(*api);
    const std::string_view source = env(std::string(v.name).c_str()) ? "environment" : fromApi ? "API" : "default";
    out->push_back(ConfigValue{v.name, v.value(c, log), source});
  }
  return Status::ok();
}

namespace {

// First of the given variables that is set, parsed as an integer.
bool firstInt(std::initializer_list<const char*> names, int* out, const char** which) {
  for (const char* n : names) {
    if (const char* v = env(n)) {
      int64_t x = 0;
      if (!parseInt(v, &x) || x < 0 || x > INT32_MAX) return false;
      *out = static_cast<int>(x);
      *which = n;
      return true;
    }
  }
  return true;
}

}  // namespace

Status readLaunchEnv(LaunchEnv* out) {
  LaunchEnv e;
  const char* rankVar = nullptr;
  const char* sizeVar = nullptr;
  const char* localVar = nullptr;
  // Launchers in order of precedence: torchrun / zcoll-run, Open MPI, PMI (MPICH hydra), Slurm.
  if (!firstInt({"RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"}, &e.rank, &rankVar))
    return invalidArgument("environment: {} is not a rank number", rankVar ? rankVar : "rank variable");
  if (!firstInt({"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"}, &e.size, &sizeVar))
    return invalidArgument("environment: world size variable is not a number");
  if (!firstInt({"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"}, &e.localRank,
                &localVar))
    return invalidArgument("environment: local rank variable is not a number");
  if (!rankVar || !sizeVar)
    return invalidArgument(
        "environment: no launcher variables found (need RANK and WORLD_SIZE, OMPI_COMM_WORLD_RANK/SIZE, "
        "PMI_RANK/SIZE or SLURM_PROCID/NTASKS)");
  if (e.size < 1 || e.rank >= e.size)
    return invalidArgument("environment: {}={} is not in [0, {}={})", rankVar, e.rank, sizeVar, e.size);
  e.source = fmt::format("{}/{}", rankVar, sizeVar);

  if (const char* id = env("ZCOLL_COMM_ID")) {
    std::string_view s(id);
    size_t colon = s.rfind(':');
    int64_t port = 0;
    if (colon == std::string_view::npos || !parseInt(s.substr(colon + 1), &port) || port <= 0 || port > 65535)
      return invalidArgument("environment: ZCOLL_COMM_ID='{}': expected host:port", id);
    std::string_view host = s.substr(0, colon);
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
    e.rendezvousHost = std::string(host);
    e.rendezvousPort = static_cast<int>(port);
  } else {
    const char* addr = env("MASTER_ADDR");
    const char* portText = env("MASTER_PORT");
    int64_t port = 0;
    if (!addr || !portText)
      return invalidArgument("environment: no rendezvous address: set MASTER_ADDR and MASTER_PORT, or ZCOLL_COMM_ID");
    if (!parseInt(portText, &port) || port <= 0 || port > 65535)
      return invalidArgument("environment: MASTER_PORT='{}' is not a port number", portText);
    e.rendezvousHost = addr;
    e.rendezvousPort = static_cast<int>(port);
  }
  *out = std::move(e);
  return Status::ok();
}

std::string sharedSettingsText(const Config& c) {
  return fmt::format("ZCOLL_CHUNK_SIZE={} ZCOLL_SOCKET_CHUNK_SIZE={} ZCOLL_SOCKETS_PER_PEER={} ZCOLL_FIFO_SLOTS={} "
                     "ZCOLL_EAGER_BYTES={} ZCOLL_ZERO_COPY={} ZCOLL_CHECK={} ZCOLL_ALGO='{}'",
                     c.chunkBytes, c.socketChunkBytes, c.socketsPerPeer, c.fifoSlots, c.eagerBytes, c.zeroCopyBytes,
                     c.check ? 1 : 0,
                     c.algo);
}

uint64_t sharedSettingsHash(const Config& c) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a
  for (unsigned char ch : sharedSettingsText(c)) h = (h ^ ch) * 0x100000001b3ull;
  return h;
}

}  // namespace zcoll
