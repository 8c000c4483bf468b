// config.hpp - the one typed configuration of zcoll.
//
// A Config is filled once per communicator: defaults, then the API's zcollConfig_t, then the ZCOLL_*
// environment (which wins), and passed down by const reference. No other file reads the
// environment: launcher variables (RANK, MASTER_ADDR...) are read here too, into LaunchEnv.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.hpp"
#include "zcoll/zcoll.h"


namespace zcoll {

enum class LogLevel : int { Off = 0, Warn = 1, Info = 2, Trace = 3 };

struct Config {
  int64_t timeoutMs = 300'000;       // every wait is bounded by this
  int64_t chunkBytes = 256 * 1024;   // pipelining chunk = shared-memory slot size
  int64_t socketChunkBytes = 512 * 1024;  // ZCOLL_SOCKET_CHUNK_SIZE: the same for the tcp transport; a
                                          // chunk size that is set (ZCOLL_CHUNK_SIZE or chunkBytes)
                                          // applies to it too unless this is set
  int fifoSlots = 4;                 // slots per peer FIFO (>= 2: see docs/algorithms.md)
  int64_t spinNs = -1;               // wait policy: spin this long (-1: 2000, 200 when oversubscribed),
  int64_t yieldNs = 50'000;          // then sched_yield this long, then sleep on a futex
  int64_t streamBytes = 32 << 20;    // ZCOLL_STREAM_STORES: host ops of at least this size write their
                                     // results with non-temporal stores (0 = never)
  int64_t zeroCopyBytes = 32 << 10;  // ZCOLL_ZERO_COPY: collectives of at least this size on zcollMemAlloc
                                     // (or registered) buffers run zero-copy (algorithms/zcopy.hpp; 0 = never)
  bool localRegister = true;         // ZCOLL_LOCAL_REGISTER: and on plain buffers used again, whose
                                     // pages are then adopted into shared memory (core/adopted_memory.hpp)
  int64_t eagerBytes = 2048;         // ZCOLL_EAGER_BYTES: host collectives up to this / (nranks - 1)
                                     // run the eager schedule (algorithms/eager.cpp; 0 = never)
  std::string algo;                  // ZCOLL_ALGO: "" = automatic
  std::string transports;            // ZCOLL_TRANSPORTS: "" = automatic (names checked by transport/registry)
  const char* transportsOrigin = "";  // what set it, for messages
  std::string socketIfname;          // ZCOLL_SOCKET_IFNAME: interface for bootstrap sockets
  int socketsPerPeer = 1;            // ZCOLL_SOCKETS_PER_PEER: tcp connections per peer (1-16)
  int64_t socketMemoryBytes = int64_t{1} << 30;  // ZCOLL_SOCKET_MEMORY: tcp slot memory kept for peers
  std::string ibHca;                 // ZCOLL_IB_HCA: "name[:port],...", "" = first active port
  int ibGidIndex = -1;               // ZCOLL_IB_GID_INDEX: RoCE GID index, -1 = automatic
  std::string bootstrapSecret;       // ZCOLL_BOOTSTRAP_SECRET (32 hex digits), for env launch
  bool check = false;                // ZCOLL_CHECK: compare every collective's signature across ranks
  bool calibrate = true;             // ZCOLL_CALIBRATE: measure the cost model at init (or use the cache)
  bool recalibrate = false;          // ZCOLL_CALIBRATE=2: measure even if cached, and rewrite the cache
  std::string calibrationDir;        // ZCOLL_CALIBRATION_DIR: cache of measured models ("" = none)
  std::string tracePath;             // ZCOLL_TRACE: Chrome trace file pattern ("" = off)
  int64_t traceEvents = 262'144;     // ZCOLL_TRACE_EVENTS: events kept per rank
};

// Process-wide logging settings (the logger is shared by all communicators of a process).
struct LogSettings {
  LogLevel level = LogLevel::Warn;
  std::string subsystems;  // comma-separated, "" = all
  std::string file;        // "" = stderr; %h host, %p pid
};

// One row per ZCOLL_* variable: the single table the docs are checked against, with how to show its
// effective value and whether a zcollConfig_t field can set it (describeConfig, zcoll-info).
struct ConfigVariable {
  std::string_view name;
  std::string_view defaultValue;
  std::string_view meaning;
  std::string (*value)(const Config& c, const LogSettings& log);
  bool (*fromApi)(const zcollConfig_t& api);  // nullptr: no API field
};
const std::vector<ConfigVariable>& configVariables();

// Defaults, then `api` (may be null; validated: size/magic/field ranges), then ZCOLL_* variables.
Status buildConfig(const zcollConfig_t* api, Config* out);

// The settings every rank of a communicator must share, because they decide what goes on the wire
// (slot size and count) or which algorithm runs (ZCOLL_ALGO, ZCOLL_EAGER_BYTES, ZCOLL_ZERO_COPY,
// ZCOLL_CHECK): as text for messages, and its hash, which the bootstrap exchanges so that creation
// fails on every rank with the settings named instead of ops that hang or mismatch later.
std::string sharedSettingsText(const Config& c);
uint64_t sharedSettingsHash(const Config& c);

LogSettings readLogSettings();
// ZCOLL_WAIT_TRACE: where a -Dwait_trace=true build writes each process's waits ("" = off;
// core/wait_trace.hpp).
std::string readWaitTraceDir();
// The subsystems ZCOLL_DEBUG_SUBSYS names (log.hpp's Subsys, in order).
inline constexpr std::string_view kLogSubsystems[] = {"init", "boot", "coll", "shm", "api"};

// ZCOLL_* names in the environment that neither the library nor this repository's tools read (typos:
// buildConfig warns once per process), and the known variable nearest to a name.
std::vector<std::string> unknownConfigVariables();
std::string closestConfigVariable(std::string_view name);

// ZCOLL_DEVICE (process-wide): "auto", "cuda", "emulated" or "none" ("auto" when unset or unknown;
// buildConfig rejects an unknown value).
std::string readDeviceSetting();

// The effective value of every variable of configVariables() and where it came from ("default",
// "API" - a zcollConfig_t field - or "environment"), for zcoll-info. Fails as buildConfig does.
struct ConfigValue {
  std::string_view name;
  std::string value;
  std::string_view source;
};
Status describeConfig(const zcollConfig_t* api, std::vector<ConfigValue>* out);

// What a launcher (torchrun, Open MPI, PMI, Slurm, zcoll-run) put in the environment.
struct LaunchEnv {
  int rank = -1;
  int size = -1;
  int localRank = -1;
  std::string rendezvousHost;  // MASTER_ADDR or the host part of ZCOLL_COMM_ID
  int rendezvousPort = -1;
  std::string source;          // which launcher's variables were used, for messages
};
Status readLaunchEnv(LaunchEnv* out);

// The next item of a comma-separated value (ZCOLL_TRANSPORTS, ZCOLL_ALGO, ZCOLL_DEBUG_SUBSYS): returns
// it and drops it and its comma from *rest.
inline std::string_view nextListItem(std::string_view* rest) {
  const size_t comma = rest->find(',');
  const std::string_view item = rest->substr(0, comma);
  *rest = comma == std::string_view::npos ? std::string_view() : rest->substr(comma + 1);
  return item;
}

// ZCOLL_IB_HCA: "name[:port],..." into (name, port) pairs; port 0 = any active port of that device.
Status parseHcaList(std::string_view text, std::vector<std::pair<std::string, int>>* out);

// "262144", "256K", "1M", "2G" (binary multiples). False if malformed or negative.
bool parseByteSize(std::string_view s, int64_t* out);

}  // namespace zcoll
