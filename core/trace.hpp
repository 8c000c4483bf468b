// trace.hpp - ZCOLL_TRACE: Chrome trace events (JSON, viewable in Perfetto or chrome://tracing) of
// every collective and every algorithm step of one rank.
//
// Events go into a buffer reserved at creation (ZCOLL_TRACE_EVENTS, default 262144; later events are
// counted, not kept), so tracing adds no allocation or syscall per op; the file is written when the
// communicator is destroyed. One file per rank: "%r" in the path is the rank, "%p" the pid; without
// "%r", ".rankN" goes before the extension. tools/merge-trace joins the ranks' files into one.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.hpp"
#include "core/types.hpp"

namespace zcoll {

class Tracer {
 public:
  // nullptr (and no error) when pattern is empty.
  static Status create(const std::string& pattern, int rank, int nranks, int64_t capacity,
                       std::unique_ptr<Tracer>* out);
  // The file a rank writes for `pattern` (for tests and messages).
  static std::string pathFor(const std::string& pattern, int rank);

  // A whole collective (or send/recv batch) on this rank, [t0, t1) in nowNs().
  void op(Collective coll, uint64_t seq, std::string_view algo, size_t count, DataType dtype, int64_t t0, int64_t t1,
          bool ok) {
    push(Event{t0, t1, collectiveName(coll), algo, static_cast<int64_t>(seq), static_cast<int64_t>(count), -1,
               static_cast<int16_t>(dtype), ok ? int16_t{1} : int16_t{0}, true});
  }
  // One primitive step of an algorithm: kind ("recvReduceSend"...), the peer it waited on, bytes.
  void step(const char* kind, int peer, size_t bytes, int64_t t0, int64_t t1) {
    push(Event{t0, t1, kind, {}, 0, static_cast<int64_t>(bytes), peer, 0, 1, false});
  }
  // Writes the file; called once, at destroy.
  Status write();

 private:
  struct Event {
    int64_t t0, t1;
    std::string_view name;  // static strings: collective names, step kinds
    std::string_view algo;
    int64_t seq;
    int64_t size;  // count for ops, bytes for steps
    int32_t peer;
    int16_t dtype;
    int16_t ok;
    bool isOp;
  };
  void push(const Event& e) {
    if (events_.size() < events_.capacity()) events_.push_back(e);
    else ++dropped_;
  }

  std::string path_;
  int rank_ = 0, nranks_ = 1;
  std::vector<Event> events_;
  int64_t dropped_ = 0;
};

}  // namespace zcoll
