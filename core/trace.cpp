// trace.cpp - see trace.hpp.
#include "core/trace.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include <fmt/format.h>

namespace zcoll {

std::string Tracer::pathFor(const std::string& pattern, int rank) {
  std::string out;
  bool hasRank = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '%' && i + 1 < pattern.size() && (pattern[i + 1] == 'r' || pattern[i + 1] == 'p')) {
      hasRank |= pattern[i + 1] == 'r';
      out += std::to_string(pattern[i + 1] == 'r' ? rank : static_cast<int>(getpid()));
      ++i;
    } else {
      out += pattern[i];
    }
  }
  if (!hasRank) {
    const size_t slash = out.rfind('/');
    const size_t dot = out.rfind('.');
    const std::string suffix = fmt::format(".rank{}", rank);
    if (dot != std::string::npos && (slash == std::string::npos || dot > slash)) out.insert(dot, suffix);
    else out += suffix;
  }
  return out;
}

Status Tracer::create(const std::string& pattern, int rank, int nranks, int64_t capacity,
                      std::unique_ptr<Tracer>* out) {
  out->reset();
  if (pattern.empty()) return Status::ok();
  std::unique_ptr<Tracer> t(new Tracer());
  t->path_ = pathFor(pattern, rank);
  t->rank_ = rank;
  t->nranks_ = nranks;
  // Fail now, not at destroy, if the file cannot be written.
  FILE* f = std::fopen(t->path_.c_str(), "w");
  if (!f) return systemError(fmt::format("ZCOLL_TRACE: cannot write '{}'", t->path_), errno);
  std::fclose(f);
  t->events_.reserve(static_cast<size_t>(capacity));
  *out = std::move(t);
  return Status::ok();
}

Status Tracer::write() {
  FILE* f = std::fopen(path_.c_str(), "w");
  if (!f) return systemError(fmt::format("ZCOLL_TRACE: cannot write '{}'", path_), errno);
  fmt::print(f, "{{\"traceEvents\":[\n");
  fmt::print(f, "{{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":{0},\"tid\":0,\"args\":{{\"name\":\"rank {0}\"}}}},\n",
             rank_);
  fmt::print(f, "{{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":{0},\"tid\":0,\"args\":{{\"sort_index\":{0}}}}}",
             rank_);
  for (const Event& e : events_) {
    const double ts = static_cast<double>(e.t0) / 1e3, dur = static_cast<double>(e.t1 - e.t0) / 1e3;
    if (e.isOp) {
      fmt::print(f,
                 ",\n{{\"name\":\"{} #{}\",\"cat\":\"coll\",\"ph\":\"X\",\"ts\":{:.3f},\"dur\":{:.3f},\"pid\":{},"
                 "\"tid\":0,\"args\":{{\"seq\":{},\"algo\":\"{}\",\"count\":{},\"dtype\":\"{}\",\"ok\":{}}}}}",
                 e.name, e.seq, ts, dur, rank_, e.seq, e.algo, e.size,
                 dataTypeName(static_cast<DataType>(e.dtype)), e.ok ? "true" : "false");
    } else {
      fmt::print(f,
                 ",\n{{\"name\":\"{}\",\"cat\":\"step\",\"ph\":\"X\",\"ts\":{:.3f},\"dur\":{:.3f},\"pid\":{},"
                 "\"tid\":0,\"args\":{{\"peer\":{},\"bytes\":{}}}}}",
                 e.name, ts, dur, rank_, e.peer, e.size);
    }
  }
  fmt::print(f, "\n],\"displayTimeUnit\":\"ns\",\"otherData\":{{\"rank\":{},\"nranks\":{},\"dropped_events\":{}}}}}\n",
             rank_, nranks_, dropped_);
  const bool ok = std::ferror(f) == 0;
  if (std::fclose(f) != 0 || !ok) return systemError(fmt::format("ZCOLL_TRACE: writing '{}'", path_), EIO);
  return Status::ok();
}

}  // namespace zcoll
