// wait_trace.cpp - the process's wait log (wait_trace.hpp).
#include "core/wait_trace.hpp"

#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <utility>

#include "core/config.hpp"

namespace zcoll::wait_trace {

namespace detail {
Log* current = nullptr;
bool asked = false;
}  // namespace detail

namespace {
std::string directory;

void writeAtExit() {
  if (!detail::current) return;
  const std::string path = directory + "/" + std::to_string(getpid()) + ".bin";
  if (!detail::current->write(path)) std::fprintf(stderr, "zcoll: ZCOLL_WAIT_TRACE: cannot write %s\n", path.c_str());
}

// In a child the parent's log is a copy it must not write: the child opens its own (the copy stays
// mapped till exit; a diagnostic's cost).
void forked() {
  detail::current = nullptr;
  detail::asked = false;
}
}  // namespace

Log::Log(size_t capacity) {
  void* p = mmap(nullptr, capacity * sizeof(Record), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE,
                 -1, 0);
  if (p == MAP_FAILED) return;
  records_ = static_cast<Record*>(p);
  capacity_ = capacity;
}

Log::~Log() {
  if (records_) munmap(records_, capacity_ * sizeof(Record));
}

bool Log::write(const std::string& path) const {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return false;
  const bool ok = std::fwrite(records_, sizeof(Record), size_, f) == size_;
  return std::fclose(f) == 0 && ok;
}

namespace detail {
Log* open() {
  asked = true;
  std::string dir = readWaitTraceDir();
  if (dir.empty()) return nullptr;
  static const bool hooked = [] {
    std::atexit(writeAtExit);
    pthread_atfork(nullptr, nullptr, forked);
    return true;
  }();
  (void)hooked;
  directory = std::move(dir);
  current = new Log(kCapacity);  // written at exit, never freed: records may come until then
  return current;
}
}  // namespace detail

}  // namespace zcoll::wait_trace
